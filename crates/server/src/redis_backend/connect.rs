//! The start's connection to Redis: open it, `PING` it, and wait as the
//! settings' `startup_retry` says (see [`crate::config::StartupRetry`]).
//!
//! # Decisions
//!
//! - **`PING` must answer `PONG`**, as envoyproxy/ratelimit checks at
//!   start: a connection opens to a Redis that wants a password the server
//!   lacks (`requirepass`), and every command is then refused (`NOAUTH`).
//!   Found here, it stops the start (or is waited out), instead of sending
//!   every decision to the failure policy in silence.
//! - **Without `startup_retry`** the first failure is the start's error
//!   (the YAML door's default). **With it**, each failure is logged at
//!   WARN with the wait before the next try (at most one line per
//!   [`RETRY_LOG_EVERY`], the tries in between counted in it), until Redis
//!   answers or `give_up_after` has passed since the first try. The
//!   listeners are bound after this returns, as envoyproxy/ratelimit binds
//!   its own once Redis answered.

use std::time::{Duration, Instant};

use tollgate_redis::Redis;

use super::{redis_config, target_name};
use crate::backend::BackendError;
use crate::config::RedisSettings;

/// At most one retry line per this long.
pub const RETRY_LOG_EVERY: Duration = Duration::from_secs(1);

/// One try: open, then `PING`.
async fn try_once(settings: &RedisSettings) -> Result<Redis, String> {
    let redis = Redis::open(&redis_config(settings))
        .await
        .map_err(|error| error.to_string())?;
    let answered = tokio::time::timeout(settings.response_timeout, redis.ping()).await;
    match answered {
        Ok(Ok(())) => Ok(redis),
        Ok(Err(error)) => Err(format!("PING: {error}")),
        Err(_) => Err(format!(
            "PING: no answer within {:?}",
            settings.response_timeout
        )),
    }
}

/// Redis of `settings`, answering `PING` (see the [module docs](self));
/// `what` names it in messages (`""`, or ` (per-second limits)`).
///
/// # Errors
///
/// Redis cannot be reached or refuses, at once without `startup_retry`,
/// else once `give_up_after` has passed.
pub(super) async fn open(settings: &RedisSettings, what: &str) -> Result<Redis, BackendError> {
    let target = target_name(settings);
    let started = Instant::now();
    let mut attempt: u32 = 0;
    let mut last_line: Option<Instant> = None;
    let mut unlogged: u32 = 0;
    loop {
        let error = match try_once(settings).await {
            Ok(redis) => {
                if attempt > 0 {
                    tracing::warn!(
                        redis = %target,
                        "Redis {target}{what} answers after {attempt} failed tries ({:.1?})",
                        started.elapsed()
                    );
                }
                return Ok(redis);
            }
            Err(error) => error,
        };
        let Some(retry) = settings.startup_retry else {
            return Err(BackendError::new(format!(
                "cannot connect to {target}{what}: {error}"
            )));
        };
        let elapsed = started.elapsed();
        if retry.give_up_after.is_some_and(|limit| elapsed >= limit) {
            return Err(BackendError::new(format!(
                "timed out waiting for Redis {target}{what} after {elapsed:.1?}: {error}"
            )));
        }
        let wait = retry.wait(attempt);
        attempt = attempt.saturating_add(1);
        unlogged += 1;
        let now = Instant::now();
        if last_line.is_none_or(|last| now.duration_since(last) >= RETRY_LOG_EVERY) {
            tracing::warn!(
                redis = %target,
                %error,
                "Retrying Redis connection to {target}{what} in {wait:.1?} (elapsed: {elapsed:.1?}, {unlogged} failed tr{} since the last line): {error}",
                if unlogged == 1 { "y" } else { "ies" }
            );
            last_line = Some(now);
            unlogged = 0;
        }
        tokio::time::sleep(wait).await;
    }
}
