//! The members' clocks together, for a quarantine's end. A quarantine is
//! measured on our clock and on the node's (`nodebound.rs`), but neither
//! is enough where both misbehave: a client whose clock runs fast ends it
//! early on ours, and the node's clock may step forward between two of our
//! readings by no more than our fast clock lets pass unseen (a client that
//! reads the node twice a second at four times real time misses a step of
//! 1.5 s), or run fast itself. The node's clock then shows the quarantine
//! over while a lock it forgot is still valid.
//!
//! So a quarantine is also over only once a majority of the members'
//! clocks show it: each advanced by its length times `1 + drift` (the
//! drift factor, or the clock's measured rate where that is more) since it
//! began. As locks are, this rests on a majority of the members: a
//! majority holds at least one member whose clock is sound, whatever one
//! node's clock or ours does. Every member's `TIME` already comes behind
//! every request (`clockwatch.rs`): each reading is kept here, the latest
//! per connection, at the cost of one uncontended lock per reply.
//!
//! Where a quarantine began: each clock's latest reading before it, moved
//! on by our clock's time since (more than real time where our clock runs
//! fast: it asks more), or else its first reading (moved on the same way
//! where it came in before the start, while the start was being dated).
//! A member whose `TIME` is refused (answered, never with a time) shows
//! nothing: counted as showing, it would make a majority with one bad
//! clock. Where no member's clock was ever read, or too few members
//! answer `TIME` to make a majority, the panel says nothing (the members'
//! clocks cannot outvote a bad one there).
//!
//! The panel also holds what else one client reads across its members:
//! their markers' tags (`tags.rs`).

use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::mutex;
use crate::node::trust::tags::Tags;

/// One connection's readings of its node's clock.
#[derive(Debug, Default)]
struct Clock {
    /// Its first reading: when (our clock) the reply came in, and the
    /// node's time in µs.
    first: Option<(Instant, u64)>,
    /// Its latest reading, the same way.
    latest: Option<(Instant, u64)>,
    /// The drift factor it is judged by (or its measured rate's excess).
    allowance: f64,
    /// Whether it answered `TIME` with something that is not a time.
    refused: bool,
}

/// One client's members' clocks.
#[derive(Debug)]
pub(crate) struct Panel {
    /// How many members there are.
    members: usize,
    /// Its deployment (see [`deployment`]).
    deployment: String,
    /// Each connection's clock, with its member.
    clocks: Mutex<Vec<(usize, Weak<Mutex<Clock>>)>>,
    /// The members' markers' tags (`tags.rs`).
    tags: Tags,
    /// The rule before, for the model's mutant: a member whose `TIME` is
    /// refused counts as showing a quarantine over.
    #[cfg(test)]
    pub(crate) refused_shows: bool,
}

/// Where one connection puts its readings.
#[derive(Clone, Debug)]
pub(crate) struct Seat(Arc<Mutex<Clock>>);

impl Seat {
    /// The node's clock read `node_us` in a reply that came in at `recv`,
    /// judged by the drift factor `allowance`.
    pub(crate) fn reading(&self, recv: Instant, node_us: u64, allowance: f64) {
        let mut c = mutex::lock(&self.0);
        if c.latest.is_some_and(|(r, _)| r > recv) {
            return;
        }
        c.first.get_or_insert((recv, node_us));
        c.latest = Some((recv, node_us));
        c.allowance = allowance;
    }

    /// The node answered `TIME` with something that is not a time.
    pub(crate) fn refused(&self) {
        mutex::lock(&self.0).refused = true;
    }
}

/// Where each clock stood when a quarantine began.
#[derive(Clone, Debug, Default)]
pub(crate) struct Start {
    /// When (our clock) it began.
    since: Option<Instant>,
    /// Each clock read before then, with its time then at the latest.
    from: Vec<(Weak<Mutex<Clock>>, u64)>,
}

/// What names a client's deployment in our marker's `served`: its
/// members (`identities`, in any order) and its restart quarantine
/// (`quarantine_secs`), hashed (FNV-1a, 64 bits: stable across builds).
/// Another client takes a writer's word that a quarantine is over only
/// where both match: a client given another node list (a subset, or one
/// node under two addresses) judges by other clocks, and one with a
/// shorter quarantine by a shorter length.
pub(crate) fn deployment(identities: &[String], quarantine_secs: u64) -> String {
    let mut sorted: Vec<&str> = identities.iter().map(String::as_str).collect();
    sorted.sort_unstable();
    let text = format!("{}|{quarantine_secs}", sorted.join(","));
    let hash = text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("{hash:016x}")
}

impl Panel {
    /// A panel for `members` members, of deployment `deployment`.
    pub(crate) fn new(members: usize, deployment: String) -> Self {
        Self {
            members,
            deployment,
            clocks: Mutex::default(),
            tags: Tags::new(members),
            #[cfg(test)]
            refused_shows: false,
        }
    }

    /// The client's deployment (see [`deployment`]).
    pub(crate) fn deployment(&self) -> &str {
        &self.deployment
    }

    /// The members' markers' tags, as this client read them.
    pub(crate) fn tags(&self) -> &Tags {
        &self.tags
    }

    /// A seat for a connection to member `member`.
    pub(crate) fn seat(&self, member: usize) -> Seat {
        let clock = Arc::new(Mutex::new(Clock::default()));
        let mut clocks = mutex::lock(&self.clocks);
        clocks.retain(|(_, c)| c.strong_count() > 0);
        clocks.push((member, Arc::downgrade(&clock)));
        Seat(clock)
    }

    /// The clocks that are still kept, with their members.
    fn live(&self) -> Vec<(usize, Arc<Mutex<Clock>>)> {
        let clocks = mutex::lock(&self.clocks);
        clocks
            .iter()
            .filter_map(|(m, c)| Some((*m, c.upgrade()?)))
            .collect()
    }

    /// Where each clock stands for a quarantine that begins at `since`.
    pub(crate) fn start(&self, since: Instant) -> Start {
        let from = self
            .live()
            .into_iter()
            .filter_map(|(_, clock)| {
                let (r, us) = mutex::lock(&clock).latest?;
                let on = since.saturating_duration_since(r).as_micros();
                let us = us.saturating_add(u64::try_from(on).unwrap_or(u64::MAX));
                Some((Arc::downgrade(&clock), us))
            })
            .collect();
        Start {
            since: Some(since),
            from,
        }
    }

    /// Whether this client may vouch to others that a quarantine of
    /// `length` that began at `start` is over (our marker's `served`:
    /// `check.rs`): a majority of the members' clocks, and at least two
    /// of them, read since and showing it. A client of one member, or one
    /// whose other members' clocks are not read, sees only the node's own
    /// clock, which may be the one that runs fast: others would count the
    /// node on its word.
    pub(crate) fn vouches(&self, start: &Start, length: Duration) -> bool {
        let Some(since) = start.since else {
            return false;
        };
        let length_us = length.as_secs_f64() * 1e6;
        let mut showing = vec![false; self.members];
        for (member, clock) in self.live() {
            let c = mutex::lock(&clock);
            let from = Self::from(start, since, &clock, &c);
            if from.is_some() && Self::still(from, &c, length_us) == Some(0.0) {
                if let Some(slot) = showing.get_mut(member) {
                    *slot = true;
                }
            }
        }
        let shown = showing.iter().filter(|s| **s).count();
        shown >= 2 && shown > self.members / 2
    }

    /// Where `clock` (locked: `c`) stood when a quarantine began at
    /// `since`: its reading then (`start`), or else its first one, moved
    /// on by our clock's time to `since` where it came in before (a first
    /// reading taken in while the start was being dated).
    fn from(start: &Start, since: Instant, clock: &Arc<Mutex<Clock>>, c: &Clock) -> Option<u64> {
        let known = start
            .from
            .iter()
            .find(|(w, _)| std::ptr::eq(w.as_ptr(), Arc::as_ptr(clock)));
        match (known, c.first) {
            (Some((_, us)), _) => Some(*us),
            (None, Some((r, us))) => {
                let on = since.saturating_duration_since(r).as_micros();
                Some(us.saturating_add(u64::try_from(on).unwrap_or(u64::MAX)))
            }
            _ => None,
        }
    }

    /// What clock `c`, which stood at `from` when a quarantine of
    /// `length_us` began ([`Panel::from`]), still has to run, in µs, to
    /// show it over: all of it (times its allowance) where it was not
    /// dated then; `None` before its first reading.
    fn still(from: Option<u64>, c: &Clock, length_us: f64) -> Option<f64> {
        let (_, latest) = c.latest?;
        let need = length_us * (1.0 + c.allowance);
        Some(from.map_or(need, |f| (need - latest.saturating_sub(f) as f64).max(0.0)))
    }

    /// How much longer, about, until a majority of the members' clocks
    /// show a quarantine of `length` that began at `start` over (`None`:
    /// they do, or no member's clock was ever read).
    pub(crate) fn left(&self, start: &Start, length: Duration) -> Option<Duration> {
        let since = start.since?;
        let length_us = length.as_secs_f64() * 1e6;
        // Per member, the least any of its clocks still has to run, and
        // whether its `TIME` was refused (and never read).
        let mut member_left = vec![f64::INFINITY; self.members];
        let mut refused = vec![false; self.members];
        let mut any_read = false;
        for (member, clock) in self.live() {
            let c = mutex::lock(&clock);
            let from = Self::from(start, since, &clock, &c);
            match Self::still(from, &c, length_us) {
                Some(left) => {
                    any_read = true;
                    if let Some(slot) = member_left.get_mut(member) {
                        *slot = slot.min(left);
                    }
                }
                None if c.refused => {
                    #[cfg(test)]
                    if self.refused_shows {
                        if let Some(slot) = member_left.get_mut(member) {
                            *slot = 0.0;
                        }
                        continue;
                    }
                    if let Some(slot) = refused.get_mut(member) {
                        *slot = true;
                    }
                }
                None => {}
            }
        }
        let majority = self.members / 2 + 1;
        // A member whose `TIME` is refused shows nothing: counted as
        // showing, it would let one bad clock make a majority with it.
        // Where too few members answer `TIME` to make a majority, the
        // members' clocks cannot outvote a bad one: the panel says nothing.
        let refusing = (0..self.members)
            .filter(|&m| refused[m] && member_left[m].is_infinite())
            .count();
        if !any_read || self.members - refusing < majority {
            return None;
        }
        member_left.sort_by(f64::total_cmp);
        let left = *member_left.get(majority - 1)?;
        if left <= 0.0 {
            None
        } else if left.is_finite() {
            Some(Duration::from_micros(left.ceil() as u64))
        } else {
            // Too few members read since: at least the whole of it.
            Some(length)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000;

    #[test]
    fn a_majority_of_the_members_clocks_must_show_it() {
        let t0 = Instant::now();
        let panel = Panel::new(3, String::new());
        let seats: Vec<Seat> = (0..3).map(|m| panel.seat(m)).collect();
        for s in &seats {
            s.reading(t0, 100 * S, 0.0);
        }
        let start = panel.start(t0);
        let ten = Duration::from_secs(10);
        assert_eq!(panel.left(&start, ten), Some(ten));
        // One clock stepped 20 s: one member is no majority.
        let t1 = t0 + Duration::from_secs(1);
        seats[0].reading(t1, 121 * S, 0.0);
        seats[1].reading(t1, 101 * S, 0.0);
        assert_eq!(panel.left(&start, ten), Some(Duration::from_secs(9)));
        // A second member's clock shows it.
        seats[1].reading(t1, 110 * S, 0.0);
        assert_eq!(panel.left(&start, ten), None);
    }

    #[test]
    fn a_start_is_dated_by_the_reading_before_it_moved_on_or_the_first_after() {
        let t0 = Instant::now();
        let panel = Panel::new(3, String::new());
        let (a, b) = (panel.seat(0), panel.seat(1));
        a.reading(t0, 100 * S, 0.0);
        // Begun 2 s after a's last reading: a's time then is 102 s at the
        // latest; b was never read before, so its first reading dates it.
        let start = panel.start(t0 + Duration::from_secs(2));
        let t = t0 + Duration::from_secs(3);
        a.reading(t, 105 * S, 0.0);
        b.reading(t, 500 * S, 0.0);
        let five = Duration::from_secs(5);
        assert_eq!(panel.left(&start, five), Some(Duration::from_secs(5)));
        let t = t0 + Duration::from_secs(8);
        a.reading(t, 107 * S, 0.0);
        b.reading(t, 505 * S, 0.0);
        assert_eq!(panel.left(&start, five), None);
    }

    #[test]
    fn a_deployment_is_its_members_in_any_order_and_its_quarantine() {
        let ids = |s: &[&str]| s.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let d = deployment(&ids(&["a:1", "b:2", "c:3"]), 60);
        assert_eq!(d, deployment(&ids(&["c:3", "a:1", "b:2"]), 60));
        assert_ne!(d, deployment(&ids(&["a:1", "b:2"]), 60));
        assert_ne!(d, deployment(&ids(&["a:1", "b:2", "c:3"]), 1));
        assert_eq!(d.len(), 16);
    }

    #[test]
    fn only_two_or_more_clocks_read_vouch_for_others() {
        let t0 = Instant::now();
        let ten = Duration::from_secs(10);
        // One member: its clock alone shows it over, and that is enough
        // for this client, not to vouch to others.
        let alone = Panel::new(1, String::new());
        let seat = alone.seat(0);
        seat.reading(t0, 100 * S, 0.0);
        let start = alone.start(t0);
        seat.reading(t0 + ten, 110 * S, 0.0);
        assert_eq!(alone.left(&start, ten), None);
        assert!(!alone.vouches(&start, ten));
        // Three: a refused clock shows nothing, for this client or others.
        let panel = Panel::new(3, String::new());
        let seats: Vec<Seat> = (0..3).map(|m| panel.seat(m)).collect();
        seats[0].reading(t0, 100 * S, 0.0);
        let start = panel.start(t0);
        seats[0].reading(t0 + ten, 110 * S, 0.0);
        seats[1].refused();
        assert_eq!(panel.left(&start, ten), Some(ten));
        assert!(!panel.vouches(&start, ten));
        seats[2].reading(t0 + ten, 777 * S, 0.0);
        seats[2].reading(t0 + ten + ten, 787 * S, 0.0);
        assert_eq!(panel.left(&start, ten), None);
        assert!(panel.vouches(&start, ten));
    }

    #[test]
    fn a_first_reading_taken_in_while_a_start_was_dated_is_moved_on_to_it() {
        let t0 = Instant::now();
        let panel = Panel::new(3, String::new());
        let seats: Vec<Seat> = (0..3).map(|m| panel.seat(m)).collect();
        let start = panel.start(t0 + Duration::from_secs(1));
        // Came in at t0, before the start, but stored after it was dated.
        seats[1].reading(t0, 100 * S, 0.0);
        seats[0].reading(t0 + Duration::from_secs(1), 500 * S, 0.0);
        let five = Duration::from_secs(5);
        let t = t0 + Duration::from_secs(6);
        seats[0].reading(t, 505 * S, 0.0);
        seats[1].reading(t, 105 * S, 0.0);
        // Node 1 at the start: 101 s at the latest, so 4 s passed there.
        assert_eq!(panel.left(&start, five), Some(Duration::from_secs(1)));
        seats[1].reading(t, 106 * S, 0.0);
        assert_eq!(panel.left(&start, five), None);
    }

    #[test]
    fn refused_clocks_show_nothing_and_too_few_answering_say_nothing() {
        let t0 = Instant::now();
        let panel = Panel::new(3, String::new());
        let seats: Vec<Seat> = (0..3).map(|m| panel.seat(m)).collect();
        let start = panel.start(t0);
        let ten = Duration::from_secs(10);
        assert_eq!(panel.left(&start, ten), None);
        seats[0].reading(t0, 100 * S, 0.1);
        assert_eq!(panel.left(&start, ten), Some(ten));
        // Node 0's clock (perhaps the bad one) shows it over; node 1's
        // `TIME` is refused; node 2's is not read yet: not over.
        seats[1].refused();
        seats[0].reading(t0 + ten, 111 * S, 0.1);
        assert_eq!(panel.left(&start, ten), Some(ten));
        // Two of three refuse: no majority can show it, the panel says
        // nothing (the node's clock and ours decide).
        seats[2].refused();
        assert_eq!(panel.left(&start, ten), None);
    }
}
