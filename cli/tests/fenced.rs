//! docs/cli.md's fenced writes from a shell, run as they stand there: a
//! `redquorum lock --fenced` command writing PostgreSQL through `psql` and
//! Redis through `redis-cli`, and the same command with a stale token
//! refused by both.

#[path = "../../tests/support/mod.rs"]
mod support;

use std::path::Path;
use std::process::{Command, Output};

use support::postgres::Postgres;
use support::{Cluster, Persistence, RedisNode};

/// The code block after `<!-- name -->` in docs/cli.md.
fn block(name: &str) -> String {
    let doc = include_str!("../../docs/cli.md");
    let marker = format!("<!-- {name} -->\n");
    let after = doc
        .split_once(&marker)
        .unwrap_or_else(|| panic!("docs/cli.md has no block {name}"))
        .1;
    let body = after.split_once('\n').expect("a fence line").1;
    body.split_once("\n```")
        .expect("the block's end")
        .0
        .to_owned()
}

/// The shell command of block `name`: what `sh -c` runs, unquoted.
fn command_of(name: &str) -> String {
    let text = block(name).replace("\\\n", " ");
    let quoted = text.split_once('\'').expect("a quoted command").1;
    quoted.rsplit_once('\'').expect("its end").0.to_owned()
}

fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

/// `sh -c command` in `dir` with `env`: what a fenced holder's command
/// does, here run with a token of our choosing.
fn sh(dir: &Path, command: &str, env: &[(&str, String)]) -> Output {
    Command::new("sh")
        .args(["-c", command])
        .current_dir(dir)
        .envs(env.iter().map(|(k, v)| (k, v.as_str())))
        .output()
        .expect("run sh")
}

#[test]
fn the_docs_shell_writes_land_under_the_lock_and_a_stale_token_is_refused() {
    let c = Cluster::start(3);
    let pg = Postgres::start();
    let data = RedisNode::start(Persistence::None);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("withdraw.sql"), block("withdraw.sql")).unwrap();
    std::fs::write(
        dir.path().join("fenced-incrby.lua"),
        block("fenced-incrby.lua"),
    )
    .unwrap();
    for sql in [
        block("fences.sql"),
        "CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL)".to_owned(),
        "INSERT INTO accounts VALUES (7, 100)".to_owned(),
    ] {
        let (out, ok) = pg.psql(&sql, &[]);
        assert!(ok, "{sql}: {out}");
    }
    data.set(
        "account:7:balance",
        "100",
        std::time::Duration::from_secs(3600),
    );
    let env = vec![
        ("PGHOST", "127.0.0.1".to_owned()),
        ("PGPORT", pg.port.to_string()),
        ("PGUSER", "postgres".to_owned()),
        ("PGDATABASE", "postgres".to_owned()),
        ("DATA_URL", data.url()),
    ];
    let balance = || pg.psql("SELECT balance FROM accounts WHERE id = 7", &[]).0;
    // The blocks run as a shell runs them, with `redquorum` on PATH.
    let exe = Path::new(env!("CARGO_BIN_EXE_redquorum"));
    let path = format!(
        "{}:{}",
        exe.parent().expect("a folder").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut held = env.clone();
    held.push(("PATH", path));
    held.push(("REDQUORUM_NODES", c.urls().join(",")));
    for name in ["psql", "redis-cli"] {
        for _ in 0..2 {
            let o = sh(dir.path(), &block(name), &held);
            assert_eq!(code(&o), 0, "{name}: {o:?}");
        }
    }
    assert_eq!(balance().trim(), "40", "two withdrawals");
    assert_eq!(data.get("account:7:balance").as_deref(), Some("40"));
    let (last, _) = pg.psql(
        "SELECT token FROM redquorum_fences WHERE scope = 'accounts:7'",
        &[],
    );
    let last: u64 = last.trim().parse().expect("a token");
    let stale = (last - 1).to_string();
    let mut late = env.clone();
    late.push(("REDQUORUM_FENCING_TOKEN", stale.clone()));
    let o = sh(dir.path(), &command_of("psql"), &late);
    assert_eq!(code(&o), 3, "psql refuses: {o:?}");
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .contains(&format!("token {stale} of account:7 is below")),
        "{o:?}"
    );
    let o = sh(dir.path(), &command_of("redis-cli"), &late);
    assert_eq!(code(&o), 1, "redis-cli refuses: {o:?}");
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(
        said.contains(&format!("STALE token {stale} is below")),
        "{o:?}"
    );
    // What is not a token, and a fence key of another key, are refused.
    // ("05" is 5 to PostgreSQL's numbers, but not to Lua's string
    // comparison: refused there.)
    for bad in ["4.6", "abc", "05", "18446744073709551616"] {
        let mut odd = env.clone();
        odd.push(("REDQUORUM_FENCING_TOKEN", bad.to_owned()));
        if bad != "05" {
            let o = sh(dir.path(), &command_of("psql"), &odd);
            assert_ne!(code(&o), 0, "psql takes {bad}: {o:?}");
        }
        let o = sh(dir.path(), &command_of("redis-cli"), &odd);
        let said = String::from_utf8_lossy(&o.stderr);
        assert!(
            code(&o) == 1 && said.contains("BADTOKEN"),
            "redis-cli takes {bad}: {o:?}"
        );
    }
    let fresh = (last + 10).to_string();
    let mut fine = env.clone();
    fine.push(("REDQUORUM_FENCING_TOKEN", fresh));
    let elsewhere = command_of("redis-cli").replace(
        "redquorum:write-fence:{account:7:balance}:account:7:balance",
        "redquorum:write-fence:{other}:other",
    );
    let o = sh(dir.path(), &elsewhere, &fine);
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(code(&o) == 1 && said.contains("BADFENCE"), "{o:?}");
    assert_eq!(balance().trim(), "40", "no stale withdrawal");
    assert_eq!(data.get("account:7:balance").as_deref(), Some("40"));
    // The shell's fence is the library's: it reads it, and refuses the
    // stale token too.
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let client = redis::Client::open(data.url()).unwrap();
        let conn = client.get_multiplexed_async_connection().await.unwrap();
        let store = redquorum::FencedRedis::new(conn);
        let (resource, token) = store.fence_of("account:7:balance").await.unwrap().unwrap();
        assert_eq!(resource, "account:7");
        assert!(token >= last, "{token} {last}");
        let fence = redquorum::Fence::new("account:7", last - 1);
        let refused = store.incr_by(fence, "account:7:balance", -30).await;
        assert!(
            matches!(refused, Err(redquorum::FenceError::Stale { .. })),
            "{refused:?}"
        );
    });
}
