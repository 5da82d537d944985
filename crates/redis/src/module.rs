//! The native module (`tollgate-redis-module`, command `TOLLGATE.DECIDE`):
//! detection at connect time and the fallback to the scripts.
//!
//! # Rule
//!
//! - **Detection**: when a [`Redis`](crate::Redis) connects (and with
//!   [`ModuleUse::Detect`], the default) it sends `COMMAND INFO
//!   tollgate.decide tollgate.lean`; on a cluster to every primary. The
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

/// Which of the module's commands every server knows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Found {
    /// Not the module: the scripts decide.
    #[default]
    None,
    /// `TOLLGATE.DECIDE` only (a module that predates the lean command).
    Decide,
    /// Both commands.
    Lean,
}

impl Found {
    /// As stored in one atomic byte.
    pub(crate) fn to_u8(self) -> u8 {
        match self {
            Found::None => 0,
            Found::Decide => 1,
            Found::Lean => 2,
        }
    }

    /// Back from [`to_u8`](Self::to_u8).
    pub(crate) fn from_u8(v: u8) -> Found {
        match v {
            1 => Found::Decide,
            2 => Found::Lean,
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

/// `COMMAND INFO tollgate.decide tollgate.lean`.
fn command_info() -> Cmd {
    let mut cmd = redis::cmd("COMMAND");
    cmd.arg("INFO").arg(COMMAND).arg(LEAN);
    cmd
}

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

/// Each node's two command descriptions, in order (nil for a command it
/// does not know), concatenated on a cluster: a command is used only if
/// every node knows it.
fn found(reply: &Value) -> Found {
    let Value::Array(items) = reply else {
        return Found::default();
    };
    if items.is_empty() || items.len() % 2 != 0 {
        return Found::default();
    }
    let every = |first: usize| {
        items
            .iter()
            .skip(first)
            .step_by(2)
            .all(|i| !matches!(i, Value::Nil))
    };
    match (every(0), every(1)) {
        (true, true) => Found::Lean,
        (true, false) => Found::Decide,
        (false, _) => Found::None,
    }
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
    if found != Found::None {
        let lean = found == Found::Lean && matches!(script, Script::Gcra | Script::Fixed);
        let name = if lean { LEAN } else { COMMAND };
        match command(name, keys, &args).query_async(connection).await {
            Err(e) if unknown_command(&e) => on_absent(),
            reply => return script::numbers(reply?),
        }
    }
    script::run(connection, script, keys, args).await
}

fn unknown_command(e: &redis::RedisError) -> bool {
    e.kind() == ErrorKind::Server(ServerErrorKind::ResponseError)
        && e.to_string()
            .to_ascii_lowercase()
            .contains("unknown command")
}

/// Values of the script's call before the per-limit ones.
const HEAD: usize = 5;
/// Values per limit in the script's call (algorithm, four numbers, refund
/// value).
const PER_LIMIT: usize = 6;

/// The module's command from the script's arguments: each key in front of
/// its limit's values, the call's own five last (see the module crate's
/// docs for why).
fn command(name: &str, keys: &[Vec<u8>], args: &impl Fn(&mut Cmd)) -> Cmd {
    let mut script_args = Cmd::new();
    args(&mut script_args);
    let values: Vec<&[u8]> = script_args
        .args_iter()
        .filter_map(|a| match a {
            Arg::Simple(v) => Some(v),
            _ => None,
        })
        .collect();
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
            cmd.arg(*value);
        }
    }
    for value in values.iter().take(HEAD) {
        cmd.arg(*value);
    }
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_puts_each_key_before_its_limit_and_the_call_last() {
        let keys = vec![b"a".to_vec(), b"b".to_vec()];
        let cmd = command(COMMAND, &keys, &|cmd: &mut Cmd| {
            cmd.arg("c").arg("").arg(1).arg(10).arg(0);
            cmd.arg("g").arg(1).arg(2).arg(3).arg(4).arg(0);
            cmd.arg("f").arg(5).arg(6).arg(0).arg(0).arg(0);
        });
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
        let (both, decide_only) = (Found::Lean, Found::Decide);
        assert_eq!(found(&Value::Array(vec![info(), info()])), both);
        // Two nodes: the second's module predates the lean command.
        let older = Value::Array(vec![info(), info(), info(), Value::Nil]);
        assert_eq!(found(&older), decide_only);
        // One node without the module: neither.
        let absent = Value::Array(vec![info(), info(), Value::Nil, Value::Nil]);
        assert_eq!(found(&absent), Found::default());
        assert_eq!(found(&Value::Array(vec![])), Found::default());
        assert_eq!(found(&Value::Array(vec![info()])), Found::default());
        assert_eq!(found(&Value::Nil), Found::default());
    }
}
