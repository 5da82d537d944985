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
//! # Command
//!
//! `TOLLGATE.DECIDE (key alg a1 a2 a3 a4 x)×m op now cost slack stamp`
//!
//! The values are the script's (see `tollgate_redis::script` for their
//! meaning and the reply), reordered so that the first argument is a key (a
//! cluster client routes the command by it) and every key sits at a fixed
//! stride of 7: the command's key specification is `(first 1, last −6, step
//! 7)`, so Redis Cluster checks the slots itself and answers `CROSSSLOT` or
//! `MOVED` as for any multi-key command. The reply is
//! `{allowed, taken, now, (allowed_i, headroom_i, retry_i, reset_i)×m}`, or
//! an error reply `ERR tollgate: …` for invalid input (a cost of `-2` or
//! `1.5`, a GCRA modulus that is not the contract's, an unknown algorithm, a
//! wrong arity: see [`args`]); an error writes nothing. A key holding
//! something that is not a state of its limit (garbage, a number out of
//! range, another type) is no error: it is read as no state and replaced by
//! the next admission, as the scripts do (see [`transition`], "Foreign
//! values").
//!
//! `TOLLGATE.LEAN`, the same arguments for one GCRA or fixed window limit
//! and a check or a peek, answers as the lean scripts do: one integer where
//! it is exact (see [`lean`]). Clients use it where they detect it.
//!
//! # Guarantees
//!
//! - **Atomic**: a module command runs alone on the server's main thread, as
//!   a script does; several limits are decided all-or-nothing (every key is
//!   read and decided before any is written).
//! - **Server clock**: with `now` empty the clock is the server's real-time
//!   clock in microseconds (what `TIME` reads, from the server process
//!   itself); a `now` of nanoseconds is the test mode, as for the script.
//! - **TTL with every write**: a string state is written and given its TTL
//!   in the same command, a hash state gets `PEXPIREAT` after its `HSET`; a
//!   key with nothing to hold is deleted; a denial writes nothing.
//! - **Replication by effects**: replicas and the AOF receive the writes
//!   (`SET … PXAT`, `HSET`, `HDEL`, `PEXPIREAT`, `DEL`, wrapped in one
//!   `MULTI`/`EXEC` by Redis when there are several), never the command,
//!   whose answer depends on the clock of the server that ran it; a string
//!   state's expiry on the master is the same absolute time as the one
//!   replicated, so a replica, or a server restarted from the AOF, holds
//!   exactly the master's keys, values and expiry times, without the module
//!   (`tests/replication.rs`).
//! - **Shared state with the scripts**: the stored formats are the
//!   script's, so clients that use the module and clients that fall back to
//!   the script decide on the same keys consistently.
//!
//! # Detection and fallback (in `tollgate-redis`)
//!
//! At connect time `tollgate-redis` sends `COMMAND INFO tollgate.decide`
//! (to every primary on a cluster): the module is used only if **every**
//! node knows the command; otherwise (managed Redis without modules, a
//! partly upgraded cluster, a server refusing `COMMAND`) every decision uses
//! the scripts, which need nothing installed. The choice is made once per
//! connection and can be overridden by the client's options.
//!
//! # Safety
//!
//! The module SDK ([`redis_module`]) is a binding over Redis's C module API:
//! registering the commands and the server's allocator expands to `unsafe`
//! FFI code in this crate, so this crate alone opts out of the workspace's
//! `forbid(unsafe_code)`. The decision's hot path calls the C API directly
//! where the SDK's wrappers cost more than the decision (profiled: see
//! `BENCHMARKS.md`): the commands' registration and arguments, key handles
//! read and written in place (`handle`), the absolute expiry and the
//! replication with a static format (`effects`). Each `unsafe` block there
//! has its `SAFETY:` reason; hashes and the rare paths go through the SDK's
//! safe wrappers.

pub mod args;
mod controls;
pub mod lean;
pub mod store;
pub mod transition;

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
