//! The write of a string state (a GCRA TAT, a fixed window) and its
//! replication: the admission's hot path, with as little work as Redis's
//! module API allows.
//!
//! # Guarantees
//!
//! - **Exact replicas and AOF**: every write is propagated as its effect,
//!   `SET key value PXAT at`, with the absolute expiry `at` the master itself
//!   stores (`RedisModule_SetAbsExpire`): the master, its replicas and a
//!   server restarted from the AOF hold the same value and the same expiry to
//!   the millisecond, and none of them needs the module (see
//!   `tests/replication.rs`).
//! - **The TTL in the same step**: the value and its expiry are written in
//!   one command, before anything else runs.
//!
//! # Cost
//!
//! The aim is Redis CPU per admission no more than redis-cell's
//! `CL.THROTTLE` (`BENCHMARKS.md`); in a module command most of it is
//! allocation, so:
//!
//! - **In place**: the value is written through the key's DMA buffer, raw;
//!   a state of the stored value's length (nearly every admission) is
//!   overwritten without any allocation, any other is re-created at the
//!   exact length.
//! - **One `RedisModule_Replicate` with a static format** (`"sbss"`), its
//!   `PXAT` and time strings reused: no Rust allocation; Redis's own work
//!   in it remains, even without replicas, as a module cannot see that no
//!   one listens.
//! - **Effects, not `RedisModule_ReplicateVerbatim`**: the decision depends
//!   on the master's clock, so a replica re-running the command would
//!   decide on its own.
//!
//! Why each choice, with the profiles and the bytes per key:
//! `crates/redis-module/docs/effects.md`.
//!
//! # Safety
//!
//! Four calls of Redis's module API have no safe wrapper in the SDK
//! ([`redis_module`]): `RedisModule_SetAbsExpire`, the variadic
//! `RedisModule_Replicate` with our own format, and
//! `RedisModule_CreateString`/`FreeString` without a context for the
//! strings kept between commands (the key handles are in
//! [`crate::handle`]). Each `unsafe` block states what makes it sound; all
//! run on Redis's main thread inside a command's call (or the module's
//! load), with that call's context and a key handle this module opened and
//! has not closed.

use std::ffi::c_char;
use std::sync::atomic::{AtomicI64, AtomicPtr, Ordering};

use redis_module::raw;

use crate::handle::{Arg, WriteKey};

/// Sets the string `key` to `value`, expiring at `at_ms` (Unix time, ms),
/// and replicates `SET key value PXAT at_ms`.
pub(crate) fn set_string(ctx: *mut raw::RedisModuleCtx, key: Arg, value: &[u8], at_ms: i64) {
    {
        let Some(mut handle) = WriteKey::open(ctx, key) else {
            return;
        };
        match handle.buffer() {
            Some(buffer) if buffer.len() == value.len() && !value.is_empty() => {
                buffer.copy_from_slice(value);
            }
            _ => {
                // Empty, another type or another length: a fresh string of
                // the exact length (Redis creates it raw, `value.len()` zero
                // bytes, which the DMA buffer then receives).
                handle.delete();
                if raw::string_truncate(handle.raw(), value.len()) == raw::Status::Ok {
                    if let Some(buffer) = handle.buffer() {
                        if buffer.len() == value.len() {
                            buffer.copy_from_slice(value);
                        }
                    }
                }
            }
        }
        set_abs_expire(&handle, at_ms);
    }
    replicate_set(ctx, key, value, at_ms);
}

/// Expires the key at `at_ms`; on a server older than 6.2.2 (no
/// `RedisModule_SetAbsExpire`) in `at_ms` minus now (then a replica's
/// expiry may differ from the master's by the millisecond between the two
/// clock readings).
fn set_abs_expire(handle: &WriteKey, at_ms: i64) {
    // SAFETY: a plain read (a copy) of the function pointer that
    // `RedisModule_Init` filled in (or left `None` on an older server).
    let absolute = unsafe { raw::RedisModule_SetAbsExpire };
    match absolute {
        // SAFETY: an open key handle, opened for writing, holding a value.
        Some(set) => unsafe {
            set(handle.raw(), at_ms);
        },
        None => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
            raw::set_expire(handle.raw(), (at_ms - now).max(1));
        }
    }
}

/// The `PXAT` argument of every replicated `SET`, made once when the
/// module is loaded ([`init`]): Redis takes a reference to it for each
/// replicated command instead of a new string.
static PXAT: AtomicPtr<raw::RedisModuleString> = AtomicPtr::new(std::ptr::null_mut());

/// The last replicated expiry time and its string: admissions in the same
/// millisecond with the same TTL (every new key of a quota, a hot key's
/// admissions) share one, a reference instead of a new string each.
/// Touched only by commands, which Redis runs one at a time on its main
/// thread: `Relaxed` suffices, there is no other thread to order with.
static LAST_AT: AtomicI64 = AtomicI64::new(i64::MIN);
static LAST_AT_STRING: AtomicPtr<raw::RedisModuleString> = AtomicPtr::new(std::ptr::null_mut());

/// Makes the replicated command's constant argument (at load, on Redis's
/// main thread).
pub(crate) fn init() {
    // Release: published once at load, before any command runs; commands
    // read it on the same thread, with Acquire.
    PXAT.store(create_string(b"PXAT"), Ordering::Release);
}

/// Frees the strings kept between commands (at unload, on Redis's main
/// thread, after the last command).
pub(crate) fn deinit() {
    LAST_AT.store(i64::MIN, Ordering::Relaxed);
    for kept in [&PXAT, &LAST_AT_STRING] {
        // Relaxed: the main thread, after every command (see `LAST_AT`).
        let string = kept.swap(std::ptr::null_mut(), Ordering::Relaxed);
        free_string(string);
    }
}

/// Drops this module's reference to `string` (made without a context);
/// a replicated command still queued holds its own, so the string lives
/// until it is sent. Null: nothing.
fn free_string(string: *mut raw::RedisModuleString) {
    if string.is_null() {
        return;
    }
    // SAFETY: a plain read (a copy) of the function pointer that
    // `RedisModule_Init` filled in when the module was loaded.
    if let Some(free) = unsafe { raw::RedisModule_FreeString } {
        // SAFETY: our own reference to a string made without a context,
        // so freed without one.
        unsafe { free(std::ptr::null_mut(), string) };
    }
}

/// A string that lives until freed (no context: not auto-memory managed);
/// null on a server that lacks the call.
fn create_string(bytes: &[u8]) -> *mut raw::RedisModuleString {
    // SAFETY: a plain read (a copy) of the function pointer that
    // `RedisModule_Init` filled in when the module was loaded.
    let Some(create) = (unsafe { raw::RedisModule_CreateString }) else {
        return std::ptr::null_mut();
    };
    // SAFETY: no context (NULL) is allowed and means no auto memory; the
    // buffer is `bytes`, which Redis copies.
    unsafe {
        create(
            std::ptr::null_mut(),
            bytes.as_ptr().cast::<c_char>(),
            bytes.len(),
        )
    }
}

/// The string of `at_ms` for the replicated `SET`: the last one if the same
/// time, else a new one that replaces it (null if none could be made).
fn at_string(at_ms: i64) -> *mut raw::RedisModuleString {
    let last = LAST_AT_STRING.load(Ordering::Relaxed);
    if LAST_AT.load(Ordering::Relaxed) == at_ms && !last.is_null() {
        return last;
    }
    let mut digits = itoa::Buffer::new();
    let fresh = create_string(digits.format(at_ms).as_bytes());
    free_string(last);
    LAST_AT_STRING.store(fresh, Ordering::Relaxed);
    LAST_AT.store(at_ms, Ordering::Relaxed);
    fresh
}

/// `SET key value PXAT at_ms` to the replicas and the AOF.
fn replicate_set(ctx: *mut raw::RedisModuleCtx, key: Arg, value: &[u8], at_ms: i64) {
    // SAFETY: a plain read (a copy) of the function pointer that
    // `RedisModule_Init` filled in when the module was loaded.
    let Some(replicate) = (unsafe { raw::RedisModule_Replicate }) else {
        return;
    };
    // Acquire: pairs with the Release of `init` (see there).
    let pxat = PXAT.load(Ordering::Acquire);
    let at = at_string(at_ms);
    if !pxat.is_null() && !at.is_null() {
        // SAFETY: the context is the running command's; the command name
        // and the format are NUL-terminated literals; the variadic
        // arguments match the format exactly: `s` a `RedisModuleString*`
        // (the command's own key argument, alive for the call; `PXAT` and
        // the time, alive until this module frees them: Redis takes its
        // own references to all three), `b` a `char*` and its `size_t`
        // length (the value, alive for the call; Redis copies it).
        unsafe {
            replicate(
                ctx,
                c"SET".as_ptr(),
                c"sbss".as_ptr(),
                key.0,
                value.as_ptr().cast::<c_char>(),
                value.len(),
                pxat,
                at,
            );
        }
        return;
    }
    let mut digits = itoa::Buffer::new();
    let at = digits.format(at_ms).as_bytes();
    // SAFETY: as above, with `c` a NUL-terminated `char*` and the time's
    // digits as a `b` buffer (on the stack, alive for the call; Redis
    // copies them).
    unsafe {
        replicate(
            ctx,
            c"SET".as_ptr(),
            c"sbcb".as_ptr(),
            key.0,
            value.as_ptr().cast::<c_char>(),
            value.len(),
            c"PXAT".as_ptr(),
            at.as_ptr().cast::<c_char>(),
            at.len(),
        );
    }
}
