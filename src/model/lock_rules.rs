//! How the lock model's nodes and clients act on a message: a node applies
//! it; a client counts the vote of its attempt or of one of its extensions
//! and, once the round decided, acts by the crate's rules (see `lock.rs`).

use std::time::Duration;

use stateright::Property;

use crate::client::config::Config;
use crate::error::NodeErrorKind;
use crate::fenced_writes::{verdict, Verdict};
use crate::model::detection::check_after;
use crate::model::lock::{LockModel, FENCING};
use crate::model::lock_state::send;
use crate::model::lock_state::{Action, ClockRules, Hold, Kind, Mint, Msg, Node, Phase, State};
use crate::model::lock_symmetry::representative_for;
use crate::model::tally_of;
use crate::model::{check, check_symmetric};
use crate::quorum::tally::{node_bit, NodeSet, Vote};

impl LockModel {
    /// Every node.
    pub(crate) fn all(&self) -> NodeSet {
        (1 << self.nodes) - 1
    }

    /// The clock rules a client judges a reading by.
    pub(crate) fn clock(&self) -> ClockRules {
        ClockRules {
            allowance: self.drift_factor,
            quarantine: self.ttl,
            check: self.clock_check,
            cut: self.holder_cut,
            odd: self.odd_clock,
            needed: (self.quorum)(self.nodes),
        }
    }

    /// The first connection check on a node that restarted, at `now`: the
    /// detection step's verdict from the uptime the new process reports
    /// (see `uptime_grain`, and `Restart::uptime_offset` for a process
    /// that ran elsewhere or whose clock stepped), its quarantine in
    /// grains from now.
    pub(crate) fn probe(&self, node: &mut Node, now: u8) {
        let Some(start) = node.unprobed_since.take() else {
            return;
        };
        let g = self.uptime_grain.max(1);
        let uptime = u64::from(now / g - start / g) + self.restart.uptime_offset();
        let q = self.real_ttl(self.ttl).div_ceil(g);
        let a = check_after(self.detect, self.restart, uptime, q.into());
        if a.loss.is_some() {
            let left = a.remaining.saturating_mul(g.into());
            node.quarantined_until = now.saturating_add(u8::try_from(left).unwrap_or(u8::MAX));
            node.quarantined_from = now;
        }
    }

    /// A crashed node `n` restarts, with or without its keys; the first
    /// connection check to reach it decides from what the new process
    /// shows (`probe`).
    pub(crate) fn restart(&self, s: &mut State, n: u8) {
        let node = &mut s.nodes[n as usize];
        node.up = true;
        if !self.restart.keeps_keys() {
            node.key = None;
        }
        if self.quarantine {
            node.unprobed_since = Some(s.now);
        }
    }

    /// Message `m` arrives at its node, which is up: the node applies it
    /// (probing it first where it restarted), the client reads the node's
    /// clock and evictions from the reply, and counts the vote.
    pub(crate) fn deliver(&self, s: &mut State, m: &Msg) {
        self.probe(&mut s.nodes[m.node as usize], s.now);
        let done = self.apply(s, m);
        let clock_ok = self.steps == 0 || self.read_clock(s, m.client, m.node);
        let q = self.real_ttl(self.ttl);
        let kept_ok = !self.connected_reads || s.read_evictions((m.client, m.node), q);
        let marked_ok = self
            .flush
            .is_none_or(|read| s.read_marker((m.client, m.node), q, read));
        let vote = match done {
            // A quarantined node's yes to a SET or an extension does not
            // count (it still applied it).
            true if !(clock_ok && kept_ok && marked_ok)
                || self.quarantined(s, m.client, m.node) =>
            {
                Vote::Failed(NodeErrorKind::UnexpectedReply)
            }
            true => Vote::Yes,
            false => Vote::No,
        };
        match m.kind {
            Kind::Set => self.vote(s, m.client, m.node, vote),
            Kind::Extend { seq, .. } => self.ext_vote(s, m.client, seq, m.node, vote),
            Kind::Release => {}
        }
    }

    /// Client `c` reads node `n`'s clock with a reply; whether the node's
    /// yes counts by it. The fast client's quarantine for a clock that ran
    /// ahead is judged with the restart's instead, on its own clock and
    /// the node's (`fast_view.rs`): it notes when it first saw a step.
    pub(crate) fn read_clock(&self, s: &mut State, c: u8, n: u8) -> bool {
        let (jumped, q) = (
            s.readings[c as usize][n as usize],
            s.clock_q[c as usize][n as usize],
        );
        let counts = s.read_clock((c, n), self.clock());
        if !(self.fast_client && c == 0) {
            return counts;
        }
        s.clock_q[0][n as usize] = q;
        let node = &mut s.nodes[n as usize];
        if node.step_seen == 0 && s.readings[0][n as usize] != jumped {
            node.step_seen = s.now + 1;
        }
        true
    }

    /// Validity left by a round of `ttl` that decided `elapsed` ms after it
    /// started, counted on the yes of the nodes in `held`: the crate's
    /// rule, in whole ms (rounded down: the client's view); zero when
    /// nothing is left.
    pub(crate) fn left(&self, grown: bool, ttl: u8, elapsed: u8, held: NodeSet) -> u8 {
        let ttl_d = Duration::from_millis(ttl.into());
        let drift = self.drift_of(ttl, held, !self.grows || grown);
        (self.validity)(ttl_d, Duration::from_millis(elapsed.into()), drift)
            .map_or(0, |v| v.as_millis().min(255) as u8)
    }

    /// The clients' drift allowance for `ttl` on keys the nodes in `held`
    /// hold, from the crate's configuration code: at the fast node's
    /// measured rate where it counted (and the rule is on), once `known`.
    fn drift_of(&self, ttl: u8, held: NodeSet, known: bool) -> Duration {
        let config = Config {
            drift_factor: self.drift_factor,
            ..Config::default()
        };
        let excess = match self.fast {
            Some((n, rate)) if known && self.rate_counted && held & node_bit(n.into()) != 0 => {
                rate - 1.0
            }
            _ => 0.0,
        };
        config.drift_at(Duration::from_millis(ttl.into()), excess)
    }

    /// How long a key set with `ttl` lasts in real time on a node whose
    /// clock runs the drift fast (rounded down: the worst case).
    pub(crate) fn real_ttl(&self, ttl: u8) -> u8 {
        (f64::from(ttl) / (1.0 + self.drift_factor)).floor() as u8
    }

    /// How long a key set with `ttl` lasts in real time on node `n`: the
    /// fast node's rate there (once it runs at it), the drift elsewhere.
    fn key_life(&self, grown: bool, n: u8, ttl: u8) -> u8 {
        match self.fast {
            Some((fast, rate)) if fast == n && (!self.grows || grown) => {
                (f64::from(ttl) / rate).floor() as u8
            }
            _ => self.real_ttl(ttl),
        }
    }

    /// A node applies a message at the current instant; returns whether it
    /// did what was asked (a `SET NX` set the key, an extension extended).
    pub(crate) fn apply(&self, s: &mut State, m: &Msg) -> bool {
        let (now, grown) = (s.now, s.grown);
        let node = &mut s.nodes[m.node as usize];
        let live = node.key.filter(|(_, expires)| now < *expires);
        let ours = live.is_some_and(|(holder, _)| holder == m.client);
        let foreign = live.is_some() && !ours;
        match m.kind {
            Kind::Set if live.is_some() => false,
            Kind::Set => {
                node.key = Some((m.client, now + self.key_life(grown, m.node, self.ttl)));
                true
            }
            Kind::Extend { ttl, .. } if ours => {
                node.key = Some((m.client, now + self.key_life(grown, m.node, ttl)));
                true
            }
            Kind::Extend { .. } if self.failed_extend_deletes => {
                node.key = None;
                s.foreign_delete |= foreign;
                false
            }
            Kind::Extend { .. } => false,
            Kind::Release if ours || (foreign && !self.compare_on_release) => {
                node.key = None;
                s.foreign_delete |= foreign;
                false
            }
            Kind::Release => false,
        }
    }

    /// Nodes not in `heard`.
    pub(crate) fn unheard(&self, heard: NodeSet) -> impl Iterator<Item = u8> {
        (0..self.nodes as u8).filter(move |n| heard & node_bit((*n).into()) == 0)
    }

    /// Holder `c` counts node `n`'s vote on its extension `seq` and, once
    /// the round decided, updates its validity by the guard's rule.
    pub(crate) fn ext_vote(&self, s: &mut State, c: u8, seq: u8, n: u8, vote: Vote) {
        let (now, grown) = (s.now, s.grown);
        let Phase::Holding(h) = &mut s.clients[c as usize] else {
            return;
        };
        let Some(e) = h.exts.iter_mut().find(|e| e.seq == seq && !e.decided) else {
            return;
        };
        let bit = node_bit(n.into());
        if (e.yes | e.no | e.failed) & bit != 0 {
            return;
        }
        match vote {
            Vote::Yes => e.yes |= bit,
            Vote::No => e.no |= bit,
            Vote::Failed(_) => e.failed |= bit,
        }
        let tally = tally_of(self.nodes, (self.quorum)(self.nodes), e.yes, e.no, e.failed);
        let Some(won) = tally.decided() else { return };
        e.decided = true;
        let left = self.left(grown, e.ttl, now - e.start, self.all());
        // Confirmed: won, time left, and finished within the validity it
        // was sent with. Otherwise the guard keeps what it has.
        if !won || left == 0 || now >= e.before {
            return;
        }
        let until = now + left;
        if !self.dispatch_order {
            h.until = until;
        } else if seq > h.confirmed {
            h.confirmed = seq;
            h.held = e.yes;
            h.basis = (e.start, e.ttl);
            h.ahead = 0;
            h.exts.retain(|e| e.seq > seq);
            h.until = h.exts.iter().fold(until, |u, e| u.min(e.bound));
        }
    }

    /// Client `c` counts node `n`'s vote and acts once the round decided.
    pub(crate) fn vote(&self, s: &mut State, c: u8, n: u8, vote: Vote) {
        let (now, grown) = (s.now, s.grown);
        let Phase::Trying {
            start,
            yes,
            no,
            failed,
        } = &mut s.clients[c as usize]
        else {
            return;
        };
        let bit = node_bit(n.into());
        if (*yes | *no | *failed) & bit != 0 {
            return;
        }
        match vote {
            Vote::Yes => *yes |= bit,
            Vote::No => *no |= bit,
            Vote::Failed(_) => *failed |= bit,
        }
        let tally = tally_of(self.nodes, (self.quorum)(self.nodes), *yes, *no, *failed);
        let won = match tally.decided() {
            None => return,
            Some(won) => won,
        };
        let left = if won {
            self.left(grown, self.ttl, now - *start, *yes)
        } else {
            0
        };
        if left > 0 {
            s.clients[c as usize] = Phase::Holding(Hold {
                until: now + left,
                acquired: now,
                sent: 0,
                confirmed: 0,
                exts: Vec::new(),
                held: *yes,
                basis: (*start, self.ttl),
                stalled: None,
                due: 0,
                ahead: 0,
                token: 0,
                wrote: false,
                mint: match s.premint[c as usize] {
                    0 if self.fenced => Mint::Asked,
                    0 => Mint::None,
                    token => Mint::Minted(token),
                },
            });
        } else {
            let undo = self.all() & !tally.no;
            s.clients[c as usize] = Phase::Done;
            send(&mut s.net, c, undo, Kind::Release);
        }
    }
}

impl LockModel {
    /// The fast node's clock starts running at its rate: a key there has
    /// the rest of its life shortened by as much, and every client learns
    /// the rate; a holder whose keys sit there bounds its validity by it
    /// (where `rebound`), counted from the round that set them, as the
    /// crate's `Shared::clock_bound` does.
    pub(crate) fn grow(&self, s: &mut State) {
        let Some((fast, rate)) = self.fast else {
            return;
        };
        s.grown = true;
        let now = s.now;
        let node = &mut s.nodes[fast as usize];
        node.key = node.key.map(|(c, expires)| {
            let rest = f64::from(expires.saturating_sub(now)) * (1.0 + self.drift_factor) / rate;
            (c, now + rest.floor() as u8)
        });
        for phase in &mut s.clients {
            let Phase::Holding(h) = phase else { continue };
            if self.rebound && h.held & node_bit(fast.into()) != 0 {
                let (start, ttl) = h.basis;
                h.until = h.until.min(start + self.left(true, ttl, 0, h.held));
            }
        }
    }
}

impl LockModel {
    /// The property a holder's clock cut keeps.
    pub(crate) const CUT: &str =
        "a holder that read a stepped clock counts on that node's key no longer than it lives";

    /// What the lock model checks: no two valid holders at one real instant;
    /// fenced locks returned in token order; no release or extension deletes
    /// another's key; and a holder whose client read a node's clock since its
    /// latest step, where the node's yes counted for the lock, counts the lock
    /// valid no longer than its key there lives (the cut of `lock/shared.rs`).
    pub(crate) fn checked() -> Vec<Property<LockModel>> {
        vec![
            Property::always(
                "no two clients hold a valid lock at once",
                |_, s: &State| {
                    let valid = s
                        .clients
                        .iter()
                        .filter(|p| matches!(p, Phase::Holding(h) if h.valid(s.now)))
                        .count();
                    valid <= 1
                },
            ),
            Property::always(FENCING, |_, s: &State| {
                // Sorted by acquisition: tokens must be sorted too.
                s.returned.windows(2).all(|w| w[0].1 < w[1].1)
            }),
            Property::always(
                "a release or an extension never deletes another holder's key",
                |_, s: &State| !s.foreign_delete,
            ),
            Property::always(FENCED_WRITES, |_, s: &State| {
                s.store.landed.windows(2).all(|w| w[0] <= w[1])
            }),
            Property::always(Self::CUT, |_, s: &State| {
                s.clients.iter().enumerate().all(|(c, p)| {
                    let Phase::Holding(h) = p else { return true };
                    // A stalled clock's holder: the exclusion property.
                    s.now >= h.until
                        || h.stalled.is_some()
                        || s.nodes.iter().enumerate().all(|(n, node)| {
                            let read = node.jumped > 0 && s.readings[c][n] == node.jumped;
                            h.held & node_bit(n) == 0
                                || !read
                                || node
                                    .key
                                    .is_some_and(|(k, e)| k as usize == c && e >= h.until)
                        })
                })
            }),
            Property::sometimes("both clients held the lock", |_, s: &State| {
                s.clients.iter().all(|p| *p == Phase::Done)
                    && s.nodes.iter().all(|n| n.key.is_none())
                    && s.net.is_empty()
            }),
        ]
    }
}

impl LockModel {
    /// What a holder `c` whose clock runs may do next.
    pub(crate) fn holding_actions(&self, s: &State, c: u8, h: &Hold, actions: &mut Vec<Action>) {
        match h.mint {
            Mint::Asked => actions.push(Action::Mint(c)),
            Mint::Minted(_) => actions.push(Action::Minted(c)),
            Mint::None => {
                actions.push(Action::Release(c));
                if self.writes.is_some() && h.token > 0 && !h.wrote {
                    actions.push(Action::Write(c));
                }
                // The guard refuses to extend an expired lock.
                if s.faults[3] > 0 && s.now < h.until {
                    actions.push(Action::Extend(c, self.ttl));
                    if self.short_ttl != 0 {
                        actions.push(Action::Extend(c, self.short_ttl));
                    }
                }
                for n in (0..self.nodes as u8).filter(|_| s.faults[5] > 0) {
                    actions.push(Action::Probe(c, n));
                }
                for e in h.exts.iter().filter(|e| !e.decided && s.faults[1] > 0) {
                    for n in self.unheard(e.yes | e.no | e.failed) {
                        actions.push(Action::Timeout(c, n, Some(e.seq)));
                    }
                }
            }
        }
    }
}

impl LockModel {
    /// Whether a stalled holder's node timer is due: it comes back by then,
    /// before time moves on.
    pub(crate) fn fire_due(s: &State) -> bool {
        s.clients
            .iter()
            .any(|p| matches!(p, Phase::Holding(h) if h.stalled.is_some() && s.now >= h.due))
    }

    /// Holder `c`'s clock stops now; its node timer comes back within one
    /// period.
    pub(crate) fn stall(&self, s: &mut State, c: u8) {
        s.faults[7] -= 1;
        let (now, tick) = (s.now, self.tick);
        if let Phase::Holding(h) = &mut s.clients[c as usize] {
            h.stalled = Some(now);
            h.due = now.saturating_add(tick);
        }
    }

    /// Stalled holder `c`'s node timer came back: it reads every node's
    /// clock, and waits one more period.
    pub(crate) fn fire(&self, s: &mut State, c: u8) {
        for n in 0..self.nodes as u8 {
            if s.nodes[n as usize].up {
                s.read_clock((c, n), self.clock());
            }
        }
        let (now, tick) = (s.now, self.tick);
        if let Phase::Holding(h) = &mut s.clients[c as usize] {
            h.due = now.saturating_add(tick);
        }
    }
}

/// The fenced store's property's name.
pub(crate) const FENCED_WRITES: &str =
    "a write from a holder whose lock was taken earlier never lands after a later one's";

/// The store's rule as shipped: the fence's verdict (`fenced_writes.rs`),
/// every write naming the one resource.
pub(crate) fn fence_admits(fence: Option<u8>, token: u8) -> bool {
    let fence = fence.map(|seen| ("r", u64::from(seen)));
    verdict(fence, "r", u64::from(token)) == Verdict::Lands
}

impl LockModel {
    /// Holder `c` writes to the store: it lands where the store's rule
    /// admits it, and the fence takes its token, as the script does.
    pub(crate) fn write(&self, s: &mut State, c: u8) {
        let (Some(admits), Phase::Holding(h)) = (self.writes, &mut s.clients[c as usize]) else {
            return;
        };
        h.wrote = true;
        if admits(s.store.fence, h.token) {
            s.store.fence = Some(h.token);
            s.store.landed.push(h.acquired);
        }
    }
}

/// Safe: explored to the end, no counterexample, both clients held it.
pub(crate) fn safe(name: &str, m: LockModel) {
    let rep = representative_for(m.fast.is_some(), m.fast_client);
    check_symmetric(name, m, rep).assert_safe(name, 1_000, "both clients held the lock");
}

/// Unsafe: the checker finds a counterexample to `property`.
pub(crate) fn unsafe_(name: &str, m: LockModel, property: &str) {
    check(name, m).assert_violates(name, property);
}
