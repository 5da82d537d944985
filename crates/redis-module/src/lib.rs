//! tollgate's Redis decisions as a native Redis module: `TOLLGATE.DECIDE`
//! runs the transitions of `tollgate-redis`'s scripts without Lua, with the
//! same arguments, the same stored state and the same reply.
//!
//! # Loading
//!
//! ```text
//! cargo build --release -p tollgate-redis-module
//! redis-server --loadmodule target/release/libtollgate_redis_module.so
//! ```
//!
//! (or `MODULE LOAD` at run time, or `loadmodule` in `redis.conf`). Redis 6.0
//! or later, Valkey alike.
//!
//! # Commands
//!
//! `TOLLGATE.DECIDE (key alg a1 a2 a3 a4 x)×m op now cost slack stamp`: the
//! script's values (see `tollgate_redis::script`), each key first in a
//! stride of 7 so that Redis Cluster checks the slots itself. The reply is
//! `{allowed, taken, now, (allowed_i, headroom_i, retry_i, reset_i)×m}`, or
//! `ERR tollgate: …` for invalid input ([`args`]), which writes nothing. A
//! key holding something that is not a state of its limit is read as no
//! state and replaced by the next admission, as the scripts do
//! ([`transition`], "Foreign values"). `TOLLGATE.LEAN`, for one GCRA or
//! fixed window limit, answers as the lean scripts do ([`lean`]).
//! Warm-up limits (`w<cold> …`) are decided as the general script decides
//! them ([`warm_up`]). `TOLLGATE.CHARGE`, the same arguments with the
//! operation `h`, records a budget's charge on GCRA limits into debt as
//! `charge.lua` does, capped as the core caps it, and answers as the
//! script does, with the state after the charge ([`charge`]).
//! `TOLLGATE.VERSION` answers [`VERSION`].
//!
//! # Guarantees
//!
//! - **Atomic**: a module command runs alone on the server's main thread, as
//!   a script does; several limits are decided all-or-nothing.
//! - **Server clock**: with `now` empty, the server's real-time clock in
//!   microseconds (what `TIME` reads); a `now` in nanoseconds is the test
//!   mode, as for the script.
//! - **TTL with every write**, and a denial writes nothing.
//! - **Replication by effects**: replicas and the AOF receive the writes,
//!   never the command, so they hold exactly the master's keys, values and
//!   expiry times, without the module (`tests/replication.rs`).
//! - **Shared state with the scripts**: clients on the module and clients on
//!   the scripts decide on the same keys consistently. `tollgate-redis` uses
//!   the module only where **every** node knows the command (`COMMAND INFO`
//!   at connect time), else the scripts.
//!
//! # Safety
//!
//! The module SDK ([`redis_module`]) is a binding over Redis's C module API,
//! so this crate alone opts out of the workspace's `forbid(unsafe_code)`.
//! The hot path calls the C API directly where the SDK's wrappers cost more
//! than the decision (profiled: see `BENCHMARKS.md`): registration and
//! arguments, key handles (`handle`), expiry and replication (`effects`).
//! Each `unsafe` block has its `SAFETY:` reason; hashes and the rare paths
//! go through the SDK's safe wrappers.
//!
//! Each rule in full (the argument layout and key specification, the
//! writes, detection and fallback): `crates/redis-module/docs/module.md`.

/// The module's version (`MODULE LIST`'s `ver`, `TOLLGATE.VERSION`'s
/// reply). 2: `TOLLGATE.CHARGE` answers the state after the charge (1
/// answered `{fitted, recorded}` alone, and had no `TOLLGATE.VERSION`).
/// Clients detect this version by `TOLLGATE.VERSION` in `COMMAND INFO`, in
/// the one call that detects the other commands.
pub const VERSION: i32 = 2;

pub mod args;
pub mod charge;
mod controls;
pub mod lean;
pub mod store;
pub mod transition;
pub mod warm_up;

/// The lean scripts' off-vector cases, shared with `tollgate-redis`'s
/// tests, which replay them against Redis (`lean.rs`'s tests replay them
/// on the transitions themselves).
#[cfg(test)]
#[allow(dead_code)]
#[path = "../../redis/tests/scenarios/lean_cases.rs"]
mod lean_cases;

#[cfg(not(test))]
mod command;
#[cfg(not(test))]
mod effects;
#[cfg(not(test))]
mod handle;
