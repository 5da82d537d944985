//! A Redis Cluster with replicas that a test can change under load: slots
//! migrated step by step, a replica promoted by `CLUSTER FAILOVER`, a
//! master killed so that its replica takes over, a master added and given
//! slots.
//!
//! Every change is driven with `redis-cli` against the nodes, as an
//! operator would, and every method that changes the cluster returns once
//! the cluster has converged: every live node reports `cluster_state:ok`
//! and the same owner for every slot, with no slot left importing or
//! migrating ([`ReplicatedCluster::wait_converged`]). Convergence is
//! awaited with generous deadlines (a loaded 2-core machine gossips
//! slowly); the cluster's node timeout is 2 s, so a killed master is
//! replaced within about 3 to 6 s.
//!
//! Like the rest of the crate, everything here panics on failure.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::RedisServer;

/// The hash slot of `key` (CRC16/XMODEM of its hash tag, or of the whole
/// key, modulo 16,384), as Redis Cluster computes it.
pub fn key_slot(key: &[u8]) -> u16 {
    let tagged = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            let close = rest.iter().position(|&b| b == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(key);
    crc16::State::<crc16::XMODEM>::calculate(tagged) % 16_384
}

/// One line of `CLUSTER NODES`, as seen by one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeInfo {
    /// The node's id.
    pub id: String,
    /// Its loopback port.
    pub port: u16,
    /// Whether it is a master (else a replica).
    pub master: bool,
    /// A replica's master id (`-` for a master).
    pub master_id: String,
    /// Whether it is flagged `fail` or `fail?`.
    pub failing: bool,
    /// The slots it owns (masters).
    pub slots: Vec<u16>,
    /// Whether any of its slots is marked importing or migrating.
    pub migrating: bool,
}

/// Parses `CLUSTER NODES`.
pub fn parse_nodes(text: &str) -> Vec<NodeInfo> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 8 {
                return None;
            }
            let port = fields[1]
                .split('@')
                .next()?
                .rsplit(':')
                .next()?
                .parse()
                .ok()?;
            let flags: Vec<&str> = fields[2].split(',').collect();
            let mut slots = Vec::new();
            let mut migrating = false;
            for range in &fields[8..] {
                if range.starts_with('[') {
                    migrating = true;
                } else if let Some((a, b)) = range.split_once('-') {
                    let (a, b): (u16, u16) = (a.parse().ok()?, b.parse().ok()?);
                    slots.extend(a..=b);
                } else {
                    slots.push(range.parse().ok()?);
                }
            }
            Some(NodeInfo {
                id: fields[0].to_owned(),
                port,
                master: flags.contains(&"master"),
                master_id: fields[3].to_owned(),
                failing: flags.contains(&"fail") || flags.contains(&"fail?"),
                slots,
                migrating,
            })
        })
        .collect()
}

/// A Redis Cluster of masters with replicas on loopback ports.
pub struct ReplicatedCluster {
    /// Every node ever started, by index; a killed node stays (not running).
    pub nodes: Vec<RedisServer>,
    killed: Vec<bool>,
}

/// How long a change may take to converge.
const CONVERGE: Duration = Duration::from_secs(30);

impl ReplicatedCluster {
    /// `masters` masters with `replicas` replicas each, joined by
    /// `redis-cli --cluster create`, once converged and every replica's
    /// link to its master is up.
    pub fn start(masters: usize, replicas: usize) -> ReplicatedCluster {
        let count = masters * (1 + replicas);
        let nodes: Vec<RedisServer> = (0..count).map(|_| RedisServer::start_free(true)).collect();
        let addrs: Vec<String> = nodes
            .iter()
            .map(|node| format!("127.0.0.1:{}", node.port))
            .collect();
        let status = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("redis-cli");
        assert!(status.success(), "redis-cli --cluster create failed");
        let cluster = ReplicatedCluster {
            killed: vec![false; nodes.len()],
            nodes,
        };
        cluster.wait_converged();
        cluster.wait_replicas_linked();
        cluster
    }

    /// Every live node's URL.
    pub fn urls(&self) -> Vec<String> {
        self.live().map(|i| self.nodes[i].url()).collect()
    }

    /// The indexes of the nodes not killed.
    pub fn live(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.nodes.len()).filter(|&i| !self.killed[i])
    }

    /// `redis-cli` against node `i`; empty if it failed.
    pub fn cli(&self, i: usize, args: &[&str]) -> String {
        self.nodes[i].cli(args)
    }

    /// Node `i`'s id.
    pub fn id(&self, i: usize) -> String {
        self.cli(i, &["CLUSTER", "MYID"])
    }

    /// The cluster as node `i` sees it.
    pub fn view(&self, i: usize) -> Vec<NodeInfo> {
        parse_nodes(&self.cli(i, &["CLUSTER", "NODES"]))
    }

    fn index_of_port(&self, port: u16) -> usize {
        self.nodes
            .iter()
            .position(|n| n.port == port)
            .expect("a node of this cluster")
    }

    /// The live masters' indexes, as the first live node sees them.
    pub fn masters(&self) -> Vec<usize> {
        let first = self.live().next().expect("a live node");
        self.view(first)
            .iter()
            .filter(|n| n.master && !n.failing)
            .map(|n| self.index_of_port(n.port))
            .filter(|&i| !self.killed[i])
            .collect()
    }

    /// The node owning `slot`, as the first live node sees it.
    pub fn owner_of(&self, slot: u16) -> usize {
        let first = self.live().next().expect("a live node");
        let view = self.view(first);
        let owner = view
            .iter()
            .find(|n| n.master && n.slots.contains(&slot))
            .unwrap_or_else(|| panic!("no owner of slot {slot}"));
        self.index_of_port(owner.port)
    }

    /// The replicas of master `i` (live ones).
    pub fn replicas_of(&self, i: usize) -> Vec<usize> {
        let id = self.id(i);
        self.view(i)
            .iter()
            .filter(|n| !n.master && n.master_id == id)
            .map(|n| self.index_of_port(n.port))
            .filter(|&r| !self.killed[r])
            .collect()
    }

    /// Polls until every live node reports `cluster_state:ok`, sees the
    /// same owner for every slot, covers all 16,384 slots, and no slot is
    /// importing or migrating. Panics after 30 s.
    pub fn wait_converged(&self) {
        let deadline = Instant::now() + CONVERGE;
        loop {
            if self.converged() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the cluster did not converge: {:#?}",
                self.live()
                    .map(|i| (self.nodes[i].port, self.cli(i, &["CLUSTER", "NODES"])))
                    .collect::<Vec<_>>()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn converged(&self) -> bool {
        let mut first: Option<BTreeMap<u16, u16>> = None;
        for i in self.live() {
            if !self
                .cli(i, &["CLUSTER", "INFO"])
                .contains("cluster_state:ok")
            {
                return false;
            }
            let view = self.view(i);
            if view.iter().any(|n| n.migrating) {
                return false;
            }
            let owners: BTreeMap<u16, u16> = view
                .iter()
                .filter(|n| n.master && !n.failing)
                .flat_map(|n| n.slots.iter().map(move |&s| (s, n.port)))
                .collect();
            if owners.len() != 16_384 {
                return false;
            }
            match &first {
                None => first = Some(owners),
                Some(f) if *f != owners => return false,
                Some(_) => {}
            }
        }
        true
    }

    /// Polls until every live replica reports `master_link_status:up`.
    pub fn wait_replicas_linked(&self) {
        let deadline = Instant::now() + CONVERGE;
        for i in self.live().collect::<Vec<_>>() {
            loop {
                let info = self.cli(i, &["INFO", "replication"]);
                if info.contains("role:master") || info.contains("master_link_status:up") {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "replica {} never linked: {info}",
                    self.nodes[i].port
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    /// Polls until node `i` is a replica of master `master` with its link
    /// up (a restarted master that lost its slots becomes one).
    pub fn wait_replica_of(&self, i: usize, master: usize) {
        let deadline = Instant::now() + CONVERGE;
        let master_port = format!("master_port:{}", self.nodes[master].port);
        loop {
            let info = self.cli(i, &["INFO", "replication"]);
            let lines: Vec<&str> = info.lines().map(str::trim).collect();
            if lines.contains(&"role:slave")
                && lines.contains(&master_port.as_str())
                && lines.contains(&"master_link_status:up")
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{} never replicated {}: {info}",
                self.nodes[i].port,
                self.nodes[master].port
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Moves `slot` to master `to` step by step, as `redis-cli --cluster
    /// reshard` does, but one key per `MIGRATE` with `pause` between keys,
    /// so that clients meet the slot half moved (`ASK`, and `TRYAGAIN`
    /// for a multi-key call whose keys are split): `SETSLOT IMPORTING` on
    /// the target, `SETSLOT MIGRATING` on the source, every key moved,
    /// then `SETSLOT NODE` on the target, the source and every other
    /// master. Returns the number of keys moved.
    pub fn migrate_slot(&self, slot: u16, to: usize, pause: Duration) -> usize {
        let from = self.owner_of(slot);
        if from == to {
            return 0;
        }
        let (from_id, to_id) = (self.id(from), self.id(to));
        let s = slot.to_string();
        self.ok(to, &["CLUSTER", "SETSLOT", &s, "IMPORTING", &from_id]);
        self.ok(from, &["CLUSTER", "SETSLOT", &s, "MIGRATING", &to_id]);
        let port = self.nodes[to].port.to_string();
        let mut moved = 0;
        loop {
            let keys = self.cli(from, &["CLUSTER", "GETKEYSINSLOT", &s, "1"]);
            let Some(key) = keys.lines().find(|k| !k.is_empty()) else {
                break;
            };
            // `MIGRATE host port "" 0 timeout KEYS key`: one key, atomically.
            let reply = self.cli(
                from,
                &["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS", key],
            );
            assert!(
                reply == "OK" || reply == "NOKEY",
                "MIGRATE {key} of slot {slot}: {reply:?}"
            );
            moved += 1;
            std::thread::sleep(pause);
        }
        // The target first, so that the slot is never ownerless (what
        // `redis-cli --cluster` does too).
        self.ok(to, &["CLUSTER", "SETSLOT", &s, "NODE", &to_id]);
        self.ok(from, &["CLUSTER", "SETSLOT", &s, "NODE", &to_id]);
        for m in self.masters() {
            if m != to && m != from {
                self.ok(m, &["CLUSTER", "SETSLOT", &s, "NODE", &to_id]);
            }
        }
        moved
    }

    /// `redis-cli` against node `i`, which must answer `OK`.
    fn ok(&self, i: usize, args: &[&str]) {
        let reply = self.cli(i, args);
        assert_eq!(reply, "OK", "{args:?} on {}", self.nodes[i].port);
    }

    /// `CLUSTER FAILOVER` on `replica`: its master stops writes, the
    /// replica catches up and takes over (no acknowledged write is lost).
    /// Returns once `replica` is a master and the cluster converged.
    pub fn manual_failover(&self, replica: usize) {
        self.ok(replica, &["CLUSTER", "FAILOVER"]);
        self.wait_master(replica);
    }

    /// Polls until node `i` is a master that every live node agrees on,
    /// and the cluster converged.
    pub fn wait_master(&self, i: usize) {
        let deadline = Instant::now() + CONVERGE;
        let port = self.nodes[i].port;
        while !self.live().all(|n| {
            self.view(n)
                .iter()
                .any(|info| info.port == port && info.master && !info.slots.is_empty())
        }) {
            assert!(Instant::now() < deadline, "{port} was never promoted");
            std::thread::sleep(Duration::from_millis(50));
        }
        self.wait_converged();
    }

    /// Kills node `i` (SIGKILL): its data is gone; a replica of a killed
    /// master is promoted once the others mark it failed.
    pub fn kill(&mut self, i: usize) {
        self.nodes[i].kill();
        self.killed[i] = true;
    }

    /// Starts killed node `i` again on its port, with its cluster
    /// configuration but no data: a master replaced meanwhile rejoins as a
    /// replica of the node that took its slots. Returns once every live
    /// node sees it connected and the cluster converged.
    pub fn restart(&mut self, i: usize) {
        self.nodes[i].restart();
        self.killed[i] = false;
        let port = self.nodes[i].port;
        let deadline = Instant::now() + CONVERGE;
        while !self.live().all(|n| {
            self.view(n)
                .iter()
                .any(|info| info.port == port && !info.failing)
        }) {
            assert!(Instant::now() < deadline, "{port} never rejoined");
            std::thread::sleep(Duration::from_millis(50));
        }
        self.wait_converged();
    }

    /// Starts a new empty master and joins it (`CLUSTER MEET`), once every
    /// node knows it; it owns no slot. Returns its index.
    pub fn add_master(&mut self) -> usize {
        let node = RedisServer::start_free(true);
        let port = node.port;
        self.nodes.push(node);
        self.killed.push(false);
        let i = self.nodes.len() - 1;
        let first = self.live().next().expect("a live node");
        self.ok(first, &["CLUSTER", "MEET", "127.0.0.1", &port.to_string()]);
        let deadline = Instant::now() + CONVERGE;
        while !self.live().all(|n| {
            self.view(n).len() == self.live().count() && self.view(n).iter().any(|x| x.port == port)
        }) {
            assert!(Instant::now() < deadline, "{port} never joined");
            std::thread::sleep(Duration::from_millis(50));
        }
        self.wait_converged();
        i
    }

    /// The slots master `i` owns, as it sees itself.
    pub fn slots_of(&self, i: usize) -> Vec<u16> {
        let port = self.nodes[i].port;
        self.view(i)
            .into_iter()
            .find(|n| n.port == port)
            .map(|n| n.slots)
            .unwrap_or_default()
    }

    /// Writes `bytes` of ballast on master `i` (one string, set by a
    /// script, so that the value itself is replicated), to fill the socket
    /// buffers of its link to a replica that stopped reading: the writes
    /// that follow then wait in the master's own memory (its replication
    /// buffer), and a kill loses them. Without it, the kernel could still
    /// hand them to the replica after the master died.
    pub fn fill_replication_link(&self, i: usize, bytes: usize) {
        let slots = self.slots_of(i);
        let key = (0u64..)
            .map(|n| format!("ballast-{n}"))
            .find(|k| slots.contains(&key_slot(k.as_bytes())))
            .expect("a key in the master's slots");
        let script = format!("redis.call('SET', KEYS[1], string.rep('x', {bytes})) return 1");
        let reply = self.cli(i, &["EVAL", &script, "1", &key]);
        assert_eq!(reply, "1", "ballast on {}", self.nodes[i].port);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_slots_are_the_servers() {
        let server = RedisServer::start_free(true);
        for key in ["a", "foo", "{user1000}.following", "x{}y", "{}{a}", "é{b}c"] {
            let slot: u16 = server
                .cli(&["CLUSTER", "KEYSLOT", key])
                .parse()
                .expect("a slot");
            assert_eq!(key_slot(key.as_bytes()), slot, "{key}");
        }
    }

    #[test]
    fn cluster_nodes_lines_are_read() {
        let text = "07c3 127.0.0.1:30004@31004 slave e7d1 0 1 1 connected\n\
                    e7d1 127.0.0.1:30001@31001 myself,master - 0 0 1 connected 0-2 7 [8->-292f]\n\
                    292f 127.0.0.1:30002@31002 master,fail - 0 0 2 disconnected\n";
        let nodes = parse_nodes(text);
        assert_eq!(nodes.len(), 3);
        assert_eq!((nodes[0].port, nodes[0].master), (30004, false));
        assert_eq!(nodes[0].master_id, "e7d1");
        assert_eq!(nodes[1].slots, vec![0, 1, 2, 7]);
        assert!(nodes[1].migrating);
        assert!(nodes[2].failing && nodes[2].slots.is_empty());
    }
}
