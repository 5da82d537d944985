//! Dedicated connections: one per call that may block its connection
//! (`WAIT`), so that nothing else waits behind it.
//!
//! Redis answers a connection's commands in order, and a blocked `WAIT`
//! blocks its client: on the multiplexed connection every limiter shares,
//! every call pipelined behind it would wait for it too (measured on a
//! master left without a replica: 252–295 admissions of other keys ended
//! as timeouts behind `WAIT 1 100`, 4–6 as what they were). A call that
//! waits for replicas therefore takes a connection of its own from a
//! [`Pool`] for its one exchange (the decision and its `WAIT`, pipelined:
//! `WAIT` counts the writes of its own connection), and gives it back once
//! the exchange completed. A call cancelled mid-exchange (its deadline
//! passed) drops its connection instead: Redis unblocks a client that
//! disconnects, and the next call does not inherit a late reply.
//!
//! # Parameters
//!
//! - **No response timeout** on a dedicated connection: the caller's
//!   deadline bounds the exchange, so that an admission `WAIT` left
//!   unacknowledged reaches the failure policy as
//!   [`Fault::Unreplicated`](crate::Fault::Unreplicated) whenever `WAIT`
//!   answered before the deadline, and as a timeout only when it did not.
//! - **The connection timeout** is the configuration's (50 ms by default).
//! - **At most [`IDLE`] idle connections** are kept per server; more are
//!   opened while more calls wait at once (each limiter's `max_in_flight`
//!   bounds them), and closed when given back beyond that.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{AsyncConnectionConfig, Cmd, Pipeline, RedisFuture, Value};

/// Idle dedicated connections kept per server.
pub(crate) const IDLE: usize = 16;

/// Dedicated connections to one server.
pub(crate) struct Pool {
    client: redis::Client,
    config: AsyncConnectionConfig,
    idle: Mutex<Vec<MultiplexedConnection>>,
}

impl Pool {
    /// A pool of connections to `client`, each opened within
    /// `connection_timeout`.
    pub(crate) fn new(client: redis::Client, connection_timeout: Duration) -> Pool {
        Pool {
            client,
            config: AsyncConnectionConfig::new()
                .set_connection_timeout(Some(connection_timeout))
                .set_response_timeout(None),
            idle: Mutex::new(Vec::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<MultiplexedConnection>> {
        // A list of connections: valid even if a holder panicked.
        self.idle.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// An idle connection, or a new one.
    pub(crate) async fn take(self: &Arc<Self>) -> redis::RedisResult<Taken> {
        let idle = self.lock().pop();
        let connection = match idle {
            Some(connection) => connection,
            None => {
                self.client
                    .get_multiplexed_async_connection_with_config(&self.config)
                    .await?
            }
        };
        Ok(Taken {
            connection: Some(connection),
            pool: Arc::clone(self),
            clean: false,
        })
    }

    fn db(&self) -> i64 {
        self.client.get_connection_info().redis_settings().db()
    }

    /// Closes the idle connections (the server was replaced or is
    /// suspected): the next calls open fresh ones.
    pub(crate) fn clear(&self) {
        self.lock().clear();
    }
}

/// A connection taken from a [`Pool`]: given back on drop if its last
/// exchange completed, else closed.
pub(crate) struct Taken {
    connection: Option<MultiplexedConnection>,
    pool: Arc<Pool>,
    clean: bool,
}

impl ConnectionLike for Taken {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let Some(connection) = self.connection.as_mut() else {
                return Err(closed());
            };
            self.clean = false;
            let reply = connection.req_packed_command(cmd).await;
            // Set only once the exchange completed: a cancelled call leaves
            // it false and the connection is closed.
            self.clean = reply.is_ok();
            reply
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let Some(connection) = self.connection.as_mut() else {
                return Err(closed());
            };
            self.clean = false;
            let reply = connection
                .req_packed_commands(pipeline, offset, count)
                .await;
            self.clean = reply.is_ok();
            reply
        })
    }

    fn get_db(&self) -> i64 {
        self.pool.db()
    }
}

fn closed() -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::Io,
        "tollgate: dedicated connection closed",
    ))
}

impl Drop for Taken {
    fn drop(&mut self) {
        if let (true, Some(connection)) = (self.clean, self.connection.take()) {
            let mut idle = self.pool.lock();
            if idle.len() < IDLE {
                idle.push(connection);
            }
        }
    }
}

/// A call on a dedicated connection of `pool`, one exchange per request,
/// as a [`ConnectionLike`].
#[derive(Clone)]
pub(crate) struct Dedicated(pub(crate) Arc<Pool>);

impl ConnectionLike for Dedicated {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move { self.0.take().await?.req_packed_command(cmd).await })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            self.0
                .take()
                .await?
                .req_packed_commands(pipeline, offset, count)
                .await
        })
    }

    fn get_db(&self) -> i64 {
        self.0.db()
    }
}
