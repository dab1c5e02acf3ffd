//! A throwaway `redis-server` for unit tests that check a script against
//! the Rust rule the model checker uses (`redis-server` from
//! `REDQUORUM_REDIS_SERVER` or PATH, as the test harness starts it), or
//! against a server's own command (`valkey-server`, from
//! `scripts/ensure-valkey.sh`).

use std::process::{Child, Command, Stdio};

/// The node's process, killed on drop (also when an assertion fails), and
/// its directory.
pub(crate) struct Scratch {
    /// The process.
    child: Child,
    /// Its directory, removed on drop.
    _dir: tempfile::TempDir,
    /// Its port.
    port: u16,
}

impl Scratch {
    /// Another connection to the node.
    pub(crate) fn connection(&self) -> redis::Connection {
        redis::Client::open(format!("redis://127.0.0.1:{}", self.port))
            .and_then(|c| c.get_connection())
            .expect("a connection to the scratch node")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts a node with no persistence on a free loopback port; returns it
/// and a connection to it. A port another test took between our choice and
/// the bind is detected by the answering server's process id, and another
/// port is tried.
pub(crate) fn node() -> (Scratch, redis::Connection) {
    let server = std::env::var("REDQUORUM_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
    node_of(&server)
}

/// [`node`] running the pinned `valkey-server`.
pub(crate) fn valkey() -> (Scratch, redis::Connection) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/ensure-valkey.sh");
    let out = Command::new(script)
        .stderr(Stdio::inherit())
        .output()
        .expect("run scripts/ensure-valkey.sh");
    assert!(out.status.success(), "no valkey-server (see above)");
    let server = String::from_utf8(out.stdout).expect("a path");
    node_of(server.trim())
}

/// [`node`] running `server`.
fn node_of(server: &str) -> (Scratch, redis::Connection) {
    let mut last = String::new();
    for _ in 0..5 {
        match try_node(server) {
            Ok(started) => return started,
            Err(e) => last = e,
        }
    }
    panic!("no scratch redis-server: {last}");
}

/// One try of [`node`].
fn try_node(server: &str) -> Result<(Scratch, redis::Connection), String> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("free port: {e}"))?
        .port();
    let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
    let mut node = Scratch {
        child: Command::new(server)
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
            ])
            .arg("--dir")
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("start {server}: {e}"))?,
        _dir: dir,
        port,
    };
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).expect("url");
    for _ in 0..200 {
        if let Ok(Some(status)) = node.child.try_wait() {
            return Err(format!("{server} on port {port} exited with {status}"));
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
        let Ok(mut conn) = client.get_connection() else {
            continue;
        };
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query(&mut conn)
            .map_err(|e| format!("INFO on port {port}: {e}"))?;
        let ours = format!("process_id:{}", node.child.id());
        if info.lines().any(|l| l.trim() == ours) {
            return Ok((node, conn));
        }
        return Err(format!("port {port} answered by another test's server"));
    }
    Err(format!("{server} on port {port} did not answer in 2 s"))
}
