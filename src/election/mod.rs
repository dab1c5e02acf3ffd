//! Leader election: the name's lock, a term from the quorum counter, and
//! a published record of who leads.
//!
//! A candidate takes the election's lock, waiting as lock waiters do (in
//! arrival order, woken by the nodes), then mints its term from the
//! election's counter exactly as a fencing token is minted: it keeps the
//! leadership only if the lock was still valid when the term's
//! compare-and-set reached a quorum. Every later leader takes the lock
//! after that, and mints a larger term, so terms increase along the order
//! of leadership. It then writes the record {owner, term, value} on the
//! nodes, only where the lock still holds its value (`LEADER_PUBLISH`), and
//! renews the lock in the background until it resigns or loses it.
//!
//! [`Election::leader`] reads every node (`LEADER_READ`) and reports a
//! leader only when a quorum of nodes name the same term and value with
//! the lock still held by the record's owner. Observers are woken by the
//! nodes (client tracking on the lock key and the record), not by polling.
//!
//! In Kubernetes' words: the lease duration is the TTL, the renew deadline
//! the validity the lock keeps, the retry period the auto-extension
//! interval.

pub(crate) mod leadership;
pub(crate) mod observe;
pub(crate) mod scripts;

use std::sync::Mutex;
use std::time::Duration;

use redis::Value;
use tracing::{debug, Instrument};

use crate::acquire::acquisition::{acquisition_span, sealed, Acquire, How, Taking};
use crate::acquire::attempt::KeyAttempt;
use crate::acquire::patience::Patience;
use crate::client::redlock::{int_vote, Redlock};
use crate::counter::CounterKeys;
use crate::election::leadership::Leadership;
use crate::error::{Error, Result};
use crate::keys::{self, Kind};
use crate::lock::guard::Lock;
use crate::mutex;
use crate::node::connection::request::Request;
use crate::quorum::fanout::Fanout;
use crate::quorum::tally::Tally;
use crate::quorum::Counts;
use crate::telemetry::labels::Primitive;

/// The leader a quorum of nodes agree on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leader {
    /// What the leader campaigned with (an address, a host name).
    pub value: String,
    /// Its term: larger than every earlier leader's.
    pub term: u64,
}

/// An election over the nodes: at most one leader at a time, each with a
/// larger term than every earlier one.
///
/// Made by [`Redlock::election`](crate::Redlock::election); clone it freely.
///
/// # Examples
///
/// ```no_run
/// # async fn f(redlock: redquorum::Redlock) -> redquorum::Result<()> {
/// use std::time::Duration;
/// let election = redlock.election("scheduler", Duration::from_secs(10))?;
/// let leadership = election.campaign("host-a:8080").await?;
/// println!("leading in term {}", leadership.term());
/// tokio::select! {
///     () = leadership.lost() => println!("lost it"),
///     () = tokio::time::sleep(Duration::from_secs(60)) => leadership.resign().await?,
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Election {
    /// The client.
    pub(crate) redlock: Redlock,
    /// The name the caller gave.
    pub(crate) name: String,
    /// The lock key, then the leadership record: what observers watch.
    pub(crate) keys: [String; 2],
    /// Where terms are counted.
    terms: CounterKeys,
    /// The leadership's TTL.
    ttl: Duration,
}

impl Redlock {
    /// An election named `name` whose leaders hold it for `ttl` at a time,
    /// renewed in the background (every `ttl × auto_extend_fraction`, sooner
    /// where the validity left calls for it). A
    /// leader that dies is replaced within `ttl`. A leader holds the name's
    /// lock key, so the name's lock ([`Redlock::lock`]) and read-write lock
    /// exclude it (one name, one lock); its record and term counter live in
    /// redquorum's reserved namespace.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig) for an empty or reserved name or an
    /// unusable TTL.
    pub fn election(&self, name: &str, ttl: Duration) -> Result<Election> {
        if name.is_empty() {
            return Err(Error::InvalidConfig("election name is empty".into()));
        }
        keys::check_resource(name)?;
        self.config().check_ttl(ttl)?;
        let prefix = &self.config().key_prefix;
        // The leadership is the name's lock: `lock(name)`, a read-write
        // lock's writer and readers of `name` and every Redlock client's
        // `SET NX` on it exclude a leader, and it them (one name, one
        // lock). Terms keep the counter they always had, named after the
        // key elections used before, so they go on rising across an
        // upgrade.
        let anchor = self.key_for(name);
        let terms = self.fence_keys_at(name, &keys::internal(prefix, Kind::Election, &anchor));
        let record = keys::internal(prefix, Kind::Leader, &anchor);
        Ok(Election {
            redlock: self.clone(),
            name: name.to_owned(),
            keys: [anchor, record],
            terms,
            ttl,
        })
    }
}

/// What [`Election::campaign`] takes: the leadership, with a new term.
#[derive(Debug)]
pub struct Candidacy<'a> {
    /// The election.
    election: &'a Election,
    /// What the leader reports.
    value: &'a str,
}

impl<'a> sealed::Target<'a> for Candidacy<'a> {
    type Held = Leadership;

    fn take(self, how: How) -> Taking<'a, Leadership> {
        let span = acquisition_span!(
            how,
            "campaign_timeout",
            "campaign",
            "campaign_timeout",
            "campaign",
            "campaign_timeout"
        );
        span.record("election", self.election.name.as_str());
        Box::pin(self.election.take(self.value, how).instrument(span))
    }

    fn lock_of(held: Leadership) -> Lock {
        held.into_lock()
    }
}

impl Election {
    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Campaigns with `value` (what [`Election::leader`] reports for this
    /// leader): await what this returns to wait to become leader, for as
    /// long as it takes (through outages too: a round that fails for want
    /// of nodes is retried after a pause), in arrival order among
    /// candidates; then it leads with a new term, renewed in the
    /// background. Or first say how ([`Acquire`]): `.wait(d)` for at most
    /// `d`, `.try_once()` for one attempt, `.run(f)` to lead while `f`
    /// runs (a leadership is always fenced by its term).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig) for an unusable
    /// TTL; otherwise it keeps trying (drop the future to give up); with
    /// `.wait(d)`, [`Error::Timeout`](crate::Error::Timeout) when `d` runs
    /// out, carrying the last attempt's error.
    pub fn campaign<'a>(&'a self, value: &'a str) -> Acquire<'a, Candidacy<'a>> {
        Acquire::new(Candidacy {
            election: self,
            value,
        })
    }

    /// Campaigns as `how` says.
    async fn take(&self, value: &str, how: How) -> Result<Leadership> {
        let patience = how.patience(&self.redlock, Some(Patience::within(Duration::MAX)));
        self.run(value, patience).await
    }

    /// [`Election::campaign`] for at most `wait`.
    ///
    /// # Errors
    ///
    /// As [`Election::campaign`] with `.wait(wait)`.
    #[deprecated(since = "0.2.0", note = "use `campaign(value).wait(wait)`")]
    pub async fn campaign_timeout(&self, value: &str, wait: Duration) -> Result<Leadership> {
        self.campaign(value).wait(wait).await
    }

    /// The campaign's loop: the fenced lock, then the record.
    async fn run(&self, value: &str, patience: Patience) -> Result<Leadership> {
        let redlock = &self.redlock;
        let ttl_ms = redlock.config().check_ttl(self.ttl)?;
        let key = self.keys[0].clone();
        let what = KeyAttempt::new(redlock, &self.name, key, self.ttl, ttl_ms)
            .standing_for(Primitive::Election);
        loop {
            let lock = match redlock
                .fenced_with(&what, std::slice::from_ref(&self.terms), patience)
                .await
            {
                Ok(lock) => lock,
                // A term that could not be minted (counter nodes away or
                // not yet repaired): time can fix that, as it fixes an
                // outage, so the campaign goes on while its patience lasts.
                Err(e) if e.is_retryable() && !patience.run_out() => {
                    let pause = redlock.retry_pause();
                    if !patience.allows_pause(pause) {
                        return Err(e);
                    }
                    debug!(error = %e, "no leadership this round; campaigning again");
                    tokio::time::sleep(pause).await;
                    continue;
                }
                Err(e) => return Err(e),
            };
            // Renewed from now: the lock and the term took a round each,
            // and the record takes another; a far candidate (a round trip a
            // fifth of the TTL) renewing only after all that lost every
            // leadership. A release below stops it.
            lock.auto_extend();
            let term = lock.fencing_token().unwrap_or_default();
            let error = match self.publish(&lock, term, value).await {
                Ok(()) => {
                    debug!(term, "leading");
                    return Ok(Leadership::new(lock, term, value));
                }
                Err(e) => e,
            };
            if let Err(release) = lock.release().await {
                debug!(error = %release, "release after a leadership record that did not land");
            }
            if patience.run_out() {
                return Err(error);
            }
        }
    }

    /// Writes the leadership record on a quorum, where the lock is ours.
    async fn publish(&self, lock: &Lock, term: u64, value: &str) -> Result<()> {
        let req = Request::script(
            &scripts::LEADER_PUBLISH,
            [&self.keys[0], &self.keys[1]],
            |cmd| {
                cmd.arg(lock.value()).arg(term).arg(value);
            },
        );
        let nodes = self.redlock.nodes();
        let (tally, stragglers) = nodes
            .vote_round(&req, "publish", Counts::Trusted, int_vote)
            .await;
        stragglers.finish_in_background();
        match tally.decided() {
            Some(true) if lock.is_valid() => Ok(()),
            Some(true) => Err(Error::Expired {
                resource: self.name.clone(),
            }),
            _ => Err(self
                .redlock
                .failure_or_expired(&self.name, &self.keys[0], tally)),
        }
    }

    /// The current leader, if a quorum of nodes agree on one (the same term
    /// and value, its lock held). `None` between leaders, and while a new
    /// leader is still writing its record.
    ///
    /// A leader read here may have lost its leadership since; a leader
    /// itself checks [`Lock::ensure_valid`](crate::Lock::ensure_valid) on its [`Leadership`].
    ///
    /// # Errors
    ///
    /// [`Error::NoQuorum`](crate::Error::NoQuorum) when too few nodes answered to tell.
    pub async fn leader(&self) -> Result<Option<Leader>> {
        Ok(self.read().await?.0)
    }

    /// Reads every node: the leader a quorum agree on, and the shortest time
    /// any node's lock key has left (when that node's view may change by
    /// expiry alone).
    pub(crate) async fn read(&self) -> Result<(Option<Leader>, Option<Duration>)> {
        let req = Request::script(
            &scripts::LEADER_READ,
            [&self.keys[0], &self.keys[1]],
            |_| {},
        );
        let n = self.redlock.node_count();
        let views: Mutex<Vec<Option<View>>> = Mutex::new(vec![None; n]);
        let lock_views = || mutex::lock(&views);
        let classify = |i: usize, v: &Value| {
            let view = read_view(v)?;
            lock_views()[i] = Some(view);
            Some(true)
        };
        let quorum = self.redlock.quorum();
        let done = |t: &Tally, _: &Fanout<'_>| {
            agreed(&lock_views(), quorum).is_some()
                || t.decided() == Some(false)
                || t.heard() >= t.asked
        };
        let (tally, _) = self
            .redlock
            .nodes()
            .vote_until(&req, "leader", Counts::All, classify, done)
            .await;
        let views = mutex::into_inner(views);
        if let Some(leader) = agreed(&views, quorum) {
            return Ok((Some(leader), soonest(&views)));
        }
        if tally.yes_count() < quorum {
            return Err(tally.into_no_quorum(&self.name));
        }
        Ok((None, soonest(&views)))
    }
}

/// What one node says of an election: the record's term and value if the
/// lock's holder wrote it, and the lock's PTTL (-2: not held).
#[derive(Clone, Debug, PartialEq, Eq)]
struct View {
    /// The leader, if the record names the lock's holder.
    leader: Option<Leader>,
    /// The lock key's PTTL.
    pttl: i64,
}

/// A node's `LEADER_READ` reply.
fn read_view(v: &Value) -> Option<View> {
    let Value::Array(items) = v else { return None };
    let [term, value, Value::Int(pttl)] = items.as_slice() else {
        return None;
    };
    let text = |v: &Value| match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    let (term, value) = (text(term)?, text(value)?);
    let leader = match term.parse::<u64>() {
        Ok(term) => Some(Leader { value, term }),
        Err(_) if term.is_empty() => None,
        Err(_) => return None,
    };
    Some(View {
        leader,
        pttl: *pttl,
    })
}

/// The leader at least `quorum` views name.
fn agreed(views: &[Option<View>], quorum: usize) -> Option<Leader> {
    let named: Vec<&Leader> = views
        .iter()
        .flatten()
        .filter_map(|v| v.leader.as_ref())
        .collect();
    named
        .iter()
        .find(|l| named.iter().filter(|m| m == l).count() >= quorum)
        .map(|l| (*l).clone())
}

/// The shortest time a held lock key has left on any node.
fn soonest(views: &[Option<View>]) -> Option<Duration> {
    views
        .iter()
        .flatten()
        .filter(|v| v.pttl >= 0)
        .map(|v| Duration::from_millis(v.pttl as u64))
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(term: &str, value: &str, pttl: i64) -> Value {
        Value::Array(vec![
            Value::BulkString(term.into()),
            Value::BulkString(value.into()),
            Value::Int(pttl),
        ])
    }

    #[test]
    fn a_leader_is_what_a_quorum_of_nodes_name() {
        let a = read_view(&view("7", "host-a", 900));
        let b = read_view(&view("", "", 900));
        let none = read_view(&view("", "", -2));
        let leader = Leader {
            value: "host-a".into(),
            term: 7,
        };
        assert_eq!(
            a.as_ref().and_then(|v| v.leader.clone()),
            Some(leader.clone())
        );
        assert_eq!(agreed(&[a.clone(), a.clone(), b.clone()], 2), Some(leader));
        assert_eq!(agreed(&[a.clone(), b.clone(), none.clone()], 2), None);
        assert_eq!(soonest(&[a, none, None]), Some(Duration::from_millis(900)));
        assert!(
            read_view(&view("x", "y", 1)).is_none(),
            "a term is a number"
        );
    }
}
