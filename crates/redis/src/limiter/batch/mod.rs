//! [`Batcher`]: the decisions of concurrent callers on one Redis, coalesced
//! into fewer script calls.
//!
//! A server deciding for many clients at once sends Redis one `EVALSHA` per
//! decision; Redis then pays, per decision, the command's parsing, the
//! script lookup and call, a `TIME` and the reply. A batch decides several
//! keys in one script call, so those costs are paid once per batch. What a
//! batch keeps and what it changes:
//!
//! # Guarantees
//!
//! - **Independent, not all-or-nothing.** One call decides each entry
//!   exactly as its own lean call would: the batch script runs `gcra.lua`
//!   or `fixed.lua` themselves (their text, pasted into a function; see
//!   `batch.lua`) once per entry, in order, with a reply per entry. An entry
//!   its script refuses answers its own error reply, decided by its
//!   limiter's failure policy as [`Fault::Script`] (no breaker count); the
//!   other entries of the batch are decided as if it were not there.
//! - **Every decision keeps its own semantics**: the deny cache answers
//!   first, leases answer from local permits (a leased check never joins a
//!   batch), then the decision takes its limiter's breaker pass and
//!   in-flight slot, waits at most its limiter's deadline *counted from its
//!   own start*, and on a timeout, an error or a refusal is decided by its
//!   limiter's failure policy and counted under its limiter's stats, as in
//!   [`RedisLimiter::check_n`] / [`RedisLimiter::peek_n`].
//! - **Never a timer, never a wait for a batch to fill.** At most
//!   [`MAX_OUTSTANDING`] script calls of a batcher are in flight at once.
//!   A decision that finds a call free and nothing queued is sent at once,
//!   alone, from the caller's own task: at one caller (and whenever Redis
//!   keeps up) the path and the latency are the limiter's own. A decision
//!   that finds every call in flight joins the queue, and the queue leaves
//!   as one batch (at most [`MAX_BATCH`] entries per call) the moment a call
//!   in flight is answered. A queued decision therefore waits for Redis to
//!   answer what was sent before it — which, sent alone on the same
//!   connection, it would have waited for anyway, Redis answering a
//!   connection's commands in order — plus one hand-off; nothing waits for
//!   a timer or for a batch to fill, and a batch holds only what was already
//!   queued. The batches form exactly when Redis is the bottleneck (calls
//!   pile up behind it), which is when its cost per decision matters.
//! - **One instant per batch.** Entries on the server's clock share the
//!   batch's one `TIME` reading (the script call is atomic, so this is the
//!   instant at which every entry is decided); an entry of a limiter on a
//!   manual clock carries its own reading, as its lean call does.
//!
//! # Which decisions are batched (decision)
//!
//! Checks and peeks of limiters of **exactly one GCRA limit or one fixed
//! window** (the lean scripts' shapes: the common call), built on the
//! batcher's own [`Redis`], on a **single server**. Every other decision
//! takes the limiter's own path, unchanged: several limits of one key
//! (all-or-nothing by design: `decide.lua`), sliding and calendar windows,
//! a limiter carrying state from previous limits, a limiter whose
//! admissions wait for replicas ([`Durability`](crate::Durability)), the
//! native module when
//! it is in use (one module command is cheaper than a script), and Redis
//! Cluster (a batch's keys live in different hash slots).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};

use redis::aio::ConnectionLike;
use redis::{Cmd, ErrorKind, RedisError, ServerErrorKind, Value};
use tokio::sync::oneshot;
use tollgate::{Clock, Decision};

use super::{Reply, Time};
use crate::backend::{Connection, Redis};
use crate::key::BoundedKey;
use crate::limit::Limit;
use crate::limiter::{CostError, Outcome, RedisLimiter};
use crate::policy::Fault;
use crate::script::Op;

/// The most script calls of one batcher in flight at once (see the module
/// docs): two, so that Redis has the next batch in its socket while it runs
/// one, and batches form as soon as calls pile up.
pub const MAX_OUTSTANDING: usize = 2;

/// The most entries one script call decides: a batch runs on Redis's one
/// thread, so a bound keeps one call short (300 µs at 64 entries on a
/// shared 2-core machine: 4.7 µs per entry, against 7.8 µs for one lean call).
pub const MAX_BATCH: usize = 64;

/// The batch script: `batch.lua`'s prelude, the lean scripts as functions,
/// and the loop over the entries.
pub const SOURCE_BATCH: &str = concat!(
    include_str!("batch.lua"),
    "local function gcra(KEYS, ARGV, redis)\n",
    include_str!("../../gcra.lua"),
    "\nend\nlocal function fixed(KEYS, ARGV, redis)\n",
    include_str!("../../fixed.lua"),
    "\nend\n",
    "local n = #KEYS\n",
    "if #ARGV ~= n * 11 then\n",
    "  return real.error_reply('ERR tollgate: invalid arguments: a batch of ' .. n .. ' keys and ' .. #ARGV .. ' arguments')\n",
    "end\n",
    "local out = {}\n",
    "for i = 1, n do\n",
    "  local b = (i - 1) * 11\n",
    "  local decide = gcra\n",
    "  if ARGV[b + 6] == 'f' then decide = fixed end\n",
    "  out[i] = decide({KEYS[i]}, {unpack(ARGV, b + 1, b + 11)}, proxy)\n",
    "end\n",
    "return out\n",
);

/// The SHA-1 of the batch script.
static BATCH_SHA: LazyLock<String> =
    LazyLock::new(|| redis::Script::new(SOURCE_BATCH).get_hash().to_owned());

/// What an entry's script answered: its reply, or why there is none.
type Answer = Result<Vec<i64>, Fault>;

/// Counters of a [`Batcher`], since it was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BatchStats {
    /// Decisions sent alone (a call was free and nothing queued).
    pub alone: u64,
    /// Decisions sent in batches.
    pub batched: u64,
    /// Batch script calls sent (each holding 1 to [`MAX_BATCH`] decisions).
    pub batches: u64,
}

/// Coalesces the decisions of concurrent callers on one [`Redis`] into
/// fewer script calls (see the [module docs](self)). Clones share the queue.
#[derive(Clone)]
pub struct Batcher {
    inner: Arc<Inner>,
}

struct Inner {
    redis: Redis,
    state: Mutex<State>,
    /// Whether a decision may go alone (always, but in tests that force
    /// the batch path).
    lone_calls: bool,
    /// Counters for [`BatchStats`]. Relaxed: independent statistics.
    alone: AtomicU64,
    batched: AtomicU64,
    batches: AtomicU64,
}

/// The queue and the calls in flight, under one lock.
#[derive(Default)]
struct State {
    queue: Vec<Entry>,
    /// Script calls sent and not answered yet (lone and batch calls).
    outstanding: usize,
}

/// One queued decision.
struct Entry {
    limiter: RedisLimiter,
    key: Vec<u8>,
    op: Op,
    now: String,
    cost: u64,
    answer: oneshot::Sender<Answer>,
}

impl std::fmt::Debug for Batcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batcher")
            .field("redis", &self.inner.redis)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

/// A script call in flight (lone or batch): frees its place on drop
/// (answered, or its caller gone), sending what queued meanwhile.
struct Outstanding<'a>(&'a Arc<Inner>);

impl Drop for Outstanding<'_> {
    fn drop(&mut self) {
        self.0.finished();
    }
}

impl Batcher {
    /// A batcher for limiters built on `redis` (or a clone of it).
    pub fn new(redis: &Redis) -> Batcher {
        Batcher::with_lone_calls(redis, true)
    }

    fn with_lone_calls(redis: &Redis, lone_calls: bool) -> Batcher {
        Batcher {
            inner: Arc::new(Inner {
                redis: redis.clone(),
                state: Mutex::new(State::default()),
                lone_calls,
                alone: AtomicU64::new(0),
                batched: AtomicU64::new(0),
                batches: AtomicU64::new(0),
            }),
        }
    }

    /// [`RedisLimiter::check_n`] of `limiter`, in a batch when others are in
    /// flight.
    ///
    /// # Errors
    ///
    /// [`CostError`] if `cost` is above a limit's capacity.
    pub async fn check_n(
        &self,
        limiter: &RedisLimiter,
        key: impl AsRef<[u8]>,
        cost: u64,
    ) -> Result<Decision, CostError> {
        Ok(self.check_outcome(limiter, key, cost).await?.decision)
    }

    /// [`check_n`](Self::check_n), saying where the decision came from.
    ///
    /// # Errors
    ///
    /// [`CostError`] if `cost` is above a limit's capacity.
    pub async fn check_outcome(
        &self,
        limiter: &RedisLimiter,
        key: impl AsRef<[u8]>,
        cost: u64,
    ) -> Result<Outcome, CostError> {
        limiter.check_cost(cost)?;
        let key = key.as_ref();
        let outcome = self
            .check_bounded(limiter, &BoundedKey::new(key), cost)
            .await;
        // As `RedisLimiter::check_outcome`: every decision reported once to
        // the limiter's observer (dry-run's shadow marking included).
        if let Some(observer) = &limiter.shared().observer {
            limiter.report(&**observer, key, cost, &outcome);
        }
        Ok(outcome)
    }

    /// `RedisLimiter::check_bounded`, with the script call possibly batched.
    async fn check_bounded(&self, limiter: &RedisLimiter, key: &BoundedKey, cost: u64) -> Outcome {
        limiter
            .check_local_first(key, cost, || async {
                if self.batchable(limiter) {
                    self.decide(limiter, key, cost, Op::Check).await
                } else {
                    limiter.check_plain(key, cost).await
                }
            })
            .await
    }

    /// [`RedisLimiter::peek_n`] of `limiter`, in a batch when others are in
    /// flight.
    ///
    /// # Errors
    ///
    /// [`CostError`] if `cost` is above a limit's capacity.
    pub async fn peek_n(
        &self,
        limiter: &RedisLimiter,
        key: impl AsRef<[u8]>,
        cost: u64,
    ) -> Result<Decision, CostError> {
        Ok(self.peek_outcome(limiter, key, cost).await?.decision)
    }

    /// [`peek_n`](Self::peek_n), saying where the answer came from (a
    /// look Redis did not answer is the failure policy's, with its fault).
    ///
    /// # Errors
    ///
    /// [`CostError`] if `cost` is above a limit's capacity.
    pub async fn peek_outcome(
        &self,
        limiter: &RedisLimiter,
        key: impl AsRef<[u8]>,
        cost: u64,
    ) -> Result<Outcome, CostError> {
        limiter.check_cost(cost)?;
        let key = &BoundedKey::new(key.as_ref());
        Ok(if self.batchable(limiter) {
            self.decide(limiter, key, cost, Op::Peek).await
        } else {
            limiter.decide(key, cost, Op::Peek).await
        })
    }

    /// Counters since the batcher was made.
    pub fn stats(&self) -> BatchStats {
        let i = &self.inner;
        BatchStats {
            alone: i.alone.load(Ordering::Relaxed),
            batched: i.batched.load(Ordering::Relaxed),
            batches: i.batches.load(Ordering::Relaxed),
        }
    }

    /// Whether `limiter`'s decisions may join a batch (see the module docs).
    fn batchable(&self, limiter: &RedisLimiter) -> bool {
        let s = limiter.shared();
        matches!(
            s.limits.as_slice(),
            [Limit::Gcra(_) | Limit::FixedWindow(_)]
        ) && s.redis.same(&self.inner.redis)
            && !s.redis.is_cluster()
            && !s.redis.uses_module()
            && s.wait.is_none()
            && !s.carry.as_ref().is_some_and(|c| c.active(s.clock.now()))
    }

    /// `RedisLimiter::decide`, with the script call possibly batched.
    async fn decide(&self, limiter: &RedisLimiter, key: &BoundedKey, cost: u64, op: Op) -> Outcome {
        let sent = limiter.now();
        let asked = limiter.guarded(self.call(limiter, key, cost, op)).await;
        limiter.decided(key, cost, op, sent, asked)
    }

    /// One decision's script call: alone if a call is free and nothing is
    /// queued, else queued for the next batch.
    async fn call(
        &self,
        limiter: &RedisLimiter,
        key: &BoundedKey,
        cost: u64,
        op: Op,
    ) -> Result<Reply, Fault> {
        let inner = &self.inner;
        let alone = {
            let mut state = inner.lock();
            let free = state.queue.is_empty() && state.outstanding < MAX_OUTSTANDING;
            if inner.lone_calls && free {
                state.outstanding += 1;
            }
            inner.lone_calls && free
        };
        if alone {
            let _outstanding = Outstanding(inner);
            inner.alone.fetch_add(1, Ordering::Relaxed);
            // The limiter's own call (the lean script): `extra` is the cost,
            // as in `RedisLimiter::decide`.
            return limiter
                .call(key, cost, op, cost, None)
                .await
                .map_err(|e| classify(&e));
        }
        let s = limiter.shared();
        let now = match &s.time {
            Time::Server => String::new(),
            Time::Manual(clock) => clock.now().as_u64().to_string(),
        };
        // One limit (see `batchable`): one Redis key.
        let Some(key) = s.codec.keys_of(key).pop() else {
            return Err(Fault::Error);
        };
        let (answer, answered) = oneshot::channel();
        let sent_now: i64 = now.parse().unwrap_or(0);
        {
            let mut state = inner.lock();
            state.queue.push(Entry {
                limiter: limiter.clone(),
                key,
                op,
                now,
                cost,
                answer,
            });
            inner.dispatch(&mut state);
        }
        // A batch that could not answer (its task cancelled with the
        // runtime) is an error like a dropped connection.
        let raw = answered.await.map_err(|_| Fault::Error)??;
        // As the single call: the lean scripts' compact reply in the
        // general form, and a reply that does not decode is an error.
        let expanded = limiter.expand_compact(&raw, true, op, cost, sent_now);
        limiter
            .decode(expanded.as_deref().unwrap_or(&raw))
            .ok_or(Fault::Error)
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // The state is plain values, valid even if a holder panicked.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A call in flight was answered (or abandoned): its place is free.
    fn finished(self: &Arc<Self>) {
        let mut state = self.lock();
        state.outstanding -= 1;
        self.dispatch(&mut state);
    }

    /// Sends what is queued, one batch per free call, each from a task of
    /// its own (no caller's cancellation can strand the others' answers).
    fn dispatch(self: &Arc<Self>, state: &mut State) {
        // Outside a runtime (a caller dropped there) nothing can be sent:
        // the queue waits for the next call's dispatch, or its callers'
        // deadlines.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        while state.outstanding < MAX_OUTSTANDING && !state.queue.is_empty() {
            let n = state.queue.len().min(MAX_BATCH);
            let batch: Vec<Entry> = state.queue.drain(..n).collect();
            state.outstanding += 1;
            let inner = Arc::clone(self);
            runtime.spawn(async move {
                let _outstanding = Outstanding(&inner);
                inner.send(batch).await;
            });
        }
    }

    /// One batch script call; answers every entry.
    async fn send(&self, mut batch: Vec<Entry>) {
        // A caller gone meanwhile (its deadline passed, its answer the
        // policy's) is not decided on Redis too: nothing taken for it.
        batch.retain(|entry| !entry.answer.is_closed());
        if batch.is_empty() {
            return;
        }
        self.batches.fetch_add(1, Ordering::Relaxed);
        self.batched
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        let answers = run(&mut self.redis.connection(), &batch).await;
        for (entry, answer) in batch.into_iter().zip(answers) {
            // The caller may be gone (its deadline passed): nothing to
            // answer then.
            let _ = entry.answer.send(answer);
        }
    }
}

/// One batch script call; one answer per entry, in order.
async fn run(connection: &mut Connection, batch: &[Entry]) -> Vec<Answer> {
    let call = |verb: &str, script: &str| {
        let mut cmd = Cmd::new();
        cmd.arg(verb).arg(script).arg(batch.len());
        for entry in batch {
            cmd.arg(entry.key.as_slice());
        }
        for entry in batch {
            let s = entry.limiter.shared();
            cmd.arg(entry.op.code())
                .arg(&entry.now)
                .arg(entry.cost)
                .arg(s.slack_ms)
                .arg(entry.cost);
            for a in &s.args[0] {
                cmd.arg(a.as_str());
            }
            cmd.arg(0);
        }
        cmd
    };
    let reply = match query(connection, &call("EVALSHA", &BATCH_SHA)).await {
        Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
            query(connection, &call("EVAL", SOURCE_BATCH)).await
        }
        reply => reply,
    };
    answers(reply, batch.len())
}

/// One command's reply, an error reply as `Err`, with the error replies
/// nested in it left in place (the redis crate's `query_async` would turn
/// one entry's error into the whole call's).
async fn query(connection: &mut Connection, cmd: &Cmd) -> Result<Value, RedisError> {
    match connection.req_packed_command(cmd).await? {
        Value::ServerError(e) => Err(e.into()),
        value => Ok(value),
    }
}

/// Each entry's answer from the batch call's reply: a whole-call error
/// answers every entry alike; an entry's own error reply answers it alone.
fn answers(reply: Result<Value, RedisError>, n: usize) -> Vec<Answer> {
    let items = match reply {
        Ok(Value::Array(items)) if items.len() == n => items,
        // A reply of another shape: as a reply that does not decode.
        Ok(_) => return vec![Err(Fault::Error); n],
        Err(e) => return vec![Err(classify(&e)); n],
    };
    items.into_iter().map(entry_answer).collect()
}

fn entry_answer(item: Value) -> Answer {
    match item {
        Value::Array(values) => values
            .into_iter()
            .map(|v| match v {
                Value::Int(i) => Ok(i),
                _ => Err(Fault::Error),
            })
            .collect(),
        // A lean script's compact reply (see `script`, "The lean reply").
        Value::Int(i) => Ok(vec![i]),
        Value::ServerError(e) => Err(classify(&RedisError::from(e))),
        _ => Err(Fault::Error),
    }
}

/// An error's fault, as `RedisLimiter::ask` tells them apart.
fn classify(e: &RedisError) -> Fault {
    super::round_trip::fault_of(e)
}

#[cfg(test)]
mod tests;
