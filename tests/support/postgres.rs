//! A real PostgreSQL server for a test: a temporary database cluster
//! (`initdb`) on a free loopback port, stopped and removed on Drop. The
//! binaries come from `REDQUORUM_PG_BIN` (a folder), else Debian's
//! `/usr/lib/postgresql/<version>/bin`, else PATH (`scripts/ensure-
//! postgres.sh` installs them). PostgreSQL refuses to run as root: when
//! the tests do, the server runs as the `postgres` user (or `nobody`).

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running PostgreSQL server with one database, `postgres`, and one
/// user, `postgres`, trusted on loopback.
pub struct Postgres {
    /// Its port on 127.0.0.1.
    pub port: u16,
    child: Child,
    dir: PathBuf,
}

impl Postgres {
    /// Starts a server; panics with its log if it does not accept
    /// connections within 60 s.
    pub fn start() -> Self {
        let bin = bin_dir();
        static STARTED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let nth = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("redquorum-pg-{}-{nth}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the server's folder");
        let owner = Owner::find();
        owner.give(&dir);
        let data = dir.join("data");
        let init = owner
            .command(&bin.join("initdb"))
            .arg("-D")
            .arg(&data)
            .args(["-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"])
            .output()
            .expect("run initdb");
        assert!(
            init.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&init.stderr)
        );
        let port = super::free_port();
        let log = std::fs::File::create(dir.join("log")).expect("create the log");
        owner.give(&dir.join("log"));
        let child = owner
            .command(&bin.join("postgres"))
            .arg("-D")
            .arg(&data)
            .args(["-p", &port.to_string(), "-k"])
            .arg(&dir)
            .args(["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"])
            .args(["-c", "synchronous_commit=off", "-c", "full_page_writes=off"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start postgres");
        let server = Postgres { port, child, dir };
        server.await_ready(&bin);
        server
    }

    /// Its URL, for sqlx.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
    }

    /// Runs `sql` with `psql` (in the environment given), returning what it
    /// printed (tuples only, unaligned) and whether it succeeded.
    pub fn psql(&self, sql: &str, env: &[(&str, &str)]) -> (String, bool) {
        let out = Command::new(bin_dir().join("psql"))
            .args(["-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1"])
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(["-U", "postgres", "-d", "postgres", "-c", sql])
            .envs(env.iter().copied())
            .output()
            .expect("run psql");
        let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&out.stderr));
        (text, out.status.success())
    }

    fn await_ready(&self, bin: &Path) {
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(60) {
            let ready = Command::new(bin.join("pg_isready"))
                .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-q"])
                .status()
                .is_ok_and(|s| s.success());
            if ready {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("postgres did not start in 60 s:\n{}", self.log());
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        // SIGINT: fast shutdown (rolls back open transactions, closes
        // connections); then make sure.
        let _ = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status();
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(10) {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The folder of PostgreSQL's server binaries.
fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("REDQUORUM_PG_BIN") {
        return PathBuf::from(dir);
    }
    let debian = std::fs::read_dir("/usr/lib/postgresql").ok().and_then(|d| {
        d.filter_map(Result::ok)
            .map(|e| e.path().join("bin"))
            .filter(|b| b.join("initdb").exists())
            .max()
    });
    if let Some(dir) = debian {
        return dir;
    }
    let found = Command::new("sh")
        .args(["-c", "command -v initdb"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .filter(|p| !p.is_empty());
    match found {
        Some(path) => Path::new(&path).parent().expect("a folder").to_path_buf(),
        None => panic!(
            "PostgreSQL's initdb was not found: run scripts/ensure-postgres.sh, or set \
             REDQUORUM_PG_BIN to the folder of its server binaries"
        ),
    }
}

/// Whom the server runs as: ourselves, or, when we are root (which
/// PostgreSQL refuses), an unprivileged user.
struct Owner(Option<(u32, u32)>);

impl Owner {
    fn find() -> Self {
        let me = Command::new("id").arg("-u").output().expect("run id");
        if String::from_utf8_lossy(&me.stdout).trim() != "0" {
            return Owner(None);
        }
        for name in ["postgres", "nobody"] {
            let id = |flag: &str| -> Option<u32> {
                let out = Command::new("id").args([flag, name]).output().ok()?;
                String::from_utf8_lossy(&out.stdout).trim().parse().ok()
            };
            if let (Some(uid), Some(gid)) = (id("-u"), id("-g")) {
                return Owner(Some((uid, gid)));
            }
        }
        panic!(
            "running as root, and neither a postgres nor a nobody user exists to run PostgreSQL"
        );
    }

    /// Makes `path` the server user's.
    fn give(&self, path: &Path) {
        if let Some((uid, gid)) = self.0 {
            std::os::unix::fs::chown(path, Some(uid), Some(gid)).expect("chown for postgres");
        }
    }

    /// `program`, run as the server user.
    fn command(&self, program: &Path) -> Command {
        let mut cmd = Command::new(program);
        if let Some((uid, gid)) = self.0 {
            cmd.uid(uid).gid(gid).env("HOME", "/tmp");
            cmd.current_dir("/tmp");
        }
        cmd
    }
}
