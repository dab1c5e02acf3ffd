//! One real `redis-server` (or `valkey-server`) process on a free loopback
//! port, in its own data directory: start, stop, kill, pause, restart with
//! or without its data.

use super::*;

/// How a node persists data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Persistence {
    /// Nothing on disk: a restart comes back empty, and the client keeps
    /// the node out of lock quorums for its restart quarantine (also after
    /// its first start: a new node looks like one that lost everything).
    None,
    /// AOF with `appendfsync always`: acknowledged writes survive kill -9.
    Aof,
    /// AOF as above, and `HELLO` renamed away, as on Redis 5 and older:
    /// no RESP3, so no client tracking (push-woken waiting must fall back).
    NoneWithoutHello,
    /// AOF as above, and `CONFIG` renamed away (as managed offerings do):
    /// clients cannot tell it is durable.
    AofWithoutConfig,
    /// AOF as above, cluster mode on, the node owning all 16384 slots:
    /// a one-shard Redis Cluster, as managed offerings run them. Scripts
    /// must keep the keys they use in one hash slot.
    OneShardCluster,
    /// AOF as above, cluster mode on, owning no slot: a node for a
    /// [`ShardedCluster`] to assign slots to.
    ClusterShard,
}

/// One real `redis-server` process.
pub struct RedisNode {
    /// The loopback port; kept across restarts.
    pub port: u16,
    /// Data and log directory, removed on drop.
    pub(crate) dir: tempfile::TempDir,
    /// The running process, if any.
    pub(crate) child: Option<Child>,
    /// Current persistence mode.
    pub(crate) persistence: Persistence,
    /// Whether the process is SIGSTOPped.
    pub(crate) paused: bool,
    /// Environment for every start (a clock preload).
    pub(crate) env: Vec<(&'static str, std::ffi::OsString)>,
    /// Whether this node is a whole member that is a one-shard Redis
    /// Cluster (see [`Members`]), whatever its persistence.
    pub(crate) one_shard: bool,
    /// Each key's extra loading time at the next start (Redis's
    /// `key-load-delay`, µs; 0: none); that start returns while it loads.
    pub(crate) load_delay_us: u64,
    /// The server binary it runs.
    pub(crate) binary: String,
}

/// A node's data directory: in memory where the machine has one, so
/// `appendfsync always` costs no disk flush.
pub(crate) fn data_dir() -> tempfile::TempDir {
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(dir) = tempfile::tempdir_in(shm) {
            return dir;
        }
    }
    tempfile::tempdir().expect("temp dir")
}

pub(crate) fn server_binary() -> String {
    std::env::var("REDQUORUM_REDIS_SERVER").unwrap_or_else(|_| "redis-server".to_owned())
}

/// The pinned `valkey-server` (`scripts/ensure-valkey.sh`: from
/// `REDQUORUM_VALKEY_SERVER`, else a cached copy, else fetched once and
/// checked), for the tests that run Valkey beside Redis.
pub fn valkey_binary() -> String {
    static PATH: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        // The repository root: this crate's, or the one above (the CLI's).
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .ancestors()
            .map(|dir| dir.join("scripts/ensure-valkey.sh"))
            .find(|script| script.exists())
            .expect("scripts/ensure-valkey.sh in the repository");
        let out = Command::new(script)
            .stderr(Stdio::inherit())
            .output()
            .expect("run scripts/ensure-valkey.sh");
        assert!(
            out.status.success(),
            "scripts/ensure-valkey.sh found no valkey-server (see above)"
        );
        String::from_utf8(out.stdout)
            .expect("a path")
            .trim()
            .to_owned()
    })
    .clone()
}

/// Copies a data directory's files and folders (one level deep, as Redis
/// keeps them), leaving out the log.
pub(crate) fn copy_data(from: &std::path::Path, to: &std::path::Path) {
    for entry in std::fs::read_dir(from).expect("read data dir").flatten() {
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        if entry.file_name() == "redis.log" {
            continue;
        }
        if src.is_dir() {
            std::fs::create_dir_all(&dst).expect("create dir");
            for f in std::fs::read_dir(&src).expect("read dir").flatten() {
                std::fs::copy(f.path(), dst.join(f.file_name())).expect("copy file");
            }
        } else {
            std::fs::copy(&src, &dst).expect("copy file");
        }
    }
}

pub(crate) fn signal(pid: u32, sig: &str) {
    let status = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill {sig} {pid} failed");
}

impl RedisNode {
    /// Starts a node on a free port.
    pub fn start(persistence: Persistence) -> Self {
        Self::start_with_env(persistence, Vec::new(), false)
    }

    /// Starts a node on a free port that is a whole member of the kind
    /// `REDQUORUM_TEST_MEMBERS` asks for (see [`Members`]).
    pub fn start_member(persistence: Persistence) -> Self {
        let one_shard = Members::from_env() == Members::Clusters;
        Self::start_with_env(persistence, Vec::new(), one_shard)
    }

    /// Starts a node whose clocks `clock` fakes (see [`clock`]).
    pub fn start_with_clock(persistence: Persistence, clock: &clock::ClockFile) -> Self {
        Self::start_with_env(persistence, clock.env().into(), false)
    }

    /// [`RedisNode::start_member`] with a clock `clock` fakes.
    pub fn start_member_with_clock(persistence: Persistence, clock: &clock::ClockFile) -> Self {
        let one_shard = Members::from_env() == Members::Clusters;
        Self::start_with_env(persistence, clock.env().into(), one_shard)
    }

    /// [`RedisNode::start_member`] running `binary` (say
    /// [`valkey_binary`]).
    pub fn start_member_on(persistence: Persistence, binary: &str) -> Self {
        let one_shard = Members::from_env() == Members::Clusters;
        Self::start_with_binary(persistence, Vec::new(), one_shard, binary.to_owned())
    }

    pub(crate) fn start_with_env(
        persistence: Persistence,
        env: Vec<(&'static str, std::ffi::OsString)>,
        one_shard: bool,
    ) -> Self {
        Self::start_with_binary(persistence, env, one_shard, server_binary())
    }

    pub(crate) fn start_with_binary(
        persistence: Persistence,
        env: Vec<(&'static str, std::ffi::OsString)>,
        one_shard: bool,
        binary: String,
    ) -> Self {
        let mut last = String::new();
        for _ in 0..5 {
            let mut node = RedisNode {
                port: free_port(),
                dir: data_dir(),
                child: None,
                persistence,
                paused: false,
                env: env.clone(),
                one_shard,
                load_delay_us: 0,
                binary: binary.clone(),
            };
            match node.spawn() {
                Ok(()) => return node,
                Err(e) => last = e, // port taken by a parallel test: try another (drop kills ours)
            }
        }
        panic!("could not start redis-server: {last}");
    }

    /// The URL a client names this node by: `redis://`, or for a member
    /// that is a one-shard cluster `redis+cluster://` (see [`Members`]).
    pub fn url(&self) -> String {
        if self.one_shard {
            format!("redis+cluster://127.0.0.1:{}", self.port)
        } else {
            self.plain_url()
        }
    }

    /// The node's `redis://` URL (a direct connection, whatever it is).
    pub fn plain_url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Whether this node is a member that is a one-shard cluster.
    pub fn is_one_shard(&self) -> bool {
        self.one_shard
    }

    /// How the client names this member in errors and logs.
    pub fn addr(&self) -> String {
        if self.one_shard {
            format!("cluster 127.0.0.1:{}", self.port)
        } else {
            format!("127.0.0.1:{}", self.port)
        }
    }

    /// Whether `addr`, from an error, names this member (on a cluster,
    /// perhaps with its shard).
    pub fn named_by(&self, addr: &str) -> bool {
        addr == self.addr() || addr == format!("{} (shard 127.0.0.1:{})", self.addr(), self.port)
    }

    /// The key of our marker on this member: `redquorum:node`, or on a
    /// one-shard cluster the one in its lowest slot (found by its prefix).
    pub fn marker_key(&self) -> String {
        if !self.one_shard {
            return "redquorum:node".into();
        }
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("redquorum:node:*")
            .query(&mut self.conn())
            .expect("KEYS");
        assert_eq!(keys.len(), 1, "one marker on port {}: {keys:?}", self.port);
        keys.into_iter().next().expect("the marker")
    }

    /// The log file path.
    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("redis.log")
    }

    /// The log's contents (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_else(|e| format!("<no log: {e}>"))
    }

    /// Starts the process on `self.port` and waits until it answers PING.
    pub(crate) fn spawn(&mut self) -> Result<(), String> {
        let aof = self.persistence != Persistence::None;
        let one_shard = self.one_shard || self.persistence == Persistence::OneShardCluster;
        let cluster = one_shard || self.persistence == Persistence::ClusterShard;
        let mut cmd = Command::new(&self.binary);
        cmd.envs(self.env.iter().map(|(k, v)| (*k, v)));
        if cluster {
            cmd.args(["--cluster-enabled", "yes"])
                .arg("--cluster-config-file")
                .arg(self.dir.path().join("nodes.conf"))
                // As a quorum member should run: one shard down leaves the
                // others serving; a dead master is noticed within a second.
                .args(["--cluster-require-full-coverage", "no"])
                .args(["--cluster-node-timeout", "1000"]);
        }
        if self.persistence == Persistence::NoneWithoutHello {
            cmd.args(["--rename-command", "HELLO", ""]);
        }
        if self.persistence == Persistence::AofWithoutConfig {
            cmd.args(["--rename-command", "CONFIG", ""]);
        }
        let loading = self.load_delay_us > 0;
        if loading {
            // Events are served every KiB loaded: the node answers (with
            // LOADING to reads) while it loads.
            cmd.args(["--key-load-delay", &self.load_delay_us.to_string()])
                .args(["--loading-process-events-interval-bytes", "1024"]);
        }
        let child = cmd
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", ""])
            .args(["--appendonly", if aof { "yes" } else { "no" }])
            .args(["--appendfsync", "always"])
            .args(["--protected-mode", "no"])
            // `DEBUG RELOAD` goes back to an older snapshot (connected.rs).
            .args(["--enable-debug-command", "local"])
            .args(["--daemonize", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .arg("--logfile")
            .arg(self.log_path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("spawn {}: {e}", self.binary))?;
        self.child = Some(child);
        self.paused = false;
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                self.child = None;
                return Err(format!(
                    "redis-server exited with {status}; log:\n{}",
                    self.log()
                ));
            }
            if loading && is_loading(self.port) {
                return Ok(());
            }
            if ping(self.port) {
                // Make sure it is our process answering, not another test's
                // node that took the same port a moment earlier.
                let pid = self.child.as_ref().map(Child::id);
                if server_pid(self.port) == pid {
                    if one_shard {
                        self.own_all_slots()?;
                    }
                    return Ok(());
                }
                return Err(format!("port {} answered by another process", self.port));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Err(format!(
            "redis-server did not answer PING; log:\n{}",
            self.log()
        ))
    }

    /// Makes a cluster-mode node own every slot, unless its cluster
    /// configuration (kept across a restart) says it does already, and
    /// waits until it serves.
    pub(crate) fn own_all_slots(&self) -> Result<(), String> {
        let mut conn = self.conn();
        let info: String = redis::cmd("CLUSTER")
            .arg("INFO")
            .query(&mut conn)
            .map_err(|e| format!("CLUSTER INFO: {e}"))?;
        if info.contains("cluster_slots_assigned:0\r") {
            let _: () = redis::cmd("CLUSTER")
                .arg("ADDSLOTSRANGE")
                .arg(0)
                .arg(16383)
                .query(&mut conn)
                .map_err(|e| format!("CLUSTER ADDSLOTSRANGE: {e}"))?;
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            let info: String = redis::cmd("CLUSTER")
                .arg("INFO")
                .query(&mut conn)
                .map_err(|e| format!("CLUSTER INFO: {e}"))?;
            if info.contains("cluster_state:ok") {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Err("cluster state never became ok".into())
    }

    /// The process id of the running server.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("node is running").id()
    }

    /// Whether the process is running (paused counts as running).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }
}

impl Drop for RedisNode {
    fn drop(&mut self) {
        self.kill();
        Claimed::clear(self.port);
    }
}

/// Whether the server on `port` answers the inline command `cmd` with a
/// reply that starts with `reply`, within `wait`.
pub(crate) fn replies_with(port: u16, cmd: &[u8], reply: &[u8], wait: Duration) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(wait));
    if s.write_all(cmd).is_err() {
        return false;
    }
    let mut buf = vec![0u8; reply.len()];
    s.read_exact(&mut buf).is_ok() && buf == reply
}

/// Sends PING and expects +PONG within a short timeout.
pub(crate) fn ping(port: u16) -> bool {
    replies_with(port, b"PING\r\n", b"+PONG\r\n", Duration::from_millis(500))
}

/// Whether the server on `port` answers reads with `LOADING` (a loading
/// node serves events only between chunks of its data: a longer wait).
pub(crate) fn is_loading(port: u16) -> bool {
    replies_with(port, b"GET x\r\n", b"-LOADING", Duration::from_secs(2))
}

/// The process id of the redis-server answering on `port`.
pub(crate) fn server_pid(port: u16) -> Option<u32> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).ok()?;
    let mut conn = client
        .get_connection_with_timeout(Duration::from_secs(2))
        .ok()?;
    let info: String = redis::cmd("INFO").arg("server").query(&mut conn).ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .and_then(|p| p.trim().parse().ok())
}
