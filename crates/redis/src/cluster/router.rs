//! The cluster's router: one connection per node, the slot map held here,
//! `MOVED` and `ASK` followed here, the map refreshed in the background —
//! so that nothing one node does stalls the calls to another (see the
//! [module docs](super), "Faults stay with their node").

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

use futures_util::future::join_all;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::{
    Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, RedisResult, ServerErrorKind, Value,
};
use tokio::time::Instant;

use super::slots::{self, Range, SLOTS};
use crate::config::RedisConfig;
use crate::connect;
use crate::dedicated::Pool;

/// A node, by the address the cluster gives it (`host:port`).
pub(crate) type NodeId = Arc<str>;

/// The shortest time between two refreshes of the slot map.
pub(crate) const MIN_REFRESH: Duration = Duration::from_millis(100);

/// Redirections followed within one call before its error is returned
/// (the caller then pauses and sends it again within its deadline).
const MAX_REDIRECTS: usize = 5;

/// Which master owns each slot.
#[derive(Clone, Default)]
struct Table {
    /// Per slot, an index into `masters`, or [`NONE`].
    owners: Vec<u16>,
    masters: Vec<NodeId>,
}

const NONE: u16 = u16::MAX;

impl Table {
    fn owner(&self, slot: u16) -> Option<&NodeId> {
        let i = *self.owners.get(usize::from(slot))?;
        self.masters.get(usize::from(i))
    }

    fn set(&mut self, slot: u16, node: &str) {
        if self.owners.len() != SLOTS {
            self.owners = vec![NONE; SLOTS];
        }
        let i = match self.masters.iter().position(|m| &**m == node) {
            Some(i) => i,
            None => {
                self.masters.push(node.into());
                self.masters.len() - 1
            }
        };
        self.owners[usize::from(slot)] = u16::try_from(i).unwrap_or(NONE);
    }
}

/// One node: its shared multiplexed connection and its dedicated ones.
struct Node {
    client: redis::Client,
    shared: RwLock<ConnectionManager>,
    pool: Arc<Pool>,
}

impl Node {
    fn shared(&self) -> ConnectionManager {
        // A poisoned lock still holds a valid manager.
        self.shared
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// What a call sends: one command, or a pipeline and the replies it wants.
#[derive(Clone, Copy)]
enum Request<'a> {
    One(&'a Cmd),
    Many(&'a Pipeline, usize, usize),
}

/// The reply to a [`Request`].
enum Reply {
    One(Value),
    Many(Vec<Value>),
}

/// A redirection Redis answered instead of running the call.
enum Redirect {
    Moved(u16, String),
    Ask(String),
}

/// The router of one cluster; shared by every clone of its
/// [`Redis`](crate::Redis).
pub(crate) struct Router {
    config: RedisConfig,
    manager: ConnectionManagerConfig,
    response_timeout: Duration,
    seeds: Vec<NodeId>,
    table: RwLock<Table>,
    nodes: Mutex<HashMap<NodeId, Arc<Node>>>,
    /// A refresh is scheduled or running (one at a time).
    refreshing: AtomicBool,
    last_refresh: Mutex<Option<Instant>>,
    me: Weak<Router>,
}

impl Router {
    /// A router through `seeds` (URLs), with the slot map read once.
    ///
    /// # Errors
    ///
    /// An invalid URL, or no node answered `CLUSTER SLOTS` in time.
    pub(crate) async fn connect(
        seeds: &[String],
        config: &RedisConfig,
        manager: ConnectionManagerConfig,
    ) -> RedisResult<Arc<Router>> {
        let mut ids = Vec::with_capacity(seeds.len());
        for url in seeds {
            let info = redis::IntoConnectionInfo::into_connection_info(url.as_str())?;
            let id: NodeId = match info.addr() {
                redis::ConnectionAddr::Tcp(host, port)
                | redis::ConnectionAddr::TcpTls { host, port, .. } => format!("{host}:{port}"),
                other => other.to_string(),
            }
            .into();
            ids.push(id);
        }
        let tls = config.tls.is_some() || seeds.iter().any(|s| s.starts_with("rediss://"));
        let mut config = config.clone();
        if tls && config.tls.is_none() {
            config.tls = Some(crate::config::TlsConfig::default());
        }
        let router = Arc::new_cyclic(|me| Router {
            response_timeout: config.options.response_timeout,
            config,
            manager,
            seeds: ids,
            table: RwLock::new(Table::default()),
            nodes: Mutex::new(HashMap::new()),
            refreshing: AtomicBool::new(false),
            last_refresh: Mutex::new(None),
            me: me.clone(),
        });
        router.refresh().await?;
        Ok(router)
    }

    fn table(&self) -> std::sync::RwLockReadGuard<'_, Table> {
        // Plain values: valid even if a writer panicked.
        self.table.read().unwrap_or_else(|e| e.into_inner())
    }

    /// The master that owns `slot`, as last learned.
    pub(crate) fn owner(&self, slot: u16) -> Option<NodeId> {
        self.table().owner(slot).cloned()
    }

    /// The masters that own at least one slot.
    pub(crate) fn masters(&self) -> Vec<NodeId> {
        let table = self.table();
        let mut owning = vec![false; table.masters.len()];
        for &i in &table.owners {
            if let Some(o) = owning.get_mut(usize::from(i)) {
                *o = true;
            }
        }
        table
            .masters
            .iter()
            .zip(owning)
            .filter(|&(_, owns)| owns)
            .map(|(m, _)| m.clone())
            .collect()
    }

    /// The node `id`, connected lazily on first use.
    fn node(&self, id: &str) -> RedisResult<Arc<Node>> {
        let mut nodes = self.nodes.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(node) = nodes.get(id) {
            return Ok(Arc::clone(node));
        }
        let scheme = if self.config.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        let client = connect::single(&format!("{scheme}://{id}"), &self.config)?;
        let shared = ConnectionManager::new_lazy_with_config(client.clone(), self.manager.clone())?;
        let pool = Arc::new(Pool::new(
            client.clone(),
            self.config.options.connection_timeout,
        ));
        let node = Arc::new(Node {
            client,
            shared: RwLock::new(shared),
            pool,
        });
        nodes.insert(id.into(), Arc::clone(&node));
        Ok(node)
    }

    /// A fresh connection to `id` for the calls that follow (a node that
    /// accepts and never answers gives no I/O error: its connection would
    /// be kept forever), and a refresh of the slot map (it may have been
    /// replaced).
    pub(crate) fn reconnect(&self, id: &str) {
        if let Ok(node) = self.node(id) {
            if let Ok(fresh) =
                ConnectionManager::new_lazy_with_config(node.client.clone(), self.manager.clone())
            {
                *node.shared.write().unwrap_or_else(|e| e.into_inner()) = fresh;
            }
            node.pool.clear();
        }
        self.refresh_soon();
    }

    /// `cmd` on every master; each one's reply.
    pub(crate) async fn on_masters(&self, cmd: &Cmd) -> Vec<RedisResult<Value>> {
        join_all(self.masters().into_iter().map(|id| async move {
            let mut connection = self.node(&id)?.shared();
            connection.req_packed_command(cmd).await
        }))
        .await
    }

    /// Schedules a refresh of the slot map, at most one at a time and one
    /// per [`MIN_REFRESH`], in a task of its own: no call waits for it.
    pub(crate) fn refresh_soon(&self) {
        if self.refreshing.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.refreshing.store(false, Ordering::Release);
            return;
        };
        let last = *self.last_refresh.lock().unwrap_or_else(|e| e.into_inner());
        let wait = last.map_or(Duration::ZERO, |t| MIN_REFRESH.saturating_sub(t.elapsed()));
        let me = self.me.clone();
        runtime.spawn(async move {
            tokio::time::sleep(wait).await;
            if let Some(router) = me.upgrade() {
                let _ = router.refresh().await;
                // AcqRel/Release: the flag hands the next refresh the table
                // this one installed.
                router.refreshing.store(false, Ordering::Release);
            }
        });
    }

    /// Reads the slot map from the masters known (the seeds before any),
    /// each within the response timeout, and keeps for each slot the owner
    /// most of them name: one node's stale view does not win.
    async fn refresh(&self) -> RedisResult<()> {
        *self.last_refresh.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        let mut asked = self.masters();
        if asked.is_empty() {
            asked = self.seeds.clone();
        }
        let mut views = self.views(&asked).await;
        if views.is_empty() {
            // No master answered: any node known, the seeds too.
            let mut all: Vec<NodeId> = self
                .nodes
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .keys()
                .cloned()
                .collect();
            all.extend(self.seeds.iter().cloned());
            all.sort();
            all.dedup();
            all.retain(|id| !asked.contains(id));
            views = self.views(&all).await;
        }
        if views.is_empty() {
            return Err(RedisError::from((
                ErrorKind::Io,
                "tollgate: no cluster node answered CLUSTER SLOTS",
            )));
        }
        let mut fresh = self.table().clone();
        if fresh.owners.len() != SLOTS {
            fresh.owners = vec![NONE; SLOTS];
        }
        let mut per_slot: Vec<Vec<&str>> = vec![Vec::new(); SLOTS];
        for view in &views {
            for range in view {
                for slot in range.start..=range.end {
                    per_slot[usize::from(slot)].push(&range.master);
                }
            }
        }
        for (slot, named) in per_slot.iter().enumerate() {
            if let Some(owner) = most_named(named) {
                fresh.set(slot as u16, owner);
            }
        }
        *self.table.write().unwrap_or_else(|e| e.into_inner()) = fresh;
        Ok(())
    }

    /// The `CLUSTER SLOTS` views of the nodes `ids` that answered in time.
    async fn views(&self, ids: &[NodeId]) -> Vec<Vec<Range>> {
        let mut cmd = redis::cmd("CLUSTER");
        cmd.arg("SLOTS");
        let cmd = &cmd;
        join_all(ids.iter().map(|id| async move {
            let mut connection = self.node(id).ok()?.shared();
            let reply =
                tokio::time::timeout(self.response_timeout, connection.req_packed_command(cmd))
                    .await
                    .ok()?
                    .ok()?;
            let host = id.rsplit_once(':').map_or(&**id, |(h, _)| h);
            slots::parse_slots(&reply, host)
        }))
        .await
        .into_iter()
        .flatten()
        .collect()
    }

    /// Sends `request` to the owner of its key's slot (`SCRIPT` and
    /// `FUNCTION` to every master, any other request without a key to one), following `MOVED` (the map updated at once,
    /// a refresh scheduled) and `ASK` (`ASKING` first, on the target), on
    /// the node's shared connection or, when `dedicated`, on one of its own.
    async fn send(&self, request: Request<'_>, dedicated: bool) -> RedisResult<Reply> {
        if let Request::One(cmd) = request {
            if slots::for_every_master(cmd) {
                // Every master's reply, or the first error.
                let mut replies = self.on_masters(cmd).await.into_iter();
                let first = replies.next().unwrap_or_else(|| {
                    Err(RedisError::from((
                        ErrorKind::Io,
                        "tollgate: no cluster master",
                    )))
                });
                return replies
                    .find(Result::is_err)
                    .unwrap_or(first)
                    .map(Reply::One);
            }
        }
        let slot = request.key().map(slots::key_slot);
        let mut target = match slot.and_then(|s| self.owner(s)) {
            Some(owner) => owner,
            None => self
                .masters()
                .into_iter()
                .next()
                .or_else(|| self.seeds.first().cloned())
                .ok_or_else(|| RedisError::from((ErrorKind::Io, "tollgate: no cluster node")))?,
        };
        let mut asking = false;
        for _ in 0..MAX_REDIRECTS {
            let node = self.node(&target)?;
            let reply = if dedicated {
                let mut taken = node.pool.take().await?;
                request.send(&mut taken, asking).await
            } else {
                request.send(&mut node.shared(), asking).await
            };
            match redirect_of(&reply) {
                Some(Redirect::Moved(moved, to)) => {
                    let to = with_host(&to, &target);
                    self.table
                        .write()
                        .unwrap_or_else(|e| e.into_inner())
                        .set(moved, &to);
                    self.refresh_soon();
                    target = to.into();
                    asking = false;
                }
                Some(Redirect::Ask(to)) => {
                    target = with_host(&to, &target).into();
                    asking = true;
                }
                None => {
                    if reply
                        .as_ref()
                        .is_err_and(|e| !matches!(e.kind(), ErrorKind::Server(_)))
                    {
                        // No answer, or a broken connection: the node may
                        // be gone and its slots elsewhere.
                        self.refresh_soon();
                    }
                    return reply;
                }
            }
        }
        Err(RedisError::from((
            ErrorKind::Server(ServerErrorKind::Moved),
            "tollgate: too many redirections",
        )))
    }
}

impl Request<'_> {
    /// The key the request is routed by: its first command's with one.
    fn key(&self) -> Option<&[u8]> {
        match self {
            Request::One(cmd) => slots::command_key(cmd),
            Request::Many(pipeline, _, _) => pipeline.cmd_iter().find_map(slots::command_key),
        }
    }

    /// Sends the request on `connection`, after `ASKING` when `asking`
    /// (in one pipeline: the flag holds for the next command only).
    async fn send<C: ConnectionLike + Send>(
        self,
        connection: &mut C,
        asking: bool,
    ) -> RedisResult<Reply> {
        match (self, asking) {
            (Request::One(cmd), false) => connection.req_packed_command(cmd).await.map(Reply::One),
            (Request::Many(p, o, c), false) => connection
                .req_packed_commands(p, o, c)
                .await
                .map(Reply::Many),
            (Request::One(cmd), true) => {
                let mut pipe = redis::pipe();
                pipe.cmd("ASKING").add_command(cmd.clone());
                let mut values = connection.req_packed_commands(&pipe, 1, 1).await?;
                values.pop().map(Reply::One).ok_or_else(|| {
                    RedisError::from((ErrorKind::Parse, "tollgate: no reply after ASKING"))
                })
            }
            (Request::Many(p, o, c), true) => {
                let mut pipe = redis::pipe();
                pipe.cmd("ASKING");
                for cmd in p.cmd_iter() {
                    pipe.add_command(cmd.clone());
                }
                connection
                    .req_packed_commands(&pipe, o + 1, c)
                    .await
                    .map(Reply::Many)
            }
        }
    }
}

/// The redirection in `reply`, if Redis answered one (for a pipeline: in
/// any of its replies).
fn redirect_of(reply: &RedisResult<Reply>) -> Option<Redirect> {
    let of = |e: &RedisError| {
        let (to, slot) = e.redirect_node()?;
        match e.kind() {
            ErrorKind::Server(ServerErrorKind::Moved) => Some(Redirect::Moved(slot, to.to_owned())),
            ErrorKind::Server(ServerErrorKind::Ask) => Some(Redirect::Ask(to.to_owned())),
            _ => None,
        }
    };
    let of_value = |v: &Value| match v {
        Value::ServerError(e) => of(&RedisError::from(e.clone())),
        _ => None,
    };
    match reply {
        Err(e) => of(e),
        Ok(Reply::One(v)) => of_value(v),
        Ok(Reply::Many(values)) => values.iter().find_map(of_value),
    }
}

/// `to` (`host:port`), with `from`'s host when Redis left its own empty.
fn with_host(to: &str, from: &str) -> String {
    match to.strip_prefix(':') {
        Some(port) => {
            let host = from.rsplit_once(':').map_or(from, |(h, _)| h);
            format!("{host}:{port}")
        }
        None => to.to_owned(),
    }
}

/// The name most of `named` give (the first of them on a tie).
fn most_named<'a>(named: &[&'a str]) -> Option<&'a str> {
    let mut best: Option<(&str, usize)> = None;
    for &n in named {
        let count = named.iter().filter(|&&m| m == n).count();
        if best.is_none_or(|(_, c)| count > c) {
            best = Some((n, count));
        }
    }
    best.map(|(n, _)| n)
}

/// A call routed by the cluster's router, as a [`ConnectionLike`]: on
/// the owner's shared connection, or on a dedicated one of its own.
#[derive(Clone)]
pub(crate) struct Routed {
    pub(crate) router: Arc<Router>,
    pub(crate) dedicated: bool,
}

impl ConnectionLike for Routed {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            match self.router.send(Request::One(cmd), self.dedicated).await? {
                Reply::One(value) => Ok(value),
                Reply::Many(_) => Err(RedisError::from((
                    ErrorKind::Parse,
                    "tollgate: a pipeline's reply to one command",
                ))),
            }
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            match self
                .router
                .send(Request::Many(pipeline, offset, count), self.dedicated)
                .await?
            {
                Reply::Many(values) => Ok(values),
                Reply::One(_) => Err(RedisError::from((
                    ErrorKind::Parse,
                    "tollgate: one reply to a pipeline",
                ))),
            }
        })
    }

    fn get_db(&self) -> i64 {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_owner_most_masters_name_wins_and_hosts_are_filled() {
        assert_eq!(most_named(&["a", "b", "b"]), Some("b"));
        assert_eq!(most_named(&["a", "b"]), Some("a"));
        assert_eq!(most_named(&[]), None);
        assert_eq!(with_host(":7001", "10.0.0.1:7000"), "10.0.0.1:7001");
        assert_eq!(with_host("10.0.0.2:7001", "10.0.0.1:7000"), "10.0.0.2:7001");
        let mut table = Table::default();
        table.set(7, "a:1");
        table.set(8, "b:2");
        table.set(9, "a:1");
        assert_eq!(table.owner(7).map(|n| &**n), Some("a:1"));
        assert_eq!(table.owner(8).map(|n| &**n), Some("b:2"));
        assert_eq!(table.owner(10), None);
        assert_eq!(table.masters.len(), 2);
    }
}
