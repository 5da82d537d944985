//! One round trip: a decision's or a control's script call through the
//! circuit breaker, the in-flight bound and the deadline, and its reply
//! decoded (see [`limiter`](crate::limiter), "One decision", for the order
//! and [`script`] for the contract).
//!
//! A fault is returned to the caller, which decides what answers it: the
//! failure policy for a decision, an error for a control.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis::Cmd;
use tollgate::{Clock, Decision};

use crate::backend::Redis;
use crate::breaker::Pass;
use crate::cluster;
use crate::cluster::router::NodeId;
use crate::durability::{self, Waiting};
use crate::key::BoundedKey;
use crate::limit::{Limit, binding};
use crate::limiter::{RedisLimiter, Time};
use crate::policy::Fault;
use crate::script::{self, Op, Script};

/// What the script answered, decoded.
#[derive(Clone, Debug)]
pub(crate) struct Reply {
    pub(crate) decision: Decision,
    /// Permits taken (a lease may take more than asked).
    pub(crate) taken: u64,
    /// The script's clock reading, in clock units.
    pub(crate) now: i64,
    /// Per limit: the raw reset value (GCRA: ticks), for refunds.
    pub(crate) resets: Vec<i64>,
    /// For an admission, the end of the earliest fixed window it counted in.
    pub(crate) window_end: Option<Duration>,
}

impl RedisLimiter {
    /// Runs the script through the breaker, the in-flight bound and the
    /// deadline. `Err` carries the fault and when Redis will next be tried.
    pub(crate) async fn ask(
        &self,
        key: &BoundedKey,
        cost: u64,
        op: Op,
        extra: u64,
        refund: Option<&Reply>,
    ) -> Result<Reply, (Fault, Duration)> {
        // Every key of one user key shares one slot: the first names the
        // node, whose breaker decides (see `breaker`).
        let node = self
            .shared
            .codec
            .keys_of(key)
            .first()
            .and_then(|k| self.shared.redis.node_of(k));
        let moving = AtomicBool::new(false);
        self.guarded_on(node.as_ref(), &moving, async {
            // Redis answered an error the script raised: it is up, the
            // fault is this key's or this call's (one malformed key must
            // not open the breaker for every key).
            self.call_traced(key, cost, op, extra, refund, &moving)
                .await
                .map_err(|e| fault_of(&e))
        })
        .await
    }

    /// One script call (`call`: alone or in a batch) through the breaker,
    /// the in-flight bound and the deadline. `call` answers
    /// [`Fault::Script`] for an error the script raised (Redis is up: the
    /// breaker counts a success) and [`Fault::Error`] for any other. `Err`
    /// carries the fault and when Redis will next be tried.
    pub(crate) async fn guarded(
        &self,
        call: impl Future<Output = Result<Reply, Fault>>,
    ) -> Result<Reply, (Fault, Duration)> {
        self.guarded_on(None, &AtomicBool::new(false), call).await
    }

    /// [`guarded`](Self::guarded) through the breaker of `node` (`None`:
    /// the single server's). `moving` is set by the call while a changing
    /// cluster refuses it (`MOVED`, `ASK`, `TRYAGAIN`, `CLUSTERDOWN`): a
    /// deadline that passes then is a timeout for the policy, but no fault
    /// of the node, and counts towards no breaker (see `cluster`).
    pub(crate) async fn guarded_on(
        &self,
        node: Option<&NodeId>,
        moving: &AtomicBool,
        call: impl Future<Output = Result<Reply, Fault>>,
    ) -> Result<Reply, (Fault, Duration)> {
        let s = &self.shared;
        let breaker = s.breakers.of(node);
        if let Pass::Refuse(retry) = breaker.pass() {
            // The node may have been replaced: its slots' keys follow the
            // new owner as soon as the map says so.
            s.redis.refresh_topology();
            return Err((Fault::BreakerOpen, retry));
        }
        let Ok(_slot) = s.in_flight.clone().try_acquire_owned() else {
            return Err((Fault::Overloaded, s.deadline));
        };
        let fault = match tokio::time::timeout(s.deadline, call).await {
            Ok(Ok(reply)) => {
                breaker.success();
                return Ok(reply);
            }
            Ok(Err(Fault::Script)) => {
                breaker.success();
                return Err((Fault::Script, Duration::ZERO));
            }
            Ok(Err(fault)) => fault,
            Err(_) if !cluster::counts_as_node_fault(moving) => {
                return Err((Fault::Timeout, cluster::MAX_PAUSE));
            }
            Err(_) => Fault::Timeout,
        };
        if breaker.failure() {
            s.redis.node_failing(node.map(|n| &**n));
        } else {
            s.redis.refresh_topology();
        }
        Err((fault, s.open_for))
    }

    /// One script call. `extra` is the fifth argument: the lease's need, or
    /// a refund's stamp.
    pub(super) async fn call(
        &self,
        key: &BoundedKey,
        cost: u64,
        op: Op,
        extra: u64,
        refund: Option<&Reply>,
    ) -> Result<Reply, redis::RedisError> {
        self.call_traced(key, cost, op, extra, refund, &AtomicBool::new(false))
            .await
    }

    /// [`call`](Self::call), setting `moving` while a changing cluster
    /// refuses the call before running it.
    async fn call_traced(
        &self,
        key: &BoundedKey,
        cost: u64,
        op: Op,
        extra: u64,
        refund: Option<&Reply>,
        moving: &AtomicBool,
    ) -> Result<Reply, redis::RedisError> {
        let s = &self.shared;
        let keys = s.codec.keys_of(key);
        let now = match &s.time {
            Time::Server => String::new(),
            Time::Manual(clock) => clock.now().as_u64().to_string(),
        };
        // Admissions wait for replicas where asked (see `durability`).
        let wait = s.wait.filter(|_| matches!(op, Op::Check | Op::Lease));
        // A call that waits for replicas blocks its connection: it takes
        // one of its own (see `dedicated`).
        let connection = match wait {
            Some(_) => s.redis.dedicated(),
            None => s.redis.connection(),
        };
        let mut connection = Waiting::new(connection, wait);
        // The module if detected, else the lean script for this shape, else
        // the general one; on `unknown command` the module falls back to the
        // same script (see `module`).
        let which = match (op, s.limits.as_slice()) {
            (Op::Check | Op::Peek, [Limit::Gcra(_)]) => Script::Gcra,
            (Op::Check | Op::Peek, [Limit::FixedWindow(_)]) => Script::Fixed,
            _ => Script::Decide,
        };
        let args = |cmd: &mut Cmd| {
            cmd.arg(op.code()).arg(&now).arg(cost).arg(s.slack_ms);
            match refund {
                Some(lease) => cmd.arg(lease.now),
                None => cmd.arg(extra),
            };
            for (i, args) in s.args.iter().enumerate() {
                for a in args {
                    cmd.arg(a.as_str());
                }
                let x = refund.map_or(0, |lease| lease.resets.get(i).copied().unwrap_or(0));
                cmd.arg(x);
            }
        };
        let carrying = self.carrying();
        // A call a changing cluster refused before running it is sent
        // again until the deadline (see `cluster`).
        let mut pause = cluster::FIRST_PAUSE;
        let raw = loop {
            let attempt = match carrying {
                // Always the script: the module takes no previous limits.
                Some(carry) => {
                    let mut all = keys.clone();
                    all.extend(carry.keys_of(key));
                    script::run(&mut connection, Script::Carry, &all, |cmd| {
                        args(cmd);
                        carry.args(cmd);
                    })
                    .await
                }
                // The module knows no calendar (see `calendar`).
                None if s.scripts_only => script::run(&mut connection, which, &keys, &args).await,
                None => Redis::decide(&s.redis, &mut connection, which, &keys, &args).await,
            };
            match attempt {
                Err(e) if s.redis.is_cluster() && cluster::refused_before_running(&e) => {
                    // Relaxed: read by `guarded_on` once this future is
                    // dropped or done.
                    moving.store(true, Ordering::Relaxed);
                    tokio::time::sleep(pause).await;
                    pause = cluster::next_pause(pause);
                }
                attempt => break attempt?,
            }
        };
        let lean = matches!(which, Script::Gcra | Script::Fixed);
        let expanded = self.expand_compact(&raw, lean, op, cost, now.parse().unwrap_or(0));
        let general = expanded.as_deref().unwrap_or(&raw);
        let reply = self.decode(general).ok_or_else(|| {
            redis::RedisError::from((
                redis::ErrorKind::Parse,
                "tollgate: unexpected script reply",
                format!("{raw:?}"),
            ))
        })?;
        // A denial wrote nothing: it stands whatever the replicas hold.
        if reply.decision.is_allowed() {
            connection.replicated()?;
        }
        Ok(reply)
    }

    /// A lean script's compact reply (one number) in the general form, for
    /// [`decode`](Self::decode); `None` for a reply already in that form
    /// (the module's, a marker's, the general script's) or one that does
    /// not read back. `lean`: the reply is a lean script's; `now`: the
    /// clock reading sent (0 on the server's clock).
    pub(super) fn expand_compact(
        &self,
        raw: &[i64],
        lean: bool,
        op: Op,
        cost: u64,
        now: i64,
    ) -> Option<Vec<i64>> {
        match (&self.shared.limits[..], raw.len()) {
            ([limit], 1) if lean => script::lean_of(limit, self.unit_nanos())
                .and_then(|lean| script::expand_lean(raw, lean, op == Op::Check, cost, now)),
            _ => None,
        }
    }

    pub(super) fn decode(&self, raw: &[i64]) -> Option<Reply> {
        let limits = &self.shared.limits;
        let (&[allowed, taken, now], rest) = raw.split_first_chunk::<{ script::HEAD_REPLY }>()?;
        if rest.is_empty() {
            // A refund's reply.
            return Some(Reply {
                decision: Decision::from_parts(allowed == 1, 0, 0, Duration::ZERO, Duration::ZERO),
                taken: 0,
                now,
                resets: Vec::new(),
                window_end: None,
            });
        }
        if rest.len() != limits.len() * script::PER_LIMIT_REPLY {
            return None;
        }
        let mut decisions = Vec::with_capacity(limits.len());
        let mut resets = Vec::with_capacity(limits.len());
        let mut window_end: Option<Duration> = None;
        for (limit, chunk) in limits
            .iter()
            .zip(rest.chunks_exact(script::PER_LIMIT_REPLY))
        {
            let raw: [i64; 4] = chunk.try_into().ok()?;
            let decision = limit.decision(raw)?;
            if let Limit::FixedWindow(_) | Limit::Calendar(_) = limit {
                let end = decision.reset_after();
                window_end = Some(window_end.map_or(end, |w| w.min(end)));
            }
            decisions.push(decision);
            resets.push(raw[3]);
        }
        let decision = binding(decisions)?;
        if decision.is_allowed() != (allowed == 1) {
            return None;
        }
        Some(Reply {
            decision,
            taken: u64::try_from(taken).ok()?,
            now,
            resets,
            window_end,
        })
    }

    /// Runs a control's script (always a script, never the module: see
    /// [`controls`](crate::controls)) through the breaker, the in-flight
    /// bound and the deadline, as a decision is; a fault is returned, never
    /// answered by the failure policy.
    pub(crate) async fn run_control(
        &self,
        which: Script,
        keys: &[Vec<u8>],
        args: impl Fn(&mut Cmd),
    ) -> Result<Vec<i64>, Fault> {
        let s = &self.shared;
        let node = keys.first().and_then(|k| s.redis.node_of(k));
        let breaker = s.breakers.of(node.as_ref());
        if let Pass::Refuse(_) = breaker.pass() {
            s.redis.refresh_topology();
            return Err(Fault::BreakerOpen);
        }
        let Ok(_slot) = s.in_flight.clone().try_acquire_owned() else {
            return Err(Fault::Overloaded);
        };
        // As a decision's call (see `cluster`): sent again while a changing
        // cluster refuses it before running it.
        let moving = AtomicBool::new(false);
        let call = cluster::resent_flagging(s.redis.is_cluster(), &moving, || async {
            script::run(&mut s.redis.connection(), which, keys, &args).await
        });
        let fault = match tokio::time::timeout(s.deadline, call).await {
            Ok(Ok(reply)) => {
                breaker.success();
                return Ok(reply);
            }
            Ok(Err(e)) if script::is_call_error(&e) => {
                breaker.success();
                return Err(Fault::Script);
            }
            Ok(Err(_)) => Fault::Error,
            // Resharding is no fault of the node (see `cluster`).
            Err(_) if !cluster::counts_as_node_fault(&moving) => return Err(Fault::Timeout),
            Err(_) => Fault::Timeout,
        };
        if breaker.failure() {
            s.redis.node_failing(node.as_deref());
        } else {
            s.redis.refresh_topology();
        }
        Err(fault)
    }

    /// The arguments of a control's call: the decision's, with `op` and
    /// `cost`, and with the previous limits' after them (`stamp` 1) when
    /// `carry` is given, as its keys are (see [`controls`](crate::controls)).
    pub(crate) fn control_args(
        &self,
        op: &str,
        cost: u64,
        carry: Option<&crate::carry::CarrySpec>,
        cmd: &mut Cmd,
    ) {
        let s = &self.shared;
        let now = match &s.time {
            Time::Server => String::new(),
            Time::Manual(clock) => clock.now().as_u64().to_string(),
        };
        let stamp = u8::from(carry.is_some());
        cmd.arg(op).arg(now).arg(cost).arg(s.slack_ms).arg(stamp);
        for args in &s.args {
            for a in args {
                cmd.arg(a.as_str());
            }
            cmd.arg(0);
        }
        if let Some(carry) = carry {
            carry.args(cmd);
        }
    }
}

/// The fault a failed call is counted as: [`Fault::Script`] for an error
/// the script raised ([`script::is_call_error`]), [`Fault::Timeout`] when the
/// client gave up waiting for the reply (the connection's
/// `response_timeout`, shorter than the deadline: it was counted as an
/// error), [`Fault::Unreplicated`] for an admission too
/// few replicas acknowledged, [`Fault::Error`] for any other.
pub(crate) fn fault_of(e: &redis::RedisError) -> Fault {
    if script::is_call_error(e) {
        Fault::Script
    } else if durability::is_unreplicated(e) {
        Fault::Unreplicated
    } else if e.is_timeout() {
        Fault::Timeout
    } else {
        Fault::Error
    }
}
