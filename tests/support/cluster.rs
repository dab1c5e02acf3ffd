//! N independent nodes (each one `redis-server`, or a Redis Cluster where
//! `REDQUORUM_TEST_MEMBERS` says so), and clients built on them.

use super::*;

/// What each member of a [`Cluster`] is, from `REDQUORUM_TEST_MEMBERS`:
/// the behaviour tests run unchanged against either kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Members {
    /// `nodes` (the default): each member one standalone `redis-server`.
    Nodes,
    /// `clusters`: each member a Redis Cluster of one shard (cluster mode
    /// on, every slot owned by that one process, full coverage off), named
    /// `redis+cluster://127.0.0.1:<port>`, so clients reach it through
    /// their cluster support (the tests need the `cluster` feature).
    /// Faults (kill, SIGSTOP, restarts with or without data) hit the
    /// member's one shard; a shard restarted with no data at all takes
    /// every slot again, as an operator re-creating it would.
    Clusters,
}

impl Members {
    /// The kind `REDQUORUM_TEST_MEMBERS` asks for; anything but `nodes`,
    /// `clusters` or unset stops the test with the fix.
    pub fn from_env() -> Self {
        match std::env::var("REDQUORUM_TEST_MEMBERS").as_deref() {
            Err(_) | Ok("") | Ok("nodes") => Members::Nodes,
            Ok("clusters") => Members::Clusters,
            Ok(other) => {
                panic!("REDQUORUM_TEST_MEMBERS={other:?}: use `nodes` (the default) or `clusters`")
            }
        }
    }
}

/// N independent nodes.
pub struct Cluster {
    /// The nodes, index = position in the URL list.
    pub nodes: Vec<RedisNode>,
}

impl Cluster {
    /// Starts `n` nodes with durable persistence (AOF, `appendfsync
    /// always`), declared new as an operator would (`redquorum init`):
    /// clients trust them from the start.
    pub fn start(n: usize) -> Self {
        Self::start_with(n, Persistence::Aof)
    }

    /// Starts `n` nodes with the given persistence, declared new.
    pub fn start_with(n: usize, persistence: Persistence) -> Self {
        let c = Self::start_undeclared(n, persistence);
        c.declare_new();
        c
    }

    /// Declares every node new through the library (`init_new_nodes`), on
    /// a thread of its own (callers may be inside a runtime already), and
    /// checks that each one was.
    pub fn declare_new(&self) {
        let urls = self.urls();
        let logs = self.logs();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            let done = rt.block_on(async {
                let redlock = redquorum::Redlock::builder()
                    .nodes(urls)
                    .node_timeout(Duration::from_secs(5))
                    .build()
                    .expect("build redlock");
                redlock.init_new_nodes().await
            });
            assert!(
                done.iter().all(|d| *d == redquorum::NodeInit::Declared),
                "declaring the nodes new: {done:?}; logs:\n{logs}"
            );
        })
        .join()
        .expect("declare the nodes new");
        // Tests count the commands they cause: forget the declaration's
        // (where CONFIG is not renamed away).
        for n in &self.nodes {
            let _: redis::RedisResult<()> =
                redis::cmd("CONFIG").arg("RESETSTAT").query(&mut n.conn());
        }
    }

    /// Starts `n` nodes with the given persistence, as they are after a
    /// start: empty, with none of our marks, so clients take them for nodes
    /// that may have lost their data.
    pub fn start_undeclared(n: usize, persistence: Persistence) -> Self {
        let nodes = std::thread::scope(|s| {
            let handles: Vec<_> = (0..n)
                .map(|_| s.spawn(move || RedisNode::start_member(persistence)))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("start node"))
                .collect()
        });
        Self { nodes }
    }

    /// Starts one node per entry of `binaries` (AOF), each running that
    /// server, declared new: a quorum of mixed servers.
    pub fn start_on(binaries: &[String]) -> Self {
        let nodes = binaries
            .iter()
            .map(|b| RedisNode::start_member_on(Persistence::Aof, b))
            .collect();
        let c = Self { nodes };
        c.declare_new();
        c
    }

    /// Starts `n` nodes (AOF, undeclared) each with a clock a test can
    /// move, and the files that move them.
    pub fn start_with_clocks(n: usize) -> (Self, Vec<clock::ClockFile>) {
        let clocks: Vec<clock::ClockFile> = (0..n).map(|_| clock::ClockFile::new()).collect();
        let nodes = clocks
            .iter()
            .map(|c| RedisNode::start_member_with_clock(Persistence::Aof, c))
            .collect();
        (Self { nodes }, clocks)
    }

    /// All node URLs.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisNode::url).collect()
    }

    /// Sets ACL user `app` (password `app-pw`) on every node, with every
    /// key, channel and command but what `rules` take away (`-delifeq`);
    /// the URLs that log in as it. Again with other rules: they replace
    /// the command rules (`+@all` first).
    pub fn app_user(&self, rules: &[&str]) -> Vec<String> {
        for n in &self.nodes {
            let _: () = redis::cmd("ACL")
                .arg(&["SETUSER", "app", "on", ">app-pw", "~*", "&*", "+@all"])
                .arg(rules)
                .query(&mut n.conn())
                .expect("ACL SETUSER");
        }
        self.urls_as("redis://app:app-pw@")
    }

    /// Every node's URL as `<start>127.0.0.1:<port>`, with the scheme and
    /// any credentials in `start` (`"redis://user:pw@"`); for members that
    /// are clusters the scheme becomes `redis+cluster://`.
    pub fn urls_as(&self, start: &str) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| {
                let start = match start.strip_prefix("redis://") {
                    Some(rest) if n.one_shard => format!("redis+cluster://{rest}"),
                    _ => start.to_owned(),
                };
                format!("{start}127.0.0.1:{}", n.port)
            })
            .collect()
    }

    /// A builder pointed at every node. For members that are clusters, with
    /// a 1 s node timeout, as docs/clusters.md advises: a client's first
    /// request to such a member reads its slot map, then connects to the
    /// shard and checks it, more round trips than the 100 ms default covers
    /// on a busy machine (a test may set its own).
    pub fn builder(&self) -> redquorum::RedlockBuilder {
        let builder = redquorum::Redlock::builder().nodes(self.urls());
        if self.nodes.iter().any(RedisNode::is_one_shard) {
            builder.node_timeout(Duration::from_millis(1000))
        } else {
            builder
        }
    }

    /// A builder for a client `delay_ms` away from every node, each way,
    /// behind delaying proxies (which live as long as the returned list),
    /// with a 1 s node timeout.
    pub fn far_builder(&self, delay_ms: u64) -> (Vec<Proxy>, redquorum::RedlockBuilder) {
        let proxies: Vec<Proxy> = self.nodes.iter().map(|n| Proxy::start(n.port)).collect();
        for p in &proxies {
            p.set_mode(ProxyMode::Delay(delay_ms));
        }
        let builder = redquorum::Redlock::builder()
            .nodes(proxies.iter().map(Proxy::url))
            .node_timeout(Duration::from_millis(1000));
        (proxies, builder)
    }

    /// A client for every node with default settings.
    pub fn redlock(&self) -> redquorum::Redlock {
        self.builder().build().expect("build redlock")
    }

    /// Every node's log, for failure messages.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        for (i, n) in self.nodes.iter().enumerate() {
            let log = n.log();
            let tail: Vec<&str> = log.lines().rev().take(15).collect();
            out.push_str(&format!("--- node {i} (port {}) log tail ---\n", n.port));
            for line in tail.into_iter().rev() {
                out.push_str(line);
                out.push('\n');
            }
        }
        out
    }

    /// GET `key` on every running, unpaused node (None for the others).
    pub fn values(&self, key: &str) -> Vec<Option<String>> {
        self.nodes
            .iter()
            .map(|n| {
                if n.is_running() && !n.paused {
                    n.get(key)
                } else {
                    None
                }
            })
            .collect()
    }

    /// How many nodes hold `key` with `value`.
    pub fn holding(&self, key: &str, value: &str) -> usize {
        self.values(key)
            .iter()
            .filter(|v| v.as_deref() == Some(value))
            .count()
    }

    /// On how many nodes `key` is set, whatever its value.
    pub fn set_on(&self, key: &str) -> usize {
        self.values(key).iter().flatten().count()
    }

    /// On how many nodes somebody waits in `key`'s waiting list.
    pub fn waiting_on(&self, key: &str) -> usize {
        self.nodes
            .iter()
            .filter(|n| n.is_running() && !n.paused && n.waiters(key) > 0)
            .count()
    }

    /// On how many nodes another Redlock client's bare `SET key v NX PX`
    /// succeeds (it holds the key only with a majority); what it set is
    /// deleted again.
    pub fn bare_set_nx(&self, key: &str) -> usize {
        let mut got = 0;
        for node in self.nodes.iter().filter(|n| n.is_running() && !n.paused) {
            let mut conn = node.conn();
            let set: Option<String> = redis::cmd("SET")
                .arg(&[key, "other-client", "NX", "PX", "5000"])
                .query(&mut conn)
                .unwrap();
            if set.is_some() {
                got += 1;
                let _: () = redis::cmd("DEL").arg(key).query(&mut conn).unwrap();
            }
        }
        got
    }

    /// Whether every node lists exactly `n` waiters in `key`'s waiting list.
    pub fn listed_everywhere(&self, key: &str, n: usize) -> bool {
        self.nodes.iter().all(|node| node.waiters(key) == n)
    }

    /// Resumes every paused node (so Drop and logs behave).
    pub fn resume_all(&mut self) {
        for n in &mut self.nodes {
            n.resume();
        }
    }
}
