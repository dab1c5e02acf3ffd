//! The waiting loop shared by every primitive that waits (locks, permits,
//! leaderships): this client's callers line up, the front one tries, then
//! registers in the waiting list on the nodes and sleeps until news, a
//! TTL, its own client's release or the cap says to try again (`wait/`).
//! A semaphore's callers behind others of their client register when they
//! arrive, so the list ranks every client's waiters by arrival.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;
use tracing::debug;

use crate::acquire::attempt::{Ask, Attempts, Failed};
use crate::acquire::patience::Patience;
use crate::acquire::waiter::Waiter;
use crate::client::redlock::Redlock;
use crate::error::{Error, Result};
use crate::lock::guard::Lock;
use crate::quorum::tally::{node_bit, nodes_where};
use crate::telemetry::labels::{Mode, Woken};
use crate::telemetry::Acquisition;
use crate::wait::plan::{split, Seen};
use crate::wait::signal::{Keys, Signal};
use crate::wait::{Ahead, Listen};

impl Redlock {
    /// The waiting loop around `what`'s attempts (a lock's key, a
    /// semaphore's slots): this client's callers line up on `what.line()`,
    /// the front one tries a plain attempt unless others are known to wait,
    /// then registers in the line's waiting list on the nodes and tries
    /// again whenever the nodes may have room (news on the watched keys,
    /// their TTLs, our own releases, the cap), until `patience` runs out.
    pub(crate) async fn wait_for(&self, what: &impl Attempts, patience: Patience) -> Result<Lock> {
        let telemetry = &self.nodes().telemetry;
        let rec = telemetry.acquisition(what.primitive(), Mode::Wait, what.resource());
        let result = self.wait_loop(what, patience, &rec).await;
        recorded(rec, result)
    }

    /// [`Redlock::wait_for`]'s loop, its attempts and sleeps counted in
    /// `rec`.
    pub(crate) async fn wait_loop(
        &self,
        what: &impl Attempts,
        patience: Patience,
        rec: &Acquisition<'_>,
    ) -> Result<Lock> {
        let resource = what.resource();
        let telemetry = &self.nodes().telemetry;
        let line = what.line();
        let (started, since) = (Instant::now(), SystemTime::now());
        let give_up = |last: Error| patience.give_up(resource, started, last);
        let waiting = self.waiting();
        let place = waiting.queues.join(line, what.heard());
        let waiter = Waiter::new(self, line, since)
            .also_in(what.listed_also_in())
            .marked(what.waiter_mark());
        // Behind others of this client: where `what` says so (a
        // semaphore's permits), join the nodes' waiting list now, ranked by
        // arrival, rather than when this client's line lets us try. Else
        // other clients' waiters who came later go first as long as this
        // client's line holds us back, and a client whose callers fell
        // behind stays behind: it takes about one permit per round of its
        // own while the others' waiters take the rest.
        if what.joins_on_arrival() && place.had_company() {
            waiter.join_now();
        }
        if !place.turn(patience.until).await {
            // Still behind this client's other callers for the resource.
            return Err(give_up(Error::Contended {
                resource: resource.to_owned(),
            }));
        }
        let mut last = None;
        if !place.had_company() && !waiting.queues.is_contended(line) {
            rec.attempted();
            match what.attempt(Ask::Plain).await {
                Ok(won) => {
                    place.signal().set_crowded(false);
                    return Ok(won.counted(rec.holding()));
                }
                Err(failed) => last = Some(failed.error),
            }
        }
        let signal = place.signal();
        // Whether this caller waited for news before the attempt that won.
        let mut waited = false;
        if what.listen() == Listen::One && place.had_company() && signal.crowded() {
            // The caller ahead of us in this client had to wait for its
            // permit, so the permits are most likely all taken: wait for
            // news before the first attempt rather than make one the nodes
            // refuse. News kept from before counts (a release may have
            // named us while the caller ahead was still trying), except
            // where news is of any slot change (no channel): then the
            // caller ahead's own take would be news.
            let seen = vec![Seen::Held; self.node_count()];
            let round = match what.channel() {
                Some(_) => signal.round(),
                None => signal.reset(),
            };
            self.arm_news(what, signal, round, &seen, None);
            self.sleep_for_news(what, signal, &seen, patience.until)
                .await;
            waited = true;
        }
        loop {
            if let Some(error) = last.take() {
                if error.needs_operator() {
                    // A wrong password or an ACL refusal on too many nodes:
                    // no wait fixes it, so say so now, not as a timeout.
                    return Err(error);
                }
                if patience.run_out() {
                    return Err(give_up(error));
                }
            }
            // News from here on counts: the attempt reads the lock on every
            // node, and if it fails, the reads that arm the nodes'
            // notifications follow (a release in between shows as a read
            // that finds no key, which counts as news too).
            let round = signal.reset();
            rec.attempted();
            let Failed { error, seen } = match what.attempt(Ask::Queued(&waiter)).await {
                Ok(won) => {
                    // The next caller here waits for news first if we had
                    // to, unless our attempt left a permit to spare.
                    signal.set_crowded(waited && !waiter.spare());
                    return Ok(won.counted(rec.holding()));
                }
                Err(failed) => failed,
            };
            self.arm_news(what, signal, round, &seen, Some(&waiter));
            let behind = seen.iter().filter(|s| **s == Seen::Ahead).count();
            signal.set_behind(behind >= self.quorum());
            debug!(error = %error, "lock attempt failed; waiting");
            // A semaphore's split that failed for want of nodes (with a
            // minority down, one refusal is enough) is contention all the
            // same: a release on its way; the slots are read where it is
            // still to land (`arm_news`), and their news ends the sleep.
            let split = what.channel().is_some() && split(&seen);
            if error.is_contended() || split {
                self.sleep_for_news(what, signal, &seen, patience.until)
                    .await;
                waited = true;
            } else {
                // Nodes failing, or a round too slow to leave validity:
                // nothing says when to try again, so pause with jitter (our
                // place in the list was given up: those behind go first).
                let pause = self.retry_pause();
                if !patience.allows_failure_pause(pause) {
                    return Err(give_up(error));
                }
                if pause.is_zero() {
                    tokio::task::yield_now().await;
                } else {
                    tokio::time::sleep(pause).await;
                }
                telemetry.woke(Woken::Pause, pause);
            }
            if waiter.take_yielded() && what.joins_on_arrival() {
                // Our place in the list was given up, and this client's
                // callers behind us may be listed ahead of us there now:
                // let them try first (they could not take what they are
                // ranked for while we hold the front here).
                place.to_back();
                if !place.turn(patience.until).await {
                    return Err(give_up(error));
                }
            }
            last = Some(error);
        }
    }

    /// Sleeps until news on `signal` (or a TTL in `seen`, this client's
    /// release, the cap, `until`) says `what` may be tried again, and counts
    /// the sleep by what ended it.
    async fn sleep_for_news(
        &self,
        what: &impl Attempts,
        signal: &Signal,
        seen: &[Seen],
        until: Instant,
    ) {
        let slept = Instant::now();
        let listen = (self.quorum(), what.listen());
        let woken = self.waiting().sleep(signal, seen, listen, until).await;
        self.nodes().telemetry.woke(woken, slept.elapsed());
    }

    /// Asks the nodes `what` listens to (by what its last attempt saw,
    /// `seen`) to tell `signal` of the next change to its keys, for
    /// `round`; where `what` says so, `waiter`'s list too where someone
    /// waits ahead of it ([`Attempts::reads_list_when_ahead`]).
    fn arm_news(
        &self,
        what: &impl Attempts,
        signal: &Arc<Signal>,
        round: u64,
        seen: &[Seen],
        waiter: Option<&Waiter<'_>>,
    ) {
        let waiting = self.waiting();
        let line = what.line();
        let healthy = self.nodes().healthy();
        let ear = |channel| waiting.ear((line, channel), seen, healthy);
        // Where a key besides the watched ones kept us out (a semaphore's
        // name, held by a lock): its change there lets us try again.
        let guarded = match what.guard() {
            Some((key, nodes)) if nodes != 0 => {
                waiting.arm((key, None), nodes, signal, round);
                nodes
            }
            _ => 0,
        };
        let nodes = if let Some((channel, node)) = what.channel().and_then(|c| Some((c, ear(c)?))) {
            // Named wake-ups: hear the channel on one node; and after a
            // split, or after a message named us and we were refused, read
            // the slots on a node that had none free, where a release may
            // still be on its way. Those reads are news for this round
            // only: the tracking they leave would wake us again at other
            // waiters' takes.
            let held = waiting.split_ear(line, seen, signal.take_named());
            let keys = if held.is_some() || guarded != 0 {
                Keys::Round(round)
            } else {
                Keys::Never
            };
            signal.keys_heard(keys);
            let heard = (channel, node);
            waiting.hear(heard, what.watched(), signal, round);
            let Some(held) = held else { return };
            node_bit(held)
        } else {
            signal.keys_heard(Keys::Always);
            // Every node where one would do but none qualifies.
            let one = match what.listen() {
                Listen::One => waiting.listener(what.line(), seen),
                Listen::Quorum => None,
            };
            one.map_or(self.nodes().all(), node_bit)
        };
        let ahead = match waiter {
            Some(waiter) if what.reads_list_when_ahead() => {
                let ahead = nodes_where(seen, |s| *s == Seen::Ahead) & nodes;
                let names = Ahead {
                    keys: what.watched().to_vec(),
                    queues: waiter.queues().map(str::to_owned).collect(),
                    me: waiter.id().to_owned(),
                    mark: what.kept_out_by(),
                    free: what.free_value(),
                };
                waiting.arm_ahead(names, ahead, signal, round);
                ahead
            }
            _ => 0,
        };
        for key in what.watched() {
            waiting.arm((key, what.free_value()), nodes & !ahead, signal, round);
        }
    }

    /// A random pause of `retry_delay + uniform(0..=retry_jitter)`.
    pub(crate) fn retry_pause(&self) -> Duration {
        use rand::Rng;
        let c = self.config();
        let jitter = c.retry_jitter.as_nanos().min(u64::MAX as u128) as u64;
        c.retry_delay
            .saturating_add(Duration::from_nanos(rand::rng().random_range(0..=jitter)))
    }
}

/// Records the end of the acquisition `rec` with `result` (a lock it won
/// is counted as held from the attempt that won it, so a fenced one whose
/// token came too late counts as held and released too).
pub(crate) fn recorded(rec: Acquisition<'_>, result: Result<Lock>) -> Result<Lock> {
    rec.finish(&result);
    result
}
