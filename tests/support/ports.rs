//! Loopback ports: free ones, ones a killed node's test still owns, and
//! one that answers but not in the Redis protocol.

use super::*;

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
pub(crate) fn listener() -> TcpListener {
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
pub(crate) struct Claimed;

impl Claimed {
    /// Marks older than this are left by a test process that died.
    pub(crate) const STALE: Duration = Duration::from_secs(600);

    pub(crate) fn path(port: u16) -> PathBuf {
        std::env::temp_dir()
            .join("redquorum-test-ports")
            .join(port.to_string())
    }

    /// Marks `port` as owned by a node that is down.
    pub(crate) fn mark(port: u16) {
        let path = Self::path(port);
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let _ = std::fs::write(&path, std::process::id().to_string());
    }

    /// The node of `port` is gone for good.
    pub(crate) fn clear(port: u16) {
        let _ = std::fs::remove_file(Self::path(port));
    }

    /// Whether a recent mark claims `port`.
    pub(crate) fn is(port: u16) -> bool {
        std::fs::metadata(Self::path(port))
            .and_then(|m| m.modified())
            .is_ok_and(|at| at.elapsed().is_ok_and(|age| age < Self::STALE))
    }
}
