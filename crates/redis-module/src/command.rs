//! The command's binding to Redis: arguments in, [`Store`] over the keys,
//! reply and replication out.

use std::ffi::c_long;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis_module::raw::{self, KeyType};
use redis_module::{Context, RedisError, RedisResult, RedisString, RedisValue, redis_module};

use crate::args::{self, Call, LimitArgs, Params, STRIDE};
use crate::effects;
use crate::lean;
use crate::store::{Fields, Store};
use crate::transition;

/// `TOLLGATE.DECIDE`: see the [crate docs](crate).
fn decide(ctx: &Context, argv: Vec<RedisString>) -> RedisResult {
    let args = argv.get(1..).unwrap_or_default();
    let call = with_bytes(args, |raw| args::parse(raw))?;
    let (now, mut store) = bind(ctx, args, &call);
    let reply = transition::run(&call, now.0, now.1, &mut store).map_err(RedisError::String)?;
    reply_array(ctx, &reply);
    Ok(RedisValue::NoReply)
}

/// `TOLLGATE.LEAN`: see [`lean`].
fn lean(ctx: &Context, argv: Vec<RedisString>) -> RedisResult {
    let args = argv.get(1..).unwrap_or_default();
    let call = with_bytes(args, |raw| args::parse_lean(raw))?;
    let (now, mut store) = bind(ctx, args, &call);
    match lean::run(&call, now.0, now.1, &mut store).map_err(RedisError::String)? {
        lean::Reply::Compact(v) => {
            raw::reply_with_long_long(ctx.get_raw(), v);
        }
        lean::Reply::General(reply) => reply_array(ctx, &reply),
    }
    Ok(RedisValue::NoReply)
}

/// `parse` over the arguments' bytes, on the stack up to five limits (no
/// allocation).
fn with_bytes(
    args: &[RedisString],
    parse: fn(&[&[u8]]) -> Result<Call, args::ArgError>,
) -> Result<Call, RedisError> {
    let mut stack: [&[u8]; 5 * STRIDE + args::TAIL] = [&[]; 5 * STRIDE + args::TAIL];
    let heap: Vec<&[u8]>;
    let raw: &[&[u8]] = if args.len() <= stack.len() {
        for (slot, arg) in stack.iter_mut().zip(args) {
            *slot = arg.as_slice();
        }
        &stack[..args.len()]
    } else {
        heap = args.iter().map(RedisString::as_slice).collect();
        &heap
    };
    parse(raw).map_err(|e| RedisError::String(e.0))
}

/// The call's clock (reading, ns per unit) and its keys as a [`Store`].
fn bind<'a>(
    ctx: &'a Context,
    args: &'a [RedisString],
    call: &'a Call,
) -> ((i128, i128), RedisStore<'a>) {
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
    args: &'a [RedisString],
    /// The limits, one per key: whether key `i` holds a string (through
    /// the key API) or a hash.
    limits: &'a [LimitArgs],
    /// The real time, for the absolute expiries sent to replicas.
    wall_ms: i128,
}

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

impl RedisStore<'_> {
    fn key_string(&self, i: usize) -> &RedisString {
        &self.args[i * STRIDE]
    }

    fn key(&self, i: usize) -> &[u8] {
        self.key_string(i).as_slice()
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
    fn get(&mut self, i: usize) -> Result<Option<Vec<u8>>, String> {
        // Read-only: a read for writing would unshare the stored string.
        let key = self.ctx.open_key(self.key_string(i));
        match key.key_type() {
            KeyType::Empty => Ok(None),
            KeyType::String => key
                .read()
                .map(|v| v.map(<[u8]>::to_vec))
                .map_err(|e| e.to_string()),
            _ => Err(WRONGTYPE.to_owned()),
        }
    }

    fn set(&mut self, i: usize, value: &str, ttl_ms: i128) {
        // A key of another type is foreign (read as no state): replaced,
        // as `SET` replaces it. See `effects` for how and what it costs.
        let at = i64::try_from(self.wall_ms + ttl_ms.max(1)).unwrap_or(i64::MAX);
        effects::set_string(self.ctx, self.key_string(i), value.as_bytes(), at);
    }

    fn del(&mut self, i: usize) {
        if self.is_string(i) {
            let _ = self.ctx.open_key_writable(self.key_string(i)).delete();
        } else {
            let _ = self.call("DEL", &[self.key(i)]);
        }
        self.replicate("DEL", &[self.key(i)]);
    }

    fn hgetall(&mut self, i: usize) -> Result<Fields, String> {
        let RedisValue::Array(items) = self.call("HGETALL", &[self.key(i)])? else {
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

    fn hset(&mut self, i: usize, fields: &[(&str, String)]) {
        let mut args: Vec<&[u8]> = vec![self.key(i)];
        for (field, value) in fields {
            args.push(field.as_bytes());
            args.push(value.as_bytes());
        }
        let _ = self.call("HSET", &args);
        self.replicate("HSET", &args);
    }

    fn hdel(&mut self, i: usize, field: &str) {
        let args = [self.key(i), field.as_bytes()];
        let _ = self.call("HDEL", &args);
        self.replicate("HDEL", &args);
    }

    fn pexpire(&mut self, i: usize, ttl_ms: i128) {
        // The same absolute time on the master as replicated: a relative
        // `PEXPIRE` here read the server's clock again, one millisecond
        // later at times, and the replica's expiry differed by it.
        let at = self.at_ms(ttl_ms.max(1));
        let _ = self.call("PEXPIREAT", &[self.key(i), at.as_bytes()]);
        self.replicate("PEXPIREAT", &[self.key(i), at.as_bytes()]);
    }
}

redis_module! {
    name: "tollgate",
    version: 1,
    allocator: (redis_module::alloc::RedisAlloc, redis_module::alloc::RedisAlloc),
    data_types: [],
    commands: [
        ["tollgate.decide", decide, "write deny-oom", 1, -6, 7, ""],
        ["tollgate.lean", lean, "write deny-oom", 1, 1, 1, ""],
    ],
}
