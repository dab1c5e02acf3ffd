//! The command line: subcommands, their options, and the parsers for
//! durations and reset periods.

use std::ffi::OsString;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use redquorum::ResetPeriod;

use crate::exit;

#[derive(Parser, Debug)]
#[command(
    name = "redquorum",
    version,
    about = "Quorum locks, serial numbers and node checks over N independent Redis nodes",
    after_help = top_help()
)]
pub struct Cli {
    /// Redis node URLs, comma-separated (odd count, 5 recommended); a
    /// member that is a Redis Cluster is `redis+cluster://host:port,host:port`
    /// (its seeds, comma-separated too).
    #[arg(long, env = "REDQUORUM_NODES", value_delimiter = ',', global = true)]
    pub nodes: Vec<String>,

    /// Per-node request timeout (a first request, which waits for its
    /// connection's set-up, gets at least 1 s).
    #[arg(long, value_parser = parse_duration, default_value = "100ms", global = true, allow_hyphen_values = true)]
    pub node_timeout: Duration,

    /// How long a node that may have lost writes (restarted, replaced,
    /// flushed, or just started and not declared new with `init`) is kept
    /// out of lock quorums; the longest TTL any client of these nodes uses,
    /// and the longest `--ttl` accepted. 0s trusts every node.
    #[arg(long, env = "REDQUORUM_RESTART_QUARANTINE", value_parser = parse_duration, default_value = "60s", global = true, allow_hyphen_values = true)]
    pub restart_quarantine: Duration,

    /// Key prefix of every key a command touches (e.g. "redlock:" to share
    /// locks with pottery); `status` and `init` touch none.
    #[arg(long, env = "REDQUORUM_KEY_PREFIX", default_value = "", global = true)]
    pub key_prefix: String,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run a command while holding a distributed lock (a distributed flock).
    #[command(after_help = lock_help())]
    Lock(LockArgs),
    /// Run a command while this instance leads an election (stopped when
    /// leadership is lost), or print each change of leader (--listen).
    #[command(after_help = elect_help())]
    Elect(ElectArgs),
    /// Show who holds a lock (or a semaphore's permits), for how long at
    /// least, when it can be taken, and how many wait; takes nothing.
    #[command(after_help = inspect_help())]
    Inspect(InspectArgs),
    /// Serial numbers (PREFIX + local date + zero-padded counter).
    #[command(subcommand)]
    Serial(SerialCommand),
    /// Check every node: reachability, latency, version, clock offset,
    /// persistence; warn where a node is unsafe for locks and counters.
    #[command(after_help = status_help())]
    Status(StatusArgs),
    /// Declare nodes that were just started empty new, once per deployment,
    /// so clients count them at once. Without it a fresh node looks like
    /// one whose data was wiped, and waits out --restart-quarantine. Nodes
    /// in use or holding keys are left as they are.
    #[command(after_help = init_help())]
    Init,
}

/// `redquorum --help`: nodes, durations, logs and the exit codes.
fn top_help() -> String {
    format!(
        "Nodes come from --nodes or REDQUORUM_NODES, comma-separated:\n  \
         REDQUORUM_NODES=redis://10.0.0.1:6379,redis://10.0.0.2:6379,redis://10.0.0.3:6379\n\n\
         Durations: 500ms, 30s, 2m, 1h (a unit is required).  Logs: RUST_LOG=redquorum=debug.\n\n{}",
        exit::all_codes()
    )
}

/// `redquorum lock --help`: examples, what the command learns, exit codes,
/// signals.
fn lock_help() -> String {
    format!(
        "Examples:\n  \
         redquorum lock nightly-report --ttl 30s --wait 10s -- ./report.sh\n  \
         redquorum lock deploy --wait 0s -- make deploy   # fail at once if held\n  \
         redquorum lock ledger --fenced -- sh -c 'store --token \"$REDQUORUM_FENCING_TOKEN\"'\n  \
         redquorum lock -n 4 gpu -- ./train.sh           # at most 4 at once, anywhere\n  \
         redquorum lock account-7 account-9 -- ./transfer.sh   # both at once, or wait\n  \
         redquorum lock --shared catalog -- ./read.sh   # many at once; none with -x\n  \
         redquorum lock --exclusive catalog -- ./rebuild.sh   # alone, after reads in progress\n  \
         redquorum lock deploy --conflict-exit-code 3 -- ./deploy.sh   # 3: held elsewhere\n  \
         redquorum lock deploy > deploy.env &   # held until killed; `held` ends deploy.env\n\n\
         Without a command, redquorum takes the lock, prints the lines below (NAME=VALUE,\n\
         quoted for sh) and a line `held`, keeps the lock renewed, and releases it when\n\
         signalled or, where stdin is a pipe or a terminal, when stdin closes (exit 0).\n\n\
         The command's environment also has:\n  \
         REDQUORUM_RESOURCE        the resource name (several: joined by +, in key order)\n  \
         REDQUORUM_RESOURCES       the resource names, space-separated, in key order\n  \
         REDQUORUM_KEY             the lock's Redis key (with --key-prefix; not with -n N\n                            \
         or several resources)\n  \
         REDQUORUM_TTL_MS          the TTL, renewed in the background every ttl/3 (sooner when validity runs short)\n  \
         REDQUORUM_VALID_UNTIL_MS  when the lock's first validity ends (Unix time, ms;\n                            \
         renewals push it later)\n  \
         REDQUORUM_FENCING_TOKEN   with --fenced: a number larger than every earlier\n                            \
         holder's; pass it to your storage and have it refuse smaller ones\n                            \
         (several resources: the first's)\n  \
         REDQUORUM_FENCING_TOKENS  with --fenced: one per resource, in REDQUORUM_RESOURCES order\n  \
         REDQUORUM_PERMITS         with -n N (N > 1): N\n  \
         REDQUORUM_PERMIT_SLOT     with -n N (N > 1): which permit, 0 to N-1\n\n\
         {}\n\n\
         The command runs in a process group of its own (in the terminal's foreground\n\
         when redquorum is, so it can read the terminal and gets one Ctrl-C).\n\
         SIGINT/SIGTERM/SIGHUP sent to redquorum go to that whole group (while still\n\
         waiting for the lock, they end the wait: nothing runs). When the command's\n\
         first process exits, what is left of its group gets SIGTERM (SIGKILL after\n\
         --grace), then the lock is released: nothing of the command outlives the lock.\n\
         If redquorum itself dies (SIGKILL, an OOM kill, a crash), the group gets SIGKILL\n\
         at once from a guard process (and its first process from the kernel), while the\n\
         lock is still valid; only a process that leaves the group (setsid) escapes.\n\
         Linux only (the parent-death signal and the subreaper are Linux's).\n\
         Under a shell's job control, ^Z stops redquorum with the command (one job);\n\
         nothing renews the lock while the job is stopped, so it lapses after --ttl.\n\
         fg or bg resumes the command only if the lock is still valid; otherwise the\n\
         command gets SIGKILL and redquorum exits 76. (Without job control, a command\n\
         stopped by a signal keeps its lock, renewed, until it is continued or ends.)",
        exit::lock_codes()
    )
}

/// `redquorum elect --help`: examples, what the command learns, exit codes.
fn elect_help() -> String {
    format!(
        "Examples:\n  \
         redquorum elect scheduler -- ./scheduler   # runs while this instance leads\n  \
         redquorum elect scheduler --ttl 5s --value \"$(hostname):8080\" -- ./scheduler\n  \
         redquorum elect --listen scheduler         # one line per change: term=7 value=host-a:8080\n\n\
         A candidate waits (in arrival order, woken by the nodes) until it leads, then runs\n\
         the command with, in its environment:\n  \
         REDQUORUM_ELECTION  the election's name\n  \
         REDQUORUM_TERM      this leadership's term, larger than every earlier leader's;\n                      \
         pass it to storage that can refuse an older leader's writes\n  \
         REDQUORUM_VALUE     what --listen prints for this leader\n\n\
         A leader that dies is replaced within --ttl. Signals, the command's process group\n\
         and its ending on loss are as for `redquorum lock`.\n\n{}",
        exit::elect_codes()
    )
}

/// `redquorum status --help`: examples and exit codes.
/// `redquorum init --help`: when to run it, and when never to.
fn init_help() -> String {
    "Run it once, right after starting a new deployment's nodes. Never run it on\n\
     nodes that may have held locks (a wiped node declared new can give a held\n\
     lock to a second holder): it refuses nodes with our marker or any key.\n\n\
     Exit codes: 0 every node declared new or already in use; 69 a node did not\n\
     answer; 78 a node holds keys (not new; nothing done there)."
        .to_owned()
}

fn status_help() -> String {
    format!(
        "Examples:\n  redquorum status\n  \
         REDQUORUM_NODES=redis://a:6379,redis://b:6379,redis://c:6379 redquorum status\n  \
         redquorum status --wait    # after a node restarted without its data\n\n{}",
        exit::status_codes()
    )
}

#[derive(Args, Debug)]
pub struct StatusArgs {
    /// First wait out, once for every client, the quarantine of nodes that
    /// lost data (restarted without it, flushed, swapped in), staying
    /// connected, then report. A client that lives shorter than the
    /// quarantine (this CLI, a cron job) never counts such a node
    /// otherwise, unless a long-running client watched its quarantine pass.
    #[arg(long)]
    pub wait: bool,
}

#[derive(Args, Debug)]
pub struct LockArgs {
    /// Resource (lock) name, shared by everyone who must exclude each other;
    /// several: all of them at once, or none (in any order: no deadlock).
    #[arg(required = true, num_args = 1.., value_name = "RESOURCE")]
    pub resources: Vec<String>,
    /// Lock TTL; it is renewed in the background every ttl/3 (sooner when validity runs short) while the command runs.
    #[arg(long, value_parser = parse_duration, default_value = "30s", allow_hyphen_values = true)]
    pub ttl: Duration,
    /// How long to wait for the lock before giving up with exit code 75.
    #[arg(long, value_parser = parse_duration, default_value = "10s", allow_hyphen_values = true)]
    pub wait: Duration,
    /// When redquorum ends the command itself (the lock was lost, or its
    /// first process exited and left others running): SIGKILL this long
    /// after SIGTERM (on loss never past the lock's validity, unless
    /// --grace-past-lock). Signals sent to redquorum are only passed on.
    #[arg(long, value_parser = parse_duration, default_value = "10s", allow_hyphen_values = true)]
    pub grace: Duration,
    /// On lock loss, give the command its whole --grace even past the lock's
    /// validity. This breaks mutual exclusion: another owner may hold the
    /// lock while the command still runs.
    #[arg(long)]
    pub grace_past_lock: bool,
    /// At most this many commands at once (a semaphore of N permits, which
    /// every caller of RESOURCE must give alike); 1 is a plain lock.
    #[arg(short = 'n', long = "permits", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub permits: u16,
    /// Mint a fencing token with the lock (REDQUORUM_FENCING_TOKEN; with
    /// --shared, the last writer's token).
    #[arg(long)]
    pub fenced: bool,
    /// Read side of the read-write lock RESOURCE (as flock -s): any number
    /// of --shared holders at once, none while an --exclusive one holds.
    #[arg(short = 's', long, conflicts_with = "exclusive")]
    pub shared: bool,
    /// Write side of the read-write lock RESOURCE (as flock -x): alone,
    /// after the --shared holders in progress when it arrived. Not the
    /// plain lock: every caller of RESOURCE uses --shared or --exclusive.
    #[arg(short = 'x', long)]
    pub exclusive: bool,
    /// Exit with this code when the lock is held elsewhere and not acquired
    /// within --wait (as flock -E), so it cannot be told apart from the
    /// command's own status; default 75.
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=255))]
    pub conflict_exit_code: Option<u8>,
    /// The command and its arguments, after `--`; without one, the lock is
    /// held until a signal or the end of stdin.
    #[arg(last = true)]
    pub command: Vec<String>,
}

/// `redquorum inspect --help`: examples, what it prints, exit codes.
fn inspect_help() -> String {
    format!(
        "Examples:\n  \
         redquorum inspect deploy\n  \
         redquorum inspect -n 4 gpu\n  \
         redquorum inspect deploy || echo \"deploy is running elsewhere\"\n\n\
         One line per lock (per permit with -n N): its holder (the host and process id of a\n\
         `redquorum lock` or `elect`; another client's random value otherwise), on how many\n\
         nodes, how long it keeps the lock at least unless renewed, when the lock can be\n\
         taken, and how many wait. Without -n, the name is read as every kind, and each it\n\
         is in use as gets its lines: a read-write lock's writer and readers, a semaphore's\n\
         permits, an election's leader and term. A snapshot: the holder may release or renew\n\
         it a moment later.\n\n{}",
        exit::inspect_codes()
    )
}

#[derive(Args, Debug)]
pub struct InspectArgs {
    /// The name: a lock, a read-write lock, a semaphore or an election
    /// (what the nodes say it is).
    pub resource: String,
    /// Read it as a semaphore of this many permits (1: a lock), whatever
    /// the nodes say it is.
    #[arg(short = 'n', long = "permits", value_parser = clap::value_parser!(u16).range(1..=256))]
    pub permits: Option<u16>,
}

#[derive(Args, Debug)]
pub struct ElectArgs {
    /// Election name, shared by every candidate.
    pub name: String,
    /// Leadership TTL: a dead leader is replaced within it; renewed every ttl/3.
    #[arg(long, value_parser = parse_duration, default_value = "10s", allow_hyphen_values = true)]
    pub ttl: Duration,
    /// What --listen and other observers report for this leader (default:
    /// host name and process id).
    #[arg(long)]
    pub value: Option<String>,
    /// How long to wait to lead before giving up with exit code 75
    /// (default: as long as it takes).
    #[arg(long, value_parser = parse_duration, allow_hyphen_values = true)]
    pub wait: Option<Duration>,
    /// Print one line per change of leader ("term=N value=V", or "none"),
    /// until interrupted, instead of campaigning; an outage of the nodes is
    /// told once on stderr, and its end once.
    #[arg(long)]
    pub listen: bool,
    /// When redquorum ends the command itself (the leadership was lost, or
    /// its first process exited and left others running): SIGKILL this long
    /// after SIGTERM (on loss never past the leadership's validity, unless
    /// --grace-past-lock). Signals sent to redquorum are only passed on.
    #[arg(long, value_parser = parse_duration, default_value = "10s", allow_hyphen_values = true)]
    pub grace: Duration,
    /// On loss, give the command its whole --grace even past the
    /// leadership's validity (two leaders may then act at once).
    #[arg(long)]
    pub grace_past_lock: bool,
    /// The command and its arguments, after `--` (not with --listen).
    #[arg(
        last = true,
        required_unless_present = "listen",
        conflicts_with = "listen"
    )]
    pub command: Vec<String>,
}

#[derive(Subcommand, Debug)]
pub enum SerialCommand {
    /// Issue numbers and print them, one per line.
    #[command(after_help = serial_help())]
    Next(SerialArgs),
}

/// `redquorum serial next --help`: examples and exit codes.
fn serial_help() -> String {
    format!(
        "Examples:\n  redquorum serial next ORDER\n  \
         redquorum serial next ORDER --count 50 --width 6 --tz Asia/Shanghai\n  \
         redquorum serial next INV --period never --width 9\n\n{}",
        exit::serial_codes()
    )
}

#[derive(Args, Debug)]
pub struct SerialArgs {
    /// Business prefix: up to 64 of A-Z a-z 0-9 _ -, not ending in a digit (may be empty: "").
    pub prefix: String,
    /// How many numbers to issue (at least 1).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pub count: u64,
    /// Numbers per allocation (default: all of --count in one allocation).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub batch: Option<u64>,
    /// Counter digits (1..=18).
    #[arg(long, default_value_t = redquorum::DEFAULT_WIDTH)]
    pub width: u8,
    /// IANA time zone for the date (default: the machine's local zone).
    #[arg(long)]
    pub tz: Option<String>,
    /// When the counter restarts: second, minute, hour, day, month, year, never.
    #[arg(long, default_value = "day", value_parser = parse_period)]
    pub period: ResetPeriod,
}

/// The command line as clap should see it: `redquorum help --help` (and
/// `-h`) is `redquorum --help`, not an unknown subcommand.
pub fn normalized(args: impl Iterator<Item = OsString>) -> Vec<OsString> {
    let mut args: Vec<OsString> = args.collect();
    if args.len() >= 3 && args[1] == "help" && args[2..].iter().any(|a| a == "--help" || a == "-h")
    {
        args.truncate(1);
        args.push("--help".into());
    }
    args
}

/// A line to add under clap's error where the usual mistake is obvious: the
/// command given without `--` before it, or no command at all.
pub fn hint(e: &clap::Error) -> Option<&'static str> {
    use clap::error::ErrorKind;
    let text = e.to_string();
    let in_lock = text.contains("redquorum lock");
    match e.kind() {
        ErrorKind::UnknownArgument | ErrorKind::MissingRequiredArgument if in_lock => Some(
            "hint: the command goes after `--`: redquorum lock RESOURCE [OPTIONS] -- COMMAND [ARGS...]",
        ),
        _ => None,
    }
}

/// The usual mistake `redquorum lock NAME echo hi` parses as three
/// resources and no command: several names with no command are taken as
/// that unless the line has a `--` (`redquorum lock a b --` holds both with
/// no command). Returns the error to print.
pub fn several_names_without_dashes(
    args: &LockArgs,
    mut argv: impl Iterator<Item = OsString>,
) -> Option<String> {
    if args.resources.len() < 2 || !args.command.is_empty() || argv.any(|a| a == "--") {
        return None;
    }
    Some(format!(
        "redquorum: {} names and no command: is {:?} the command?\n\
         hint: the command goes after `--`: redquorum lock RESOURCE... [OPTIONS] -- COMMAND \
         [ARGS...]; to hold several resources with no command, end the line with `--`",
        args.resources.len(),
        args.resources[1]
    ))
}

/// Parses `500ms`, `30s`, `2m`, `1h`; a number without a unit is an error
/// (is `30` seconds or milliseconds?).
fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if s.starts_with('-') {
        return Err(format!("{s:?} is negative: durations are 0 or more"));
    }
    let split = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration like 500ms, 30s, 2m or 1h"))?;
    let secs = match unit {
        "ms" => value / 1000.0,
        "s" => value,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        "" => {
            return Err(format!(
                "{s:?} has no unit: write {s}s, {s}ms, {s}m or {s}h"
            ))
        }
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
        let bare = parse_duration("30").unwrap_err();
        assert!(bare.contains("no unit"), "{bare}");
    }
}

/// The node list as clap split it at every comma, with the seeds of a
/// `redis+cluster://` member (`host:port` parts with no scheme) put back
/// into its URL.
pub fn join_cluster_seeds(parts: Vec<String>) -> Vec<String> {
    redquorum::split_node_list(&parts.join(","))
}

#[cfg(test)]
mod cluster_seeds {
    use super::join_cluster_seeds;

    #[test]
    fn a_clusters_seeds_stay_in_its_url() {
        let parts = [
            "redis://a:1",
            "redis+cluster://b:1",
            "c:1",
            "redis://d:1",
            "e:1",
        ];
        let urls = join_cluster_seeds(parts.iter().map(|s| s.to_string()).collect());
        assert_eq!(
            urls,
            [
                "redis://a:1",
                "redis+cluster://b:1,c:1",
                "redis://d:1",
                "e:1"
            ]
        );
    }
}
