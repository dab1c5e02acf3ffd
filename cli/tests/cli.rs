//! The `redquorum` binary against real nodes: exit codes, lock loss, signals,
//! serial output across processes, status.

mod bin;
#[path = "../../tests/support/mod.rs"]
mod support;

use std::collections::HashSet;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use bin::cli;
use support::{wait_until, Cluster, Persistence, ShardedCluster};

fn run(cmd: &mut Command) -> Output {
    cmd.output().expect("run redquorum")
}

/// Sends SIGTERM to `child` and waits for it to exit.
async fn terminate(child: std::process::Child) -> Output {
    assert!(Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap()
        .success());
    tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap()
}

fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

#[test]
fn lock_runs_the_command_and_passes_its_status() {
    let c = Cluster::start(3);
    let o = run(cli(&c).args([
        "lock",
        "cli_status",
        "--ttl",
        "5s",
        "--",
        "sh",
        "-c",
        "echo held; exit 7",
    ]));
    assert_eq!(code(&o), 7, "{o:?}");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "held\n");
    // Released afterwards.
    assert_eq!(c.values("cli_status"), vec![None; 3]);
}

#[test]
fn missing_command_is_127() {
    let c = Cluster::start(3);
    let o = run(cli(&c).args(["lock", "cli_missing", "--", "/nonexistent/program"]));
    assert_eq!(code(&o), 127, "{o:?}");
}

#[tokio::test]
async fn not_acquired_within_wait_is_75() {
    let c = Cluster::start(3);
    let holder = c.redlock();
    let lock = holder
        .lock("cli_busy", Duration::from_secs(30))
        .try_once()
        .await
        .unwrap();
    let t = Instant::now();
    let o = run(cli(&c).args(["lock", "cli_busy", "--wait", "300ms", "--", "true"]));
    assert_eq!(code(&o), 75, "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("held by another owner"),
        "{o:?}"
    );
    assert!(t.elapsed() < Duration::from_secs(10));
    lock.release().await.unwrap();
}

#[tokio::test]
async fn bad_configuration_is_78() {
    let c = Cluster::start(3);
    let o = run(cli(&c).args(["lock", "", "--", "true"]));
    assert_eq!(code(&o), 78, "{o:?}");
    let o = run(cli(&c)
        .env("REDQUORUM_NODES", "not-a-url")
        .args(["lock", "x", "--", "true"]));
    assert_eq!(code(&o), 78, "{o:?}");
    let o = run(cli(&c).args(["serial", "next", "BAD PREFIX"]));
    assert_eq!(code(&o), 78, "{o:?}");
    let o = run(cli(&c).args(["serial", "next", "X", "--tz", "Mars/Olympus"]));
    assert_eq!(code(&o), 78, "{o:?}");
    // Usage errors exit with the documented configuration code, not 2.
    for args in [
        &["lock", "x", "--ttl", "ten", "--", "true"][..],
        &["lock", "x", "true"],
        &["lock", "x", "--ttl", "30", "--", "true"],
        &["serial", "next", "X", "--count", "0"],
        &["no-such-command"],
    ] {
        let o = run(cli(&c).args(args));
        assert_eq!(code(&o), 78, "{args:?}: {o:?}");
    }
    let o = run(cli(&c).args(["lock", "x", "--ttl", "30", "--", "true"]));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("has no unit"), "{err}");
    // A reserved name, and someone else's data where a counter belongs.
    let o = run(cli(&c).args(["lock", "redquorum:x", "--", "true"]));
    assert_eq!(code(&o), 78, "{o:?}");
    let counter = support::internal_key("serial", "serial:day:TAKEN");
    for node in &c.nodes {
        node.set(&counter, "not a counter", Duration::from_secs(60));
    }
    let o = run(cli(&c).args(["serial", "next", "TAKEN"]));
    assert_eq!(code(&o), 78, "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("another type"), "{err}");
    // A TTL above the quarantine: said in the command line's words, not
    // the library's setting names.
    let o = run(cli(&c).args(["lock", "x", "--ttl", "2h", "--", "true"]));
    assert_eq!(code(&o), 78, "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("raise the restart quarantine"), "{err}");
    assert!(!err.contains("restart_quarantine"), "{err}");
    let o = run(cli(&c).args(["--help"]));
    assert_eq!(code(&o), 0, "{o:?}");
}

#[tokio::test]
async fn no_quorum_is_69_not_75_and_each_cause_is_said_once() {
    let mut c = Cluster::start(3);
    c.nodes[0].kill();
    c.nodes[1].kill();
    let o = run(cli(&c).args(["lock", "cli_outage", "--wait", "300ms", "--", "true"]));
    assert_eq!(code(&o), 69, "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("2 of 3 nodes failed"), "{err}");
    // The two nodes failed alike: named together, the cause said once.
    let refused = err.matches("onnection refused").count();
    assert_eq!(refused, 1, "the cause said once for both nodes: {err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    let o = run(cli(&c).args(["serial", "next", "ORDER"]));
    assert_eq!(code(&o), 69, "{o:?}");
}

#[test]
fn exhausted_serial_numbers_are_65_not_69() {
    let c = Cluster::start(3);
    let next = |count: &str| {
        run(cli(&c).args([
            "serial", "next", "TINY", "--width", "1", "--period", "never", "--count", count,
        ]))
    };
    let o = next("9");
    assert!(o.status.success(), "{o:?}");
    let o = next("1");
    assert_eq!(code(&o), 65, "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("exhausted"), "{err}");
}

#[tokio::test]
async fn a_renewal_that_fails_once_does_not_end_the_command() {
    // TTL 3 s, renewed every second; three of five nodes paused from 0.8 s
    // to 1.4 s after the lock is on them: the first renewal fails, the
    // next one succeeds, and the command runs to its end.
    let mut c = Cluster::start(5);
    let child = cli(&c)
        .args(["lock", "cli_renew", "--ttl", "3s", "--"])
        .args(["sh", "-c", "sleep 4; echo cmd-finished"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(wait_until(Duration::from_secs(5), || c.set_on("cli_renew") == 5).await);
    tokio::time::sleep(Duration::from_millis(800)).await;
    for n in &mut c.nodes[..3] {
        n.pause();
    }
    tokio::time::sleep(Duration::from_millis(600)).await;
    c.resume_all();
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    assert_eq!(code(&out), 0, "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "cmd-finished\n");
}

#[tokio::test]
async fn lock_lost_terminates_the_command_with_76() {
    let mut c = Cluster::start(5);
    let child = cli(&c)
        .args([
            "--node-timeout",
            "50ms",
            "lock",
            "cli_lost",
            "--ttl",
            "900ms",
            "--grace",
            "2s",
            "--",
        ])
        .args([
            "sh",
            "-c",
            "trap 'echo got-term; exit 0' TERM; while true; do sleep 0.05; done",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the command runs under the lock, then take the majority away.
    assert!(wait_until(Duration::from_secs(5), || c.set_on("cli_lost") >= 3).await);
    let t = Instant::now();
    for i in 0..3 {
        c.nodes[i].pause();
    }
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    c.resume_all();
    assert_eq!(code(&out), 76, "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "got-term\n",
        "SIGTERM reached the command"
    );
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "took {:?}",
        t.elapsed()
    );
}

#[tokio::test]
async fn signals_are_forwarded_and_the_lock_released() {
    let c = Cluster::start(3);
    let child = cli(&c)
        .args(["lock", "cli_signal", "--ttl", "30s", "--", "sleep", "30"])
        .spawn()
        .unwrap();
    assert!(wait_until(Duration::from_secs(5), || c.set_on("cli_signal") >= 2).await);
    let out = terminate(child).await;
    assert_eq!(
        code(&out),
        128 + 15,
        "sleep died of the forwarded SIGTERM: {out:?}"
    );
    assert!(
        wait_until(Duration::from_secs(2), || c
            .values("cli_signal")
            .iter()
            .all(Option::is_none))
        .await
    );
}

#[tokio::test]
async fn a_signal_while_waiting_leaves_nothing_behind() {
    let c = Cluster::start(3);
    // A foreign owner holds 2 of 3 nodes: every attempt wins node 2, loses,
    // releases node 2 and tries again.
    for n in &c.nodes[..2] {
        n.set("cli_wait", "someone-else", Duration::from_secs(60));
    }
    let child = cli(&c)
        .args(["lock", "cli_wait", "--wait", "60s", "--", "echo", "ran"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // A release on node 2 shows an attempt was made, so the handlers are in.
    assert!(
        wait_until(Duration::from_secs(5), || c.nodes[2].command_calls("eval")
            >= 1)
        .await
    );
    let t = Instant::now();
    let out = terminate(child).await;
    assert_eq!(code(&out), 128 + 15, "{out:?}");
    assert!(out.stdout.is_empty(), "the command never ran: {out:?}");
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "took {:?}",
        t.elapsed()
    );
    // Whatever the interrupted attempt had set is gone; the owner's is not.
    assert_eq!(c.nodes[2].get("cli_wait"), None);
    for n in &c.nodes[..2] {
        assert_eq!(n.get("cli_wait").as_deref(), Some("someone-else"));
    }
}

#[test]
fn serial_numbers_from_three_processes_are_distinct_and_increasing() {
    let c = Cluster::start(5);
    let children: Vec<_> = (0..3)
        .map(|_| {
            cli(&c)
                .args([
                    "serial", "next", "MP", "--count", "150", "--batch", "1", "--width", "6",
                ])
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut all = HashSet::new();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{out:?}\n{}", c.logs());
        let lines: Vec<String> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect();
        assert_eq!(lines.len(), 150);
        // Same length and prefix+date, so string order is number order.
        assert!(lines.windows(2).all(|w| w[0] < w[1]), "per-process order");
        for l in lines {
            assert!(l.starts_with("MP") && l.len() == 2 + 8 + 6, "{l}");
            assert!(all.insert(l.clone()), "duplicate {l}");
        }
    }
    assert_eq!(all.len(), 450);
}

#[test]
fn serial_next_prints_one_per_line() {
    let c = Cluster::start(3);
    let o = run(cli(&c).args([
        "serial",
        "next",
        "ORDER",
        "--count",
        "3",
        "--tz",
        "Asia/Shanghai",
    ]));
    assert!(o.status.success(), "{o:?}");
    let out = String::from_utf8(o.stdout).unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3);
    assert!(
        lines[2].ends_with("0003") && lines[0].starts_with("ORDER"),
        "{out}"
    );
}

/// `serial next --key-prefix` keeps its counter under that prefix: a
/// counter of its own, beside the unprefixed one.
#[test]
fn serial_next_takes_a_key_prefix() {
    let c = Cluster::start(3);
    let next = |prefix: Option<&str>| {
        let mut cmd = cli(&c);
        cmd.args(["serial", "next", "INV"]);
        if let Some(p) = prefix {
            cmd.args(["--key-prefix", p]);
        }
        let o = run(&mut cmd);
        assert!(o.status.success(), "{o:?}");
        String::from_utf8(o.stdout).unwrap().trim().to_owned()
    };
    assert!(next(Some("app:")).ends_with("0001"));
    assert!(next(None).ends_with("0001"), "one counter per prefix");
    assert!(next(Some("app:")).ends_with("0002"));
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*serial:*INV*")
        .query(&mut c.nodes[0].conn())
        .unwrap();
    assert!(keys.iter().any(|k| k.starts_with("app:")), "{keys:?}");
}

#[test]
fn status_reports_nodes_and_quorum() {
    let mut c = Cluster::start_undeclared(3, Persistence::None);
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory-policy")
        .arg("volatile-lru")
        .query(&mut c.nodes[2].conn())
        .unwrap();
    let o = run(cli(&c).arg("status"));
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(out.contains("quorum: OK (3 of 3 reachable"), "{out}");
    // Nodes just started and not declared new may be ones that lost their
    // data: quarantined, and status says so, says when locks can be taken,
    // and fails (a `status && deploy` check must not pass).
    assert_eq!(out.matches("QUARANTINED for").count(), 3, "{out}");
    assert!(
        out.contains("lock votes: UNAVAILABLE (0 of 3 nodes count"),
        "{out}"
    );
    assert!(out.contains("locks can be taken in about "), "{out}");
    assert_eq!(code(&o), 75, "{out}");
    assert!(out.contains("7."), "version column: {out}");
    // The harness runs nodes without AOF: status must say that is unsafe,
    // on stderr, once for all three nodes.
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert_eq!(err.matches("no AOF").count(), 1, "{err}");
    assert!(err.contains("warning: nodes 0, 1, 2: no AOF"), "{err}");
    // A node that can evict our keys: what it costs, and the cure.
    assert!(
        err.contains(
            "node 2: maxmemory-policy volatile-lru can evict lock keys: clients read its \
             evictions with every lock request and keep it out of lock quorums for a \
             quarantine after any eviction (use noeviction)"
        ),
        "{err}"
    );
    assert!(!out.contains("warning"), "{out}");
    c.nodes[0].kill();
    c.nodes[1].kill();
    let o = run(cli(&c).arg("status"));
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert_eq!(code(&o), 69, "{out}");
    assert!(out.contains("quorum: UNAVAILABLE (1 of 3"), "{out}");
}

#[test]
fn status_names_each_nodes_server_and_its_own_version() {
    let redis = std::env::var("REDQUORUM_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
    let c = Cluster::start_on(&[redis, support::valkey_binary(), support::valkey_binary()]);
    let o = run(cli(&c).arg("status"));
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert_eq!(code(&o), 0, "{out}");
    let rows: Vec<&str> = out.lines().filter(|l| l.contains("127.0.0.1")).collect();
    assert_eq!(rows.len(), 3, "{out}");
    // Valkey's `redis_version` (7.2.4) is not its own.
    assert!(rows[0].contains(" redis 7."), "{out}");
    assert!(rows[1].contains(" valkey 9.1.2 "), "{out}");
    assert!(rows[2].contains(" valkey 9.1.2 "), "{out}");
    assert!(
        out.lines().next().unwrap_or("").contains(" server "),
        "{out}"
    );
}

#[test]
fn status_shows_each_shard_of_a_cluster_member_and_what_breaks_it() {
    let (member0, mut member1) = std::thread::scope(|s| {
        let m0 = s.spawn(|| ShardedCluster::start_with_replicas(3, 1));
        let m1 = s.spawn(|| ShardedCluster::start(3));
        (m0.join().unwrap(), m1.join().unwrap())
    });
    let node = Cluster::start(1);
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("cluster-require-full-coverage")
        .arg("yes")
        .query(&mut member1.nodes[1].conn())
        .unwrap();
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "default", "-cluster|nodes"])
        .query(&mut member1.nodes[0].conn())
        .unwrap();
    let urls = format!(
        "{},{},{}",
        member0.url(),
        member1.url(),
        node.nodes[0].url()
    );
    let status = || run(cli(&node).env("REDQUORUM_NODES", &urls).arg("status"));
    let o = status();
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    // A row per member, and one per shard master under a cluster member.
    for member in [0, 1] {
        let row = out
            .lines()
            .find(|l| l.starts_with(&format!("{member}    cluster 127.0.0.1:")));
        assert!(
            row.is_some_and(|r| r.contains("cluster, 3 shards")),
            "{out}"
        );
        for shard in 0..3 {
            let row = out
                .lines()
                .find(|l| l.starts_with(&format!(" {member}.{shard} ")));
            assert!(row.is_some_and(|r| r.contains(" yes ")), "{out}");
        }
    }
    assert!(out.contains("quorum: OK (3 of 3 reachable"), "{out}");
    // init names a cluster member by its first seed, as status does.
    let o = run(cli(&node).env("REDQUORUM_NODES", &urls).arg("init"));
    let init = String::from_utf8_lossy(&o.stdout).to_string();
    for member in [0, 1] {
        let seed = format!("node {member} (cluster 127.0.0.1:");
        assert!(init.contains(&seed), "{init}");
    }
    // What breaks the guarantees, each where it is.
    let port = member1.nodes[1].port;
    assert!(
        err.contains(&format!(
            "warning: node 1: shard 127.0.0.1:{port}: cluster-require-full-coverage yes"
        )),
        "{err}"
    );
    assert_eq!(
        err.matches("cluster-require-full-coverage").count(),
        1,
        "{err}"
    );
    let hidden = member1.nodes[0].port;
    assert!(
        err.contains(&format!(
            "warning: node 1: shard 127.0.0.1:{hidden}: refuses CLUSTER NODES: a client's"
        )),
        "{err}"
    );
    assert_eq!(err.matches("refuses CLUSTER").count(), 1, "{err}");
    let takeovers = err
        .lines()
        .filter(|l| l.contains("may take over on their own"));
    assert!(takeovers.clone().count() == 3, "{err}");
    assert!(
        takeovers
            .clone()
            .all(|l| l.starts_with("warning: node 0: shard ")),
        "{err}"
    );
    // A dead shard: its row says so, and so does its member's.
    member1.nodes[2].kill();
    let dead = format!("127.0.0.1:{} ", member1.nodes[2].port);
    let o = status();
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    let row = out
        .lines()
        .find(|l| l.starts_with(" 1.") && l.contains(&dead));
    assert!(row.is_some_and(|r| r.contains(" NO ")), "{out}");
    let member = out
        .lines()
        .find(|l| l.starts_with("1    cluster"))
        .unwrap_or_default();
    assert!(member.contains("1 of 3 shards down"), "{out}");
}

#[test]
fn init_declares_fresh_nodes_new_once_and_leaves_used_ones() {
    let mut c = Cluster::start_undeclared(3, Persistence::Aof);
    c.nodes[2].set("someone", "x", Duration::from_secs(60));
    let o = run(cli(&c).arg("init"));
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert_eq!(code(&o), 78, "{out}");
    assert_eq!(out.matches("declared new").count(), 2, "{out}");
    assert!(out.contains("node 2 (127.0.0.1:"), "{out}");
    assert!(out.contains("holds keys"), "{out}");
    // Declared nodes count at once: status says 2 of 3 lock votes.
    let o = run(cli(&c).arg("status"));
    let status = String::from_utf8_lossy(&o.stdout).to_string();
    assert_eq!(status.matches("QUARANTINED for").count(), 1, "{status}");
    // Again: in use now; a node away is said.
    c.nodes[2].kill();
    let o = run(cli(&c).arg("init"));
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert_eq!(code(&o), 69, "{out}");
    assert_eq!(out.matches("in use already").count(), 2, "{out}");
    assert!(
        out.contains("node 2") && out.contains("not reached"),
        "{out}"
    );
}

/// A node in use restarted without its data: each short-lived client
/// (a `status`, a `lock`) serves the whole quarantine from its own first
/// look, for ever, until one client watches it pass. `status --wait` is
/// that client, once for all.
#[test]
fn status_wait_serves_a_restarted_nodes_quarantine_for_every_later_client() {
    let mut c = Cluster::start(3);
    let quarantined = |c: &Cluster| {
        let o = run(cli(c)
            .env("REDQUORUM_RESTART_QUARANTINE", "3s")
            .arg("status"));
        let out = String::from_utf8_lossy(&o.stdout).to_string();
        out.matches("QUARANTINED for").count()
    };
    assert_eq!(quarantined(&c), 0);
    c.nodes[2].restart_empty_in_place();
    // One short-lived client after another: each one's own quarantine.
    assert_eq!(quarantined(&c), 1);
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(
        quarantined(&c),
        1,
        "a later client, past the first one's quarantine"
    );
    let o = run(cli(&c)
        .env("REDQUORUM_RESTART_QUARANTINE", "3s")
        .args(["status", "--wait"]));
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert_eq!(code(&o), 0, "{out}");
    assert_eq!(out.matches("QUARANTINED for").count(), 0, "{out}");
    assert!(out.contains("waiting out its quarantine"), "{out}");
    let served = out
        .lines()
        .filter(|l| l.contains("quarantine served"))
        .collect::<Vec<_>>();
    assert_eq!(served.len(), 1, "{out}");
    assert!(served[0].starts_with("node 2 ("), "{out}");
    // From now on, every client counts it at once.
    assert_eq!(quarantined(&c), 0);
}

#[test]
fn status_names_an_endpoint_that_is_not_redis_in_one_line() {
    let c = Cluster::start(3);
    // Something that answers, but not in the Redis protocol.
    let port = support::not_redis();
    let nodes = format!(
        "{},{},redis://127.0.0.1:{port}",
        c.nodes[0].url(),
        c.nodes[1].url()
    );
    let o = run(cli(&c).env("REDQUORUM_NODES", nodes).arg("status"));
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert_eq!(code(&o), 0, "2 of 3 reachable: {out}");
    let row: Vec<&str> = out.lines().filter(|l| l.starts_with("2 ")).collect();
    assert_eq!(row.len(), 1, "{out}");
    assert!(
        row[0].contains("NO") && row[0].contains(" not a Redis server ") && row[0].ends_with(" -"),
        "{out}"
    );
    assert_eq!(out.lines().count(), 5, "header, 3 rows, quorum: {out}");
}

#[test]
fn help_has_examples_and_exit_codes() {
    let help = |args: &[&str]| {
        let o = run(Command::new(env!("CARGO_BIN_EXE_redquorum")).args(args));
        String::from_utf8_lossy(&o.stdout).to_string()
    };
    let out = help(&["lock", "--help"]);
    assert!(
        out.contains("75") && out.contains("76") && out.contains("69") && out.contains("Examples"),
        "{out}"
    );
    let out = help(&["serial", "next", "--help"]);
    assert!(
        out.contains("65") && out.contains("69") && out.contains("Examples"),
        "{out}"
    );
    let out = help(&["status", "--help"]);
    assert!(out.contains("69") && out.contains("Examples"), "{out}");
    let out = help(&["--help"]);
    assert!(out.contains("Exit codes") && out.contains("78"), "{out}");
}

/// Reads `child`'s stdout lines until `held`, in a blocking task.
async fn until_held(child: &mut std::process::Child) -> Vec<String> {
    use std::io::BufRead as _;
    let stdout = child.stdout.take().unwrap();
    tokio::task::spawn_blocking(move || {
        let mut lines = Vec::new();
        for line in std::io::BufReader::new(stdout).lines() {
            let line = line.unwrap();
            let done = line == "held";
            lines.push(line);
            if done {
                break;
            }
        }
        lines
    })
    .await
    .unwrap()
}

/// `redquorum lock NAME` with no command holds the lock for a script: it
/// prints what it holds, keeps the lock past its TTL, makes others exit
/// with the --conflict-exit-code, and releases when its stdin ends.
#[tokio::test]
async fn a_lock_without_a_command_is_held_until_stdin_ends() {
    let c = Cluster::start(3);
    let mut holder = cli(&c)
        .args(["lock", "cli_keep", "--ttl", "1500ms"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = until_held(&mut holder).await;
    assert!(
        lines.contains(&"REDQUORUM_KEY=cli_keep".to_owned()),
        "{lines:?}"
    );
    assert!(
        lines.contains(&"REDQUORUM_TTL_MS=1500".to_owned()),
        "{lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("REDQUORUM_VALID_UNTIL_MS=")),
        "{lines:?}"
    );
    // Renewed: still held past two TTLs.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(c.set_on("cli_keep"), 3);
    let other = run(cli(&c).args([
        "lock",
        "cli_keep",
        "--wait",
        "0s",
        "--conflict-exit-code",
        "3",
        "--",
        "true",
    ]));
    assert_eq!(code(&other), 3, "{other:?}");
    drop(holder.stdin.take());
    let ended = wait_until(Duration::from_secs(10), || {
        holder.try_wait().unwrap().is_some()
    })
    .await;
    if !ended {
        let _ = holder.kill();
    }
    assert!(ended, "the end of stdin did not end the hold");
    assert_eq!(holder.wait().unwrap().code(), Some(0));
    assert!(wait_until(Duration::from_secs(5), || c.set_on("cli_keep") == 0).await);
    let other = run(cli(&c).args(["lock", "cli_keep", "--wait", "0s", "--", "true"]));
    assert_eq!(code(&other), 0, "{other:?}");
}

/// Held with stdin at /dev/null (a background job's), the lock stays until
/// a signal, then is released; a permit's lines name its slot, not a key.
#[tokio::test]
async fn a_lock_without_a_command_is_held_until_signalled() {
    let c = Cluster::start(3);
    let mut holder = cli(&c)
        .args(["lock", "cli_keep_sig", "-n", "2"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = until_held(&mut holder).await;
    assert!(
        lines.contains(&"REDQUORUM_PERMIT_SLOT=0".to_owned()),
        "{lines:?}"
    );
    assert!(
        !lines.iter().any(|l| l.starts_with("REDQUORUM_KEY=")),
        "{lines:?}"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(holder.try_wait().unwrap().is_none(), "/dev/null ended it");
    let out = terminate(holder).await;
    assert_eq!(code(&out), 0, "{out:?}");
    let slot = "redquorum:permit:{cli_keep_sig}:cli_keep_sig:0";
    assert!(wait_until(Duration::from_secs(5), || c.set_on(slot) == 0).await);
}

#[tokio::test]
async fn lock_takes_several_resources_at_once_or_none() {
    let c = Cluster::start(3);
    let o = run(cli(&c).args([
        "lock",
        "cli_mb",
        "cli_ma",
        "--fenced",
        "--",
        "sh",
        "-c",
        "echo \"$REDQUORUM_RESOURCE|$REDQUORUM_RESOURCES|${REDQUORUM_KEY-none}|$REDQUORUM_FENCING_TOKENS\"",
    ]));
    assert_eq!(code(&o), 0, "{o:?}");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.starts_with("cli_ma+cli_mb|cli_ma cli_mb|none|"),
        "{out}"
    );
    assert_eq!(
        out.trim().rsplit('|').next().unwrap().split(' ').count(),
        2,
        "{out}"
    );
    assert_eq!(c.set_on("cli_ma") + c.set_on("cli_mb"), 0, "released");
    // One of them held elsewhere: neither is taken, 75 after --wait.
    let holder = c.redlock();
    let lock = holder
        .lock("cli_mb", Duration::from_secs(30))
        .try_once()
        .await
        .unwrap();
    let o = run(cli(&c).args(["lock", "cli_ma", "cli_mb", "--wait", "300ms", "--", "true"]));
    assert_eq!(code(&o), 75, "{o:?}");
    assert_eq!(c.set_on("cli_ma"), 0, "cli_ma not taken alone");
    lock.release().await.unwrap();
    // A semaphore has one name.
    let o = run(cli(&c).args(["lock", "-n", "2", "cli_ma", "cli_mb", "--", "true"]));
    assert_eq!(code(&o), 78, "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("-n 2 takes one semaphore name"),
        "{o:?}"
    );
}

/// `--shared` holders run at once and keep `--exclusive` out; a shared
/// holder killed with SIGKILL keeps it out only until its own lease ends.
#[tokio::test]
async fn shared_holders_run_together_and_a_killed_one_frees_the_writer_at_its_ttl() {
    let c = Cluster::start(3);
    let mut reader = cli(&c)
        .args([
            "lock", "--shared", "cli_rw", "--ttl", "2s", "--", "sleep", "60",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let rw = c.redlock().rw_lock("cli_rw").unwrap();
    let held = wait_until(Duration::from_secs(5), || {
        c.nodes
            .iter()
            .filter(|n| n.zcard(&support::internal_key("rw-readers", "cli_rw")) > 0)
            .count()
            >= 2
    })
    .await;
    assert!(held, "the first reader holds");
    let o = run(cli(&c).args(["lock", "-s", "cli_rw", "--wait", "0s", "--", "true"]));
    assert_eq!(code(&o), 0, "two readers at once: {o:?}");
    let o = run(cli(&c).args(["lock", "-x", "cli_rw", "--wait", "0s", "--", "true"]));
    assert_eq!(code(&o), 75, "a writer waits for the reader: {o:?}");
    let killed = Instant::now();
    assert!(Command::new("kill")
        .args(["-KILL", &reader.id().to_string()])
        .status()
        .unwrap()
        .success());
    reader.wait().unwrap();
    let o = run(cli(&c).args(["lock", "-x", "cli_rw", "--wait", "9s", "--", "true"]));
    let after = killed.elapsed();
    assert_eq!(code(&o), 0, "{o:?}");
    assert!(
        after < Duration::from_secs(5),
        "the writer ran {after:?} after the kill"
    );
    let _ = rw
        .read(Duration::from_secs(1))
        .try_once()
        .await
        .expect("free again");
    let o = run(cli(&c).args(["lock", "-s", "-n", "2", "cli_rw", "--", "true"]));
    assert_eq!(code(&o), 78, "{o:?}");
}
