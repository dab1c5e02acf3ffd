//! Test harness: real `redis-server` processes on free loopback ports, with
//! fault injection (stop, kill -9, SIGSTOP/SIGCONT, restart on the same port
//! with or without AOF) and a TCP proxy that can add latency or blackhole.
//!
//! The binary comes from `REDQUORUM_REDIS_SERVER` or `redis-server` on PATH.
//! Each node lives in its own temp dir with its log file; every failure
//! message should include [`Cluster::logs`]. Everything is killed on Drop,
//! also when a test panics.

#![allow(dead_code)]

pub mod clock;
pub mod postgres;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
    dir: tempfile::TempDir,
    /// The running process, if any.
    child: Option<Child>,
    /// Current persistence mode.
    persistence: Persistence,
    /// Whether the process is SIGSTOPped.
    paused: bool,
    /// Environment for every start (a clock preload).
    env: Vec<(&'static str, std::ffi::OsString)>,
    /// Whether this node is a whole member that is a one-shard Redis
    /// Cluster (see [`Members`]), whatever its persistence.
    one_shard: bool,
    /// Each key's extra loading time at the next start (Redis's
    /// `key-load-delay`, µs; 0: none); that start returns while it loads.
    load_delay_us: u64,
    /// The server binary it runs.
    binary: String,
}

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

/// A node's data directory: in memory where the machine has one, so
/// `appendfsync always` costs no disk flush.
fn data_dir() -> tempfile::TempDir {
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(dir) = tempfile::tempdir_in(shm) {
            return dir;
        }
    }
    tempfile::tempdir().expect("temp dir")
}

fn server_binary() -> String {
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
fn copy_data(from: &std::path::Path, to: &std::path::Path) {
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

/// A loopback port where something answers, but not in the Redis protocol
/// (an HTTP server's reply to anything). Serves until the test ends.
pub fn not_redis() -> u16 {
    let listener = listener();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            use std::io::{Read, Write};
            let Ok(mut conn) = conn else { continue };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = conn.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    let reply = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n";
                    if conn.write_all(reply).is_err() {
                        break;
                    }
                }
            });
        }
    });
    port
}

/// A loopback port that was free a moment ago.
pub fn free_port() -> u16 {
    free_ports(1)[0]
}

/// Makes the node `conn` reaches take no new connection: its
/// `maxclients` becomes the number of connections open now (`conn`'s
/// included, which stays usable).
pub fn refuse_new_connections(conn: &mut redis::Connection) {
    let info: String = redis::cmd("INFO").arg("clients").query(conn).unwrap();
    let connected = info
        .lines()
        .find_map(|l| l.strip_prefix("connected_clients:"))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxclients")
        .arg(connected)
        .query(conn)
        .unwrap();
}

/// `n` different loopback ports that were free a moment ago: each listener
/// is held until all are bound, so the kernel cannot hand one out twice.
pub fn free_ports(n: usize) -> Vec<u16> {
    let held: Vec<TcpListener> = (0..n).map(|_| listener()).collect();
    held.iter()
        .map(|l| l.local_addr().expect("a bound address").port())
        .collect()
}

/// A listener on a free loopback port that no test's killed node may come
/// back on (see [`Claimed`]).
fn listener() -> TcpListener {
    let mut skipped = Vec::new();
    loop {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral loopback port");
        let port = l.local_addr().expect("a bound address").port();
        if !Claimed::is(port) {
            return l;
        }
        // Held until we return, so the kernel offers another.
        skipped.push(l);
    }
}

/// The ports of nodes a test killed or stopped and still owns, marked by a
/// file per port in a folder every test process shares. Without it the
/// kernel may hand a dead node's port to another test's new node (or
/// proxy), and clients of the dead node would talk to that one instead: a
/// "node down" that answers.
struct Claimed;

impl Claimed {
    /// Marks older than this are left by a test process that died.
    const STALE: Duration = Duration::from_secs(600);

    fn path(port: u16) -> PathBuf {
        std::env::temp_dir()
            .join("redquorum-test-ports")
            .join(port.to_string())
    }

    /// Marks `port` as owned by a node that is down.
    fn mark(port: u16) {
        let path = Self::path(port);
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let _ = std::fs::write(&path, std::process::id().to_string());
    }

    /// The node of `port` is gone for good.
    fn clear(port: u16) {
        let _ = std::fs::remove_file(Self::path(port));
    }

    /// Whether a recent mark claims `port`.
    fn is(port: u16) -> bool {
        std::fs::metadata(Self::path(port))
            .and_then(|m| m.modified())
            .is_ok_and(|at| at.elapsed().is_ok_and(|age| age < Self::STALE))
    }
}

fn signal(pid: u32, sig: &str) {
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

    fn start_with_env(
        persistence: Persistence,
        env: Vec<(&'static str, std::ffi::OsString)>,
        one_shard: bool,
    ) -> Self {
        Self::start_with_binary(persistence, env, one_shard, server_binary())
    }

    fn start_with_binary(
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
    fn spawn(&mut self) -> Result<(), String> {
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
    fn own_all_slots(&self) -> Result<(), String> {
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

    /// Graceful stop (SIGTERM), waiting for exit.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            Claimed::mark(self.port);
            if self.paused {
                signal(c.id(), "-CONT");
            }
            signal(c.id(), "-TERM");
            let _ = c.wait();
        }
        self.paused = false;
    }

    /// kill -9, waiting for exit.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            Claimed::mark(self.port);
            let _ = c.kill();
            let _ = c.wait();
        }
        self.paused = false;
    }

    /// SIGSTOP: the process hangs, its sockets stay open.
    pub fn pause(&mut self) {
        signal(self.pid(), "-STOP");
        self.paused = true;
    }

    /// SIGCONT.
    pub fn resume(&mut self) {
        if self.paused {
            signal(self.pid(), "-CONT");
            self.paused = false;
        }
    }

    /// Kills the node and starts it again on the same port. With
    /// `Persistence::Aof` it keeps the data written under AOF; with
    /// `Persistence::None` it comes back empty.
    pub fn restart(&mut self, persistence: Persistence) {
        self.kill();
        if persistence == Persistence::None {
            self.wipe();
        }
        self.respawn(persistence);
    }

    /// Writes `keys` filler keys, rewrites the AOF so that they load from
    /// its RDB base, kills the node and starts it again with its data,
    /// each key loading `per_key` late: returns once the new process
    /// answers, still loading (reads get `LOADING`).
    pub fn restart_loading_slowly(&mut self, keys: usize, per_key: Duration) {
        let mut conn = self.conn();
        let mut pipe = redis::pipe();
        for i in 0..keys {
            pipe.cmd("SET").arg(format!("filler:{i}")).arg(i).ignore();
        }
        let _: () = pipe.query(&mut conn).expect("filler keys");
        let _: () = redis::cmd("BGREWRITEAOF")
            .query(&mut conn)
            .expect("BGREWRITEAOF");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let info: String = redis::cmd("INFO")
                .arg("persistence")
                .query(&mut conn)
                .expect("INFO");
            if info.contains("aof_rewrite_in_progress:0")
                && info.contains("aof_rewrite_scheduled:0")
            {
                break;
            }
            assert!(Instant::now() < deadline, "AOF rewrite never ended");
            std::thread::sleep(Duration::from_millis(10));
        }
        self.kill();
        self.load_delay_us = u64::try_from(per_key.as_micros()).expect("delay");
        self.respawn(Persistence::Aof);
        self.load_delay_us = 0;
    }

    /// Whether the node still loads its data.
    pub fn is_loading(&self) -> bool {
        is_loading(self.port)
    }

    /// Kills the node, empties its data directory and starts it again with
    /// the same settings: a new disk, a container recreated without its
    /// volume, AOF on tmpfs across a reboot.
    pub fn restart_wiped(&mut self) {
        self.kill();
        self.wipe();
        self.respawn(self.persistence);
    }

    /// Kills the node, empties its data directory but for its cluster
    /// configuration (`nodes.conf`), and starts it again: a cluster's shard
    /// back in place, serving the slots it served, without its keys (its
    /// AOF lost, its node identity kept).
    pub fn restart_empty_in_place(&mut self) {
        self.kill();
        self.wipe_but("nodes.conf");
        self.respawn(self.persistence);
    }

    /// A copy of the node's data directory as it is now (a backup).
    pub fn backup(&self) -> tempfile::TempDir {
        let to = tempfile::tempdir().expect("backup dir");
        copy_data(self.dir.path(), to.path());
        to
    }

    /// Kills the node, puts `backup` in place of its data and starts it
    /// again with the same settings (a restore from an old backup).
    pub fn restart_from_backup(&mut self, backup: &tempfile::TempDir) {
        self.kill();
        self.wipe();
        copy_data(backup.path(), self.dir.path());
        self.respawn(self.persistence);
    }

    /// Removes everything in the data directory but the log.
    fn wipe(&self) {
        self.wipe_but("redis.log");
    }

    /// Empties the data directory but for the log and `keep`.
    fn wipe_but(&self, keep: &str) {
        for entry in std::fs::read_dir(self.dir.path())
            .expect("read data dir")
            .flatten()
        {
            if entry.file_name() != "redis.log" && entry.file_name() != keep {
                let p = entry.path();
                let _ = std::fs::remove_dir_all(&p).or_else(|_| std::fs::remove_file(&p));
            }
        }
    }

    /// Starts the killed node again on its port with `persistence`.
    fn respawn(&mut self, persistence: Persistence) {
        self.persistence = persistence;
        let mut last = String::new();
        // The old socket may linger for a moment after kill -9.
        for _ in 0..50 {
            match self.spawn() {
                Ok(()) => return,
                Err(e) => last = e,
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("restart on port {} failed: {last}", self.port);
    }

    /// A synchronous connection for assertions and setup.
    pub fn conn(&self) -> redis::Connection {
        redis::Client::open(self.plain_url())
            .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(5)))
            .unwrap_or_else(|e| panic!("connect to {}: {e}; log:\n{}", self.port, self.log()))
    }

    /// GET `key` on this node.
    pub fn get(&self, key: &str) -> Option<String> {
        redis::cmd("GET")
            .arg(key)
            .query(&mut self.conn())
            .expect("GET")
    }

    /// PTTL of `key` on this node in ms (-2 missing, -1 no expiry).
    pub fn pttl(&self, key: &str) -> i64 {
        redis::cmd("PTTL")
            .arg(key)
            .query(&mut self.conn())
            .expect("PTTL")
    }

    /// How many times `cmd` (lower case) ran on this node, from INFO
    /// commandstats.
    pub fn command_calls(&self, cmd: &str) -> u64 {
        self.command_stat(cmd, "calls")
    }

    /// Field `field` (`calls`, `rejected_calls`, ...) of `cmd` (lower case)
    /// in INFO commandstats; 0 where the command never ran.
    pub fn command_stat(&self, cmd: &str, field: &str) -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut self.conn())
            .expect("INFO commandstats");
        let prefix = format!("cmdstat_{cmd}:");
        info.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|rest| {
                rest.split(',')
                    .find_map(|kv| kv.strip_prefix(field)?.strip_prefix('='))?
                    .parse()
                    .ok()
            })
            .unwrap_or(0)
    }

    /// Whether the server has command `name` (`COMMAND INFO`): Valkey's
    /// `DELIFEQ`, say.
    pub fn has_command(&self, name: &str) -> bool {
        let info: Vec<redis::Value> = redis::cmd("COMMAND")
            .arg("INFO")
            .arg(name)
            .query(&mut self.conn())
            .expect("COMMAND INFO");
        matches!(info.first(), Some(redis::Value::Array(_)))
    }

    /// How many releases of a plain lock ran on this node: scripts, and
    /// Valkey's `DELIFEQ` where the node runs it for us.
    pub fn release_calls(&self) -> u64 {
        self.script_calls() + self.command_calls("delifeq")
    }

    /// How many of [`Self::release_calls`] a connection's opening makes:
    /// three scripts of its own (whether the node allows `EVALSHA`, and
    /// whether it runs Valkey's own commands for us), and on a node that has
    /// `DELIFEQ`, one `DELIFEQ` inside the last.
    pub fn opening_calls(&self) -> u64 {
        3 + u64::from(self.has_command("delifeq"))
    }

    /// How many `SET`s a connection's opening runs: on a node that has
    /// Valkey's `DELIFEQ`, one `SET … IFEQ` on a key that never exists
    /// (whether it takes `IFEQ`); none elsewhere.
    pub fn opening_sets(&self) -> u64 {
        u64::from(self.has_command("delifeq"))
    }

    /// How many scripts ran on this node (by hash, or by body the first
    /// time).
    pub fn script_calls(&self) -> u64 {
        self.command_calls("evalsha") + self.command_calls("eval")
    }

    /// The INFO errorstats section: every error reply the node gave, by kind.
    pub fn error_stats(&self) -> String {
        redis::cmd("INFO")
            .arg("errorstats")
            .query(&mut self.conn())
            .expect("INFO errorstats")
    }

    /// SET `key` to `value` with a TTL.
    pub fn set(&self, key: &str, value: &str, ttl: Duration) {
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg(value)
            .arg("PX")
            .arg(ttl.as_millis() as u64)
            .query(&mut self.conn())
            .expect("SET");
    }
}

impl RedisNode {
    /// How many keys this node tracks for clients' notifications (`INFO
    /// stats`).
    pub fn tracked_keys(&self) -> usize {
        let info: String = redis::cmd("INFO")
            .arg("stats")
            .query(&mut self.conn())
            .expect("INFO");
        info.lines()
            .find_map(|l| l.strip_prefix("tracking_total_keys:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("tracking_total_keys")
    }

    /// How many clients wait in `key`'s waiting list on this node (for a
    /// key with no prefix and no hash tag).
    pub fn waiters(&self, key: &str) -> usize {
        redis::cmd("ZCARD")
            .arg(internal_key("waiters", key))
            .query(&mut self.conn())
            .expect("ZCARD")
    }

    /// How many members the sorted set at `key` has (a read-write lock's
    /// leases: `internal_key("rw-readers", name)`).
    pub fn zcard(&self, key: &str) -> usize {
        redis::cmd("ZCARD")
            .arg(key)
            .query(&mut self.conn())
            .expect("ZCARD")
    }

    /// A foreign client's release: the compare-and-delete every Redlock
    /// client sends, on a plain connection.
    pub fn compare_and_delete(&self, key: &str, value: &str) -> i64 {
        redis::Script::new(
            r#"if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) else return 0 end"#,
        )
        .key(key)
        .arg(value)
        .invoke(&mut self.conn())
        .expect("compare-and-delete")
    }

    /// The ids of the connections with client tracking on (the
    /// notification connections).
    pub fn tracking_client_ids(&self) -> Vec<String> {
        let list: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query(&mut self.conn())
            .expect("CLIENT LIST");
        list.lines()
            .filter_map(|line| {
                let field = |name: &str| {
                    line.split(' ')
                        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
                };
                let tracking = field("flags").is_some_and(|f| f.contains('t'));
                tracking.then(|| field("id").map(str::to_owned)).flatten()
            })
            .collect()
    }

    /// How many connections have client tracking on.
    pub fn tracking_clients(&self) -> usize {
        self.tracking_client_ids().len()
    }

    /// `CLIENT KILL`s every connection with client tracking on; returns how
    /// many.
    pub fn kill_tracking_clients(&self) -> usize {
        let ids = self.tracking_client_ids();
        let mut conn = self.conn();
        for id in &ids {
            let _: redis::RedisResult<()> = redis::cmd("CLIENT")
                .arg("KILL")
                .arg("ID")
                .arg(id)
                .query(&mut conn);
        }
        ids.len()
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
fn replies_with(port: u16, cmd: &[u8], reply: &[u8], wait: Duration) -> bool {
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
fn ping(port: u16) -> bool {
    replies_with(port, b"PING\r\n", b"+PONG\r\n", Duration::from_millis(500))
}

/// Whether the server on `port` answers reads with `LOADING` (a loading
/// node serves events only between chunks of its data: a longer wait).
fn is_loading(port: u16) -> bool {
    replies_with(port, b"GET x\r\n", b"-LOADING", Duration::from_secs(2))
}

/// The process id of the redis-server answering on `port`.
fn server_pid(port: u16) -> Option<u32> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).ok()?;
    let mut conn = client
        .get_connection_with_timeout(Duration::from_secs(2))
        .ok()?;
    let info: String = redis::cmd("INFO").arg("server").query(&mut conn).ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .and_then(|p| p.trim().parse().ok())
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

/// Our internal key of `kind` for `key` (no key prefix, no `}` outside a
/// hash tag), as the crate's docs describe the reserved namespace: in
/// `key`'s hash slot, through its hash tag or the whole key.
pub fn internal_key(kind: &str, key: &str) -> String {
    let tag = key
        .split_once('{')
        .and_then(|(_, rest)| rest.split_once('}'))
        .map(|(tag, _)| tag)
        .filter(|tag| !tag.is_empty())
        .unwrap_or(key);
    format!("redquorum:{kind}:{{{tag}}}:{key}")
}

/// Waits (up to 10 s) until `redlock` has connected to and checked every
/// member (`Redlock::connect`), so that a test's first request does not
/// also carry the connections' set-up within a short node timeout.
pub async fn connected(redlock: &redquorum::Redlock) {
    let standing = redlock
        .connect(Duration::from_secs(10))
        .await
        .expect("connected");
    assert!(
        !standing.contains(&redquorum::NodeTrust::Unknown),
        "never connected: {standing:?}"
    );
}

/// How many times `redlock`'s waiters woke up, for whatever reason.
pub fn wake_ups(redlock: &redquorum::Redlock) -> u64 {
    let s = redlock.stats();
    s.woken_by_notification + s.woken_by_ttl + s.woken_by_own_release + s.woken_by_cap
}

/// Polls `cond` every 5 ms until it holds or `timeout` passes; returns whether it held.
pub async fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// What a [`Proxy`] does with traffic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProxyMode {
    /// Forward as is.
    Pass,
    /// Forward after this many milliseconds.
    Delay(u64),
    /// Accept and read, but forward nothing in either direction.
    Blackhole,
    /// Close every new connection at once, and the others at their next
    /// traffic (as a node that is down).
    Refuse,
    /// Hold the connections accepted from now on: what they send waits
    /// (either way) until the mode changes, then goes on; connections
    /// made before pass as they are.
    HoldNew,
}

/// [`ProxyMode::Refuse`], encoded.
const REFUSE: u64 = u64::MAX;
/// [`ProxyMode::HoldNew`], encoded.
const HOLD_NEW: u64 = u64::MAX - 1;

/// A TCP proxy in front of a node, on its own threads (independent of any
/// test runtime). Closed on drop.
pub struct Proxy {
    /// The port clients connect to.
    pub port: u16,
    /// Encoded mode: 0 pass, 1 blackhole, 2+ms delay, [`HOLD_NEW`],
    /// [`REFUSE`].
    mode: Arc<AtomicU64>,
    /// Set on drop to end the accept loop.
    stop: Arc<AtomicBool>,
    /// Every socket opened, for shutdown on drop.
    sockets: Arc<Mutex<Vec<TcpStream>>>,
    /// Connections accepted so far.
    accepted: Arc<AtomicU64>,
    /// The port new connections are forwarded to.
    target: Arc<AtomicU16>,
}

impl Proxy {
    /// Starts a proxy to `127.0.0.1:target`.
    pub fn start(target: u16) -> Self {
        let listener = listener();
        let port = listener.local_addr().expect("proxy addr").port();
        let mode = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let sockets = Arc::new(Mutex::new(Vec::new()));
        let accepted = Arc::new(AtomicU64::new(0));
        let target = Arc::new(AtomicU16::new(target));
        let (m, st, socks, count, to) = (
            mode.clone(),
            stop.clone(),
            sockets.clone(),
            accepted.clone(),
            target.clone(),
        );
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if st.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = client else { continue };
                count.fetch_add(1, Ordering::SeqCst);
                let now = m.load(Ordering::SeqCst);
                let held = now == HOLD_NEW;
                if now == REFUSE {
                    drop(client);
                    continue;
                }
                let Ok(server) = TcpStream::connect(("127.0.0.1", to.load(Ordering::SeqCst)))
                else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                {
                    let mut s = socks.lock().expect("sockets");
                    s.push(client.try_clone().expect("clone"));
                    s.push(server.try_clone().expect("clone"));
                }
                for (from, to) in [
                    (
                        client.try_clone().expect("clone"),
                        server.try_clone().expect("clone"),
                    ),
                    (server, client),
                ] {
                    let m = m.clone();
                    std::thread::spawn(move || pump(from, to, m, held));
                }
            }
        });
        Proxy {
            port,
            mode,
            stop,
            sockets,
            accepted,
            target,
        }
    }

    /// How many connections the proxy has accepted (a target that is down
    /// sees each closed at once).
    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::SeqCst)
    }

    /// The proxy's `redis://` URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Breaks every connection made through the proxy so far (as a network
    /// fault would); new ones are still accepted.
    pub fn cut(&self) {
        for s in self.sockets.lock().expect("sockets").drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    /// Leads the address elsewhere (a name or a virtual IP moved to
    /// another server): connections made from now on reach
    /// `127.0.0.1:port`, and those made so far are broken.
    pub fn retarget(&self, port: u16) {
        self.target.store(port, Ordering::SeqCst);
        self.cut();
    }

    /// Changes what the proxy does with traffic from now on.
    pub fn set_mode(&self, mode: ProxyMode) {
        let v = match mode {
            ProxyMode::Pass => 0,
            ProxyMode::Blackhole => 1,
            ProxyMode::Delay(ms) => 2 + ms.min(HOLD_NEW - 3),
            ProxyMode::Refuse => REFUSE,
            ProxyMode::HoldNew => HOLD_NEW,
        };
        self.mode.store(v, Ordering::SeqCst);
    }
}

/// Forwards `from` to `to` as `mode` says; `held`: the connection was
/// accepted under [`ProxyMode::HoldNew`].
fn pump(mut from: TcpStream, mut to: TcpStream, mode: Arc<AtomicU64>, held: bool) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        match mode.load(Ordering::SeqCst) {
            0 => {}
            HOLD_NEW => {
                while held && mode.load(Ordering::SeqCst) == HOLD_NEW {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            1 => continue,   // blackhole: swallow
            REFUSE => break, // a node that is down keeps no connection
            d => std::thread::sleep(Duration::from_millis(d - 2)),
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Ends the waits of held connections (their sockets are shut below).
        self.mode.store(0, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        for s in self.sockets.lock().expect("sockets").iter() {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

/// Takes `resource` in one attempt (TTL 5 s) and releases it.
pub async fn locked_once(redlock: &redquorum::Redlock, resource: &str) {
    let lock = redlock.try_lock(resource, Duration::from_secs(5)).await;
    lock.expect("lock").release().await.expect("release");
}

/// Takes `resource` with a fencing token (TTL 5 s) and releases it.
pub async fn fenced_once(redlock: &redquorum::Redlock, resource: &str) {
    let lock = redlock.lock_fenced(resource, Duration::from_secs(5)).await;
    lock.expect("fenced lock").release().await.expect("release");
}

/// Takes `resource` (TTL 600 ms, renewed in the background), gives its key
/// to another owner on every node, and waits (at most 5 s) until the
/// client's renewal fails and the lock is lost.
pub async fn lose_to_another_owner(c: &Cluster, redlock: &redquorum::Redlock, resource: &str) {
    let lock = redlock.lock(resource, Duration::from_millis(600)).await;
    let lock = lock.expect("lock");
    lock.auto_extend();
    for node in &c.nodes {
        node.set(resource, "another-owner", Duration::from_secs(10));
    }
    let lost = tokio::time::timeout(Duration::from_secs(5), lock.lost()).await;
    lost.expect("the lock was never marked lost");
}

/// A Redis Cluster of several masters on free loopback ports, made by
/// `redis-cli --cluster create` (`REDQUORUM_REDIS_CLI`, else `redis-cli`
/// on the PATH): every slot assigned, spread over the shards.
pub struct ShardedCluster {
    /// The masters, one per shard.
    pub nodes: Vec<RedisNode>,
}

/// Runs `redis-cli --cluster <command> <args> --cluster-yes` and checks
/// that it succeeded.
fn redis_cli_cluster(command: &str, args: &[String]) {
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
    fn start_small(shards: usize) -> Self {
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
    fn replicas_linked(&self) -> usize {
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
    fn any(&self) -> redis::Connection {
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
    fn id(&self, i: usize) -> String {
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
