//! While this client holds anything, the nodes' clocks are read even where
//! nothing else is sent, paced twice over: by our clock (a node sent
//! nothing for [`CLOCK_PROBE`] gets a `PING` with its `TIME` behind it),
//! and by a node's (a timer kept there, `node/clock/tick.rs`).
//!
//! The first tells a holder within about a second that a node's clock ran
//! ahead (`node/clock/clockwatch.rs`). The second is for our own clock: where it
//! stalls, no timer of ours fires, but the node's does; when it comes back
//! with less counted on ours than on the node's, every node's clock is
//! read at once, and each reading shows that node ran ahead of us. Where a
//! quorum of nodes did, our clock is the odd one and no holder keeps any
//! validity on it (`lock/shared.rs`).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use redis::RedisResult;
use tokio::time::Instant;
use tracing::debug;

use crate::mutex;
use crate::node::clock::tick::Ticker;
use crate::node::connection::request::Request;
use crate::quorum::tally::node_bit;
use crate::quorum::Quorum;

/// While this client holds a lock, a node it sent nothing to for this long
/// gets a `PING` (with its `TIME` behind it), so that a clock that runs
/// ahead is seen, and a holder told, within about this long.
pub(crate) const CLOCK_PROBE: Duration = Duration::from_secs(1);

/// The shortest period of the node's timer (its server checks timeouts
/// about every 100 ms at its default `hz`).
const SHORTEST_TICK: Duration = Duration::from_millis(50);

/// The part of a tick's period that must pass on our clock, too, for our
/// clock to pass as running: far below any drift allowance, far above a
/// stall.
const RUNNING: f64 = 0.9;

/// The rule, pure: with `ahead` nodes seen running their clocks ahead of
/// ours since a holding was taken, of which `needed` make a quorum, whether
/// the odd clock is ours. Each reading compares one node's advance with
/// ours; a quorum of nodes cannot all have run ahead without ours having
/// fallen behind, or without the keys on a quorum having lost life.
pub(crate) fn ours_is_odd(ahead: usize, needed: usize) -> bool {
    ahead >= needed
}

/// What a held lock keeps alive, and the task it starts.
#[derive(Debug, Default)]
pub(crate) struct Probing {
    /// Held by every lock this client holds: while any is, the task runs.
    token: Mutex<Weak<()>>,
    /// Whether the task runs.
    task: AtomicBool,
    /// The node timer's period in ms (0: not set since the task started):
    /// a quarter of the shortest TTL held, at most [`CLOCK_PROBE`].
    tick_ms: AtomicU64,
}

impl Probing {
    /// Whether some lock holds a token.
    pub(crate) fn held(&self) -> bool {
        mutex::lock(&self.token).upgrade().is_some()
    }

    /// The token for a lock with time to live `ttl`.
    fn token(&self, ttl: Duration) -> Arc<()> {
        let quarter = (ttl / 4).clamp(SHORTEST_TICK, CLOCK_PROBE);
        let ms = u64::try_from(quarter.as_millis()).unwrap_or(u64::MAX);
        let _ = self
            .tick_ms
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| {
                (t == 0 || ms < t).then_some(ms)
            });
        let mut token = mutex::lock(&self.token);
        token.upgrade().unwrap_or_else(|| {
            let new = Arc::new(());
            *token = Arc::downgrade(&new);
            new
        })
    }

    /// The node timer's period.
    fn tick_period(&self) -> Duration {
        match self.tick_ms.load(Ordering::Acquire) {
            0 => CLOCK_PROBE,
            ms => Duration::from_millis(ms),
        }
    }
}

impl Quorum {
    /// A token a held lock with time to live `ttl` keeps: while any is
    /// kept, a task started here reads the nodes' clocks (see the module
    /// docs). `this` is how the task reaches the nodes (it stops once the
    /// client is gone, or when it wakes and no token is kept).
    pub(crate) fn probe_while_held<T: Send + Sync + 'static>(
        &self,
        this: Weak<T>,
        quorum: fn(&T) -> &Quorum,
        ttl: Duration,
    ) -> Arc<()> {
        let token = self.probing.token(ttl);
        // One task per client, however many locks come and go: a task per
        // lock (each sleeping a second) cost sequential lock+release about
        // a tenth of its p50.
        if !self.probing.task.swap(true, Ordering::AcqRel) {
            tokio::spawn(probe(this, quorum));
        }
        token
    }

    /// Reads the clock of each answering node that was sent nothing for
    /// [`CLOCK_PROBE`] (all of them where `every`).
    fn probe_clocks(&self, every: bool) {
        let now = crate::clock::now();
        let idle = self.nodes.iter().filter(|n| {
            n.is_healthy()
                && (every
                    || n.clock_read_at()
                        .is_none_or(|at| now.saturating_duration_since(at) >= CLOCK_PROBE))
        });
        let targets = idle.fold(0, |set, n| set | node_bit(n.index));
        self.send_quietly(&Request::plain(redis::cmd("PING")), targets);
    }

    /// A timer on the first node from `from` on (in turn) that has not
    /// refused one (`refused`, a node set).
    fn next_ticker(&self, from: usize, refused: u64) -> Option<Ticker> {
        let n = self.nodes.len();
        (0..n)
            .map(|i| (from + i) % n)
            .filter(|i| refused & node_bit(*i) == 0)
            .find_map(|i| self.nodes[i].ticker())
    }
}

/// A node timer's wait: the timer back, with its outcome, when it was
/// started on our clock, and its period.
type Tick = Pin<Box<dyn Future<Output = (Ticker, RedisResult<()>, Instant, Duration)> + Send>>;

/// Starts `ticker`'s next wait of `period`.
fn start(mut ticker: Ticker, period: Duration) -> Tick {
    Box::pin(async move {
        let sent = crate::clock::now();
        let outcome = ticker.tick(period).await;
        (ticker, outcome, sent, period)
    })
}

/// A node timer's wait under way, and when it started on our clock.
struct Pending {
    /// The wait.
    tick: Tick,
    /// When it started.
    since: Instant,
    /// The node it waits on.
    node: usize,
}

/// The task: wakes on our clock or the node's, whichever first, and reads
/// clocks as the module docs say, while some lock holds a token.
async fn probe<T: Send + Sync + 'static>(this: Weak<T>, quorum: fn(&T) -> &Quorum) {
    let mut pending: Option<Pending> = None;
    // Where the next timer goes, the nodes that refused one, and how many
    // timers failed in a row.
    let (mut next, mut refused, mut failed) = (0_usize, 0_u64, 0_usize);
    let mut wake = tokio::time::Instant::now() + CLOCK_PROBE;
    // The first timer at once: a clock that stalled before the lock was
    // taken would never wake this task.
    if let Some(this) = this.upgrade() {
        let q = quorum(&this);
        pending = q.next_ticker(0, 0).map(|t| Pending {
            node: t.index,
            tick: start(t, q.probing.tick_period()),
            since: crate::clock::now(),
        });
    }
    loop {
        let woke = match pending.as_mut() {
            Some(p) => tokio::select! {
                () = tokio::time::sleep_until(wake) => None,
                done = &mut p.tick => Some(done),
            },
            None => {
                tokio::time::sleep_until(wake).await;
                None
            }
        };
        let Some(this) = this.upgrade() else { return };
        let q = quorum(&this);
        if !q.probing.held() {
            // A lock taken from here on starts a task of its own.
            q.probing.task.store(false, Ordering::Release);
            q.probing.tick_ms.store(0, Ordering::Release);
            if !q.probing.held() || q.probing.task.swap(true, Ordering::AcqRel) {
                return;
            }
        }
        let period = q.probing.tick_period();
        let now = crate::clock::now();
        let ticker = match woke {
            None => {
                wake = tokio::time::Instant::now() + CLOCK_PROBE;
                q.probe_clocks(false);
                match &pending {
                    // A node that holds its timer far past the period (a
                    // node paused, a link cut) is left for the next.
                    Some(p)
                        if now.saturating_duration_since(p.since) > 3 * period + q.node_timeout =>
                    {
                        next = p.node + 1;
                        None
                    }
                    Some(_) => continue,
                    None => None,
                }
            }
            Some((ticker, Ok(()), sent, waited)) => {
                failed = 0;
                let ours = now.saturating_duration_since(sent);
                if ours < waited.mul_f64(RUNNING) {
                    debug!(
                        node = ticker.index,
                        ours_ms = ours.as_millis() as u64,
                        node_ms = waited.as_millis() as u64,
                        "a node's timer came back before ours counted its period: reading \
                         every node's clock"
                    );
                    q.probe_clocks(true);
                }
                Some(ticker)
            }
            Some((ticker, Err(e), _, _)) => {
                debug!(node = ticker.index, error = %e, "the node's timer failed: the next node's");
                if ticker.refused {
                    refused |= node_bit(ticker.index);
                }
                next = ticker.index + 1;
                failed += 1;
                None
            }
        };
        // The same node's timer again, or the next node's; after a failure
        // on every node in a row, not before our clock's next wake (no
        // loop on nodes that fail at once).
        let ticker = ticker.or_else(|| {
            (failed < q.nodes.len())
                .then(|| q.next_ticker(next, refused))
                .flatten()
        });
        if failed >= q.nodes.len() {
            failed = 0;
        }
        pending = ticker.map(|t| Pending {
            node: t.index,
            tick: start(t, period),
            since: now,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_timer_ticks_a_quarter_of_the_shortest_ttl_held() {
        let p = Probing::default();
        assert_eq!(p.tick_period(), CLOCK_PROBE, "nothing held yet");
        let _a = p.token(Duration::from_secs(30));
        assert_eq!(p.tick_period(), CLOCK_PROBE, "at most a second");
        let _b = p.token(Duration::from_secs(2));
        assert_eq!(p.tick_period(), Duration::from_millis(500));
        let _c = p.token(Duration::from_secs(10));
        assert_eq!(p.tick_period(), Duration::from_millis(500), "the shortest");
        let _d = p.token(Duration::from_millis(20));
        assert_eq!(p.tick_period(), SHORTEST_TICK);
        assert!(p.held());
    }

    #[test]
    fn a_quorum_of_nodes_ahead_makes_our_clock_the_odd_one() {
        assert!(!ours_is_odd(2, 3));
        assert!(ours_is_odd(3, 3));
        assert!(ours_is_odd(5, 3));
    }
}
