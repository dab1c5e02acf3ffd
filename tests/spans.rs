//! Tracing on real nodes: one span per acquisition, extension, release and
//! counter allocation, carrying the resource, the outcome and each node's
//! vote in the last round (`y` yes, `n` no, `x` failed, `.` not heard), at
//! INFO, with no INFO event per request.

mod support;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use support::Cluster;
use tracing_subscriber::fmt::format::FmtSpan;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Lines written by the subscriber.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<u8>>>);

impl Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn acquisitions_extensions_releases_and_allocations_have_spans_with_outcomes() {
    let c = Cluster::start(3);
    let lines = Lines::default();
    let writer = lines.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_span_events(FmtSpan::CLOSE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    tracing::subscriber::with_default(subscriber, || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let (a, b) = (c.redlock(), c.builder().retry_count(0).build().unwrap());
            let lock = a.lock("orders", ms(5_000)).fenced().await.unwrap();
            assert!(b.lock("orders", ms(5_000)).try_once().await.is_err());
            lock.extend(ms(5_000)).await.unwrap();
            lock.release().await.unwrap();
        });
    });
    let out = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
    // The close lines of spans named `span` (the innermost span of the line).
    let closed = |span: &str| -> Vec<&str> {
        out.lines()
            .filter(|l| l.contains(": close"))
            .filter(|l| {
                l.find(&format!("{span}{{"))
                    .and_then(|at| l[at..].find('}').map(|end| &l[at + end..]))
                    .is_some_and(|rest| rest.starts_with("}: redquorum"))
            })
            .collect()
    };
    // How many nodes voted `vote` in a span's last round.
    let votes = |line: &str, vote: char| {
        line.split("nodes=\"").nth(1).map_or(0, |v| {
            v.chars()
                .take_while(|c| *c != '"')
                .filter(|c| *c == vote)
                .count()
        })
    };
    let fenced = closed("lock_fenced");
    assert_eq!(fenced.len(), 1, "{out}");
    for field in ["resource=\"orders\"", "outcome=\"acquired\"", "rounds=1"] {
        assert!(fenced[0].contains(field), "no {field} in {}", fenced[0]);
    }
    let tried = closed("try_lock");
    assert!(tried[0].contains("outcome=\"contended\""), "{out}");
    assert!(votes(tried[0], 'n') >= 2, "a quorum said no: {}", tried[0]);
    let allocation = closed("allocate");
    assert!(allocation[0].contains("outcome=\"allocated\""), "{out}");
    assert!(
        closed("extend")[0].contains("outcome=\"extended\""),
        "{out}"
    );
    let release = closed("release");
    assert!(release[0].contains("outcome=\"released\""), "{out}");
    assert!(
        votes(release[0], 'y') >= 2,
        "a quorum released: {}",
        release[0]
    );
    assert!(
        votes(allocation[0], 'y') >= 2,
        "a quorum accepted: {}",
        allocation[0]
    );
    let events: Vec<&str> = out.lines().filter(|l| !l.contains(": close")).collect();
    assert!(events.is_empty(), "INFO events per request: {events:?}");
}

/// At first contact the library says, once per node, what makes it unsafe
/// or useless for locks: no durable persistence, a policy that may evict
/// our keys, a host name that does not resolve, a database index the node
/// lacks. Nothing for a node set up right. Locks still work on the three
/// that answer (no fault tolerance left: hence the warnings).
#[test]
fn first_contact_warns_once_per_node_of_what_makes_it_unsafe() {
    let c = Cluster {
        nodes: vec![
            support::RedisNode::start(support::Persistence::None),
            support::RedisNode::start(support::Persistence::Aof),
            support::RedisNode::start(support::Persistence::Aof),
        ],
    };
    c.declare_new();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("1gb")
        .query(&mut c.nodes[1].conn())
        .unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory-policy")
        .arg("volatile-lru")
        .query(&mut c.nodes[1].conn())
        .unwrap();
    let port = c.nodes[2].port;
    let other = support::RedisNode::start(support::Persistence::Aof);
    let mut urls = c.urls();
    urls.push(format!("redis://locahost.invalid:{port}"));
    urls.push(format!("redis://127.0.0.1:{}/99", other.port));
    let lines = Lines::default();
    let writer = lines.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    tracing::subscriber::with_default(subscriber, || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let r = redquorum::Redlock::builder().nodes(&urls).build().unwrap();
            for _ in 0..3 {
                let lock = r.lock("first_contact", ms(5_000)).await.unwrap();
                lock.release().await.unwrap();
                tokio::time::sleep(ms(600)).await;
            }
        });
    });
    let out = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
    let said = |what: &str| out.lines().filter(|l| l.contains(what)).count();
    assert_eq!(said("runs without AOF"), 1, "{out}");
    assert_eq!(said("node 0 (127.0.0.1:"), 1, "{out}");
    assert_eq!(said("may evict our keys"), 1, "{out}");
    assert_eq!(said("node 1 (127.0.0.1:"), 1, "{out}");
    assert_eq!(said("node 2 "), 0, "{out}");
    assert_eq!(said("failed to lookup address"), 1, "{out}");
    assert_eq!(said("DB index is out of range"), 1, "{out}");
}
