//! What a node shows about its own history, read in one pipeline right
//! after a connection is made (a restart always breaks connections), before
//! any request of ours goes out on it. [`amnesia`](super::amnesia) decides
//! from it.
//!
//! * `INFO server`: `run_id` (a new one per process) and
//!   `uptime_in_seconds` (when the process began, on the node's own clock).
//! * `INFO replication`: `role`, and `master_replid2`, which a replica
//!   promoted in its master's place keeps set to the old master's history.
//! * `INFO stats` and `INFO commandstats`: keys evicted and `FLUSHALL`,
//!   `FLUSHDB` and `SWAPDB` calls in this process, added up as its
//!   *damage*: each may have dropped keys of ours. So do `RESTORE-ASKING`
//!   calls, the keys a Redis Cluster shard took in with slots moved to it
//!   (a reshard): they come as the shard they left held them, and that
//!   shard may have lost writes (a failover just before the move).
//! * `CLUSTER INFO` (a Redis Cluster's shard; refused elsewhere, and then
//!   nothing): `cluster_my_epoch`, the shard's configuration epoch, added
//!   to the damage in what our marker records (it does not start at 0 with
//!   a process, so it is not damage since the start). It grows when the shard takes slots over: a replica
//!   promoted, or slots moved to it (unless its epoch was the cluster's
//!   greatest already, which a failover elsewhere never leaves it). So a
//!   shard that took over a slot whose lock a failover lost shows it even
//!   where no key moved.
//! * `CLUSTER NODES` (a shard; refused elsewhere): the slots the shard
//!   serves, which our marker records (`slots`). A shard that serves a slot
//!   the marker lacks took it over since: the shard it left may have lost
//!   writes (restarted empty, or failed over) and nothing of that moves
//!   with it, epoch or key, when the slot held no key of ours any more
//!   and the receiver's epoch was already the cluster's greatest.
//! * `CONFIG GET appendonly` and `appendfsync`: what the node *would* keep
//!   across a crash. Reported, never trusted: a new disk, a recreated
//!   container or an old backup break it silently.
//! * `CONFIG GET maxmemory-policy` and `maxmemory`: whether the node can
//!   evict our keys at any moment while we stay connected (any policy but
//!   `noeviction`, with a memory limit; either unreadable counts as can).
//!   Such a node's evictions are read in every round that asks it for a
//!   vote (see `vigil.rs`).
//! * Our marker, a hash with no TTL at [`MARKER_KEY`] (one per node, shared
//!   by every key prefix): `run`, the process it was written for; `loss`,
//!   the uptime second at which a client found that the process may lack
//!   writes, which names the loss and never dates it (`-`: none);
//!   `seen`, the damage count when it was written; `repl`, the node's
//!   replication history id then (a promotion changes it); `slots`, the
//!   slots a cluster's shard served then (`-`: not a shard); `why`, what the
//!   writer concluded, in a word (`unmarked`: nothing but the absence of a
//!   marker, the one case `redquorum init` may still declare new);
//!   `served` (the writer's deployment), set by a client that watched the
//!   loss's whole quarantine pass on its own clock (see `amnesia.rs`);
//!   `tags`, the deployments whose clients count the process (see
//!   `tags.rs`).

use redis::Value;

use crate::node::cluster::slotset::own_slots;

/// Our marker's key on every node.
pub(crate) const MARKER_KEY: &str = "redquorum:node";

/// What `master_replid2` reads on a node with no earlier replication
/// history (never promoted).
const NO_REPLID: &str = "0000000000000000000000000000000000000000";

/// Our marker, as found on a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Marker {
    /// A well-formed marker.
    Found {
        /// The process it names.
        run: String,
        /// The uptime second at which a client found that process may lack
        /// writes: it names the loss, it does not date it.
        loss: Option<u64>,
        /// The damage count when it was written (absent in markers of
        /// earlier versions).
        seen: Option<u64>,
        /// The node's `master_replid` when it was written (absent in
        /// markers of earlier versions).
        repl: Option<String>,
        /// The slots a cluster's shard served when it was written
        /// ([`slotset`](crate::node::cluster::slotset)'s text form); `None` for a node
        /// that is not a shard, and in markers of earlier versions.
        slots: Option<String>,
        /// Whether a client that saw `loss` in this process, with nothing
        /// dropped since, watched its whole quarantine pass on its own
        /// clock: every lock the process may have forgotten has expired.
        served: bool,
        /// The verdict in a word when it was written (`Cause::tag`), for
        /// messages only.
        why: Option<String>,
        /// The deployments whose clients count the process (see
        /// `tags.rs`): `None` where the field is absent (a marker of an
        /// earlier version); only well-formed tags, none where the field
        /// is too long to be ours.
        tags: Option<Vec<String>>,
    },
    /// Something is at the key that we cannot read as our marker (a
    /// number out of range, another type): the node's history cannot be
    /// told from it.
    Corrupt,
}

/// One writing of our marker, as a round reads it (`HMGET` of `run`,
/// `loss` and `seen`: [`MARKER_ID_FIELDS`]): the process it names, the loss
/// it records and the damage count when it was written. A round compares
/// it with what this client last saw or wrote (`vigil.rs`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct MarkerId {
    /// The process it names.
    pub(crate) run: String,
    /// The loss it records (`None`: none).
    pub(crate) loss: Option<u64>,
    /// The damage count when it was written.
    pub(crate) seen: Option<u64>,
}

/// The fields of our marker a round reads, in [`MarkerId`]'s order.
pub(crate) const MARKER_ID_FIELDS: [&str; 3] = ["run", "loss", "seen"];

impl Marker {
    /// Which writing of our marker this is (`None`: unreadable).
    pub(crate) fn id(&self) -> Option<MarkerId> {
        match self {
            Marker::Found {
                run, loss, seen, ..
            } => Some(MarkerId {
                run: run.clone(),
                loss: *loss,
                seen: *seen,
            }),
            Marker::Corrupt => None,
        }
    }
}

/// Reads a round's `HMGET` of [`MARKER_ID_FIELDS`]: `None` where the
/// marker is gone, or anything we cannot read as ours (an error reply
/// included).
pub(crate) fn read_marker_id(v: &Value) -> Option<MarkerId> {
    // Read in place: this runs for every vote-asking request.
    let Value::Array(fields) = v else {
        return None;
    };
    let [run, loss, seen] = fields.as_slice() else {
        return None;
    };
    let run = marker_field(run)?.filter(|r| !r.is_empty())?;
    let loss = match marker_field(loss)?? {
        "-" => None,
        l => Some(l.parse().ok()?),
    };
    let seen = match marker_field(seen)? {
        None => None,
        Some(s) => Some(s.parse().ok()?),
    };
    Some(MarkerId {
        run: run.to_owned(),
        loss,
        seen,
    })
}

/// One field of a round's read of our marker: its text, `Some(None)`
/// where absent, `None` where it is not text.
fn marker_field(v: &Value) -> Option<Option<&str>> {
    match v {
        Value::BulkString(b) => std::str::from_utf8(b).ok().map(Some),
        Value::Nil => Some(None),
        _ => None,
    }
}

/// What one connection's set-up learnt about the node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Probe {
    /// The process's `run_id`; empty if `INFO` was refused.
    pub(crate) run_id: String,
    /// Whole seconds the process has run (`INFO` truncates).
    pub(crate) uptime: u64,
    /// Keys evicted plus flushes and swaps in this process; `None` where
    /// the counts could not be read.
    pub(crate) damage: Option<u64>,
    /// A Redis Cluster shard's configuration epoch (0 elsewhere): it grows
    /// when the shard takes slots over.
    pub(crate) epoch: u64,
    /// A replica promoted in its master's place, whose data is the old
    /// master's as far as replication had got.
    pub(crate) promoted: bool,
    /// The node's replication history id (`master_replid`): it changes
    /// when a replica is promoted, or a node starts over from another's
    /// data.
    pub(crate) replid: String,
    /// `appendonly yes` with `appendfsync always`; `None` if `CONFIG GET`
    /// was refused. For reports only.
    pub(crate) durable: Option<bool>,
    /// Keys evicted in this process (`INFO stats`); `None` where it could
    /// not be read.
    pub(crate) evicted: Option<u64>,
    /// Commands the process ran (`total_commands_processed`): it only
    /// grows, unless the statistics were reset (`CONFIG RESETSTAT`), which
    /// may hide evictions and flushes.
    pub(crate) commands: Option<u64>,
    /// `TIME` calls the process ran ([`time_calls`]): they only grow, unless
    /// the statistics were reset, and (unlike the commands run) padding
    /// with other commands does not make up for a reset.
    pub(crate) times: Option<u64>,
    /// Whether the node can evict keys of ours: a `maxmemory-policy` other
    /// than `noeviction` with a `maxmemory` limit, or either unreadable.
    pub(crate) evicts: bool,
    /// The slots a cluster's shard serves ([`slotset`](crate::node::cluster::slotset)'s
    /// text form); `None` for a node that is not a shard.
    pub(crate) slots: Option<String>,
    /// Our marker, if any.
    pub(crate) marker: Option<Marker>,
}

impl Probe {
    /// What our marker's `seen` records: the damage count plus the
    /// shard's epoch, so that either growing shows.
    pub(crate) fn seen(&self) -> Option<u64> {
        self.damage.and_then(|d| d.checked_add(self.epoch))
    }

    /// A probe of process `run_id` at `uptime` s, durable, with nothing
    /// dropped and replication history `h`, finding `marker` (`run`,
    /// `loss`): for tests and the models.
    #[cfg(test)]
    pub(crate) fn sample(run_id: &str, uptime: u64, marker: Option<(&str, Option<u64>)>) -> Self {
        Probe {
            run_id: run_id.into(),
            uptime,
            damage: Some(0),
            epoch: 0,
            promoted: false,
            replid: "h".into(),
            durable: Some(true),
            evicted: Some(0),
            commands: None,
            times: None,
            evicts: false,
            slots: None,
            marker: marker.map(|(run, loss)| Marker::Found {
                run: run.into(),
                loss,
                seen: Some(0),
                repl: Some("h".into()),
                slots: None,
                served: false,
                why: None,
                tags: None,
            }),
        }
    }
}

/// The commands of a probe, in the order [`read_probe`] reads them; our
/// marker is read at `marker` ([`MARKER_KEY`], or a shard's own key on a
/// member that is a Redis Cluster of several shards).
pub(crate) fn probe_pipeline(marker: &str) -> redis::Pipeline {
    let mut pipe = redis::pipe();
    for section in ["server", "replication", "stats", "commandstats"] {
        pipe.cmd("INFO").arg(section);
    }
    pipe.cmd("CONFIG").arg("GET").arg("appendonly");
    pipe.cmd("CONFIG").arg("GET").arg("appendfsync");
    pipe.cmd("HMGET").arg(marker).arg(&[
        "run", "loss", "seen", "repl", "slots", "served", "why", "tags",
    ]);
    pipe.cmd("CLUSTER").arg("INFO");
    pipe.cmd("CLUSTER").arg("NODES");
    pipe.cmd("CONFIG").arg("GET").arg("maxmemory-policy");
    pipe.cmd("CONFIG").arg("GET").arg("maxmemory");
    pipe
}

/// How many replies [`probe_pipeline`] gets.
pub(crate) const PROBE_REPLIES: usize = 11;

/// Reads the probe's replies; `ours` names this client's deployment (our
/// marker's `served` counts only where a client of it wrote it: see
/// `panel.rs`).
pub(crate) fn read_probe(replies: &[Value], ours: Option<&str>) -> Probe {
    let text = |i: usize| {
        replies
            .get(i)
            .and_then(|v| redis::from_redis_value_ref::<String>(v).ok())
            .unwrap_or_default()
    };
    let (server, replication, stats, commands) = (text(0), text(1), text(2), text(3));
    let run_id = info_field(&server, "run_id").unwrap_or_default().to_owned();
    let uptime = info_field(&server, "uptime_in_seconds")
        .and_then(|u| u.parse().ok())
        .unwrap_or(0);
    let promoted = info_field(&replication, "role") == Some("master")
        && info_field(&replication, "master_replid2").is_some_and(|r| r != NO_REPLID);
    let replid = info_field(&replication, "master_replid")
        .unwrap_or_default()
        .to_owned();
    let epoch = info_field(&text(7), "cluster_my_epoch")
        .and_then(|e| e.parse::<u64>().ok())
        .unwrap_or(0);
    let damage = damage(&stats, &commands);
    let aof = replies.get(4).and_then(config_value);
    let fsync = replies.get(5).and_then(config_value);
    let durable = match (aof, fsync) {
        (Some(a), Some(f)) => Some(a == "yes" && f == "always"),
        _ => None,
    };
    let marker = replies.get(6).and_then(|v| parse_marker(v, ours));
    let slots = own_slots(&text(8));
    let policy = replies.get(9).and_then(config_value);
    let limit = replies.get(10).and_then(config_value);
    Probe {
        run_id,
        uptime,
        damage,
        epoch,
        promoted,
        replid,
        durable,
        evicted: evicted_keys(&stats),
        commands: commands_processed(&stats),
        times: time_calls(&commands),
        evicts: can_evict(policy.as_deref(), limit.as_deref()),
        slots,
        marker,
    }
}

/// Commands the process ran, from an `INFO stats` reply.
pub(crate) fn commands_processed(stats: &str) -> Option<u64> {
    info_field(stats, "total_commands_processed")?.parse().ok()
}

/// Keys evicted in the process, from an `INFO stats` reply.
pub(crate) fn evicted_keys(stats: &str) -> Option<u64> {
    info_field(stats, "evicted_keys")?.parse().ok()
}

/// Whether a node with `maxmemory-policy` `policy` and `maxmemory` `limit`
/// (each `None` where unreadable) can evict keys: with no limit (`0`) or
/// under `noeviction` it never does. Every key of ours but the marker has a
/// TTL, so `volatile-*` policies evict exactly ours.
pub(crate) fn can_evict(policy: Option<&str>, limit: Option<&str>) -> bool {
    !(policy == Some("noeviction") || limit == Some("0"))
}

/// `TIME` calls in `INFO commandstats` (`commands`), `None` where it could
/// not be read. Every request of every client carries one, so the count
/// grows with our own traffic; `CONFIG RESETSTAT` zeroes it, and commands
/// of other kinds (a load tool's) never bring it back, as they bring back
/// `total_commands_processed`. No line: none since a reset, 0.
pub(crate) fn time_calls(commands: &str) -> Option<u64> {
    if !commands.contains("# Commandstats") {
        return None;
    }
    let Some(line) = info_field(commands, "cmdstat_time") else {
        return Some(0);
    };
    line.split(',')
        .find_map(|kv| kv.strip_prefix("calls="))
        .and_then(|c| c.parse().ok())
}

/// Evicted keys plus the calls that drop or swap whole databases, take
/// keys in from another shard, or may load the data anew (any `DEBUG`:
/// `DEBUG RELOAD` brings an older snapshot back, our marker in it, with no
/// restart), or `None` if `INFO stats` could not be read. A command never
/// called has no line in `INFO commandstats`; one refused (`DEBUG`, off
/// by default) counts in `rejected_calls`, not here.
pub(crate) fn damage(stats: &str, commands: &str) -> Option<u64> {
    let mut total = evicted_keys(stats)?;
    for cmd in ["flushall", "flushdb", "swapdb", "restore-asking", "debug"] {
        let Some(line) = info_field(commands, &format!("cmdstat_{cmd}")) else {
            continue;
        };
        let calls = line
            .split(',')
            .find_map(|kv| kv.strip_prefix("calls="))
            .and_then(|c| c.parse::<u64>().ok())?;
        total = total.checked_add(calls)?;
    }
    Some(total)
}

/// Whether the marker's reply (`replies`' 7th) is a refusal for the
/// moment (a node loading its data, a cluster not yet serving, a script
/// running): the probe then tells nothing, and is taken again, rather than
/// read as something unreadable at our key (a loss).
pub(crate) fn marker_not_ready(replies: &[Value]) -> bool {
    matches!(
        replies.get(6),
        Some(Value::ServerError(e))
            if matches!(e.code(), "LOADING" | "CLUSTERDOWN" | "TRYAGAIN" | "BUSY" | "MASTERDOWN")
    )
}

/// Reads the marker (`HMGET run loss seen repl slots served why tags`):
/// `None` where there is none, [`Marker::Corrupt`] for anything we cannot
/// read as ours; served only where a client of deployment `ours` wrote it.
fn parse_marker(v: &Value, ours: Option<&str>) -> Option<Marker> {
    let Ok([run, loss, seen, repl, slots, served, why, tags]) =
        redis::from_redis_value_ref::<[Option<String>; 8]>(v)
    else {
        // A wrong type at our key: someone else's data where our evidence
        // should be.
        return matches!(v, Value::ServerError(_)).then_some(Marker::Corrupt);
    };
    let (run, loss) = match (run, loss) {
        (None, None) if seen.is_none() && repl.is_none() && slots.is_none() => return None,
        (Some(run), Some(loss)) if !run.is_empty() => (run, loss),
        _ => return Some(Marker::Corrupt),
    };
    let loss = match loss.as_str() {
        "-" => None,
        l => match l.parse() {
            Ok(l) => Some(l),
            Err(_) => return Some(Marker::Corrupt),
        },
    };
    let seen = match seen.map(|s| s.parse()) {
        None => None,
        Some(Ok(s)) => Some(s),
        Some(Err(_)) => return Some(Marker::Corrupt),
    };
    Some(Marker::Found {
        run,
        loss,
        seen,
        repl,
        slots: slots.filter(|s| s != "-"),
        served: served.is_some_and(|s| Some(s.as_str()) == ours),
        why,
        tags: tags.as_deref().map(parse_tags),
    })
}

/// The longest `tags` field read (and kept by our scripts): far more
/// than the tags of every deployment that shares a node.
const TAGS_MAX: usize = 4096;

/// The tags in a marker's `tags` field: comma-separated, each 1 to 64
/// letters, digits, `-` or `_` (ours are 16 hex digits); anything else is
/// ignored, and a field longer than [`TAGS_MAX`] holds none.
fn parse_tags(field: &str) -> Vec<String> {
    if field.len() > TAGS_MAX {
        return Vec::new();
    }
    field
        .split(',')
        .filter(|t| {
            (1..=64).contains(&t.len())
                && t.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
        .map(str::to_owned)
        .collect()
}

/// One field of an `INFO` reply (also `CLUSTER INFO`'s).
pub(crate) fn info_field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines().find_map(|l| {
        l.strip_prefix(name)
            .and_then(|r| r.strip_prefix(':'))
            .map(str::trim)
    })
}

/// The second element of a `CONFIG GET` reply (a two-element array, or a
/// map under RESP3).
fn config_value(v: &Value) -> Option<String> {
    let text = |v: &Value| redis::from_redis_value_ref::<String>(v).ok();
    match v {
        Value::Array(a) if a.len() == 2 => text(&a[1]),
        Value::Map(m) if m.len() == 1 => text(&m[0].1),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`parse_marker`] for a client of deployment `d1`.
    fn parse(v: &Value) -> Option<Marker> {
        parse_marker(v, Some("d1"))
    }

    /// [`read_probe`] for a client of no deployment.
    fn probe_of(replies: &[Value]) -> Probe {
        read_probe(replies, None)
    }

    #[test]
    fn a_rounds_marker_read_names_its_writing_or_nothing() {
        let field = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let reply = |run, loss, seen| Value::Array(vec![field(run), field(loss), field(seen)]);
        assert_eq!(
            read_marker_id(&reply("abc", "-", "3")),
            Some(MarkerId {
                run: "abc".into(),
                loss: None,
                seen: Some(3)
            })
        );
        assert_eq!(
            read_marker_id(&reply("abc", "17", "4")).map(|m| (m.loss, m.seen)),
            Some((Some(17), Some(4)))
        );
        let earlier = Value::Array(vec![field("abc"), field("-"), Value::Nil]);
        assert_eq!(read_marker_id(&earlier).map(|m| m.seen), Some(None));
        // Gone, or unreadable as ours: no writing to compare.
        let gone = Value::Array(vec![Value::Nil, Value::Nil, Value::Nil]);
        assert_eq!(read_marker_id(&gone), None);
        assert_eq!(read_marker_id(&reply("", "-", "3")), None);
        assert_eq!(read_marker_id(&reply("abc", "x", "3")), None);
        assert_eq!(read_marker_id(&reply("abc", "-", "y")), None);
        assert_eq!(read_marker_id(&Value::Int(1)), None);
    }

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    fn pair(k: &str, v: &str) -> Value {
        Value::Array(vec![bulk(k), bulk(v)])
    }

    #[test]
    fn time_calls_count_from_a_reset_on() {
        let stats = "# Commandstats\r\ncmdstat_time:calls=42,usec=3,usec_per_call=0.07,\
                     rejected_calls=0,failed_calls=0\r\ncmdstat_info:calls=2\r\n";
        assert_eq!(time_calls(stats), Some(42));
        assert_eq!(
            time_calls("# Commandstats\r\ncmdstat_info:calls=1\r\n"),
            Some(0)
        );
        assert_eq!(time_calls(""), None, "unreadable");
    }

    #[test]
    fn replies_are_read() {
        let server =
            bulk("# Server\r\nredis_version:7.0.15\r\nrun_id:abc\r\nuptime_in_seconds:42\r\n");
        let replication = bulk(
            "# Replication\r\nrole:master\r\nmaster_replid:1234\r\n\
             master_replid2:0000000000000000000000000000000000000000\r\n",
        );
        let stats = bulk("# Stats\r\nexpired_keys:9\r\nevicted_keys:2\r\n");
        let commands = bulk(
            "# Commandstats\r\ncmdstat_get:calls=5,usec=1\r\n\
             cmdstat_flushall:calls=3,usec=10,usec_per_call=3.3\r\n",
        );
        let marker = Value::Array(vec![
            bulk("abc"),
            bulk("3"),
            bulk("4"),
            bulk("1234"),
            bulk("0-99"),
            Value::Nil,
            bulk("unmarked"),
            bulk("a,b"),
        ]);
        let mut replies = vec![
            server.clone(),
            replication,
            stats.clone(),
            commands.clone(),
            pair("appendonly", "yes"),
            pair("appendfsync", "always"),
            marker,
            bulk("cluster_state:ok\r\ncluster_current_epoch:9\r\ncluster_my_epoch:6\r\n"),
            bulk("e7d1 127.0.0.1:30001@40001 myself,master - 0 0 1 connected 0-99 200\n"),
        ];
        // A shard of a cluster: its epoch adds to what the marker records.
        let shard = read_probe(&replies, None);
        assert_eq!(
            (shard.damage, shard.epoch, shard.seen()),
            (Some(5), 6, Some(11))
        );
        assert_eq!(shard.slots.as_deref(), Some("0-99,200"));
        // A node outside a cluster refuses CLUSTER INFO: nothing added.
        let disabled =
            redis::parse_redis_value(b"-ERR This instance has cluster support disabled\r\n");
        replies[7] = disabled.clone().unwrap();
        replies[8] = disabled.unwrap();
        let p = read_probe(&replies, None);
        let found = Marker::Found {
            run: "abc".into(),
            loss: Some(3),
            seen: Some(4),
            repl: Some("1234".into()),
            slots: Some("0-99".into()),
            served: false,
            why: Some("unmarked".into()),
            tags: Some(vec!["a".into(), "b".into()]),
        };
        assert_eq!(
            p,
            Probe {
                run_id: "abc".into(),
                uptime: 42,
                damage: Some(5),
                epoch: 0,
                promoted: false,
                replid: "1234".into(),
                durable: Some(true),
                evicted: Some(2),
                commands: None,
                // Commandstats read, no TIME line: none since a reset.
                times: Some(0),
                evicts: true,
                slots: None,
                marker: Some(found),
            }
        );
        let refused = redis::parse_redis_value(b"-ERR unknown command 'CONFIG'\r\n").unwrap();
        let promoted = bulk("role:master\r\nmaster_replid2:feedbeef\r\n");
        let none = Value::Array(vec![Value::Nil; 8]);
        let p = probe_of(&[
            server,
            promoted,
            refused.clone(),
            commands,
            refused.clone(),
            refused,
            none,
        ]);
        assert_eq!(
            (p.promoted, p.damage, p.durable, p.marker),
            (true, None, None, None)
        );
    }

    #[test]
    fn markers_are_read_and_anything_else_is_corrupt() {
        let arr = |a: &[Option<&str>]| {
            Value::Array(a.iter().map(|v| v.map_or(Value::Nil, bulk)).collect())
        };
        // A marker's `run`, `loss` and `tags`, nothing else.
        let short = |run: Option<&str>, loss: Option<&str>, tags: Option<&str>| {
            arr(&[run, loss, None, None, None, None, None, tags])
        };
        assert_eq!(
            parse(&short(Some("id"), Some("-"), None)),
            Some(Marker::Found {
                run: "id".into(),
                loss: None,
                seen: None,
                repl: None,
                slots: None,
                served: false,
                why: None,
                tags: None,
            })
        );
        // A marker whose first fields are `run`, `loss`, `seen`, `repl`.
        let head = |a: [Option<&str>; 4]| {
            let mut all = [None; 8];
            all[..4].copy_from_slice(&a);
            arr(&all)
        };
        for bad in [
            head([Some("id"), Some("18446744073709551616"), Some("0"), None]),
            head([Some("id"), Some("x"), Some("0"), None]),
            head([Some("id"), None, Some("0"), None]),
            head([Some("id"), Some("-"), Some("-1"), None]),
            head([None, None, Some("0"), None]),
            head([None, None, None, Some("r")]),
            redis::parse_redis_value(b"-WRONGTYPE Operation against a key\r\n").unwrap(),
        ] {
            assert_eq!(parse(&bad), Some(Marker::Corrupt), "{bad:?}");
        }
        // A node not serving yet tells nothing: the probe is taken again.
        let at_marker = |reply: &[u8]| {
            let mut replies = vec![Value::Nil; PROBE_REPLIES];
            replies[6] = redis::parse_redis_value(reply).unwrap();
            marker_not_ready(&replies)
        };
        assert!(at_marker(
            b"-LOADING Redis is loading the dataset in memory\r\n"
        ));
        assert!(at_marker(b"-CLUSTERDOWN The cluster is down\r\n"));
        assert!(!at_marker(b"-WRONGTYPE Operation against a key\r\n"));
        assert!(!at_marker(b"*0\r\n"));
        assert_eq!(parse(&arr(&[None; 8])), None);
        // Tags: only well-formed ones; none from a field too long to be ours.
        let tagged = |t: &str| {
            let m = parse(&short(Some("id"), Some("-"), Some(t)));
            match m {
                Some(Marker::Found { tags, .. }) => tags,
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(
            tagged("a1,b c,,ok_2"),
            Some(vec!["a1".into(), "ok_2".into()])
        );
        assert_eq!(tagged(",,,"), Some(vec![]));
        assert_eq!(tagged(&",x".repeat(3000)), Some(vec![]));
        // The slots a shard served; `-` for a node that is not one.
        assert!(matches!(
            parse(&arr(&[Some("id"), Some("-"), None, None, Some("0-5"), None, None, None])),
            Some(Marker::Found { slots: Some(s), .. }) if s == "0-5"
        ));
        assert!(matches!(
            parse(&arr(&[
                Some("id"),
                Some("-"),
                None,
                None,
                Some("-"),
                None,
                None,
                None
            ])),
            Some(Marker::Found { slots: None, .. })
        ));
        // Served only where a client of our deployment wrote so: not one
        // of another (another node list or quarantine), nor the old "1".
        let served_by = |by: &'static str| {
            parse(&arr(&[
                Some("id"),
                Some("4"),
                None,
                None,
                None,
                Some(by),
                None,
                None,
            ]))
        };
        assert!(matches!(
            served_by("d1"),
            Some(Marker::Found { served: true, .. })
        ));
        for other in ["d2", "1"] {
            assert!(matches!(
                served_by(other),
                Some(Marker::Found { served: false, .. })
            ));
        }
        assert!(matches!(
            parse(&arr(&[
                Some("id"),
                Some("4"),
                None,
                None,
                None,
                Some("-"),
                None,
                None
            ])),
            Some(Marker::Found { served: false, .. })
        ));
        assert_eq!(
            parse(&arr(&[
                None,
                None,
                None,
                None,
                Some("0-5"),
                None,
                None,
                None
            ])),
            Some(Marker::Corrupt)
        );
    }

    #[test]
    fn damage_adds_evictions_flushes_swaps_imports_and_debug_calls() {
        let stats = "evicted_keys:1\r\n";
        let cmds = "cmdstat_flushdb:calls=2,usec=1\r\ncmdstat_swapdb:calls=4,usec=1\r\n\
                    cmdstat_restore-asking:calls=10,usec=1\r\n\
                    cmdstat_debug:calls=5,usec=9,rejected_calls=7\r\n";
        assert_eq!(damage(stats, cmds), Some(22));
        assert_eq!(damage(stats, ""), Some(1));
        assert_eq!(damage("", cmds), None);
    }
}
