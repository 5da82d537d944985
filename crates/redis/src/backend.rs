//! The connection to Redis or Redis Cluster that limiters share.
//!
//! # Decisions
//!
//! - **One multiplexed connection per server**, shared by every limiter and
//!   every task: concurrent calls are written back to back and their replies
//!   read in order (pipelining without batching in the caller). On a single
//!   server this is the redis crate's `ConnectionManager` (a
//!   `MultiplexedConnection` that reconnects on I/O errors); on a cluster its
//!   async `ClusterConnection` (one multiplexed connection per node, MOVED
//!   and ASK followed, slots refreshed).
//! - **Short client timeouts**: the redis crate waits 500 ms per response and
//!   retries several times by default; a rate limiter must answer in
//!   milliseconds, so [`Options`] defaults to 50 ms for responses and
//!   connections and few retries. Each limiter's own deadline (a few ms)
//!   bounds every decision regardless.
//! - **Forced reconnect**: a server that accepts and never answers (a
//!   stopped process, a black-holed route) gives no I/O error, so the
//!   `ConnectionManager` would keep its dead connection forever. When a
//!   limiter's circuit breaker opens it asks for a fresh connection
//!   ([`Redis::reconnect`]); the next probe goes through it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisError, RedisFuture, Value};

use crate::module::{self, ModuleUse};

/// Connection settings. Every setting has a default.
#[derive(Clone, Debug)]
pub struct Options {
    /// How long the client waits for one reply. By default, 50 ms.
    pub response_timeout: Duration,
    /// How long the client waits to connect. By default, 50 ms.
    pub connection_timeout: Duration,
    /// Reconnection attempts after a broken connection (single server), or
    /// retries of a redirected or failed command (cluster). By default, 2.
    pub retries: u32,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            response_timeout: Duration::from_millis(50),
            connection_timeout: Duration::from_millis(50),
            retries: 2,
        }
    }
}

/// A shared handle on Redis or Redis Cluster; clones share the connection.
#[derive(Clone)]
pub struct Redis {
    inner: Arc<Inner>,
    /// Whether decisions go to the native module (see [`module`]). Relaxed:
    /// a hint read per call; either value decides correctly, and a change
    /// needs to order nothing else.
    module: Arc<AtomicBool>,
}

enum Inner {
    Single(Box<Single>),
    Cluster(ClusterConnection),
}

struct Single {
    client: redis::Client,
    config: ConnectionManagerConfig,
    manager: RwLock<ConnectionManager>,
}

impl std::fmt::Debug for Redis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &*self.inner {
            Inner::Single(single) => f
                .debug_struct("Redis")
                .field("server", &single.client.get_connection_info().addr())
                .finish(),
            Inner::Cluster(_) => f.debug_struct("Redis").field("cluster", &true).finish(),
        }
    }
}

impl Redis {
    /// Connects to one Redis server at `url` (`redis://host:port/db`).
    ///
    /// # Errors
    ///
    /// An invalid URL, or the server does not answer within the connection
    /// timeout.
    pub async fn connect(url: &str, options: &Options) -> Result<Redis, RedisError> {
        let client = redis::Client::open(url)?;
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(options.response_timeout))
            .set_connection_timeout(Some(options.connection_timeout))
            .set_number_of_retries(options.retries as usize)
            .set_min_delay(Duration::from_millis(10))
            .set_max_delay(Duration::from_millis(200));
        let manager = ConnectionManager::new_with_config(client.clone(), config.clone()).await?;
        Redis::ready(
            Inner::Single(Box::new(Single {
                client,
                config,
                manager: RwLock::new(manager),
            })),
            ModuleUse::Detect,
        )
        .await
    }

    /// Connects to a Redis Cluster through any of `nodes` (URLs).
    ///
    /// # Errors
    ///
    /// An invalid URL, or no node gives the slot map within the timeouts.
    pub async fn connect_cluster(nodes: &[&str], options: &Options) -> Result<Redis, RedisError> {
        let client = ClusterClientBuilder::new(nodes.to_vec())
            .response_timeout(options.response_timeout)
            .connection_timeout(options.connection_timeout)
            .retries(options.retries)
            .min_retry_wait(5)
            .max_retry_wait(50)
            .build()?;
        let connection = client.get_async_connection().await?;
        Redis::ready(Inner::Cluster(connection), ModuleUse::Detect).await
    }

    /// The handle on a connected `inner`, with the module detected as
    /// `module_use` says.
    async fn ready(inner: Inner, module_use: ModuleUse) -> Result<Redis, RedisError> {
        let redis = Redis {
            inner: Arc::new(inner),
            module: Arc::new(AtomicBool::new(false)),
        };
        if module_use != ModuleUse::Never {
            redis.detect_module().await;
            if module_use == ModuleUse::Require && !redis.uses_module() {
                return Err(RedisError::from((
                    redis::ErrorKind::Client,
                    "tollgate: the native module is required but not loaded",
                    format!("`COMMAND INFO {}` does not know it", module::COMMAND),
                )));
            }
        }
        Ok(redis)
    }

    /// Looks for the native module (`COMMAND INFO tollgate.decide`, on every
    /// primary of a cluster) and uses it for the decisions that follow if
    /// every node has it, else the scripts: see [`module`].
    pub async fn detect_module(&self) -> bool {
        let found = match &*self.inner {
            Inner::Single(_) => module::detect(&mut self.connection()).await,
            Inner::Cluster(c) => module::detect_cluster(&mut c.clone()).await,
        };
        self.module.store(found, Ordering::Relaxed);
        found
    }

    /// Whether decisions go to the native module (see [`module`]).
    pub fn uses_module(&self) -> bool {
        self.module.load(Ordering::Relaxed)
    }

    /// One decision on `connection`, by the module or the script (see
    /// [`module`]); `args` appends the script's arguments.
    pub(crate) async fn decide(
        &self,
        connection: &mut Connection,
        keys: &[Vec<u8>],
        args: impl Fn(&mut Cmd),
    ) -> redis::RedisResult<Vec<i64>> {
        // On `unknown command`: the scripts from now on.
        let absent = || self.module.store(false, Ordering::Relaxed);
        module::run(connection, self.uses_module(), absent, keys, args).await
    }

    /// Whether this is a cluster connection.
    pub fn is_cluster(&self) -> bool {
        matches!(&*self.inner, Inner::Cluster(_))
    }

    /// A handle for one call: cheap (reference counts).
    pub(crate) fn connection(&self) -> Connection {
        match &*self.inner {
            Inner::Single(single) => {
                // A poisoned lock still holds a valid manager.
                let manager = single.manager.read().unwrap_or_else(|e| e.into_inner());
                Connection::Single(manager.clone())
            }
            Inner::Cluster(c) => Connection::Cluster(c.clone()),
        }
    }

    /// Replaces the single server's connection by a fresh one, made on its
    /// first use (see the [module docs](self)). The cluster client manages
    /// its connections itself.
    pub fn reconnect(&self) {
        if let Inner::Single(single) = &*self.inner {
            let fresh = ConnectionManager::new_lazy_with_config(
                single.client.clone(),
                single.config.clone(),
            );
            if let Ok(fresh) = fresh {
                *single.manager.write().unwrap_or_else(|e| e.into_inner()) = fresh;
            }
        }
    }
}

/// A connection for one call, to a server or a cluster.
#[derive(Clone)]
pub(crate) enum Connection {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Connection::Single(c) => c.req_packed_command(cmd),
            Connection::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Connection::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Connection::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Connection::Single(c) => c.get_db(),
            Connection::Cluster(c) => c.get_db(),
        }
    }
}
