//! `redquorum lock -n K` and `redquorum elect` against real nodes: at most K
//! commands at once; a command that runs while its instance leads, with the
//! term in its environment; a leader killed with SIGKILL replaced within the
//! TTL; `elect --listen` printing each change, and an outage once.

mod bin;
#[path = "../../tests/support/mod.rs"]
mod support;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bin::cli;
use support::{wait_until, Cluster, Persistence};

/// The next line `child` prints, read on a blocking thread, within 10 s.
async fn next_line(
    lines: &mut Option<std::io::Lines<BufReader<std::process::ChildStdout>>>,
) -> String {
    let mut taken = lines.take().expect("lines");
    let (line, taken) = tokio::time::timeout(
        Duration::from_secs(10),
        tokio::task::spawn_blocking(move || {
            let line = taken.next().and_then(Result::ok).unwrap_or_default();
            (line, taken)
        }),
    )
    .await
    .expect("a line within 10 s")
    .unwrap();
    *lines = Some(taken);
    line
}

fn lines_of(child: &mut Child) -> Option<std::io::Lines<BufReader<std::process::ChildStdout>>> {
    Some(BufReader::new(child.stdout.take().unwrap()).lines())
}

/// A client of `c` campaigns in `election` as `value`; the listener whose
/// output is `lines` prints its term next.
async fn leads_and_is_printed(
    c: &Cluster,
    election: &str,
    value: &str,
    lines: &mut Option<std::io::Lines<BufReader<std::process::ChildStdout>>>,
) -> redquorum::Leadership {
    let e = c
        .redlock()
        .election(election, Duration::from_secs(5))
        .unwrap();
    let leader = e.campaign(value).await.unwrap();
    assert_eq!(
        next_line(lines).await,
        format!("term={} value={value}", leader.term())
    );
    leader
}

fn kill(pid: u32, sig: &str) {
    let _ = Command::new("kill").args([sig, &pid.to_string()]).status();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_with_n_runs_at_most_n_commands_at_once() {
    let c = Cluster::start(3);
    let dir = std::env::temp_dir().join(format!("rq-sem-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = "touch \"$D/$$\"; ls \"$D\" | wc -l; sleep 1; rm \"$D/$$\"";
    let children: Vec<Child> = (0..4)
        .map(|_| {
            cli(&c)
                .args([
                    "lock", "-n", "2", "cli_pool", "--ttl", "5s", "--wait", "20s", "--",
                ])
                .args(["sh", "-c", script])
                .env("D", &dir)
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut seen = Vec::new();
    for child in children {
        let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
            .await
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let n: usize = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
        seen.push(n);
    }
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(seen.iter().all(|n| *n <= 2), "{seen:?}");
    assert!(seen.contains(&2), "two ran at once: {seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_killed_with_sigkill_is_replaced_within_the_ttl() {
    let c = Cluster::start(3);
    let candidate = |c: &Cluster| {
        cli(c)
            .args(["elect", "cli_sched", "--ttl", "1s", "--value", "v", "--"])
            .args(["sh", "-c", "echo \"$REDQUORUM_TERM $$\"; exec sleep 30"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let mut a = candidate(&c);
    let mut a_lines = lines_of(&mut a);
    let first = next_line(&mut a_lines).await;
    let (a_term, a_cmd) = first.split_once(' ').unwrap();
    let a_term: u64 = a_term.parse().unwrap();
    let mut b = candidate(&c);
    let mut b_lines = lines_of(&mut b);
    let key = "cli_sched";
    assert!(wait_until(Duration::from_secs(5), || c.waiting_on(key) >= 2).await);
    let killed = Instant::now();
    kill(a.id(), "-KILL");
    let _ = a.wait();
    let second = next_line(&mut b_lines).await;
    let took = killed.elapsed();
    let (b_term, b_cmd) = second.split_once(' ').unwrap();
    assert!(
        b_term.parse::<u64>().unwrap() > a_term,
        "{first} then {second}"
    );
    assert!(took < Duration::from_millis(1_000 + 500), "{took:?}");
    kill(a_cmd.parse().unwrap(), "-KILL");
    kill(b.id(), "-TERM");
    let out = tokio::task::spawn_blocking(move || b.wait_with_output().unwrap())
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(128 + 15), "{out:?}");
    let _ = b_cmd;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_prints_each_change_of_leader() {
    let c = Cluster::start(3);
    let mut listener = cli(&c)
        .args(["elect", "--listen", "cli_watch"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = lines_of(&mut listener);
    assert_eq!(next_line(&mut lines).await, "none");
    let leader = leads_and_is_printed(&c, "cli_watch", "host-a", &mut lines).await;
    leader.resign().await.unwrap();
    assert_eq!(next_line(&mut lines).await, "none");
    kill(listener.id(), "-TERM");
    let status = listener.wait().unwrap();
    assert_eq!(status.code(), Some(128 + 15));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_tells_an_outage_once_and_its_end() {
    let mut c = Cluster::start(3);
    let mut listener = cli(&c)
        .args(["elect", "--listen", "cli_outage"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = lines_of(&mut listener);
    let errors = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let stderr = BufReader::new(listener.stderr.take().unwrap());
    let sink = errors.clone();
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            sink.lock().unwrap().push(line);
        }
    });
    assert_eq!(next_line(&mut lines).await, "none");
    c.nodes[0].kill();
    c.nodes[1].kill();
    // The lost notification connections wake the observer; its read fails.
    let told = |what: &str| {
        errors
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(what))
            .count()
    };
    assert!(
        wait_until(Duration::from_secs(10), || told("reading election") == 1).await,
        "{:?}",
        errors.lock().unwrap()
    );
    // The outage lasts three of its half-second retries.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    c.nodes[0].restart(Persistence::Aof);
    c.nodes[1].restart(Persistence::Aof);
    assert!(
        wait_until(Duration::from_secs(10), || told("answers again") == 1).await,
        "{:?}",
        errors.lock().unwrap()
    );
    assert_eq!(told("reading election"), 1, "{:?}", errors.lock().unwrap());
    // Still listening, with no repeated line for the unchanged leader.
    let leader = leads_and_is_printed(&c, "cli_outage", "host-b", &mut lines).await;
    leader.resign().await.unwrap();
    kill(listener.id(), "-TERM");
    let status = listener.wait().unwrap();
    assert_eq!(status.code(), Some(128 + 15));
}

#[test]
fn elect_help_has_examples_and_exit_codes() {
    let o = Command::new(env!("CARGO_BIN_EXE_redquorum"))
        .args(["elect", "--help"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("75")
            && out.contains("76")
            && out.contains("REDQUORUM_TERM")
            && out.contains("Examples"),
        "{out}"
    );
    let o = Command::new(env!("CARGO_BIN_EXE_redquorum"))
        .args(["--nodes", "redis://127.0.0.1:1", "elect", "x"])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(78),
        "a command or --listen is required"
    );
}
