//! What a client knows of one node's trust: the quarantine that keeps it
//! out of lock quorums, whether it is suspect for counters, when a loss
//! was last found there and when this client first saw it (see [`check`]
//! for what fills it in).
//!
//! The rest of this folder: [`evidence`] (what a node shows of its own
//! history, read when a connection is made), [`amnesia`] (the table that
//! decides from it whether the node may have lost writes), [`marker`] and
//! [`tags`] (our marker on the node, whose writes it holds), [`counts`]
//! (the rules on its drop and command counts), [`nodebound`] and
//! [`panel`] (a quarantine's end on the node's clock and on a majority's),
//! [`truststate`] (what is read off the hot path) and [`vigil`] (what is
//! read of it while connected).

pub(crate) mod amnesia;
pub(crate) mod check;
pub(crate) mod counts;
pub(crate) mod evidence;
pub(crate) mod marker;
pub(crate) mod nodebound;
pub(crate) mod panel;
pub(crate) mod tags;
pub(crate) mod truststate;
pub(crate) mod vigil;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::mutex;
use crate::node::trust::amnesia::{Assessment, Cause, Memory};
use crate::node::trust::counts::{dropped, grown, remarked};
use crate::node::trust::evidence::{Marker, MarkerId, Probe};
pub(crate) use crate::node::trust::truststate::TrustState;

/// What a client knows of a node's trust, from its latest connection.
#[derive(Debug, Default)]
pub(crate) struct Trust {
    /// Whether a quarantine may be on: read on every lock vote, so the
    /// common case takes no lock.
    active: AtomicBool,
    /// Whether the node may have lost writes in its current process: read
    /// on every counter acceptance, so kept apart from the rest too.
    suspect: AtomicBool,
    /// The rest, changed when a connection is made.
    state: Mutex<TrustState>,
    /// Whether the node can evict keys of ours, by the last check: read on
    /// every request (see `vigil.rs`).
    evicts: AtomicBool,
    /// Its `evicted_keys` as last read ([`NOT_READ`]: not read, or
    /// unreadable).
    evicted: AtomicU64,
    /// Its damage count (`evidence::damage`) as last read, the same way.
    damage: AtomicU64,
    /// Whether the node's clock was ever read (see `nodebound.rs`).
    clock_read: AtomicBool,
    /// Whether what makes the node unsafe to keep locks on (no durable
    /// persistence, a policy that evicts) was said: once per client.
    linted: AtomicBool,
    /// Whether a loss was ever found ([`TrustState::lost_at`] set): read
    /// on every look at a held lock's nodes, so the common case takes no
    /// lock. Not whether the node is suspect now: a later check that finds
    /// nothing new (the counts the loss showed already taken in) clears
    /// that, and a held lock that looks after it must still see the loss.
    lost_seen: AtomicBool,
    /// Its `total_commands_processed` as last read, with when that
    /// reading's reply came in (our clock): a later reading, sent after
    /// that, below it means the statistics were reset. (Readings in flight
    /// together are taken in by different tasks in any order: one sent
    /// before that reply came in is not judged, and only raises what is
    /// kept: `counts::grown`.)
    commands: Mutex<Option<(u64, tokio::time::Instant)>>,
    /// Its `TIME` calls (`evidence::time_calls`) as last read, the same
    /// way: a reset padded with other commands still shows there.
    times: Mutex<Option<(u64, tokio::time::Instant)>>,
    /// Told when a loss is found that may have taken keys this client set
    /// there: its held locks look (the clock watch's news: `clockwatch.rs`).
    news: Option<Arc<tokio::sync::watch::Sender<u64>>>,
}

/// A count's value while none is known.
const NOT_READ: u64 = u64::MAX;

/// Stores count `read` in `at` ([`NOT_READ`] for none).
fn store(at: &AtomicU64, read: Option<u64>) {
    at.store(
        read.unwrap_or(NOT_READ).min(NOT_READ - 1),
        Ordering::Relaxed,
    );
}

impl Trust {
    /// A node's trust that tells `news` of each loss found (see
    /// [`TrustState::lost_at`]), and whose quarantines are over only once
    /// a majority of the members' clocks on `panel` show it too.
    pub(crate) fn telling(
        news: &Arc<tokio::sync::watch::Sender<u64>>,
        panel: &Arc<crate::node::trust::panel::Panel>,
    ) -> Self {
        let state = TrustState {
            panel: Some(Arc::clone(panel)),
            ..TrustState::default()
        };
        Self {
            news: Some(Arc::clone(news)),
            state: Mutex::new(state),
            ..Self::default()
        }
    }

    /// Whether the node can evict keys of ours (by the last check; until
    /// one, no request is sent).
    pub(crate) fn evicts(&self) -> bool {
        self.evicts.load(Ordering::Relaxed)
    }

    /// Takes in counts read of the node by a request sent at `sent` and
    /// answered at `recv` (our clock), each `None` where not read or
    /// unreadable (`damage` `None` where not asked): whether they show
    /// keys dropped since the last reading ([`dropped`]: evictions, or
    /// flushes where the damage count was read) or statistics reset
    /// ([`reset`]).
    pub(crate) fn counts_read(
        &self,
        (sent, recv): (tokio::time::Instant, tokio::time::Instant),
        evicted: Option<u64>,
        damage: Option<Option<u64>>,
        (commands, times): (Option<u64>, Option<u64>),
    ) -> bool {
        let known = |a: &AtomicU64| Some(a.load(Ordering::Relaxed)).filter(|&n| n != NOT_READ);
        let mut lost = dropped(known(&self.evicted), evicted);
        store(&self.evicted, evicted);
        for (slot, read) in [(&self.commands, commands), (&self.times, times)] {
            let mut last = mutex::lock(slot);
            let (was_reset, kept) = grown(*last, read, (sent, recv));
            lost |= was_reset;
            *last = kept;
        }
        if let Some(damage) = damage {
            lost |= dropped(known(&self.damage), damage);
            store(&self.damage, damage);
        }
        lost
    }

    /// Whether `probe`, of the process this client saw last, shows counts
    /// that moved since its last reading (see [`Trust::counts_read`]);
    /// takes them in either way.
    pub(crate) fn counts_moved(
        &self,
        probe: &Probe,
        span: (tokio::time::Instant, tokio::time::Instant),
    ) -> bool {
        let same = {
            let st = mutex::lock(&self.state);
            !st.run_id.is_empty() && st.run_id == probe.run_id
        };
        if !same {
            // Another process: its counts start anew.
            *mutex::lock(&self.commands) = None;
            *mutex::lock(&self.times) = None;
        }
        let counts = (probe.commands, probe.times);
        let moved = self.counts_read(span, probe.evicted, Some(probe.damage), counts);
        same && moved
    }

    /// Keys were dropped while this client stayed connected (`cause`:
    /// evicted, or our marker gone), as a request answered at `at` found:
    /// out of lock quorums for `quarantine` from then, suspect for
    /// counters, and this client's held locks told. Whether this starts a
    /// quarantine that was not on.
    pub(crate) fn dropped_while_connected(
        &self,
        at: Instant,
        quarantine: Duration,
        cause: Cause,
    ) -> bool {
        let until = at.checked_add(quarantine);
        let mut st = mutex::lock(&self.state);
        let new = st.until.is_none_or(|u| u < at);
        if let Some(until) = until {
            st.extend(until, at);
        }
        st.cause = Some(cause);
        self.active.store(true, Ordering::Release);
        self.suspect.store(true, Ordering::Release);
        self.lost(&mut st);
        new
    }

    /// Records that a loss was found now and tells the held locks.
    fn lost(&self, st: &mut TrustState) {
        st.lost_at = Some(crate::clock::now());
        self.lost_seen.store(true, Ordering::Release);
        if let Some(news) = &self.news {
            news.send_modify(|n| *n += 1);
        }
    }

    /// When a loss that may have taken keys this client set was last
    /// found (see [`TrustState::lost_at`]).
    pub(crate) fn lost_at(&self) -> Option<tokio::time::Instant> {
        if !self.lost_seen.load(Ordering::Acquire) {
            return None;
        }
        mutex::lock(&self.state).lost_at
    }

    /// [`Trust::lost_at`] as it was gated before: only while the node is
    /// suspect (a mutant for `model/loss_seen.rs`).
    #[cfg(test)]
    pub(crate) fn lost_at_while_suspect(&self) -> Option<tokio::time::Instant> {
        if !self.suspect.load(Ordering::Acquire) {
            return None;
        }
        mutex::lock(&self.state).lost_at
    }

    /// Whether a round reads our marker: this client knows which writing
    /// of it names the process.
    pub(crate) fn expects_marker(&self) -> bool {
        mutex::lock(&self.state).expect.is_some()
    }

    /// Whether our marker as a round found it (`None`: gone or unreadable)
    /// tells of a loss since this client last saw or wrote it
    /// ([`remarked`]); false where this client expects none.
    pub(crate) fn marker_moved(&self, found: Option<&MarkerId>) -> bool {
        let st = mutex::lock(&self.state);
        st.expect.as_ref().is_some_and(|e| remarked(e, found))
    }

    /// What this client remembers of the node, for the next probe.
    pub(crate) fn memory(&self) -> Memory {
        let st = mutex::lock(&self.state);
        Memory {
            run_id: st.run_id.clone(),
            marked: st.marked,
            loss: st.loss,
        }
    }

    /// Takes in what a new connection's probe found (`marked`: whether our
    /// marker now names the process). Returns the quarantine it starts, if
    /// it starts one (for the caller to log once).
    pub(crate) fn record(
        &self,
        probe: &Probe,
        verdict: &Assessment,
        at: Instant,
        marked: bool,
    ) -> Option<(Duration, Cause)> {
        let mut st = mutex::lock(&self.state);
        // The quarantine counts from when this client first saw the loss:
        // a later check of the same process finding the same loss does not
        // move it.
        let first = match st.sight {
            Some((first, _))
                if verdict.loss.is_some()
                    && st.loss == verdict.loss
                    && !st.run_id.is_empty()
                    && st.run_id == probe.run_id =>
            {
                first
            }
            _ => at,
        };
        let end = first
            .checked_add(Duration::from_secs(verdict.remaining))
            .unwrap_or(first);
        let until = Some(end).filter(|u| *u > at);
        st.sight = verdict.loss.map(|_| (first, end));
        let new = until.is_some() && (st.until.is_none_or(|u| u < at) || st.run_id != probe.run_id);
        // A loss this check found that the last one had not: keys this
        // client set there since may be gone (not at the first check: no
        // key of ours went out before it).
        let fresh = st.probed
            && verdict.cause.is_some()
            && (st.run_id != probe.run_id || st.loss != verdict.loss || st.cause.is_none());
        // A quarantine for a clock that ran ahead outlasts a reconnection,
        // as one for slots taken over does while the process is the same
        // (or was not known yet: no connection had been made). A check of
        // the same process never shortens one on now (a drop found while
        // connected, before the check that records it in our marker).
        let same = st.run_id.is_empty() || st.run_id == probe.run_id;
        st.received &= same;
        let clock = st.until.filter(|u| {
            (st.clock_ahead || st.received || (same && st.probed && st.cause.is_some())) && *u > at
        });
        st.clock_ahead &= clock.is_some();
        let until_all = until.max(clock);
        st.probed = true;
        st.run_id.clone_from(&probe.run_id);
        st.marked = marked;
        st.expect = probe
            .marker
            .as_ref()
            .filter(|_| marked)
            .and_then(Marker::id);
        st.last = Some(probe.clone());
        st.cause = verdict.cause.or(st.received.then_some(Cause::Received));
        st.loss = verdict.loss;
        self.evicts.store(probe.evicts, Ordering::Relaxed);
        if fresh {
            self.lost(&mut st);
        }
        if let Some(until) = until_all {
            st.checked_until(until, at);
        }
        // A quarantine over on our clock and not yet on the node's stays on.
        let read = self.clock_read.load(Ordering::Relaxed);
        let pending = until_all.is_none()
            && self.active.load(Ordering::Acquire)
            && st.node_left(read).is_some();
        self.active
            .store(until_all.is_some() || pending, Ordering::Release);
        self.suspect.store(st.cause.is_some(), Ordering::Release);
        drop(st);
        match (new, until, verdict.cause) {
            (true, Some(u), Some(cause)) => Some((u - at, cause)),
            _ => None,
        }
    }

    /// Whether this client saw the loss `loss` in process `run_id` and
    /// watched its whole quarantine pass by `now` (then our marker may say
    /// it was served: see `amnesia.rs`).
    pub(crate) fn served(&self, run_id: &str, loss: u64, now: Instant) -> bool {
        let st = mutex::lock(&self.state);
        st.run_id == run_id
            && st.loss == Some(loss)
            && matches!(st.sight, Some((first, until)) if until > first && until <= now)
            && st
                .node_left(self.clock_read.load(Ordering::Relaxed))
                .is_none()
    }

    /// This client's deployment, as our marker's `served` names it (see
    /// `panel.rs`; `None`: no panel, nothing served is ours).
    pub(crate) fn deployment(&self) -> Option<String> {
        let st = mutex::lock(&self.state);
        st.panel.as_ref().map(|p| p.deployment().to_owned())
    }

    /// The client's members together (`None`: no panel, as in unit tests).
    pub(crate) fn panel(&self) -> Option<Arc<crate::node::trust::panel::Panel>> {
        mutex::lock(&self.state).panel.clone()
    }

    /// Whether this client may vouch to others that the node's quarantine
    /// is over (see [`TrustState::vouched`]).
    pub(crate) fn vouched(&self) -> bool {
        let st = mutex::lock(&self.state);
        st.vouched()
    }

    /// True the first time it is asked (whether the node's settings were
    /// said yet).
    pub(crate) fn first_lint(&self) -> bool {
        !self.linted.swap(true, Ordering::AcqRel)
    }

    /// Our marker now names `written.run`, as `written`, if that is still
    /// the process this client knows there.
    pub(crate) fn marker_written(&self, written: MarkerId) {
        let mut st = mutex::lock(&self.state);
        if st.run_id == written.run {
            st.marked = true;
            st.expect = Some(written);
        }
    }

    /// An operator declared the node new and our marker now names
    /// `run_id` with no loss, at damage count `seen`: trusted from now, if
    /// that is still the process this client knows there.
    pub(crate) fn declared_new(&self, run_id: &str, seen: Option<u64>) {
        let mut st = mutex::lock(&self.state);
        if st.run_id != run_id {
            return;
        }
        st.marked = true;
        st.expect = Some(MarkerId {
            run: run_id.to_owned(),
            loss: None,
            seen,
        });
        st.received = false;
        self.trusted_from_now(&mut st);
    }

    /// No loss, no quarantine: the node counts from now.
    fn trusted_from_now(&self, st: &mut TrustState) {
        st.cause = None;
        st.loss = None;
        st.sight = None;
        st.until = None;
        st.bound.end();
        self.active.store(false, Ordering::Release);
        self.suspect.store(false, Ordering::Release);
    }

    /// The process `run_id`, found foreign at loss `loss` where whose
    /// writes it holds could not be told yet (`tags.rs`), holds ours after
    /// all (the members' checks told so since): trusted from now, if this
    /// client's view of it has not changed meanwhile.
    pub(crate) fn ours_after_all(&self, run_id: &str, loss: u64) {
        let mut st = mutex::lock(&self.state);
        if st.run_id != run_id
            || st.loss != Some(loss)
            || st.cause != Some(Cause::Foreign)
            || st.clock_ahead
        {
            return;
        }
        self.trusted_from_now(&mut st);
    }

    /// The quarantine's end if it is still on at `now`; and whether this
    /// call found it just over (true once, for the caller to log).
    pub(crate) fn quarantined(&self, now: Instant) -> (Option<Instant>, bool) {
        if !self.active.load(Ordering::Acquire) {
            return (None, false);
        }
        let mut st = mutex::lock(&self.state);
        match st.on_at(now, self.clock_read.load(Ordering::Relaxed)) {
            Some(end) => (Some(end), false),
            None => {
                self.active.store(false, Ordering::Release);
                st.clock_ahead = false;
                let first = !st.left_logged;
                st.left_logged = true;
                (None, first)
            }
        }
    }

    /// A reading of the node's clock (`clockwatch.rs`), `(recv, node_us)`:
    /// its time in a reply that came in at `recv`; `before` the reading
    /// before it; `allowance` its drift factor. Taken in only while a
    /// quarantine may be on (one atomic load otherwise).
    pub(crate) fn node_time(
        &self,
        before: Option<(Instant, u64)>,
        reading: (Instant, u64),
        allowance: f64,
    ) {
        if !self.clock_read.load(Ordering::Relaxed) {
            self.clock_read.store(true, Ordering::Relaxed);
        }
        if !self.active.load(Ordering::Acquire) {
            return;
        }
        let mut st = mutex::lock(&self.state);
        st.node_reading(before, reading, allowance);
    }

    /// The node's clock ran ahead of ours beyond the allowance (see
    /// `clockwatch.rs`): out of lock quorums until `until` at least. Not a
    /// reason to distrust its counter records.
    pub(crate) fn clock_ran_ahead(&self, until: Instant) {
        let mut st = mutex::lock(&self.state);
        st.extend(until, Instant::now());
        st.clock_ahead = true;
        self.active.store(true, Ordering::Release);
    }

    /// The shard took slots over from another (see `shard_rules.rs`): out
    /// of lock quorums until `until` at least, and suspect for counters
    /// while its process lives (or until declared new). Whether this
    /// starts a quarantine that was not on.
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    pub(crate) fn slots_received(&self, until: Instant) -> bool {
        let mut st = mutex::lock(&self.state);
        let now = Instant::now();
        let new = st.until.is_none_or(|u| u < now);
        st.extend(until, now);
        st.received = true;
        st.cause = st.cause.or(Some(Cause::Received));
        self.active.store(true, Ordering::Release);
        self.suspect.store(true, Ordering::Release);
        new
    }

    /// The process of a node that may have lost writes (empty if `INFO`
    /// was refused); `None` for a trusted node, without taking the lock.
    pub(crate) fn suspect_run_id(&self) -> Option<String> {
        if !self.suspect.load(Ordering::Acquire) {
            return None;
        }
        let st = mutex::lock(&self.state);
        st.cause.map(|_| st.run_id.clone())
    }

    /// A copy of what is known.
    pub(crate) fn snapshot(&self) -> TrustState {
        mutex::lock(&self.state).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::trust::amnesia::assess;
    use crate::node::trust::counts::reset;
    use crate::node::trust::evidence::Marker;

    /// A probe of process `run_id` at `uptime` s, with nothing dropped,
    /// finding our marker naming it.
    fn probe(run_id: &str, uptime: u64) -> Probe {
        Probe::sample(run_id, uptime, Some((run_id, None)))
    }

    /// A client that saw process `run` marked.
    fn saw(run: &str) -> Memory {
        Memory {
            run_id: run.into(),
            marked: true,
            loss: None,
        }
    }

    #[test]
    fn any_drop_since_the_last_count_or_an_unread_count_is_a_loss() {
        assert!(!dropped(Some(5), Some(5)));
        assert!(dropped(Some(5), Some(6)));
        assert!(dropped(None, Some(0)), "no count to compare with");
        assert!(dropped(Some(5), None), "INFO refused or unreadable");
        assert!(dropped(Some(5), Some(0)), "statistics reset");
        // Commands only grow, unless the statistics were reset.
        assert!(!reset(Some(5), Some(9)));
        assert!(reset(Some(5), Some(1)));
        assert!(!reset(None, Some(1)) && !reset(Some(5), None));
    }

    #[test]
    fn a_loss_found_while_connected_stays_found_after_a_check_that_finds_nothing_new() {
        let news = Arc::new(tokio::sync::watch::channel(0).0);
        let panel = Arc::new(crate::node::trust::panel::Panel::new(1, String::new()));
        let trust = Trust::telling(&news, &panel);
        let at = Instant::now();
        let p = probe("r1", 500);
        trust.record(&p, &assess(&p, &saw("r1"), 60), at, true);
        assert_eq!(trust.lost_at(), None, "nothing lost yet");
        trust.dropped_while_connected(at, Duration::from_secs(61), Cause::Dropped);
        let found = trust.lost_at();
        assert!(found.is_some());
        // The check that runs next sees nothing the drop did not already
        // show: the node stays out, and a held lock that looks only now
        // still finds the loss.
        trust.record(&p, &assess(&p, &saw("r1"), 60), at, true);
        assert!(trust.quarantined(at).0.is_some(), "still out");
        assert_eq!(trust.lost_at(), found);
    }

    #[test]
    fn a_clock_quarantine_outlasts_a_reconnection_that_finds_no_loss() {
        let trust = Trust::default();
        let at = Instant::now();
        let p = probe("r1", 500);
        trust.record(&p, &assess(&p, &saw("r1"), 60), at, true);
        assert_eq!(trust.quarantined(at).0, None, "trusted");
        let until = at + Duration::from_secs(60);
        trust.clock_ran_ahead(until);
        assert_eq!(trust.quarantined(at).0, Some(until));
        // The connection breaks and a new probe finds nothing lost.
        trust.record(&p, &assess(&p, &saw("r1"), 60), at, true);
        assert_eq!(trust.quarantined(at).0, Some(until), "still out");
        assert!(trust.snapshot().clock_ahead);
        // Once over, it is over.
        assert_eq!(trust.quarantined(until).0, None);
        assert!(!trust.snapshot().clock_ahead);
    }

    #[test]
    fn a_process_foreign_for_want_of_tags_counts_once_they_tell_it_is_ours() {
        let trust = Trust::default();
        let at = Instant::now();
        let p = probe("r1", 500);
        let foreign = crate::node::trust::tags::judged(
            assess(&p, &Memory::default(), 60),
            &p,
            &Memory::default(),
            60,
            None,
        );
        trust.record(&p, &foreign, at, true);
        assert!(trust.quarantined(at).0.is_some(), "foreign");
        // Another loss, or another process, is not this one.
        trust.ours_after_all("r1", 499);
        trust.ours_after_all("r2", 500);
        assert!(trust.quarantined(at).0.is_some(), "still foreign");
        trust.ours_after_all("r1", 500);
        assert_eq!(trust.quarantined(at).0, None, "ours after all");
    }

    #[test]
    fn a_quarantine_counts_from_our_first_sight_and_is_served_once_over() {
        let trust = Trust::default();
        let t0 = Instant::now();
        let q = 60;
        // A process new to our marker, seen at uptime 40: out from t0.
        let mut p = probe("r1", 40);
        p.marker = None;
        let v = assess(&p, &trust.memory(), q);
        assert_eq!(v.loss, Some(40));
        trust.record(&p, &v, t0, true);
        let end = t0 + Duration::from_secs(q);
        assert_eq!(trust.quarantined(t0).0, Some(end));
        // Checked again 10 s later (uptime 50), our marker now recording
        // the loss: the same loss, the same end.
        let later = t0 + Duration::from_secs(10);
        let mut p = probe("r1", 50);
        if let Some(Marker::Found { loss, .. }) = &mut p.marker {
            *loss = Some(40);
        }
        let v = assess(&p, &trust.memory(), q);
        assert_eq!((v.loss, v.remaining), (Some(40), q));
        trust.record(&p, &v, later, true);
        assert_eq!(trust.quarantined(later).0, Some(end));
        // Served only once the whole quarantine passed on our clock.
        assert!(!trust.served("r1", 40, end - Duration::from_millis(1)));
        assert!(trust.served("r1", 40, end));
        assert!(!trust.served("r2", 40, end), "another process");
        assert!(!trust.served("r1", 41, end), "another loss");
        // Another process at the address: a new sight, from its check.
        let swap = later + Duration::from_secs(5);
        let mut p = probe("r2", 100_000);
        p.marker = None;
        let v = assess(&p, &trust.memory(), q);
        trust.record(&p, &v, swap, true);
        assert_eq!(
            trust.quarantined(swap).0,
            Some(swap + Duration::from_secs(q))
        );
        assert!(!trust.served("r1", 40, end + Duration::from_secs(q)));
    }
}
