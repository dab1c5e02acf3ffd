//! What an operator reads from `redquorum`: one line per cause, said once,
//! no colour codes in logs, hints for the usual mistakes, the shell's exit
//! codes.

#[path = "../../tests/support/mod.rs"]
mod support;

use std::process::{Command, Output, Stdio};

use support::Cluster;

fn cli(nodes: &str) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_redquorum"));
    cmd.env("REDQUORUM_NODES", nodes)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null());
    cmd
}

fn run(cmd: &mut Command) -> (i32, String, String) {
    let o: Output = cmd.output().expect("run redquorum");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn one_node_of_five_not_redis_is_warned_about_once() {
    let c = Cluster::start(4);
    let mut urls = c.urls();
    urls.push(format!("redis://127.0.0.1:{}", support::not_redis()));
    let (code, out, err) =
        run(cli(&urls.join(",")).args(["lock", "msg_one_bad", "--", "sh", "-c", "echo ran"]));
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "ran\n");
    assert_eq!(err.matches("not a Redis server").count(), 1, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        !err.contains('\u{1b}'),
        "no colour codes off a terminal: {err:?}"
    );
}

/// A mistyped host, or a database index the node lacks: said once, at
/// first contact, naming the node and the cause (not silently counted as
/// down while the command runs with no fault tolerance left).
#[test]
fn a_mistyped_host_or_a_missing_database_is_said_once() {
    let c = Cluster::start(3);
    let other = support::RedisNode::start(support::Persistence::Aof);
    let mut urls = c.urls();
    urls.push("redis://locahost.invalid:7601".into());
    urls.push(format!("redis://127.0.0.1:{}/99", other.port));
    let (code, out, err) =
        run(cli(&urls.join(",")).args(["lock", "msg_typo", "--", "sh", "-c", "echo ran"]));
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "ran\n");
    let said = |what: &str| err.lines().filter(|l| l.contains(what)).count();
    assert_eq!(
        said("warning: node 3 (locahost.invalid:7601): failed to lookup address"),
        1,
        "{err}"
    );
    assert_eq!(said("warning: node 4 (127.0.0.1:"), 1, "{err}");
    assert_eq!(said("DB index is out of range"), 1, "{err}");
    assert_eq!(err.lines().count(), 2, "{err}");
}

#[test]
fn status_says_authentication_failed_not_not_redis() {
    let c = Cluster::start(1);
    let mut conn = c.nodes[0].conn();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("requirepass")
        .arg("right-pw")
        .query(&mut conn)
        .unwrap();
    let url = format!("redis://:wrong-pw@127.0.0.1:{}", c.nodes[0].port);
    let (_, out, err) = run(cli(&url).arg("status"));
    assert!(out.contains("authentication failed"), "{out}{err}");
    assert!(!out.contains("not a Redis server"), "{out}");
    assert!(!out.contains("wrong-pw") && !err.contains("wrong-pw"));
    let url = format!("redis://127.0.0.1:{}", c.nodes[0].port);
    let (_, out, _) = run(cli(&url).arg("status"));
    assert!(out.contains("requires a password"), "{out}");
}

#[test]
fn usage_mistakes_get_a_hint_and_78() {
    let nodes = "redis://127.0.0.1:1";
    let (code, _, err) = run(cli(nodes).args(["lock", "x", "echo", "hi"]));
    assert_eq!(code, 78);
    assert!(err.contains("the command goes after `--`"), "{err}");
    let (code, _, err) = run(cli(nodes).args(["lock", "x", "--wait", "-1s", "--", "true"]));
    assert_eq!(code, 78);
    assert!(err.contains("negative"), "{err}");
    assert!(
        !err.contains("tip:"),
        "clap's '-- -1' tip is wrong here: {err}"
    );
    let (code, _, err) = run(cli("redis://127.0.0.1:1,").args(["lock", "x", "--", "true"]));
    assert_eq!(code, 78, "{err}");
    assert!(err.contains("empty entry"), "{err}");
    assert!(!err.contains("did you mean"), "{err}");
    // No list at all (unset, or set to nothing): what to do, once.
    let unset = || {
        let mut cmd = cli("");
        cmd.env_remove("REDQUORUM_NODES");
        cmd
    };
    for mut cmd in [cli(""), cli(" "), unset()] {
        let (code, _, err) = run(cmd.args(["lock", "x", "--", "true"]));
        assert_eq!(code, 78, "{err}");
        assert_eq!(
            err, "redquorum: no nodes: pass --nodes or set REDQUORUM_NODES\n",
            "{err}"
        );
    }
    // A scheme that lost a character gets it back in the hint.
    let (code, _, err) = run(cli("redis//127.0.0.1:7602").args(["lock", "x", "--", "true"]));
    assert_eq!(code, 78, "{err}");
    assert!(
        err.contains("did you mean \"redis://127.0.0.1:7602\"?"),
        "{err}"
    );
    // A count no width can number is said with the count and the width
    // asked for, before any node is asked.
    let (code, _, err) = run(cli(nodes).args(["serial", "next", "Z", "--count", "5000000"]));
    assert_eq!(code, 78, "{err}");
    assert!(
        err.contains("--count 5000000 is more than --width 4 can number in one period (9999)"),
        "{err}"
    );
    assert!(!err.contains("1000000"), "{err}");
    // A TTL no round can leave validity of, before any node is asked (the
    // node here answers nothing: asking it would fail another way).
    for command in [
        &["lock", "x", "--ttl", "3ms", "--", "true"][..],
        &["elect", "x", "--ttl", "3ms", "--", "true"],
    ] {
        let (code, _, err) = run(cli(nodes).args(command));
        assert_eq!(code, 78, "{err}");
        assert!(err.contains("--ttl 3ms is too short"), "{err}");
        assert!(err.contains("more than 103 ms"), "{err}");
    }
    let (code, out, _) = run(cli(nodes).args(["help", "--help"]));
    assert_eq!(code, 0);
    assert!(out.contains("Usage"), "{out}");
}

#[test]
fn node_count_warnings_say_what_is_tolerated() {
    let c = Cluster::start(2);
    let (code, _, err) = run(cli(&c.nodes[0].url()).args(["lock", "msg_one", "--", "true"]));
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("a single redis node"), "{err}");
    let (code, _, err) = run(cli(&c.urls().join(",")).args(["lock", "msg_two", "--", "true"]));
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("(2) tolerates no more failures (0) than 1 would"),
        "{err}"
    );
}

#[test]
fn a_command_that_is_not_executable_is_126() {
    let c = Cluster::start(1);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-executable");
    std::fs::write(&file, "#!/bin/sh\necho hi\n").unwrap();
    let (code, out, err) = run(cli(&c.nodes[0].url())
        .args(["lock", "msg_126", "--"])
        .arg(&file));
    assert_eq!(code, 126, "{err}");
    assert!(out.is_empty());
    let (code, _, _) =
        run(cli(&c.nodes[0].url()).args(["lock", "msg_127", "--", "/nonexistent/x"]));
    assert_eq!(code, 127);
}

#[test]
fn a_prefix_with_another_period_or_width_is_refused_with_78() {
    let c = Cluster::start(3);
    let nodes = c.urls().join(",");
    let (code, out, err) = run(cli(&nodes).args(["serial", "next", "COL", "--tz", "UTC"]));
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("COL"), "{out}");
    let (code, out, err) = run(cli(&nodes).args([
        "serial", "next", "COL", "--tz", "UTC", "--period", "hour", "--width", "2",
    ]));
    assert_eq!(code, 78, "{out}{err}");
    assert!(out.is_empty(), "nothing issued: {out}");
    assert!(err.contains("is pinned to period day, width 4"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}
