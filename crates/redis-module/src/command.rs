//! The commands' binding to Redis: arguments in, [`Store`] over the keys,
//! reply and replication out.
//!
//! The commands are registered through the raw API (`RedisModule_CreateCommand`
//! with this module's own C functions) rather than the SDK's `commands:`
//! list, whose wrapper copies every argument into a `Vec` of retained
//! strings before the command runs (see [`crate::handle`]).

use std::ffi::{CStr, c_int, c_long};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis_module::{Context, RedisError, RedisString, RedisValue, Status, raw, redis_module};

use crate::args::{self, Call, LimitArgs, Params, STRIDE};
use crate::charge;
use crate::effects;
use crate::handle::{Arg, Held, ReadKey, WriteKey};
use crate::lean;
use crate::store::{Fields, Store};
use crate::transition;

/// `TOLLGATE.DECIDE`: see the [crate docs](crate).
fn decide(ctx: &Context, args: &[Arg]) -> Result<(), String> {
    let call = args::parse(args).map_err(|e| e.0)?;
    let (now, mut store) = bind(ctx, args, &call);
    let reply = transition::run(&call, now.0, now.1, &mut store)?;
    reply_array(ctx, &reply);
    Ok(())
}

/// `TOLLGATE.LEAN`: see [`lean`].
fn lean(ctx: &Context, args: &[Arg]) -> Result<(), String> {
    let call = args::parse_lean(args).map_err(|e| e.0)?;
    let (now, mut store) = bind(ctx, args, &call);
    match lean::run(&call, now.0, now.1, &mut store)? {
        lean::Reply::Compact(v) => {
            raw::reply_with_long_long(ctx.get_raw(), v);
        }
        lean::Reply::General(reply) => reply_array(ctx, &reply),
    }
    Ok(())
}

/// `TOLLGATE.CHARGE`: see [`charge`].
fn charge(ctx: &Context, args: &[Arg]) -> Result<(), String> {
    let call = charge::parse(args).map_err(|e| e.0)?;
    let (now, mut store) = bind(ctx, args, &call);
    let reply = charge::run(&call, now.0, now.1, &mut store)?;
    reply_array(ctx, &reply);
    Ok(())
}

/// `TOLLGATE.VERSION`: [`crate::VERSION`], the module's version.
fn version(ctx: &Context, args: &[Arg]) -> Result<(), String> {
    if !args.is_empty() {
        return Err("ERR tollgate: TOLLGATE.VERSION takes no arguments".to_owned());
    }
    raw::reply_with_long_long(ctx.get_raw(), i64::from(crate::VERSION));
    Ok(())
}

/// The call's clock (reading, ns per unit) and its keys as a [`Store`].
fn bind<'a>(ctx: &'a Context, args: &'a [Arg], call: &'a Call) -> ((i128, i128), RedisStore<'a>) {
    let wall = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    let now = match call.now {
        None => (i128::try_from(wall.as_micros()).unwrap_or(0), 1_000),
        Some(ns) => (ns, 1),
    };
    let store = RedisStore {
        ctx,
        args,
        limits: &call.limits,
        wall_ms: i128::try_from(wall.as_millis()).unwrap_or(0),
        read: None,
    };
    (now, store)
}

/// An array of integers, straight to the client: no intermediate
/// `RedisValue` array.
fn reply_array(ctx: &Context, reply: &[i64]) {
    let raw_ctx = ctx.get_raw();
    raw::reply_with_array(raw_ctx, c_long::try_from(reply.len()).unwrap_or(0));
    for &value in reply {
        raw::reply_with_long_long(raw_ctx, value);
    }
}

/// The call's keys on the server: strings through the key API, hashes
/// through `RedisModule_Call`; every write replicated as its effect.
struct RedisStore<'a> {
    ctx: &'a Context,
    /// The command's arguments: key `i` is argument `i · STRIDE`.
    args: &'a [Arg],
    /// The limits, one per key: whether key `i` holds a string (through
    /// the key API) or a hash.
    limits: &'a [LimitArgs],
    /// The real time, for the absolute expiries sent to replicas.
    wall_ms: i128,
    /// The key last read and its open handle: what [`Store::get`] lends
    /// (read in place), and what the next read of the same key reuses (a
    /// decision reads a key for its state, then, where the state is none,
    /// for a control's marker).
    read: Option<(usize, Option<ReadKey>)>,
}

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

impl RedisStore<'_> {
    fn key_arg(&self, i: usize) -> Arg {
        self.args[i * STRIDE]
    }

    fn key(&self, i: usize) -> &[u8] {
        self.key_arg(i).bytes()
    }

    fn is_string(&self, i: usize) -> bool {
        !matches!(self.limits[i].params, Params::Sliding { .. })
    }

    fn call(&self, command: &str, args: &[&[u8]]) -> Result<RedisValue, String> {
        self.ctx.call(command, args).map_err(|e| e.to_string())
    }

    fn replicate(&self, command: &str, args: &[&[u8]]) {
        self.ctx.replicate(command, args);
    }

    fn at_ms(&self, ttl_ms: i128) -> String {
        i64::try_from(self.wall_ms + ttl_ms)
            .unwrap_or(i64::MAX)
            .to_string()
    }

    /// Closes the key read last: before any write, which may move or free
    /// what the read handle lends.
    fn close_read(&mut self) {
        self.read = None;
    }

    /// Every field and value of the hash at `key`.
    fn hgetall_of(&self, key: &[u8]) -> Result<Fields, String> {
        let RedisValue::Array(items) = self.call("HGETALL", &[key])? else {
            return Err("ERR tollgate: unexpected HGETALL reply".to_owned());
        };
        let mut items = items.into_iter().map(bytes);
        let mut pairs = Vec::new();
        while let (Some(field), Some(value)) = (items.next(), items.next()) {
            match (field, value) {
                (Some(f), Some(v)) => pairs.push((f, v)),
                _ => return Err("ERR tollgate: unexpected HGETALL reply".to_owned()),
            }
        }
        Ok(pairs)
    }
}

/// Where an allow list holds `key`'s state aside (`tollgate-redis`'s
/// `controls.lua`).
fn held_key(key: &[u8]) -> Vec<u8> {
    [key, b"!held"].concat()
}

fn bytes(value: RedisValue) -> Option<Vec<u8>> {
    match value {
        RedisValue::SimpleString(s) | RedisValue::BulkString(s) => Some(s.into_bytes()),
        RedisValue::SimpleStringStatic(s) => Some(s.as_bytes().to_vec()),
        RedisValue::BulkRedisString(s) => Some(s.as_slice().to_vec()),
        RedisValue::StringBuffer(v) => Some(v),
        RedisValue::Integer(i) => Some(i.to_string().into_bytes()),
        _ => None,
    }
}

impl Store for RedisStore<'_> {
    fn get(&mut self, i: usize) -> Result<Option<&[u8]>, String> {
        // Read-only: a read for writing would unshare the stored string,
        // and a handle opened for writing signals the key as modified (to
        // `WATCH` and client tracking) even where a denial writes nothing.
        if !matches!(self.read, Some((j, _)) if j == i) {
            self.read = None;
            let handle = ReadKey::open(self.ctx.get_raw(), self.key_arg(i));
            self.read = Some((i, handle));
        }
        let Some((_, handle)) = &self.read else {
            return Ok(None);
        };
        match handle.as_ref().map(ReadKey::held) {
            None => Ok(None),
            Some(Held::String(value)) => Ok(Some(value)),
            Some(Held::Other) => Err(WRONGTYPE.to_owned()),
        }
    }

    fn set(&mut self, i: usize, value: &str, ttl_ms: i128) {
        self.close_read();
        // A key of another type is foreign (read as no state): replaced,
        // as `SET` replaces it. See `effects` for how and what it costs.
        let at = i64::try_from(self.wall_ms + ttl_ms.max(1)).unwrap_or(i64::MAX);
        effects::set_string(self.ctx.get_raw(), self.key_arg(i), value.as_bytes(), at);
    }

    fn del(&mut self, i: usize) {
        self.close_read();
        if self.is_string(i) {
            if let Some(handle) = WriteKey::open(self.ctx.get_raw(), self.key_arg(i)) {
                handle.delete();
            }
        } else {
            let _ = self.call("DEL", &[self.key(i)]);
        }
        self.replicate("DEL", &[self.key(i)]);
    }

    fn hgetall(&mut self, i: usize) -> Result<Fields, String> {
        self.close_read();
        self.hgetall_of(self.key(i))
    }

    // What a list holds aside: through `RedisModule_Call`, as the rare path
    // it is (an allow-listed key), on a key the command's arguments do not
    // name, as the scripts read it.
    fn get_held(&mut self, i: usize) -> Result<Option<Vec<u8>>, String> {
        self.close_read();
        match self.call("GET", &[&held_key(self.key(i))])? {
            RedisValue::Null => Ok(None),
            value => Ok(bytes(value)),
        }
    }

    fn hgetall_held(&mut self, i: usize) -> Result<Fields, String> {
        self.close_read();
        self.hgetall_of(&held_key(self.key(i)))
    }

    fn hset(&mut self, i: usize, fields: &[(&str, String)]) {
        self.close_read();
        let mut args: Vec<&[u8]> = vec![self.key(i)];
        for (field, value) in fields {
            args.push(field.as_bytes());
            args.push(value.as_bytes());
        }
        let _ = self.call("HSET", &args);
        self.replicate("HSET", &args);
    }

    fn hdel(&mut self, i: usize, field: &str) {
        self.close_read();
        let args = [self.key(i), field.as_bytes()];
        let _ = self.call("HDEL", &args);
        self.replicate("HDEL", &args);
    }

    fn pexpire(&mut self, i: usize, ttl_ms: i128) {
        self.close_read();
        // The same absolute time on the master as replicated: a relative
        // `PEXPIRE` here read the server's clock again, one millisecond
        // later at times, and the replica's expiry differed by it.
        let at = self.at_ms(ttl_ms.max(1));
        let _ = self.call("PEXPIREAT", &[self.key(i), at.as_bytes()]);
        self.replicate("PEXPIREAT", &[self.key(i), at.as_bytes()]);
    }
}

/// Runs `command` on the arguments Redis passed (without the command's
/// name) and answers an error reply for an `Err`.
fn run(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
    command: fn(&Context, &[Arg]) -> Result<(), String>,
) -> c_int {
    let context = Context::new(ctx);
    // SAFETY: `argv` and `argc` are the ones Redis passed to this command
    // call, and the slice does not outlive it.
    let args = unsafe { Arg::all(argv, argc) };
    if let Err(error) = command(&context, args.get(1..).unwrap_or_default()) {
        context.reply(Err(RedisError::String(error)));
    }
    raw::Status::Ok as c_int
}

extern "C" fn decide_command(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    run(ctx, argv, argc, decide)
}

extern "C" fn lean_command(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    run(ctx, argv, argc, lean)
}

extern "C" fn charge_command(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    run(ctx, argv, argc, charge)
}

extern "C" fn version_command(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    run(ctx, argv, argc, version)
}

/// Registers `name` as `function`, with its flags and key specification.
fn create_command(
    ctx: &Context,
    name: &CStr,
    function: raw::RedisModuleCmdFunc,
    flags: &CStr,
    keys: (c_int, c_int, c_int),
) -> Status {
    // SAFETY: a plain read (a copy) of the function pointer that
    // `RedisModule_Init` filled in when the module was loaded.
    let Some(create) = (unsafe { raw::RedisModule_CreateCommand }) else {
        return Status::Err;
    };
    // SAFETY: the load-time context; the name and flags are NUL-terminated
    // strings that Redis copies; `function` has the command's C signature.
    let status = unsafe {
        create(
            ctx.get_raw(),
            name.as_ptr(),
            function,
            flags.as_ptr(),
            keys.0,
            keys.1,
            keys.2,
        )
    };
    if status == raw::Status::Ok as c_int {
        Status::Ok
    } else {
        Status::Err
    }
}

/// At load: the commands, and the replicated command's constant argument.
fn init(ctx: &Context, _args: &[RedisString]) -> Status {
    effects::init();
    // `TOLLGATE.DECIDE`: keys `(first 1, last −6, step 7)` (see the crate
    // docs); `TOLLGATE.LEAN`: its one key; `TOLLGATE.CHARGE`: DECIDE's
    // layout, so DECIDE's specification; `TOLLGATE.VERSION`: no key.
    let write = c"write deny-oom";
    let commands: [Registration; 4] = [
        (c"tollgate.decide", Some(decide_command), write, (1, -6, 7)),
        (c"tollgate.lean", Some(lean_command), write, (1, 1, 1)),
        (c"tollgate.charge", Some(charge_command), write, (1, -6, 7)),
        (
            c"tollgate.version",
            Some(version_command),
            c"readonly fast",
            (0, 0, 0),
        ),
    ];
    for (name, function, flags, keys) in commands {
        if create_command(ctx, name, function, flags, keys) == Status::Err {
            return Status::Err;
        }
    }
    Status::Ok
}

/// A command to register: its name, C function, flags and key
/// specification `(first, last, step)`.
type Registration = (
    &'static CStr,
    raw::RedisModuleCmdFunc,
    &'static CStr,
    (c_int, c_int, c_int),
);

/// At unload: the strings kept between commands.
fn deinit(_ctx: &Context) -> Status {
    effects::deinit();
    Status::Ok
}

redis_module! {
    name: "tollgate",
    version: crate::VERSION,
    allocator: (redis_module::alloc::RedisAlloc, redis_module::alloc::RedisAlloc),
    data_types: [],
    init: init,
    deinit: deinit,
    commands: [],
}
