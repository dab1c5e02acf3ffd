//! The crate's one error type.
//!
//! Callers mostly need to tell four situations apart, and each has its own
//! variant so nobody has to parse a message: somebody else holds the resource
//! ([`Error::Contended`]), too many nodes are unreachable to form a quorum
//! ([`Error::NoQuorum`]), our lock is gone ([`Error::Expired`]), and the input or
//! configuration was wrong ([`Error::InvalidConfig`], [`Error::InvalidUrl`]).

use std::fmt;
use std::time::Duration;

pub use crate::explain::explain;
use crate::explain::{is_denied, is_moved, url_reason};

/// `Result` with this crate's [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in `redquorum`.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The resource is held by someone else: enough nodes answered that the key
    /// already exists that no quorum could be won.
    #[error("resource {resource:?} is held by another owner")]
    Contended {
        /// The resource that was asked for.
        resource: String,
    },

    /// Too few nodes answered to form a quorum (they were down, timed out or
    /// returned an error). `failures` says which nodes failed and why.
    #[error("no quorum{}: {}", for_resource(resource), no_quorum(*asked, *answered, *needed, *succeeded, failures))]
    NoQuorum {
        /// The resource (or counter) the operation was for (empty for
        /// [`Redlock::connect`](crate::Redlock::connect)).
        resource: String,
        /// How many nodes were asked.
        asked: usize,
        /// How many answered before the outcome was clear (the others were
        /// not waited for).
        answered: usize,
        /// How many nodes had to agree.
        needed: usize,
        /// How many nodes did agree.
        succeeded: usize,
        /// One entry per node that failed, in node order.
        failures: Vec<NodeError>,
    },

    /// The lock has expired or was lost: its validity ran out, or a quorum of
    /// nodes no longer holds our value (extend, release, or a guarded write after
    /// expiry).
    #[error("lock on {resource:?} has expired or was lost")]
    Expired {
        /// The resource whose lock is gone.
        resource: String,
    },

    /// A quorum of nodes granted the lock, but the attempt took longer than
    /// the TTL allows (less the drift allowance): it was never usable, and
    /// it was released. The TTL is too short for these nodes' round trips.
    #[error("winning a quorum for {resource:?} took {}, more than its TTL of {} allows (less the drift allowance): the lock was never usable; use a longer TTL", rounded(*took), rounded(*ttl))]
    TtlTooShort {
        /// The resource that was asked for.
        resource: String,
        /// The TTL asked for.
        ttl: Duration,
        /// How long the attempt took.
        took: Duration,
    },

    /// A key redquorum uses holds data of another type on a node (a string
    /// where a waiting list or counter belongs, or a hash at a lock's key):
    /// it is not ours, and no retry will change that.
    #[error("key {key:?} (or a key redquorum keeps for it) holds data of another type on {node}; it is not redquorum's: delete it or use another name")]
    WrongType {
        /// The key the operation was about.
        key: String,
        /// The node where the key was met, with the server's reply.
        node: NodeError,
    },

    /// Waiting for the lock took longer than the allowed time.
    #[error("gave up on {resource:?} after waiting {}: {}", rounded(*waited), last.reason())]
    Timeout {
        /// The resource that was asked for.
        resource: String,
        /// How long we waited in total.
        waited: Duration,
        /// Why the last attempt failed.
        #[source]
        last: Box<Error>,
    },

    /// A configuration value or an argument is not acceptable.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),

    /// A multi-lock's resources hash to different slots, and a node is a
    /// Redis Cluster member, which runs a script only on keys of one slot.
    #[error(
        "resources {resources:?} hash to different slots and node {node} is a Redis Cluster \
         member, which takes one slot's keys per script: give the resources one hash tag, \
         like {{acct}}:7 and {{acct}}:9"
    )]
    CrossSlot {
        /// The resources, joined by `+`.
        resources: String,
        /// The node that refused (`host:port`).
        node: String,
    },

    /// The lock is still ours, but for less time than the caller needs
    /// ([`Lock::ensure_valid`](crate::Lock::ensure_valid)).
    #[error("lock on {resource:?} is valid for another {}, less than the {} needed", rounded(*left), rounded(*needed))]
    ValidityTooShort {
        /// The resource.
        resource: String,
        /// Validity left.
        left: Duration,
        /// Validity asked for.
        needed: Duration,
    },

    /// A node URL could not be parsed or uses a scheme this build cannot serve.
    #[error("invalid node url {url:?}: {}{}", url_reason(source), hint.as_deref().map(|h| format!("; did you mean {h:?}?")).unwrap_or_default())]
    InvalidUrl {
        /// The URL as given, with any password removed.
        url: String,
        /// The URL we think was meant, if the mistake is a common one.
        hint: Option<String>,
        /// What the `redis` crate said about it.
        #[source]
        source: redis::RedisError,
    },

    /// A serial-number period has no numbers left at the configured width.
    #[error(
        "counter {counter:?} is exhausted for period {period}: {requested} more would pass {max}"
    )]
    Exhausted {
        /// The counter (serial prefix).
        counter: String,
        /// The period stamp, e.g. `20261122`.
        period: String,
        /// How many numbers were requested.
        requested: u64,
        /// The largest number the width allows.
        max: u64,
    },

    /// The client's clock says a period earlier than numbers were already issued
    /// for, by more than the configured tolerance.
    #[error("clock behind for counter {counter:?}: local period {local} is before issued period {issued}{}", hint.as_deref().map(|h| format!("; {h}")).unwrap_or_default())]
    ClockBehind {
        /// The counter (serial prefix).
        counter: String,
        /// The period by this client's clock.
        local: String,
        /// The latest period numbers were issued in.
        issued: String,
        /// The likely cause, when one is evident (a generator in another
        /// time zone).
        hint: Option<String>,
    },

    /// A serial prefix is pinned to another reset period or width than this
    /// generator's: issuing with both could print the same number twice.
    #[error("serial prefix {counter:?} is pinned to {} on the nodes, this generator asks for {}: the two could issue the same numbers; use the pinned configuration or another prefix (the pin is the key {key:?})", config_words(pinned), config_words(asked))]
    SerialConfigConflict {
        /// The serial prefix.
        counter: String,
        /// The configuration a node holds, `period/width` (`hour/2`).
        pinned: String,
        /// This generator's, `period/width`.
        asked: String,
        /// The key holding the pin on each node.
        key: String,
    },

    /// The nodes hold another number of permits for this semaphore than
    /// this client gives it: using both would admit more holders than the
    /// smaller number.
    #[error("semaphore {semaphore:?} has {pinned} permits on the nodes, this client gives it {asked}: use the same number everywhere (to change it, stop every user and delete the key {key:?} on every node)")]
    SemaphoreConflict {
        /// The semaphore's name.
        semaphore: String,
        /// The number of permits a node holds.
        pinned: String,
        /// This client's.
        asked: usize,
        /// The key holding the pin on each node.
        key: String,
    },

    /// The runtime is shutting down: a background round was dropped before
    /// it could answer.
    #[error("runtime shut down before the operation completed")]
    Shutdown,

    /// Concurrent writers kept winning the compare-and-set for two seconds
    /// (and at least 32 rounds), and this allocation gave up.
    #[error("counter {counter:?}: too much contention, gave up after {attempts} attempts")]
    CounterContention {
        /// The counter name.
        counter: String,
        /// How many compare-and-set rounds were tried.
        attempts: u32,
    },
}

impl Error {
    /// Why an attempt failed, as the tail of a [`Error::Timeout`] message.
    fn reason(&self) -> String {
        match self {
            Error::Contended { .. } => "held by another owner".into(),
            Error::NoQuorum {
                asked,
                answered,
                needed,
                succeeded,
                failures,
                ..
            } => format!(
                "no quorum: {}",
                no_quorum(*asked, *answered, *needed, *succeeded, failures)
            ),
            Error::Expired { .. } => "the lock expired before it could be used".into(),
            Error::TtlTooShort { ttl, took, .. } => format!(
                "the last attempt took {}, more than the TTL of {} allows: use a longer TTL",
                rounded(*took),
                rounded(*ttl)
            ),
            other => other.to_string(),
        }
    }
}

/// Why one node did not take part in a quorum.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct NodeError {
    /// Position of the node in the configured list, from 0.
    pub index: usize,
    /// The node's `host:port` (never the password).
    pub addr: String,
    /// What went wrong.
    pub kind: NodeErrorKind,
}

/// The cause of a [`NodeError`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum NodeErrorKind {
    /// The node did not answer within the per-node timeout.
    Timeout(Duration),
    /// The connection or the command failed.
    Redis(redis::RedisError),
    /// The node answered with something our scripts never return.
    UnexpectedReply,
    /// The node's ACL user may not run a command a script needs.
    Denied {
        /// The commands the script runs, one of which is not allowed
        /// (`EVAL TIME ZADD ...`).
        needs: String,
        /// What the node said.
        error: redis::RedisError,
    },
    /// The node may have lost writes (it restarted without durable
    /// persistence, or another process took its place), so its yes does not
    /// count toward a lock quorum until every lock it may have forgotten
    /// has expired.
    Quarantined {
        /// How much longer, from when the vote was counted.
        remaining: Duration,
        /// Why the node may have lost writes.
        cause: &'static str,
    },
    /// The node may have lost writes, and its record of the counter was
    /// not repaired since: its acceptance does not count until a round
    /// that a quorum of other nodes (or every node) accepted repairs it.
    Unrepaired {
        /// Why the node may have lost writes.
        cause: &'static str,
    },
}

impl NodeErrorKind {
    /// True for failures that retrying never fixes and an operator must:
    /// the node is not a Redis server, wants a password or another one, its
    /// ACL refuses a command we need, its name does not resolve (a
    /// mistyped host), or it has no database of the URL's index.
    pub(crate) fn needs_operator(&self) -> bool {
        match self {
            NodeErrorKind::Denied { .. } => true,
            NodeErrorKind::Redis(e) => {
                let text = e.to_string();
                matches!(
                    e.kind(),
                    redis::ErrorKind::Parse | redis::ErrorKind::AuthenticationFailed
                ) || matches!(e.code(), Some("NOAUTH" | "WRONGPASS"))
                    || is_denied(e)
                    || is_moved(e)
                    || text.contains("unauthenticated")
                    || text.contains("failed to lookup address")
                    || text.contains("switch database")
                    || text.contains("DB index is out of range")
            }
            _ => false,
        }
    }
}

impl NodeError {
    /// True when the node did not answer in time.
    pub fn is_timeout(&self) -> bool {
        match &self.kind {
            NodeErrorKind::Timeout(_) => true,
            NodeErrorKind::Redis(e) => e.is_timeout(),
            NodeErrorKind::UnexpectedReply
            | NodeErrorKind::Denied { .. }
            | NodeErrorKind::Quarantined { .. }
            | NodeErrorKind::Unrepaired { .. } => false,
        }
    }
}

impl fmt::Display for NodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node {} ({}): {}", self.index, self.addr, self.kind)
    }
}

impl fmt::Display for NodeErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeErrorKind::Timeout(d) => write!(f, "no reply within {}", rounded(*d)),
            NodeErrorKind::Redis(e) => f.write_str(&explain(e)),
            NodeErrorKind::UnexpectedReply => f.write_str("unexpected reply"),
            NodeErrorKind::Quarantined { remaining, cause } => write!(
                f,
                "quarantined for another {}: it {cause}, so locks it held may be gone; it \
                 counts toward lock quorums again once none of them can still be valid",
                rounded(*remaining)
            ),
            NodeErrorKind::Unrepaired { cause } => write!(
                f,
                "its record of this counter is not trusted: it {cause}; it counts again once \
                 an allocation that a quorum of the other nodes (or every node) accepted \
                 repairs it"
            ),
            NodeErrorKind::Denied { needs, .. } => write!(
                f,
                "the node's ACL user may not run one of the commands this needs ({needs}): \
                 allow them for that user (the repository's docs/configuration.md lists what each feature needs)"
            ),
        }
    }
}

/// ` for "name"`, or nothing for an operation on no resource.
fn for_resource(resource: &str) -> String {
    if resource.is_empty() {
        String::new()
    } else {
        format!(" for {resource:?}")
    }
}

/// The body of a [`Error::NoQuorum`] message: who was asked, who failed and
/// why, who answered and agreed.
fn no_quorum(
    asked: usize,
    answered: usize,
    needed: usize,
    agreed: usize,
    failures: &[NodeError],
) -> String {
    let mut out = format!("{} of {asked} nodes failed", failures.len());
    if !failures.is_empty() {
        // Nodes that failed alike are named together, the reason once.
        let mut alike: Vec<(String, Vec<String>)> = Vec::new();
        for f in failures {
            let why = f.kind.to_string();
            let who = format!("{} ({})", f.index, f.addr);
            match alike.iter_mut().find(|(w, _)| *w == why) {
                Some((_, nodes)) => nodes.push(who),
                None => alike.push((why, vec![who])),
            }
        }
        let list: Vec<String> = alike
            .into_iter()
            .map(|(why, nodes)| format!("{}: {why}", nodes.join(", ")))
            .collect();
        out.push_str(&format!(" ({})", list.join("; ")));
    }
    let unheard = asked.saturating_sub(answered + failures.len());
    // A node that failed may have answered (a quarantined node's yes that
    // does not count): the others are what is said here.
    match answered {
        // Nothing to add: the rest were not waited for (said below).
        0 if unheard > 0 => {}
        0 if failures.is_empty() => out.push_str("; none answered"),
        0 => out.push_str("; no other node answered"),
        n if agreed == n => out.push_str(&format!("; {n} answered and agreed")),
        n => out.push_str(&format!(
            "; {n} answered: {agreed} agreed, {} refused",
            n - agreed
        )),
    }
    if unheard > 0 {
        let sep = if answered == 0 { ";" } else { "," };
        out.push_str(&format!(
            "{sep} {unheard} more not waited for (a quorum was already out of reach)"
        ));
    }
    out.push_str(&format!("; {needed} needed"));
    out
}

/// `day/4` as `period day, width 4`.
fn config_words(config: &str) -> String {
    match config.split_once('/') {
        Some((period, width)) => format!("period {period}, width {width}"),
        None => format!("{config:?}"),
    }
}

/// A duration for people: `987ms`, `9.9s`, `2m30s`.
pub(crate) fn rounded(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 10_000 {
        if ms < 1_000 {
            format!("{ms}ms")
        } else {
            format!("{:.1}s", d.as_secs_f64())
        }
    } else if ms < 120_000 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}m{}s", d.as_secs() / 60, d.as_secs() % 60)
    }
}

impl std::error::Error for NodeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.kind {
            NodeErrorKind::Redis(e) | NodeErrorKind::Denied { error: e, .. } => Some(e),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn predicates() {
        let c = Error::Contended {
            resource: "r".into(),
        };
        assert!(c.is_retryable() && c.is_contended() && !c.is_timeout());
        let t = Error::Timeout {
            resource: "r".into(),
            waited: Duration::from_secs(1),
            last: Box::new(c),
        };
        assert!(t.is_timeout() && t.is_contended());
        let nq = Error::NoQuorum {
            resource: "r".into(),
            asked: 5,
            answered: 4,
            needed: 3,
            succeeded: 2,
            failures: vec![NodeError {
                index: 4,
                addr: "127.0.0.1:1".into(),
                kind: NodeErrorKind::Timeout(Duration::from_millis(5)),
            }],
        };
        assert!(nq.is_timeout());
        assert_eq!(nq.node_failures()[0].index, 4);
        assert!(!Error::InvalidConfig("x".into()).is_retryable());
    }

    fn refused(index: usize) -> NodeError {
        let io = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        NodeError {
            index,
            addr: format!("127.0.0.1:740{index}"),
            kind: NodeErrorKind::Redis(redis::RedisError::from(io)),
        }
    }

    #[test]
    fn messages_say_what_happened_and_why() {
        let node = refused(3).to_string();
        assert!(
            node.starts_with("node 3 (127.0.0.1:7403): connection refused"),
            "{node}"
        );
        assert!(!node.ends_with("redis error"), "{node}");
        let nq = Error::NoQuorum {
            resource: "x".into(),
            asked: 5,
            answered: 2,
            needed: 3,
            succeeded: 2,
            failures: vec![refused(2), refused(3), refused(4)],
        };
        let text = nq.to_string();
        // Nodes that failed alike are named together, the reason once.
        assert!(
            text.starts_with(
                "no quorum for \"x\": 3 of 5 nodes failed (2 (127.0.0.1:7402), 3 \
                 (127.0.0.1:7403), 4 (127.0.0.1:7404): connection refused)"
            ),
            "{text}"
        );
        assert!(
            text.ends_with("; 2 answered and agreed; 3 needed"),
            "{text}"
        );
        let t = Error::Timeout {
            resource: "x".into(),
            waited: Duration::from_micros(987_400),
            last: Box::new(Error::Contended {
                resource: "x".into(),
            }),
        };
        assert_eq!(
            t.to_string(),
            "gave up on \"x\" after waiting 987ms: held by another owner"
        );
        let short = Error::ValidityTooShort {
            resource: "x".into(),
            left: Duration::from_millis(9_900),
            needed: Duration::from_secs(60),
        };
        assert_eq!(
            short.to_string(),
            "lock on \"x\" is valid for another 9.9s, less than the 60s needed"
        );
        assert!(!short.is_expired());
    }
}
