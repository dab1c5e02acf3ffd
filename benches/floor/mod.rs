//! Floors for (a): the lock+release protocol (`SET NX PX`, then the
//! compare-and-delete script, each to all nodes, done at the 3rd of 5 replies)
//! with no lock logic at all, once on plain sockets and once through redis-rs.
//! They show what any quorum client can save on this machine, and what is left
//! once redis-rs carries the requests.

use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use redis::aio::MultiplexedConnection;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

/// The release script, as redquorum sends it (`EVAL`).
const RELEASE: &str = r#"if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("DEL", KEYS[1])
else
  return 0
end"#;

fn set_cmd(key: &str, value: &str, ttl: Duration) -> redis::Cmd {
    let mut c = redis::cmd("SET");
    c.arg(key)
        .arg(value)
        .arg("NX")
        .arg("PX")
        .arg(ttl.as_millis() as u64);
    c
}

fn release_cmd(key: &str, value: &str) -> redis::Cmd {
    let mut c = redis::cmd("EVAL");
    c.arg(RELEASE).arg(1).arg(key).arg(value);
    c
}

/// The protocol on plain sockets: each command is written to every node from
/// the calling task, and the task reads the replies itself. No client library,
/// no lock logic, no error handling beyond counting replies: a floor, not a
/// client.
pub struct RawSockets {
    socks: Vec<TcpStream>,
    /// Replies each node still owes (slower nodes answer during the next
    /// round, as they would for a real quorum client).
    owed: Vec<usize>,
    /// Whether any reply was an error.
    pub errors: bool,
}

impl RawSockets {
    pub async fn connect(urls: &[String]) -> Self {
        let mut socks = Vec::new();
        for u in urls {
            let addr = u.trim_start_matches("redis://").trim_end_matches('/');
            let s = TcpStream::connect(addr).await.expect("connect");
            s.set_nodelay(true).expect("nodelay");
            socks.push(s);
        }
        let owed = vec![0; socks.len()];
        Self {
            socks,
            owed,
            errors: false,
        }
    }

    /// Writes `cmd` to every node and returns once a majority answered it.
    async fn round(&mut self, cmd: &[u8]) {
        for (s, owed) in self.socks.iter().zip(&mut self.owed) {
            let mut sent = 0;
            while sent < cmd.len() {
                match s.try_write(&cmd[sent..]) {
                    Ok(n) => sent += n,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        s.writable().await.expect("writable")
                    }
                    Err(e) => panic!("write: {e}"),
                }
            }
            *owed += 1;
        }
        let quorum = self.socks.len() / 2 + 1;
        let mut replies: FuturesUnordered<_> = self
            .socks
            .iter_mut()
            .zip(&mut self.owed)
            .map(|(s, owed)| async move {
                // Every reply here is one line: count line ends.
                let mut buf = [0u8; 512];
                let mut error = false;
                while *owed > 0 {
                    let n = s.read(&mut buf).await.expect("read");
                    assert!(n > 0, "node closed the connection");
                    error |= buf[0] == b'-' || buf[..n].windows(2).any(|w| w == b"\n-");
                    *owed -= buf[..n].iter().filter(|b| **b == b'\n').count();
                }
                error
            })
            .collect();
        let mut answered = 0;
        while let Some(error) = replies.next().await {
            self.errors |= error;
            answered += 1;
            if answered == quorum {
                break;
            }
        }
    }

    /// Lock and release `key` once.
    pub async fn op(&mut self, key: &str, ttl: Duration) -> bool {
        let value = format!("{:032x}", rand::random::<u128>());
        self.round(&set_cmd(key, &value, ttl).get_packed_command())
            .await;
        self.round(&release_cmd(key, &value).get_packed_command())
            .await;
        !self.errors
    }
}

/// The protocol through redis-rs multiplexed connections, without lock logic:
/// each round is done at the majority's replies and the rest finish in a task.
pub struct RedisRs {
    conns: Vec<MultiplexedConnection>,
}

impl RedisRs {
    pub async fn connect(urls: &[String]) -> Self {
        let mut conns = Vec::new();
        for u in urls {
            let c = redis::Client::open(u.as_str()).expect("url");
            conns.push(c.get_multiplexed_async_connection().await.expect("connect"));
        }
        Self { conns }
    }

    async fn round(&self, cmd: &redis::Pipeline) -> bool {
        let mut replies: FuturesUnordered<_> = self
            .conns
            .iter()
            .map(|c| {
                let (mut c, cmd) = (c.clone(), cmd.clone());
                async move { cmd.query_async::<redis::Value>(&mut c).await.is_ok() }
            })
            .collect();
        let (mut answered, mut ok) = (0, true);
        while let Some(r) = replies.next().await {
            ok &= r;
            answered += 1;
            if answered == self.conns.len() / 2 + 1 {
                break;
            }
        }
        tokio::spawn(async move { while replies.next().await.is_some() {} });
        ok
    }

    /// Lock and release `key` once, the `SET` followed by `reads` in its
    /// pipeline.
    pub async fn op(&self, key: &str, ttl: Duration, reads: Reads) -> bool {
        let value = format!("{:032x}", rand::random::<u128>());
        let mut set = redis::pipe();
        set.add_command(set_cmd(key, &value, ttl));
        if reads != Reads::None {
            set.cmd("TIME");
        }
        if reads == Reads::TimeAndMarker {
            set.cmd("HMGET").arg(MARKER).arg(&["run", "loss", "seen"]);
        }
        let mut release = redis::pipe();
        release.add_command(release_cmd(key, &value));
        let locked = self.round(&set).await;
        self.round(&release).await && locked
    }
}

/// Our marker on a node (as `src/node/trust/evidence.rs` names it).
const MARKER: &str = "redquorum:node";

/// What the floor's `SET` carries behind it in its pipeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reads {
    /// Nothing: the protocol alone.
    None,
    /// A `TIME`, as each of our vote-asking requests.
    Time,
    /// A `TIME` and the `HMGET` of our marker: all that ours carry.
    TimeAndMarker,
}
