//! The connection to Redis or Redis Cluster that limiters share.
//!
//! # Decisions
//!
//! - **One multiplexed connection per server**, shared by every limiter and
//!   every task: concurrent calls are written back to back and their replies
//!   read in order (pipelining without batching in the caller). On a single
//!   server this is the redis crate's `ConnectionManager` (a
//!   `MultiplexedConnection` that reconnects on I/O errors); on a cluster one
//!   such connection per node, routed by tollgate's own router (MOVED and
//!   ASK followed, the slot map refreshed in the background: see
//!   [`cluster`](crate::cluster), "Faults stay with their node").
//! - **A dedicated connection for a call that blocks** (`WAIT`): see
//!   `dedicated`.
//! - **Short client timeouts**: the redis crate waits 500 ms per response and
//!   retries several times by default; a rate limiter must answer in
//!   milliseconds, so [`Options`] defaults to 50 ms for responses and
//!   connections and few retries. Each limiter's own deadline (a few ms)
//!   bounds every decision regardless; a deadline longer than the response
//!   timeout is cut short by it, and that call is counted as a
//!   [`Fault::Timeout`](crate::Fault::Timeout) (it was an `Error`).
//! - **Scripts loaded at connect** (`SCRIPT LOAD`, every primary of a
//!   cluster, again after a Sentinel failover), so that a fresh process's
//!   first decision does not compile a script inside its deadline; `EVAL`
//!   on `NOSCRIPT` still covers a server whose cache was emptied since.
//! - **Forced reconnect**: a server that accepts and never answers (a
//!   stopped process, a black-holed route) gives no I/O error, so the
//!   `ConnectionManager` would keep its dead connection forever. When a
//!   limiter's circuit breaker opens it asks for a fresh connection
//!   ([`Redis::reconnect`]); the next probe goes through it. Behind
//!   Sentinel that reconnect first asks the sentinels for the master again
//!   (in a background task, one at a time), so the limiter follows a
//!   failover; the module is then detected again on the new master.
//! - **TLS, ACL, Sentinel** come from a [`RedisConfig`] ([`Redis::open`]);
//!   [`Redis::connect`] and [`Redis::connect_cluster`] are its plain-URL
//!   shorthands.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::sentinel::SentinelClient;
use redis::{Cmd, Pipeline, RedisError, RedisFuture, Value};

use crate::cluster::router::{NodeId, Routed, Router};
use crate::cluster::slots;
pub use crate::config::Options;
use crate::config::{RedisConfig, Target};
use crate::connect;
use crate::dedicated::{Dedicated, Pool};
use crate::module::{self, ModuleUse};
use crate::script::Script;

/// A shared handle on Redis or Redis Cluster; clones share the connection.
#[derive(Clone)]
pub struct Redis {
    inner: Arc<Inner>,
    /// Which of the native module's commands decisions go to (see
    /// [`module`]; a [`module::Found`] as a byte). Relaxed: a hint read per
    /// call; every value decides correctly (a command the server no longer
    /// knows answers `unknown command`, which falls back to the script), and
    /// a change needs to order nothing else.
    module: Arc<AtomicU8>,
    /// The configuration's choice: [`ModuleUse::Never`] is never detected.
    module_use: ModuleUse,
}

enum Inner {
    Single(Box<Single>),
    Cluster(Arc<Router>),
}

struct Single {
    /// The server's client and its managed connection, replaced together
    /// when Sentinel names another master.
    current: RwLock<(redis::Client, ConnectionManager)>,
    /// Dedicated connections to the same server (see `dedicated`).
    dedicated: RwLock<Arc<Pool>>,
    connection_timeout: Duration,
    config: ConnectionManagerConfig,
    /// Behind Sentinel: who to ask for the master; the lock also keeps to
    /// one the lookups under way.
    sentinel: Option<Arc<tokio::sync::Mutex<SentinelClient>>>,
    /// How long one lookup of the master may take.
    lookup_timeout: Duration,
}

impl Single {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, (redis::Client, ConnectionManager)> {
        // A poisoned lock still holds a valid client and manager.
        self.current.read().unwrap_or_else(|e| e.into_inner())
    }
}

impl std::fmt::Debug for Redis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &*self.inner {
            Inner::Single(single) => f
                .debug_struct("Redis")
                .field("server", single.read().0.get_connection_info().addr())
                .field("sentinel", &single.sentinel.is_some())
                .finish(),
            Inner::Cluster(_) => f.debug_struct("Redis").field("cluster", &true).finish(),
        }
    }
}

impl Redis {
    /// Connects to one Redis server at `url` (`redis://host:port/db`), the
    /// module detected (see [`module`]).
    ///
    /// # Errors
    ///
    /// An invalid URL, or the server does not answer within the connection
    /// timeout.
    pub async fn connect(url: &str, options: &Options) -> Result<Redis, RedisError> {
        let mut config = RedisConfig::single(url);
        config.options = options.clone();
        Redis::open(&config).await
    }

    /// Connects to a Redis Cluster through any of `nodes` (URLs).
    ///
    /// # Errors
    ///
    /// An invalid URL, or no node gives the slot map within the timeouts.
    pub async fn connect_cluster(nodes: &[&str], options: &Options) -> Result<Redis, RedisError> {
        let mut config = RedisConfig::cluster(nodes.iter().copied());
        config.options = options.clone();
        Redis::open(&config).await
    }

    /// Connects as `config` says: a server, a cluster or the master named
    /// by the sentinels; TLS and ACL credentials; the module (see
    /// [`config`](crate::config) and [`module`]).
    ///
    /// # Errors
    ///
    /// An invalid URL or certificate, refused credentials or TLS handshake,
    /// no sentinel knowing the master, nothing answering within the
    /// connection timeout, or [`ModuleUse::Require`] without the module.
    pub async fn open(config: &RedisConfig) -> Result<Redis, RedisError> {
        let o = &config.options;
        let manager_config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(o.response_timeout))
            .set_connection_timeout(Some(o.connection_timeout))
            .set_number_of_retries(o.retries as usize)
            .set_min_delay(Duration::from_millis(10))
            .set_max_delay(Duration::from_millis(200));
        // A lookup asks each sentinel, then the master's role.
        let lookup_timeout = (o.connection_timeout + o.response_timeout) * 4;
        let (client, sentinel) = match &config.target {
            Target::Single(url) => (connect::single(url, config)?, None),
            Target::Cluster(nodes) => {
                let router = Router::connect(nodes, config, manager_config.clone()).await?;
                return Redis::ready(Inner::Cluster(router), config.module).await;
            }
            Target::Sentinel(sentinel) => {
                let mut sentinel = connect::sentinel(sentinel, config)?;
                let client = master(&mut sentinel, lookup_timeout).await?;
                (client, Some(Arc::new(tokio::sync::Mutex::new(sentinel))))
            }
        };
        let manager =
            ConnectionManager::new_with_config(client.clone(), manager_config.clone()).await?;
        let pool = Pool::new(client.clone(), o.connection_timeout);
        let single = Single {
            current: RwLock::new((client, manager)),
            dedicated: RwLock::new(Arc::new(pool)),
            connection_timeout: o.connection_timeout,
            config: manager_config,
            sentinel,
            lookup_timeout,
        };
        Redis::ready(Inner::Single(Box::new(single)), config.module).await
    }

    /// The handle on a connected `inner`, with the module detected as
    /// `module_use` says.
    async fn ready(inner: Inner, module_use: ModuleUse) -> Result<Redis, RedisError> {
        let redis = Redis {
            inner: Arc::new(inner),
            module: Arc::new(AtomicU8::new(module::Found::None.to_u8())),
            module_use,
        };
        redis.load_scripts().await;
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

    /// Looks for the native module (`COMMAND INFO tollgate.decide
    /// tollgate.lean tollgate.charge tollgate.version`, on every primary of
    /// a cluster) and uses it for the decisions that follow if every node
    /// has it, else the scripts: see [`module`].
    ///
    /// With [`ModuleUse::Never`], the scripts stay and this answers `false`.
    pub async fn detect_module(&self) -> bool {
        if self.module_use == ModuleUse::Never {
            return false;
        }
        let found = match &*self.inner {
            Inner::Single(_) => module::detect(&mut self.connection()).await,
            Inner::Cluster(router) => module::detect_cluster(router).await,
        };
        self.module.store(found.to_u8(), Ordering::Relaxed);
        found != module::Found::None
    }

    /// Loads every script into the server's cache (`SCRIPT LOAD`; on a
    /// cluster on every primary), so that the first decision of a fresh
    /// process runs a compiled script in one round trip. Before, it paid
    /// `EVALSHA`, `NOSCRIPT`, then `EVAL` compiling the script (500 lines
    /// for the general one, which leases use): on a busy server, with
    /// several processes starting at once, that first reply could outlast
    /// the connection's `response_timeout`. Errors are
    /// ignored: a server that refuses `SCRIPT` (some managed services) is
    /// still served by `EVAL` on `NOSCRIPT`, and a restart that empties the
    /// cache too.
    async fn load_scripts(&self) {
        match &*self.inner {
            Inner::Single(_) => {
                let mut pipe = redis::pipe();
                for script in Script::ALL {
                    pipe.add_command(script.load()).ignore();
                }
                let _loaded: redis::RedisResult<()> =
                    pipe.query_async(&mut self.connection()).await;
            }
            Inner::Cluster(router) => {
                for script in Script::ALL {
                    let _loaded = router.on_masters(&script.load()).await;
                }
            }
        }
    }

    /// Whether decisions go to the native module (see [`module`]).
    pub fn uses_module(&self) -> bool {
        self.found() != module::Found::None
    }

    fn found(&self) -> module::Found {
        module::Found::from_u8(self.module.load(Ordering::Relaxed))
    }

    /// One decision on `connection`, by the module or else by `script`
    /// (see [`module`]); `args` appends the script's arguments.
    pub(crate) async fn decide<C: ConnectionLike + Send>(
        &self,
        connection: &mut C,
        script: Script,
        keys: &[Vec<u8>],
        args: impl Fn(&mut Cmd),
    ) -> redis::RedisResult<Vec<i64>> {
        // On `unknown command`: the scripts from now on.
        let absent = || {
            self.module
                .store(module::Found::None.to_u8(), Ordering::Relaxed);
        };
        module::run(connection, self.found(), absent, script, keys, args).await
    }

    /// A budget's charge on `connection`: the charge `script`'s call
    /// (`keys`, and the arguments `args` appends), by the module's
    /// `TOLLGATE.CHARGE` where it decides it, else by `script` (see
    /// [`module`]).
    pub(crate) async fn charge<C: ConnectionLike + Send>(
        &self,
        connection: &mut C,
        script: &redis::Script,
        keys: &[Vec<u8>],
        args: impl Fn(&mut Cmd),
    ) -> redis::RedisResult<Vec<i64>> {
        // What the server turned out to be: never more than detected.
        let demote = |found: module::Found| {
            self.module.fetch_min(found.to_u8(), Ordering::Relaxed);
        };
        module::charge(connection, self.found(), demote, script, keys, args).await
    }

    /// Whether `other` is this handle or a clone of it (one connection).
    pub(crate) fn same(&self, other: &Redis) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Whether this is a cluster connection.
    pub fn is_cluster(&self) -> bool {
        matches!(&*self.inner, Inner::Cluster(_))
    }

    /// `PING`, answered `PONG` (on a cluster, by the node the client picks):
    /// whether Redis serves this client now. A connection can open and
    /// still be refused every command (`NOAUTH` from a server that wants a
    /// password the client lacks): this is how to find out.
    ///
    /// # Errors
    ///
    /// Redis answers an error (the error says which), anything but `PONG`,
    /// or does not answer within the response timeout.
    pub async fn ping(&self) -> Result<(), RedisError> {
        let pong: String = redis::cmd("PING")
            .query_async(&mut self.connection())
            .await?;
        if pong == "PONG" {
            Ok(())
        } else {
            Err(RedisError::from((
                redis::ErrorKind::Client,
                "unexpected PING reply",
                pong,
            )))
        }
    }

    /// A handle for one call: cheap (reference counts).
    pub(crate) fn connection(&self) -> Connection {
        match &*self.inner {
            Inner::Single(single) => Connection::Single(single.read().1.clone()),
            Inner::Cluster(router) => Connection::Cluster(Routed {
                router: Arc::clone(router),
                dedicated: false,
            }),
        }
    }

    /// A handle for one call that may block its connection (`WAIT`): each
    /// request on a connection of its own (see `dedicated`).
    pub(crate) fn dedicated(&self) -> Connection {
        match &*self.inner {
            Inner::Single(single) => Connection::Dedicated(Dedicated(Arc::clone(
                &single.dedicated.read().unwrap_or_else(|e| e.into_inner()),
            ))),
            Inner::Cluster(router) => Connection::Cluster(Routed {
                router: Arc::clone(router),
                dedicated: true,
            }),
        }
    }

    /// The node that serves `key` as last learned: on a cluster the master
    /// of its slot, `None` on a single server (one node). Failure state is
    /// kept per node (see [`cluster`](crate::cluster)).
    pub(crate) fn node_of(&self, key: &[u8]) -> Option<NodeId> {
        match &*self.inner {
            Inner::Single(_) => None,
            Inner::Cluster(router) => router.owner(slots::key_slot(key)),
        }
    }

    /// What a failing `node` (from [`node_of`](Self::node_of)) calls for:
    /// on a single server [`reconnect`](Self::reconnect); on a cluster a
    /// fresh connection to that node and a refresh of the slot map in the
    /// background (it may have been replaced).
    pub(crate) fn node_failing(&self, node: Option<&str>) {
        match (&*self.inner, node) {
            (Inner::Cluster(router), Some(node)) => router.reconnect(node),
            (Inner::Cluster(router), None) => router.refresh_soon(),
            (Inner::Single(_), _) => self.reconnect(),
        }
    }

    /// On a cluster, schedules a refresh of the slot map (at most one per
    /// 100 ms, in the background); else nothing.
    pub(crate) fn refresh_topology(&self) {
        if let Inner::Cluster(router) = &*self.inner {
            router.refresh_soon();
        }
    }

    /// Replaces the single server's connection by a fresh one, made on its
    /// first use; behind Sentinel, asks the sentinels for the master first,
    /// in a background task (see the [module docs](self)). The cluster
    /// client manages its connections itself.
    pub fn reconnect(&self) {
        let Inner::Single(single) = &*self.inner else {
            return;
        };
        let Some(sentinel) = &single.sentinel else {
            let client = single.read().0.clone();
            replace(single, client);
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        // One lookup at a time: a breaker opening while one runs adds none.
        let Ok(mut lookup) = sentinel.clone().try_lock_owned() else {
            return;
        };
        let redis = self.clone();
        runtime.spawn(async move {
            let Inner::Single(single) = &*redis.inner else {
                return;
            };
            // No master known (a failover under way): the old client, whose
            // connection retries; the next breaker opening asks again.
            let client = master(&mut lookup, single.lookup_timeout)
                .await
                .unwrap_or_else(|_| single.read().0.clone());
            drop(lookup);
            replace(single, client);
            redis.load_scripts().await;
            redis.detect_module().await;
        });
    }
}

/// The current master of `sentinel`, within `timeout`.
async fn master(
    sentinel: &mut SentinelClient,
    timeout: Duration,
) -> Result<redis::Client, RedisError> {
    match tokio::time::timeout(timeout, sentinel.async_get_client()).await {
        Ok(client) => client,
        Err(_) => Err(RedisError::from((
            redis::ErrorKind::Io,
            "tollgate: no sentinel named the master in time",
        ))),
    }
}

/// A fresh lazy connection to `client` in place of the current one.
fn replace(single: &Single, client: redis::Client) {
    if let Ok(fresh) =
        ConnectionManager::new_lazy_with_config(client.clone(), single.config.clone())
    {
        let pool = Pool::new(client.clone(), single.connection_timeout);
        *single.current.write().unwrap_or_else(|e| e.into_inner()) = (client, fresh);
        *single.dedicated.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(pool);
    }
}

/// A connection for one call, to a server or a cluster.
#[derive(Clone)]
pub(crate) enum Connection {
    Single(ConnectionManager),
    Cluster(Routed),
    Dedicated(Dedicated),
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Connection::Single(c) => c.req_packed_command(cmd),
            Connection::Cluster(c) => c.req_packed_command(cmd),
            Connection::Dedicated(c) => c.req_packed_command(cmd),
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
            Connection::Dedicated(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Connection::Single(c) => c.get_db(),
            Connection::Cluster(c) => c.get_db(),
            Connection::Dedicated(c) => c.get_db(),
        }
    }
}
