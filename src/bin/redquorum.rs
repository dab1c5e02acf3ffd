//! `redquorum`: a distributed `flock(1)`, serial numbers and a node health
//! check, from the shell.
//!
//! Exit codes of `redquorum lock` (also in `--help`):
//! the command's own status when it ran; 75 when the lock was not acquired
//! within `--wait`; 76 when the lock was lost while the command ran (it was
//! sent SIGTERM, then SIGKILL after `--grace`); 127 when the command could not
//! be started; 78 for bad configuration; 128+N when the command died of
//! signal N, or when redquorum got signal N while waiting for the lock.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, Parser, Subcommand};
use redquorum::{Error, Redlock, ResetPeriod, SerialGenerator};
use tokio::signal::unix::{signal, Signal, SignalKind};
use tracing_subscriber::EnvFilter;

/// The lock could not be acquired within `--wait`.
const EXIT_NOT_ACQUIRED: u8 = 75;
/// The lock was lost while the command ran; the command was terminated.
const EXIT_LOCK_LOST: u8 = 76;
/// Bad configuration (nodes, durations, time zone...).
const EXIT_CONFIG: u8 = 78;
/// No quorum of nodes reachable (status, serial).
const EXIT_UNAVAILABLE: u8 = 69;
/// The command could not be started.
const EXIT_CANNOT_RUN: u8 = 127;

#[derive(Parser, Debug)]
#[command(
    name = "redquorum",
    version,
    about = "Quorum locks, serial numbers and node checks over N independent Redis nodes",
    after_help = "Nodes come from --nodes or REDQUORUM_NODES, comma-separated:\n  \
        REDQUORUM_NODES=redis://10.0.0.1:6379,redis://10.0.0.2:6379,redis://10.0.0.3:6379\n\n\
        Durations: 500ms, 30s, 2m, 1h.  Logs: RUST_LOG=redquorum=debug."
)]
struct Cli {
    /// Redis node URLs, comma-separated (odd count, 5 recommended).
    #[arg(long, env = "REDQUORUM_NODES", value_delimiter = ',', global = true)]
    nodes: Vec<String>,

    /// Per-node request timeout.
    #[arg(long, value_parser = parse_duration, default_value = "100ms", global = true)]
    node_timeout: Duration,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a command while holding a distributed lock (a distributed flock).
    #[command(after_help = "Examples:\n  \
        redquorum lock nightly-report --ttl 30s --wait 10s -- ./report.sh\n  \
        redquorum lock deploy --wait 0s -- make deploy   # fail at once if held\n\n\
        Exit codes: the command's status; 75 lock not acquired within --wait;\n\
        76 lock lost while the command ran (SIGTERM, then SIGKILL after --grace);\n\
        127 command could not be started; 78 bad configuration; 128+N killed by signal N.\n\
        SIGINT/SIGTERM/SIGHUP sent to redquorum are forwarded to the command\n\
        (while still waiting for the lock, they end the wait: nothing runs);\n\
        the lock is released when the command exits.")]
    Lock(LockArgs),
    /// Serial numbers (PREFIX + local date + zero-padded counter).
    #[command(subcommand)]
    Serial(SerialCommand),
    /// Check every node: reachability, latency, version, clock offset,
    /// persistence; warn where a node is unsafe for locks and counters.
    #[command(
        after_help = "Examples:\n  redquorum status\n  REDQUORUM_NODES=redis://a:6379,redis://b:6379,redis://c:6379 redquorum status\n\n\
        Exit code 0 when a quorum of nodes is reachable, 69 otherwise."
    )]
    Status,
}

#[derive(Args, Debug)]
struct LockArgs {
    /// Resource (lock) name, shared by everyone who must exclude each other.
    resource: String,
    /// Lock TTL; it is renewed in the background every ttl/3 while the command runs.
    #[arg(long, value_parser = parse_duration, default_value = "30s")]
    ttl: Duration,
    /// How long to wait for the lock before giving up with exit code 75.
    #[arg(long, value_parser = parse_duration, default_value = "10s")]
    wait: Duration,
    /// After SIGTERM on lock loss, wait this long before SIGKILL.
    #[arg(long, value_parser = parse_duration, default_value = "10s")]
    grace: Duration,
    /// Key prefix (e.g. "redlock:" to share keys with pottery).
    #[arg(long, default_value = "")]
    key_prefix: String,
    /// The command and its arguments, after `--`.
    #[arg(required = true, last = true)]
    command: Vec<String>,
}

#[derive(Subcommand, Debug)]
enum SerialCommand {
    /// Issue numbers and print them, one per line.
    #[command(after_help = "Examples:\n  redquorum serial next ORDER\n  \
        redquorum serial next ORDER --count 50 --width 6 --tz Asia/Shanghai\n  \
        redquorum serial next INV --period never --width 9")]
    Next(SerialArgs),
}

#[derive(Args, Debug)]
struct SerialArgs {
    /// Business prefix: up to 64 of A-Z a-z 0-9 _ - (may be empty: "").
    prefix: String,
    /// How many numbers to issue.
    #[arg(long, default_value_t = 1)]
    count: u64,
    /// Numbers per allocation (default: all of --count in one allocation).
    #[arg(long)]
    batch: Option<u64>,
    /// Counter digits (1..=18).
    #[arg(long, default_value_t = redquorum::DEFAULT_WIDTH)]
    width: u8,
    /// IANA time zone for the date (default: the machine's local zone).
    #[arg(long)]
    tz: Option<String>,
    /// When the counter restarts: second, minute, hour, day, month, year, never.
    #[arg(long, default_value = "day", value_parser = parse_period)]
    period: ResetPeriod,
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("redquorum: cannot start the runtime: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    rt.block_on(run(cli))
}

async fn run(cli: Cli) -> ExitCode {
    if cli.nodes.is_empty() {
        eprintln!("redquorum: no nodes: pass --nodes or set REDQUORUM_NODES");
        return ExitCode::from(EXIT_CONFIG);
    }
    match cli.command {
        Command::Lock(args) => {
            let redlock = match build(&cli.nodes, cli.node_timeout, &args.key_prefix) {
                Ok(r) => r,
                Err(code) => return code,
            };
            lock_and_run(redlock, args).await
        }
        Command::Serial(SerialCommand::Next(args)) => {
            let redlock = match build(&cli.nodes, cli.node_timeout, "") {
                Ok(r) => r,
                Err(code) => return code,
            };
            serial_next(redlock, args).await
        }
        Command::Status => status(&cli.nodes, cli.node_timeout).await,
    }
}

/// Makes the client, reporting configuration errors.
fn build(nodes: &[String], node_timeout: Duration, prefix: &str) -> Result<Redlock, ExitCode> {
    Redlock::builder()
        .nodes(nodes)
        .node_timeout(node_timeout)
        .key_prefix(prefix)
        .build()
        .map_err(|e| {
            eprintln!("redquorum: {}", report(&e));
            ExitCode::from(EXIT_CONFIG)
        })
}

/// An error with its chain of causes, one line.
fn report(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        out.push_str(": ");
        out.push_str(&s.to_string());
        src = s.source();
    }
    if let Some(err) = e.downcast_ref::<Error>() {
        for f in err.node_failures() {
            out.push_str(&format!("\n  {}", report(f)));
        }
    }
    out
}

/// The signals `lock` forwards to its command. Installed before the first
/// request, so that from then on none of them can kill us with the default
/// action while a lock may be held (which would leave it to its TTL).
struct Forwarded {
    /// SIGINT.
    int: Signal,
    /// SIGTERM.
    term: Signal,
    /// SIGHUP.
    hup: Signal,
}

impl Forwarded {
    fn install() -> std::io::Result<Self> {
        Ok(Self {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    /// The next signal received.
    async fn recv(&mut self) -> libc::c_int {
        tokio::select! {
            _ = self.int.recv() => libc::SIGINT,
            _ = self.term.recv() => libc::SIGTERM,
            _ = self.hup.recv() => libc::SIGHUP,
        }
    }
}

async fn lock_and_run(redlock: Redlock, args: LockArgs) -> ExitCode {
    let mut signals = match Forwarded::install() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("redquorum: cannot install signal handlers: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let acquired = tokio::select! {
        r = redlock.lock_timeout(&args.resource, args.ttl, args.wait) => r,
        sig = signals.recv() => {
            // Dropping the attempt releases whatever it had set; wait for
            // that to reach the nodes, then die of the signal's status.
            let _ = tokio::time::timeout(Duration::from_secs(1), redlock.settle()).await;
            return ExitCode::from(128 + sig as u8);
        }
    };
    // A signal that arrives from here until the command runs is kept by the
    // handlers and forwarded to the command as soon as it starts.
    let lock = match acquired {
        Ok(lock) => lock,
        Err(Error::InvalidConfig(msg)) => {
            eprintln!("redquorum: invalid configuration: {msg}");
            return ExitCode::from(EXIT_CONFIG);
        }
        Err(e) => {
            eprintln!(
                "redquorum: lock {:?} not acquired: {}",
                args.resource,
                describe(&e)
            );
            return ExitCode::from(EXIT_NOT_ACQUIRED);
        }
    };
    lock.auto_extend();
    let mut child = match tokio::process::Command::new(&args.command[0])
        .args(&args.command[1..])
        .kill_on_drop(true)
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("redquorum: cannot run {:?}: {e}", args.command[0]);
            let _ = lock.release().await;
            return ExitCode::from(EXIT_CANNOT_RUN);
        }
    };
    let pid = child.id().map(|p| p as libc::pid_t);
    let lost = lock.lost();
    tokio::pin!(lost);
    let status = loop {
        tokio::select! {
            status = child.wait() => break Ok(status),
            () = &mut lost => break Err(()),
            sig = signals.recv() => send(pid, sig),
        }
    };
    match status {
        Ok(status) => {
            if let Err(e) = lock.release().await {
                eprintln!("redquorum: release: {}", describe(&e));
            }
            // Let the release reach the slower nodes before we exit.
            redlock.settle().await;
            match status {
                Ok(s) => exit_code_of(s),
                Err(e) => {
                    eprintln!("redquorum: waiting for the command: {e}");
                    ExitCode::from(EXIT_CANNOT_RUN)
                }
            }
        }
        Err(()) => {
            eprintln!(
                "redquorum: lock {:?} lost while the command ran; terminating it",
                args.resource
            );
            send(pid, libc::SIGTERM);
            if tokio::time::timeout(args.grace, child.wait())
                .await
                .is_err()
            {
                send(pid, libc::SIGKILL);
                let _ = child.wait().await;
            }
            drop(lock);
            let _ = tokio::time::timeout(Duration::from_secs(1), redlock.settle()).await;
            ExitCode::from(EXIT_LOCK_LOST)
        }
    }
}

/// Sends `sig` to the child.
fn send(pid: Option<libc::pid_t>, sig: libc::c_int) {
    if let Some(pid) = pid {
        // SAFETY: kill(2) has no memory-safety preconditions; the pid is our
        // own child's, which we have not reaped yet.
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

/// The shell convention: the exit status, or 128 + signal.
fn exit_code_of(status: std::process::ExitStatus) -> ExitCode {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => ExitCode::from(c as u8),
        (None, Some(sig)) => ExitCode::from(128u8.wrapping_add(sig as u8)),
        _ => ExitCode::FAILURE,
    }
}

/// A short explanation of why a lock was not acquired.
fn describe(e: &Error) -> String {
    if e.is_contended() {
        format!("held by another owner ({})", report(e))
    } else {
        report(e)
    }
}

async fn serial_next(redlock: Redlock, args: SerialArgs) -> ExitCode {
    let mut builder = SerialGenerator::builder(redlock)
        .width(args.width)
        .reset_period(args.period);
    if let Some(tz) = &args.tz {
        match tz.parse::<chrono_tz::Tz>() {
            Ok(tz) => builder = builder.time_zone(tz),
            Err(_) => {
                eprintln!(
                    "redquorum: unknown time zone {tz:?} (use an IANA name like Asia/Shanghai)"
                );
                return ExitCode::from(EXIT_CONFIG);
            }
        }
    }
    let serials = match builder.build() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("redquorum: {}", report(&e));
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let batch = args.batch.unwrap_or(args.count).max(1);
    let mut left = args.count;
    let mut out = String::new();
    while left > 0 {
        let k = batch.min(left);
        match serials.next_batch(&args.prefix, k).await {
            Ok(numbers) => {
                use std::fmt::Write;
                for n in numbers {
                    let _ = writeln!(out, "{n}");
                }
                if out.len() > 64 * 1024 || k == left {
                    print!("{out}");
                    out.clear();
                }
            }
            Err(e) => {
                print!("{out}");
                eprintln!("redquorum: {}", report(&e));
                return ExitCode::from(match e {
                    Error::InvalidConfig(_) => EXIT_CONFIG,
                    _ => EXIT_UNAVAILABLE,
                });
            }
        }
        left -= k;
    }
    // Let the last allocation's writes reach slow nodes before exiting.
    serials.redlock().settle().await;
    ExitCode::SUCCESS
}

/// One node's health, as `status` prints it.
struct NodeReport {
    addr: String,
    reachable: bool,
    rtt: Option<Duration>,
    version: String,
    offset_ms: Option<i64>,
    persistence: String,
    warnings: Vec<String>,
}

async fn status(urls: &[String], timeout: Duration) -> ExitCode {
    // Validate the list the same way the library does.
    if let Err(code) = build(urls, timeout, "") {
        return code;
    }
    let checks = urls
        .iter()
        .map(|u| check_node(u, timeout.max(Duration::from_secs(1))));
    let reports = futures::future::join_all(checks).await;
    println!(
        "{:<4} {:<24} {:<9} {:>8} {:>8} {:>10}  persistence",
        "node", "address", "reachable", "rtt", "version", "clock"
    );
    let mut up = 0;
    for (i, r) in reports.iter().enumerate() {
        if r.reachable {
            up += 1;
        }
        println!(
            "{:<4} {:<24} {:<9} {:>8} {:>8} {:>10}  {}",
            i,
            r.addr,
            if r.reachable { "yes" } else { "NO" },
            r.rtt
                .map_or("-".into(), |d| format!("{:.2}ms", d.as_secs_f64() * 1e3)),
            r.version,
            r.offset_ms.map_or("-".into(), |o| format!("{o:+}ms")),
            r.persistence,
        );
        for w in &r.warnings {
            println!("     warning: {w}");
        }
    }
    let quorum = urls.len() / 2 + 1;
    if urls.len().is_multiple_of(2) {
        println!(
            "warning: {} nodes is an even count; it tolerates no more failures than {}",
            urls.len(),
            urls.len() - 1
        );
    }
    if up >= quorum {
        println!(
            "quorum: OK ({up} of {} reachable, {quorum} needed)",
            urls.len()
        );
        ExitCode::SUCCESS
    } else {
        println!(
            "quorum: UNAVAILABLE ({up} of {} reachable, {quorum} needed)",
            urls.len()
        );
        ExitCode::from(EXIT_UNAVAILABLE)
    }
}

async fn check_node(url: &str, timeout: Duration) -> NodeReport {
    let mut r = NodeReport {
        addr: url.to_owned(),
        reachable: false,
        rtt: None,
        version: "-".into(),
        offset_ms: None,
        persistence: "-".into(),
        warnings: Vec::new(),
    };
    let client = match redis::Client::open(url) {
        Ok(c) => c,
        Err(e) => {
            r.warnings.push(format!("invalid url: {e}"));
            return r;
        }
    };
    r.addr = client.get_connection_info().addr().to_string();
    let work = async {
        let mut conn = client.get_multiplexed_async_connection().await?;
        let t0 = Instant::now();
        redis::cmd("PING").query_async::<String>(&mut conn).await?;
        let rtt = t0.elapsed();
        let before = std::time::SystemTime::now();
        let (secs, micros): (i64, i64) = redis::cmd("TIME").query_async(&mut conn).await?;
        let after = std::time::SystemTime::now();
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query_async(&mut conn)
            .await?;
        let persistence: String = redis::cmd("INFO")
            .arg("persistence")
            .query_async(&mut conn)
            .await?;
        let config: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg("appendfsync")
            .query_async(&mut conn)
            .await
            .unwrap_or_default();
        let policy: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg("maxmemory-policy")
            .query_async(&mut conn)
            .await
            .unwrap_or_default();
        Ok::<_, redis::RedisError>((
            rtt,
            before,
            after,
            secs,
            micros,
            info,
            persistence,
            config,
            policy,
        ))
    };
    match tokio::time::timeout(timeout, work).await {
        Err(_) => r.warnings.push(format!("no answer within {timeout:?}")),
        Ok(Err(e)) => r.warnings.push(format!("unreachable: {e}")),
        Ok(Ok((rtt, before, after, secs, micros, info, pers, fsync, policy))) => {
            r.reachable = true;
            r.rtt = Some(rtt);
            r.version = field(&info, "redis_version").unwrap_or("?").to_owned();
            let to_us = |t: std::time::SystemTime| {
                t.duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_micros() as i64)
            };
            let local_mid = (to_us(before) + to_us(after)) / 2;
            let node = secs * 1_000_000 + micros;
            let offset = (node - local_mid) / 1000;
            r.offset_ms = Some(offset);
            if offset.abs() > 1000 {
                r.warnings
                    .push(format!("clock differs from ours by {offset} ms"));
            }
            let aof = field(&pers, "aof_enabled") == Some("1");
            let fsync = fsync.get(1).cloned().unwrap_or_else(|| "?".into());
            r.persistence = if aof {
                format!("aof, appendfsync {fsync}")
            } else {
                "no aof".into()
            };
            if !aof {
                r.warnings.push(
                    "no AOF: a restart forgets locks and counters (unsafe unless restarts are delayed by the max TTL, and counters can repeat numbers)".into(),
                );
            } else if fsync != "always" {
                r.warnings.push(format!(
                    "appendfsync {fsync}: a crash can lose acknowledged writes (use appendfsync always)"
                ));
            }
            if let Some(p) = policy.get(1) {
                if p != "noeviction" && p != "volatile-ttl" && p.starts_with("allkeys") {
                    r.warnings.push(format!(
                        "maxmemory-policy {p} can evict lock and counter keys"
                    ));
                } else if p.starts_with("volatile") {
                    r.warnings
                        .push(format!("maxmemory-policy {p} can evict lock keys"));
                }
            }
        }
    }
    r
}

/// A `key:value` field of an INFO reply.
fn field<'a>(info: &'a str, key: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .map(str::trim)
}

/// Parses `500ms`, `30s`, `2m`, `1h` (and a bare number of seconds).
fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration like 500ms, 30s, 2m or 1h"))?;
    let secs = match unit {
        "ms" => value / 1000.0,
        "" | "s" => value,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        _ => {
            return Err(format!(
                "unknown unit {unit:?} in {s:?} (use ms, s, m or h)"
            ))
        }
    };
    Duration::try_from_secs_f64(secs).map_err(|_| format!("{s:?} is out of range"))
}

/// Parses a reset period name.
fn parse_period(s: &str) -> Result<ResetPeriod, String> {
    Ok(match s {
        "second" => ResetPeriod::Second,
        "minute" => ResetPeriod::Minute,
        "hour" => ResetPeriod::Hour,
        "day" => ResetPeriod::Day,
        "month" => ResetPeriod::Month,
        "year" => ResetPeriod::Year,
        "never" => ResetPeriod::Never,
        _ => {
            return Err(format!(
                "unknown period {s:?}: second, minute, hour, day, month, year or never"
            ))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("10 parsecs").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_duration("-1s").is_err());
    }

    #[test]
    fn info_fields() {
        let info = "# Server\r\nredis_version:7.0.15\r\naof_enabled:1\r\n";
        assert_eq!(field(info, "redis_version"), Some("7.0.15"));
        assert_eq!(field(info, "aof_enabled"), Some("1"));
        assert_eq!(field(info, "nope"), None);
    }
}
