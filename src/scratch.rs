//! A throwaway `redis-server` for unit tests that check a script against
//! the Rust rule the model checker uses (`redis-server` from
//! `REDQUORUM_REDIS_SERVER` or PATH, as the test harness starts it).

use std::process::{Child, Command, Stdio};

/// The node's process, killed on drop (also when an assertion fails), and
/// its directory.
pub(crate) struct Scratch {
    /// The process.
    child: Child,
    /// Its directory, removed on drop.
    _dir: tempfile::TempDir,
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts a node with no persistence on a free loopback port; returns it
/// and a connection to it.
pub(crate) fn node() -> (Scratch, redis::Connection) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let dir = tempfile::tempdir().expect("temp dir");
    let server = std::env::var("REDQUORUM_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
    let node = Scratch {
        child: Command::new(&server)
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
            .expect("start redis-server"),
        _dir: dir,
    };
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).expect("url");
    let conn = (0..200)
        .find_map(|_| {
            std::thread::sleep(std::time::Duration::from_millis(10));
            client.get_connection().ok()
        })
        .expect("redis-server answers");
    (node, conn)
}
