//! The native module (`tollgate-redis-module`, command `TOLLGATE.DECIDE`):
//! detection at connect time and the fallback to the scripts.
//!
//! # Rule
//!
//! - **Detection**: when a [`Redis`](crate::Redis) connects (and with
//!   [`ModuleUse::Detect`], the default) it sends `COMMAND INFO
//!   tollgate.decide tollgate.lean tollgate.charge tollgate.version`; on a
//!   cluster to every primary. The
//!   module is used only if **every** node answers with the first command's
//!   description, and a lean script's call (one GCRA or fixed window limit,
//!   a check or a peek) goes to `TOLLGATE.LEAN`, whose reply is the lean
//!   script's, only if every node knows that one too (a module that
//!   predates it gets `TOLLGATE.DECIDE` for everything). An
//!   error (a server that refuses `COMMAND`, as some managed services do)
//!   counts as "absent": the scripts need nothing installed, so doubt
//!   chooses them.
//! - **Fallback during use**: a server that answers the module's command
//!   with `unknown command` (a failover or restart onto a server without the
//!   module) turns the module off for that connection and the same decision
//!   is sent again as the script, at once: no decision is lost to it.
//!   [`Redis::detect_module`](crate::Redis::detect_module) looks again.
//! - **Same answers**: the module takes the script's arguments and gives the
//!   script's reply, on the script's stored state, so the choice changes the
//!   cost per decision and nothing else; clients with and without the module
//!   can share keys.
//!
//! - **What each module decides**: a call goes to the module only if every
//!   node's module decides each of its limits exactly as the scripts do;
//!   else to the scripts. GCRA: any module. Warm-up, fixed and sliding
//!   windows: only a module that knows `TOLLGATE.CHARGE` (the version that
//!   decides warm-up, and answers `DEFER` for a window in a budget's debt,
//!   which an older module would read as empty). Calendar windows: always
//!   the scripts. A call the module answers `DEFER` is sent again to the
//!   same script at once (the module stays in use).
//! - **Charges**: `Redis::charge` sends a budget's charge on GCRA limits
//!   to `TOLLGATE.CHARGE` where every node's module is version 2 or later;
//!   a charge on any other limit (a window's debt), or without such a
//!   module, goes to the charge script: never dropped, never allowed
//!   unrecorded. The limiter's charge path (`RedisLimiter::charge_outcome`)
//!   goes through it. Either reply is the charge script's, `{fitted,
//!   recorded}` then the state after the charge: one round trip, and no
//!   other request between the charge and the state it reports.
//! - **Module versions and the charge's reply**: a module of version 1
//!   answers `TOLLGATE.CHARGE` with `{fitted, recorded}` alone. Version 2
//!   registers `TOLLGATE.VERSION`, so the same `COMMAND INFO` tells the two
//!   apart at connect time, and the client sends a charge to the module
//!   only where every node answers the full reply.
//!   The reply's length is not how they are told apart: by the time an
//!   older module has answered, it has recorded the charge, which can be
//!   neither sent again (charged twice) nor read back in the same step. A
//!   short reply that still arrives (a node replaced by one with an older
//!   module after detection) is recorded but not read back: the limiter
//!   answers it by its failure policy, never from a misread reply, and
//!   later charges on this connection go to the script (a version 1
//!   module still decides everything else).
//!
//! [`ModuleUse::Never`] keeps the scripts (a server whose module is a
//! different version, say); [`ModuleUse::Require`] fails the connection when
//! the module is absent.

use redis::aio::ConnectionLike;
use redis::{Arg, Cmd, ErrorKind, RedisResult, ServerErrorKind, Value};

use crate::script::{self, Script};

/// The module's command.
pub const COMMAND: &str = "TOLLGATE.DECIDE";
/// The module's lean command: one GCRA or fixed window limit, a check or a
/// peek, answered as the lean scripts answer (one integer where exact).
pub const LEAN: &str = "TOLLGATE.LEAN";
/// The module's charge command: a budget's charge on GCRA limits, the
/// charge script's arguments and reply (from the module's version 2).
pub const CHARGE: &str = "TOLLGATE.CHARGE";
/// The module's version command, from its version 2: its presence says
/// that [`CHARGE`] answers the state after the charge.
pub const VERSION: &str = "TOLLGATE.VERSION";
/// The error code of a module's answer "the scripts decide this call" (a
/// window in a budget's debt).
const DEFER: &str = "DEFER";

/// Which of the module's commands every server knows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Found {
    /// Not the module: the scripts decide.
    #[default]
    None,
    /// `TOLLGATE.DECIDE` only (a module that predates the lean command).
    Decide,
    /// `TOLLGATE.DECIDE` and `TOLLGATE.LEAN`.
    Lean,
    /// The three commands (the module's version 1), which also decides
    /// warm-up and defers windows in debt to the scripts; its
    /// `TOLLGATE.CHARGE` answers the charge alone, so charges go to the
    /// script.
    Charge,
    /// The four commands, `TOLLGATE.VERSION` among them (version 2 or
    /// later): `TOLLGATE.CHARGE` answers the charge script's reply.
    Outcome,
}

impl Found {
    /// As stored in one atomic byte: a module that does more, a larger
    /// byte, so that a demotion is a `fetch_min` and never an upgrade.
    pub(crate) fn to_u8(self) -> u8 {
        match self {
            Found::None => 0,
            Found::Decide => 1,
            Found::Lean => 2,
            Found::Charge => 3,
            Found::Outcome => 4,
        }
    }

    /// Back from [`to_u8`](Self::to_u8).
    pub(crate) fn from_u8(v: u8) -> Found {
        match v {
            1 => Found::Decide,
            2 => Found::Lean,
            3 => Found::Charge,
            4 => Found::Outcome,
            _ => Found::None,
        }
    }
}

/// Whether to decide with the native module where it is loaded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ModuleUse {
    /// Use it when every server has it, else the scripts (see the
    /// [module docs](self)). The default.
    #[default]
    Detect,
    /// Always the scripts.
    Never,
    /// The module or an error at connect time.
    Require,
}

/// `COMMAND INFO tollgate.decide tollgate.lean tollgate.charge
/// tollgate.version`.
fn command_info() -> Cmd {
    let mut cmd = redis::cmd("COMMAND");
    cmd.arg("INFO")
        .arg(COMMAND)
        .arg(LEAN)
        .arg(CHARGE)
        .arg(VERSION);
    cmd
}

/// The commands [`command_info`] asks about, in order.
const ASKED: usize = 4;

/// [`command_info`] on one server: which commands it knows.
pub(crate) async fn detect<C: ConnectionLike>(connection: &mut C) -> Found {
    match command_info().query_async::<Value>(connection).await {
        Ok(reply) => found(&reply),
        Err(_) => Found::default(),
    }
}

/// The cluster's version of [`detect`]: every primary is asked; a node
/// that does not answer leaves the module unused.
pub(crate) async fn detect_cluster(router: &crate::cluster::router::Router) -> Found {
    let mut all = Vec::new();
    for reply in router.on_masters(&command_info()).await {
        match reply {
            Ok(Value::Array(items)) => all.extend(items),
            _ => return Found::default(),
        }
    }
    found(&Value::Array(all))
}

/// Each node's four command descriptions, in order (nil for a command it
/// does not know), concatenated on a cluster: a command is used only if
/// every node knows it.
fn found(reply: &Value) -> Found {
    let Value::Array(items) = reply else {
        return Found::default();
    };
    if items.is_empty() || items.len() % ASKED != 0 {
        return Found::default();
    }
    let every = |first: usize| {
        items
            .iter()
            .skip(first)
            .step_by(ASKED)
            .all(|i| !matches!(i, Value::Nil))
    };
    match (every(0), every(1), every(2), every(3)) {
        (true, true, true, true) => Found::Outcome,
        (true, true, true, false) => Found::Charge,
        (true, true, false, _) => Found::Lean,
        (true, false, _, _) => Found::Decide,
        (false, _, _, _) => Found::None,
    }
}

/// Whether a module of `found` decides every limit of a call whose
/// script arguments are `values` as the scripts do (see the [module
/// docs](self)).
fn decides(found: Found, values: &[Vec<u8>]) -> bool {
    let mut algorithms = values
        .get(HEAD..)
        .unwrap_or_default()
        .iter()
        .step_by(PER_LIMIT);
    let current = matches!(found, Found::Charge | Found::Outcome);
    found != Found::None
        && algorithms.all(|alg| match alg.first() {
            Some(b'g') => true,
            Some(b'w' | b'f' | b's') => current,
            _ => false,
        })
}

/// Runs one decision through the module if `found` says so, else through
/// `script` (see [`script::run`]); `args` appends the script's arguments.
/// A lean script's call goes to [`LEAN`] where every server knows it, and
/// answers as the lean script would. On `unknown command` the same decision
/// is sent to `script` and `on_absent` is called (see the [module
/// docs](self)).
pub(crate) async fn run<C: ConnectionLike>(
    connection: &mut C,
    found: Found,
    on_absent: impl FnOnce(),
    script: Script,
    keys: &[Vec<u8>],
    args: impl Fn(&mut Cmd),
) -> RedisResult<Vec<i64>> {
    let values = script_values(&args);
    if decides(found, &values) {
        let lean = matches!(found, Found::Lean | Found::Charge | Found::Outcome)
            && matches!(script, Script::Gcra | Script::Fixed);
        let name = if lean { LEAN } else { COMMAND };
        match command(name, keys, &values).query_async(connection).await {
            Err(e) if unknown_command(&e) => on_absent(),
            Err(e) if e.code() == Some(DEFER) => {}
            reply => return script::numbers(reply?),
        }
    }
    script::run(connection, script, keys, args).await
}

/// A budget's charge (the charge script's call: `script`'s `keys` and
/// `args`, `decide.lua`'s arguments with op `h`): `TOLLGATE.CHARGE` where
/// every node's module answers the script's reply ([`Found::Outcome`]) and
/// every limit is GCRA, else `script`; on `unknown command` or `DEFER`,
/// `script` at once (see [`run`]). The reply is the script's. `demote` is
/// told what the server turned out to be: [`Found::None`] on `unknown
/// command`; [`Found::Charge`] on the short reply of an older module,
/// which is returned as it came (recorded: not to be sent again, and not
/// to be read as the script's; see the [module docs](self)).
pub(crate) async fn charge<C: ConnectionLike>(
    connection: &mut C,
    found: Found,
    demote: impl FnOnce(Found),
    script: &redis::Script,
    keys: &[Vec<u8>],
    args: impl Fn(&mut Cmd),
) -> RedisResult<Vec<i64>> {
    let values = script_values(&args);
    let gcra = values
        .get(HEAD..)
        .unwrap_or_default()
        .iter()
        .step_by(PER_LIMIT)
        .all(|alg| alg.as_slice() == b"g");
    if found == Found::Outcome && gcra {
        match command(CHARGE, keys, &values)
            .query_async::<Vec<i64>>(connection)
            .await
        {
            Err(e) if unknown_command(&e) => demote(Found::None),
            Err(e) if e.code() == Some(DEFER) => {}
            Ok(reply) if reply.len() <= OLD_CHARGE_REPLY => {
                demote(Found::Charge);
                return Ok(reply);
            }
            reply => return reply,
        }
    }
    let mut invocation = script.prepare_invoke();
    for key in keys {
        invocation.key(key.as_slice());
    }
    for value in &values {
        invocation.arg(value.as_slice());
    }
    invocation.invoke_async(connection).await
}

/// The script's arguments that `args` appends, as bytes.
fn script_values(args: &impl Fn(&mut Cmd)) -> Vec<Vec<u8>> {
    let mut script_args = Cmd::new();
    args(&mut script_args);
    script_args
        .args_iter()
        .filter_map(|a| match a {
            Arg::Simple(v) => Some(v.to_vec()),
            _ => None,
        })
        .collect()
}

fn unknown_command(e: &redis::RedisError) -> bool {
    e.kind() == ErrorKind::Server(ServerErrorKind::ResponseError)
        && e.to_string()
            .to_ascii_lowercase()
            .contains("unknown command")
}

/// The length of a version 1 module's `TOLLGATE.CHARGE` reply, `{fitted,
/// recorded}`.
const OLD_CHARGE_REPLY: usize = 2;

/// Values of the script's call before the per-limit ones.
const HEAD: usize = 5;
/// Values per limit in the script's call (algorithm, four numbers, refund
/// value).
const PER_LIMIT: usize = 6;

/// The module's command from the script's arguments: each key in front of
/// its limit's values, the call's own five last (see the module crate's
/// docs for why).
fn command(name: &str, keys: &[Vec<u8>], values: &[Vec<u8>]) -> Cmd {
    debug_assert_eq!(
        values.len(),
        HEAD + PER_LIMIT * keys.len(),
        "the script's arguments: {HEAD} then {PER_LIMIT} per key, for {} keys",
        keys.len()
    );
    let mut cmd = redis::cmd(name);
    let limits = values.get(HEAD..).unwrap_or_default();
    for (key, limit) in keys.iter().zip(limits.chunks(PER_LIMIT)) {
        cmd.arg(key.as_slice());
        for value in limit {
            cmd.arg(value.as_slice());
        }
    }
    for value in values.iter().take(HEAD) {
        cmd.arg(value.as_slice());
    }
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_puts_each_key_before_its_limit_and_the_call_last() {
        let keys = vec![b"a".to_vec(), b"b".to_vec()];
        let values = script_values(&|cmd: &mut Cmd| {
            cmd.arg("c").arg("").arg(1).arg(10).arg(0);
            cmd.arg("g").arg(1).arg(2).arg(3).arg(4).arg(0);
            cmd.arg("f").arg(5).arg(6).arg(0).arg(0).arg(0);
        });
        let cmd = command(COMMAND, &keys, &values);
        let got: Vec<String> = cmd
            .args_iter()
            .map(|a| match a {
                Arg::Simple(v) => String::from_utf8_lossy(v).into_owned(),
                _ => "?".into(),
            })
            .collect();
        let want = "TOLLGATE.DECIDE a g 1 2 3 4 0 b f 5 6 0 0 0 c  1 10 0";
        assert_eq!(got.join(" "), want);
    }

    #[test]
    fn detection_needs_every_node() {
        let info = || Value::Array(vec![]);
        let node =
            |commands: [bool; 4]| commands.map(|known| if known { info() } else { Value::Nil });
        let nodes = |all: &[[bool; 4]]| Value::Array(all.iter().flat_map(|n| node(*n)).collect());
        assert_eq!(found(&nodes(&[[true; 4]])), Found::Outcome);
        assert_eq!(found(&nodes(&[[true; 4], [true; 4]])), Found::Outcome);
        // The second node's module is version 1: its charge answers
        // {fitted, recorded} alone.
        let short = nodes(&[[true; 4], [true, true, true, false]]);
        assert_eq!(found(&short), Found::Charge);
        // ... or predates the charge command.
        let older = nodes(&[[true; 4], [true, true, false, false]]);
        assert_eq!(found(&older), Found::Lean);
        // ... or the lean one.
        let oldest = nodes(&[[true; 4], [true, false, false, false]]);
        assert_eq!(found(&oldest), Found::Decide);
        // One node without the module: none.
        let absent = nodes(&[[true; 4], [false; 4]]);
        assert_eq!(found(&absent), Found::default());
        assert_eq!(found(&Value::Array(vec![])), Found::default());
        let three = Value::Array(vec![info(), info(), info()]);
        assert_eq!(found(&three), Found::default());
        assert_eq!(found(&Value::Nil), Found::default());
    }

    /// A connection that answers every command with `answer(name)` and
    /// records the names sent.
    struct Fake {
        sent: Vec<String>,
        answer: fn(&str) -> Value,
    }

    impl ConnectionLike for Fake {
        fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> redis::RedisFuture<'a, Value> {
            let name = match cmd.args_iter().next() {
                Some(Arg::Simple(v)) => String::from_utf8_lossy(v).into_owned(),
                _ => String::new(),
            };
            let reply = (self.answer)(&name);
            self.sent.push(name);
            Box::pin(async move { Ok(reply) })
        }

        fn req_packed_commands<'a>(
            &'a mut self,
            _: &'a redis::Pipeline,
            _: usize,
            _: usize,
        ) -> redis::RedisFuture<'a, Vec<Value>> {
            Box::pin(async { Ok(Vec::new()) })
        }

        fn get_db(&self) -> i64 {
            0
        }
    }

    /// Sends a charge of one GCRA limit over `connection` with `found`;
    /// returns the reply and what `demote` was told.
    async fn charge_on(connection: &mut Fake, found: Found) -> (Vec<i64>, Option<Found>) {
        let script = redis::Script::new("return 0");
        let keys = [b"k".to_vec()];
        let mut demoted = None;
        let reply = charge(
            connection,
            found,
            |f| demoted = Some(f),
            &script,
            &keys,
            |cmd: &mut Cmd| {
                cmd.arg("h").arg("").arg(1).arg(10).arg(0);
                cmd.arg("g").arg(1).arg(10).arg(20).arg(9).arg(180);
            },
        )
        .await
        .unwrap();
        (reply, demoted)
    }

    fn numbers(values: &[i64]) -> Value {
        Value::Array(values.iter().map(|&v| Value::Int(v)).collect())
    }

    /// The charge goes to the module only where it answers the script's
    /// reply (version 2); a version 1 module's short reply, should one
    /// still come, is returned as it came (recorded: never sent again to
    /// the script) and demotes the connection to the scripts for charges.
    #[tokio::test]
    async fn a_charge_goes_to_a_module_whose_reply_is_the_scripts() {
        let full = [1, 1, 1, 0, 7, 1, 0, 0, 20];
        let mut current = Fake {
            sent: Vec::new(),
            answer: |_| numbers(&[1, 1, 1, 0, 7, 1, 0, 0, 20]),
        };
        assert_eq!(
            charge_on(&mut current, Found::Outcome).await,
            (full.to_vec(), None)
        );
        assert_eq!(current.sent, [CHARGE]);

        let mut older = Fake {
            sent: Vec::new(),
            answer: |_| numbers(&[1, 1]),
        };
        assert_eq!(
            charge_on(&mut older, Found::Outcome).await,
            (vec![1, 1], Some(Found::Charge))
        );
        assert_eq!(older.sent, [CHARGE], "sent once, not again as the script");

        // Detected as version 1: the script, not the module.
        let mut detected = Fake {
            sent: Vec::new(),
            answer: |_| numbers(&[1, 1, 1, 0, 7, 1, 0, 0, 20]),
        };
        assert_eq!(charge_on(&mut detected, Found::Charge).await.0, full);
        assert_eq!(detected.sent, ["EVALSHA"]);
    }

    /// GCRA goes to any module; warm-up and windows only to one that
    /// decides them as the scripts now do; a calendar never.
    #[test]
    fn each_limit_goes_to_a_module_that_decides_it_as_the_scripts() {
        let call = |algorithms: &[&str]| {
            script_values(&|cmd: &mut Cmd| {
                cmd.arg("c").arg("").arg(1).arg(10).arg(0);
                for alg in algorithms {
                    cmd.arg(*alg).arg(1).arg(2).arg(3).arg(4).arg(0);
                }
            })
        };
        for found in [Found::Decide, Found::Lean, Found::Charge, Found::Outcome] {
            assert!(decides(found, &call(&["g"])), "{found:?}");
            assert!(!decides(found, &call(&["g", "c"])), "{found:?}");
            let current = matches!(found, Found::Charge | Found::Outcome);
            for alg in ["w3", "f", "s"] {
                assert_eq!(
                    decides(found, &call(&["g", alg])),
                    current,
                    "{found:?} {alg}"
                );
            }
        }
        assert!(!decides(Found::None, &call(&["g"])));
    }
}
