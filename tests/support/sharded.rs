//! A Redis Cluster of several masters, made and resharded with
//! `redis-cli --cluster`.

use super::*;

/// A Redis Cluster of several masters on free loopback ports, made by
/// `redis-cli --cluster create` (`REDQUORUM_REDIS_CLI`, else `redis-cli`
/// on the PATH): every slot assigned, spread over the shards.
pub struct ShardedCluster {
    /// The masters, one per shard.
    pub nodes: Vec<RedisNode>,
}

/// Runs `redis-cli --cluster <command> <args> --cluster-yes` and checks
/// that it succeeded.
pub(crate) fn redis_cli_cluster(command: &str, args: &[String]) {
    let cli = std::env::var("REDQUORUM_REDIS_CLI").unwrap_or_else(|_| "redis-cli".into());
    let out = Command::new(&cli)
        .args(["--cluster", command])
        .args(args)
        .arg("--cluster-yes")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{cli} --cluster {command}: {e}"));
    assert!(
        out.status.success(),
        "{cli} --cluster {command}: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

impl ShardedCluster {
    /// A cluster of `shards` masters, serving once this returns.
    pub fn start(shards: usize) -> Self {
        Self::start_with_replicas(shards, 0)
    }

    /// A cluster of `shards` masters with `replicas` replicas each,
    /// serving once this returns (masters first in `nodes`).
    pub fn start_with_replicas(shards: usize, replicas: usize) -> Self {
        if shards < 3 && replicas == 0 {
            return Self::start_small(shards);
        }
        let nodes: Vec<RedisNode> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..shards * (1 + replicas))
                .map(|_| s.spawn(|| RedisNode::start(Persistence::ClusterShard)))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("start node"))
                .collect()
        });
        let mut args: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        args.extend(["--cluster-replicas".into(), replicas.to_string()]);
        redis_cli_cluster("create", &args);
        let c = Self { nodes };
        c.await_ok(|c| c.replicas_linked() == shards * replicas);
        c
    }

    /// A cluster of one or two masters, which `redis-cli --cluster create`
    /// does not make: the nodes meet, and each takes its share of the slots.
    pub(crate) fn start_small(shards: usize) -> Self {
        let nodes: Vec<RedisNode> = (0..shards)
            .map(|_| RedisNode::start(Persistence::ClusterShard))
            .collect();
        let first = nodes[0].port;
        for (i, node) in nodes.iter().enumerate() {
            let mut conn = node.conn();
            if i > 0 {
                let _: () = redis::cmd("CLUSTER")
                    .arg("MEET")
                    .arg("127.0.0.1")
                    .arg(first)
                    .query(&mut conn)
                    .expect("CLUSTER MEET");
            }
            let (lo, hi) = (i * 16384 / shards, (i + 1) * 16384 / shards - 1);
            let _: () = redis::cmd("CLUSTER")
                .arg("ADDSLOTSRANGE")
                .arg(lo)
                .arg(hi)
                .query(&mut conn)
                .expect("CLUSTER ADDSLOTSRANGE");
        }
        let c = Self { nodes };
        c.await_ok(|c| {
            c.nodes.iter().all(|n| {
                redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query::<String>(&mut n.conn())
                    .is_ok_and(|i| i.contains(&format!("cluster_known_nodes:{shards}\r")))
            })
        });
        c
    }

    /// Waits until every running node reports `cluster_state:ok` and `more`
    /// holds.
    pub fn await_ok(&self, more: impl Fn(&Self) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        let ok = |n: &RedisNode| {
            !n.is_running()
                || redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query::<String>(&mut n.conn())
                    .is_ok_and(|i| i.contains("cluster_state:ok"))
        };
        while !(self.nodes.iter().all(ok) && more(self)) {
            assert!(Instant::now() < deadline, "the cluster never became ok");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Replicas whose link to their master is up.
    pub(crate) fn replicas_linked(&self) -> usize {
        self.nodes
            .iter()
            .filter(|n| n.is_running())
            .filter(|n| {
                redis::cmd("INFO")
                    .arg("replication")
                    .query::<String>(&mut n.conn())
                    .is_ok_and(|i| i.contains("master_link_status:up"))
            })
            .count()
    }

    /// The member's URL: `redis+cluster://` and every node as a seed.
    pub fn url(&self) -> String {
        let seeds: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        format!("redis+cluster://{}", seeds.join(","))
    }

    /// A running node's connection.
    pub(crate) fn any(&self) -> redis::Connection {
        self.nodes
            .iter()
            .find(|n| n.is_running())
            .expect("a running node")
            .conn()
    }

    /// The node that serves `key`'s slot now.
    pub fn owner(&self, key: &str) -> &RedisNode {
        &self.nodes[self.owner_index(key)]
    }

    /// The hash slot the cluster gives `key`.
    pub fn slot(&self, key: &str) -> u16 {
        redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut self.any())
            .expect("CLUSTER KEYSLOT")
    }

    /// The position in `nodes` of the node that serves `key`'s slot now.
    pub fn owner_index(&self, key: &str) -> usize {
        self.slot_owner(self.slot(key))
    }

    /// The position in `nodes` of the node that serves `slot` now.
    pub fn slot_owner(&self, slot: u16) -> usize {
        let mut conn = self.any();
        let ranges: Vec<(u16, u16, (String, u16))> = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query::<Vec<redis::Value>>(&mut conn)
            .expect("CLUSTER SLOTS")
            .into_iter()
            .filter_map(|r| {
                let redis::Value::Array(parts) = r else {
                    return None;
                };
                let first: u16 = redis::from_redis_value_ref(&parts[0]).ok()?;
                let last: u16 = redis::from_redis_value_ref(&parts[1]).ok()?;
                let redis::Value::Array(master) = &parts[2] else {
                    return None;
                };
                let host: String = redis::from_redis_value_ref(&master[0]).ok()?;
                let port: u16 = redis::from_redis_value_ref(&master[1]).ok()?;
                Some((first, last, (host, port)))
            })
            .collect();
        let port = ranges
            .iter()
            .find(|(a, b, _)| (*a..=*b).contains(&slot))
            .map(|(_, _, (_, p))| *p)
            .expect("a shard serves the slot");
        self.nodes
            .iter()
            .position(|n| n.port == port)
            .expect("owner")
    }

    /// The value of `key` where the cluster serves it.
    pub fn get(&self, key: &str) -> Option<String> {
        self.owner(key).get(key)
    }

    /// Moves `slots` slots from the master `from` to the master `to`
    /// (positions in `nodes`) with `redis-cli --cluster reshard`, keys and
    /// all, while the cluster serves; returns when done.
    pub fn reshard(&self, from: usize, to: usize, slots: usize) {
        let args = [
            format!("127.0.0.1:{}", self.nodes[from].port),
            "--cluster-from".into(),
            self.id(from),
            "--cluster-to".into(),
            self.id(to),
            "--cluster-slots".into(),
            slots.to_string(),
        ];
        redis_cli_cluster("reshard", &args);
    }

    /// The cluster's name for the node at `i` in `nodes`.
    pub(crate) fn id(&self, i: usize) -> String {
        redis::cmd("CLUSTER")
            .arg("MYID")
            .query(&mut self.nodes[i].conn())
            .expect("CLUSTER MYID")
    }

    /// Moves `slot` from the master `from` to the master `to` (positions
    /// in `nodes`) as `redis-cli --cluster reshard` moves each slot: `to`
    /// importing, `from` migrating, its keys sent with `MIGRATE`, then the
    /// slot given to `to`; returns once the cluster says so.
    pub fn move_slot(&self, slot: u16, from: usize, to: usize) {
        let (from_id, to_id) = (self.id(from), self.id(to));
        let (mut src, mut dst) = (self.nodes[from].conn(), self.nodes[to].conn());
        let setslot = |conn: &mut redis::Connection, how: &str, id: &str| {
            let _: () = redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg(how)
                .arg(id)
                .query(conn)
                .unwrap_or_else(|e| panic!("CLUSTER SETSLOT {slot} {how}: {e}"));
        };
        setslot(&mut dst, "IMPORTING", &from_id);
        setslot(&mut src, "MIGRATING", &to_id);
        loop {
            let keys: Vec<String> = redis::cmd("CLUSTER")
                .arg("GETKEYSINSLOT")
                .arg(slot)
                .arg(100)
                .query(&mut src)
                .expect("CLUSTER GETKEYSINSLOT");
            if keys.is_empty() {
                break;
            }
            let _: () = redis::cmd("MIGRATE")
                .arg("127.0.0.1")
                .arg(self.nodes[to].port)
                .arg("")
                .arg(0)
                .arg(5_000)
                .arg("KEYS")
                .arg(&keys)
                .query(&mut src)
                .expect("MIGRATE");
        }
        setslot(&mut dst, "NODE", &to_id);
        setslot(&mut src, "NODE", &to_id);
        self.await_ok(|c| c.slot_owner(slot) == to);
    }

    /// The position in `nodes` of the replica of the master at `port`, by
    /// `CLUSTER NODES`.
    pub fn replica_of(&self, port: u16) -> usize {
        let nodes: String = redis::cmd("CLUSTER")
            .arg("NODES")
            .query(&mut self.any())
            .expect("CLUSTER NODES");
        let id_of = |port: u16| {
            nodes
                .lines()
                .find(|l| {
                    l.split(' ')
                        .nth(1)
                        .is_some_and(|a| a.starts_with(&format!("127.0.0.1:{port}@")))
                })
                .and_then(|l| l.split(' ').next())
                .map(str::to_owned)
        };
        let master = id_of(port).expect("master id");
        let replica_port = nodes
            .lines()
            .find(|l| l.split(' ').nth(3) == Some(master.as_str()))
            .and_then(|l| l.split(' ').nth(1))
            .and_then(|a| a.split(['@', ':']).nth(1))
            .and_then(|p| p.parse::<u16>().ok())
            .expect("a replica");
        self.nodes
            .iter()
            .position(|n| n.port == replica_port)
            .expect("replica")
    }
}
