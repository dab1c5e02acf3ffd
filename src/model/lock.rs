//! The lock, model-checked.
//!
//! Time is discrete (1 ms a tick, up to a horizon). A node keeps one key
//! with an expiry on its own clock, which may run up to the drift factor
//! fast: a TTL of `ttl` ms set at real time `t` on a fast node is gone at
//! `t + floor(ttl / (1 + drift))`. Clients send `SET NX` to every node,
//! count votes in a real [`Tally`], and hold the lock until the decision
//! plus [`validity`]`(ttl, elapsed, drift)`, the drift being the crate's
//! own allowance ([`Config::drift`]); a failed attempt releases on every
//! node that did not refuse; a holder extends with compare-and-pexpire
//! (with the lock's TTL or a shorter one, several in flight) and releases
//! with compare-and-delete. The guard's validity follows the crate's rule
//! for extensions: lowered to what an extension would leave before it is
//! sent, raised only by a confirmed one, in dispatch order. A fenced holder
//! mints a token from the counter (a linearizable counter here: the
//! counter model checks the real one) and returns the lock only if it was
//! still valid when the token came back.
//! Messages are delayed and reordered (delivered in any order), lost, or
//! their answer lost; clients stop waiting for slow nodes; nodes crash,
//! with or without persistence, and restart at once or after a delay. A
//! node that restarted, or another process that appeared at its address,
//! is judged by the first connection check that reaches it: the crate's
//! detection step (`detection.rs`) reads the uptime it reports (in whole
//! grains, like Redis's seconds, and far beyond the time since the fault
//! for a process swapped in or a wall clock stepped) and sets its
//! quarantine from then. A
//! node may also evict the key it holds while every client stays connected
//! (no connection check runs then): each reply to a request that asks for
//! a vote carries the node's eviction count, judged by the crate's rule
//! (`node/trust/vigil.rs`); or flush it, with our marker, which a client outside
//! the model may then write anew, and each such reply carries the marker
//! (`lock_connected.rs`).
//!
//! Properties: no two clients hold a valid lock at the same real instant;
//! a release or an extension (failed or not) never deletes another holder's
//! key; among fenced locks returned to their callers, tokens increase with
//! the order in which the locks were taken; and where fenced holders write
//! to storage that checks tokens, at any time, valid or not, a write from
//! a holder whose lock was taken earlier never lands after a later one's.

use std::time::Duration;

use stateright::{Model, Property};

use crate::client::redlock::validity;
use crate::error::NodeErrorKind;
use crate::model::detection::{
    check_after, checked, dated_by_uptime, restart_seen_as_loss, trusts_durable_settings, Detect,
    Restart,
};
use crate::model::lock_connected::MarkerRead;
use crate::model::lock_state::{
    per_node, send, Action, Ext, Kind, Members, Mint, Node, Phase, State, Store, JUMP,
};
use crate::model::{insert_sorted, take_one};
use crate::quorum::tally::{quorum, quorum_tolerating, Vote};

/// The fencing property's name.
pub(crate) const FENCING: &str = "fenced locks returned carry tokens in acquisition order";

/// How a client computes validity: `(ttl, elapsed, drift)`.
type Validity = fn(Duration, Duration, Duration) -> Option<Duration>;

/// One run's bounds and rules.
#[derive(Clone)]
pub(crate) struct LockModel {
    /// Nodes (all with clocks running the full drift fast: the worst case).
    pub(crate) nodes: usize,
    /// Clients, one acquisition each.
    pub(crate) clients: usize,
    /// The TTL, ms.
    pub(crate) ttl: u8,
    /// The drift factor of the clients' configuration and of the nodes'
    /// clocks.
    pub(crate) drift_factor: f64,
    /// Last real instant (ms) explored.
    pub(crate) horizon: u8,
    /// Messages (or their answers) lost.
    pub(crate) drops: u8,
    /// Times a client stops waiting for a node.
    pub(crate) timeouts: u8,
    /// Node crashes.
    pub(crate) crashes: u8,
    /// How a crashed node comes back (its keys and our marker).
    pub(crate) restart: Restart,
    /// The detection step: what the connection check after a restart makes
    /// of what the node shows (the crate's table, as shipped).
    pub(crate) detect: Detect,
    /// How long a crashed node stays down, ms.
    pub(crate) restart_delay: u8,
    /// Rule: a node that restarts without its keys does not count toward a
    /// lock quorum for the restart quarantine, one maximum TTL on its own
    /// clock (as shipped).
    pub(crate) quarantine: bool,
    /// The grain of the uptime a node reports, ms (at least 1). Like
    /// Redis's whole seconds, it is the difference of two readings cut to
    /// a grain; the first connection check after a restart reads it and
    /// hands it to the detection step, whose quarantine (in grains) starts
    /// then.
    pub(crate) uptime_grain: u8,
    /// The client's validity rule.
    pub(crate) validity: Validity,
    /// Votes needed, for `n` nodes.
    pub(crate) quorum: fn(usize) -> usize,
    /// Whether a release compares the value before deleting (as shipped).
    pub(crate) compare_on_release: bool,
    /// Extensions holders send.
    pub(crate) extends: u8,
    /// Whether an extension that finds the key not ours deletes it (the
    /// bug of clients whose failed extend deletes the lock; not shipped).
    pub(crate) failed_extend_deletes: bool,
    /// A second, shorter TTL extensions may carry (0: only `ttl`).
    pub(crate) short_ttl: u8,
    /// Rule: an extension lowers the guard's validity to what it would
    /// leave before it is sent (as shipped).
    pub(crate) lower_before_send: bool,
    /// Rule: a confirmed extension raises the validity only up to the
    /// bounds of extensions sent after it, and not at all once a later one
    /// was confirmed (as shipped). Off: the last to finish wins.
    pub(crate) dispatch_order: bool,
    /// Holders mint a fencing token after acquiring.
    pub(crate) fenced: bool,
    /// Rule: a fenced lock is returned only if still valid when its token
    /// arrives (as shipped); otherwise it is released.
    pub(crate) check_mint: bool,
    /// Fenced holders write to a store that admits a write by this rule on
    /// its fence and the write's token (`None`: they do not write).
    pub(crate) writes: Option<fn(Option<u8>, u8) -> bool>,
    /// Rule, negated: the token (an election's term) is taken from the
    /// counter before the attempt, not after it won (not shipped).
    pub(crate) mint_before_acquire: bool,
    /// Node clock steps ([`JUMP`] ms ahead each); clients read every clock
    /// at 0 (they used the nodes before), then with each reply.
    pub(crate) steps: u8,
    /// Rule: a reading ahead of the last beyond the allowance keeps the
    /// node's yes from counting for one TTL (as shipped: `clockwatch.rs`).
    pub(crate) clock_check: bool,
    /// Clock readings holders take of idle nodes (`quorum/mod.rs`).
    pub(crate) probes: u8,
    /// Rule: such a reading cuts the holder's validity by the excess where
    /// the node's yes counted for the lock (as shipped: `lock/shared.rs`).
    pub(crate) holder_cut: bool,
    /// One node whose clock runs faster than the drift factor allows: its
    /// index and rate (a key there lives `ttl / rate`); the clients have
    /// measured that rate (`node/clock/clockrate.rs`).
    pub(crate) fast: Option<(u8, f64)>,
    /// Rule: validity is counted at a measured rate beyond the drift
    /// factor where that node's yes counted (an extension: any node), by
    /// the crate's `Config::drift_at` (as shipped).
    pub(crate) rate_counted: bool,
    /// The fast node's clock runs the drift fast at first and starts
    /// running at its rate at a moment the checker picks (a rate that grows
    /// under a held lock); every client learns the new rate then.
    pub(crate) grows: bool,
    /// Rule: a holder whose keys sit on a node whose faster rate it learns
    /// counts them valid no longer than they live at that rate (as shipped:
    /// `lock/shared.rs`, `Shared::clock_bound`).
    pub(crate) rebound: bool,
    /// Evictions: a node drops the key it holds while every client stays
    /// connected (clients were connected before any; the connection's
    /// check never runs again).
    pub(crate) evictions: u8,
    /// Rule: a reply to a request that asks for a vote carries the node's
    /// eviction count, and keys dropped since the client's last reading
    /// keep the node's yes from counting for one TTL (as shipped:
    /// `node/trust/vigil.rs`). Off: the rule before, evidence read only when a
    /// connection is made.
    pub(crate) connected_reads: bool,
    /// The evictions are flushes, of a node that cannot evict: each takes
    /// our marker too, and a client outside the model may write it anew;
    /// each round reads the marker as this says (`None`: evictions).
    pub(crate) flush: Option<MarkerRead>,
    /// Holders' clocks that stop: their timers fire no more, a timer on a
    /// node's clock reads every node each `tick` ms (`quorum/probe.rs`). A
    /// stall starts with over a period and 2 ms of validity left (the docs'
    /// stated limit).
    pub(crate) stalls: u8,
    /// The node timer's period, ms.
    pub(crate) tick: u8,
    /// Rule: once a quorum of nodes ran ahead of a holder's clock, it
    /// keeps no validity (as shipped: `quorum/probe.rs`, `lock/shared.rs`).
    /// Off: each node's excess is cut where its yes counted, as for a node
    /// whose clock jumped.
    pub(crate) odd_clock: bool,
    /// Client 0's clock runs `fast_rate` times as fast as real time.
    pub(crate) fast_client: bool,
    /// How many times as fast (see `fast_client`).
    pub(crate) fast_rate: u8,
    /// Rule: its quarantine is over once the node's clock shows it too.
    pub(crate) both_clocks: bool,
    /// Rule: a loss found while a quarantine is on (a step read) counts
    /// it anew on the node's clock (`TrustState::extend`; `fast_view.rs`).
    pub(crate) rebegin: bool,
    /// How far (ms) a step moves a node's clock.
    pub(crate) jump: u8,
    /// Rule: also over only once a majority of the members' clocks show it.
    pub(crate) panel: Members,
}

impl LockModel {
    /// The rules as shipped: 3 nodes, 2 clients, TTL 5 ms, node clocks 10 %
    /// fast (a key lives 4 ms), the crate's drift allowance for that (2.5
    /// ms), 7 ms of time, one timeout.
    pub(crate) fn shipped() -> Self {
        Self {
            nodes: 3,
            clients: 2,
            ttl: 5,
            drift_factor: 0.1,
            horizon: 7,
            drops: 0,
            timeouts: 1,
            crashes: 0,
            restart: Restart::Kept,
            detect: checked,
            restart_delay: 0,
            quarantine: true,
            uptime_grain: 4,
            validity,
            quorum,
            compare_on_release: true,
            extends: 0,
            failed_extend_deletes: false,
            short_ttl: 0,
            lower_before_send: true,
            dispatch_order: true,
            fenced: false,
            check_mint: true,
            writes: None,
            mint_before_acquire: false,
            steps: 0,
            clock_check: true,
            probes: 0,
            holder_cut: true,
            fast: None,
            rate_counted: true,
            grows: false,
            rebound: true,
            evictions: 0,
            connected_reads: true,
            flush: None,
            stalls: 0,
            tick: 1,
            odd_clock: true,
            fast_client: false,
            fast_rate: 4,
            both_clocks: true,
            rebegin: true,
            jump: JUMP,
            panel: Members::Read,
        }
    }
}

impl Model for LockModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let node = Node {
            key: None,
            up: true,
            down_since: 0,
            quarantined_until: 0,
            quarantined_from: 0,
            unprobed_since: None,
            jumped: 0,
            step_seen: 0,
            evicted: 0,
            flushed: 0,
            mark: Some(0),
        };
        vec![State {
            now: 0,
            nodes: vec![node; self.nodes],
            clients: vec![Phase::Idle; self.clients],
            net: Vec::new(),
            faults: [
                self.drops,
                self.timeouts,
                self.crashes,
                self.extends,
                self.steps,
                self.probes,
                self.evictions,
                self.stalls,
            ],
            foreign_delete: false,
            counter: 0,
            returned: Vec::new(),
            premint: vec![0; self.clients],
            readings: per_node(self.nodes, self.clients, 0),
            clock_q: per_node(self.nodes, self.clients, 0),
            evictions_read: per_node(self.nodes, self.clients, 0),
            marks: per_node(self.nodes, self.clients, Some(0)),
            grown: false,
            store: Store::default(),
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        if s.now < self.horizon && !Self::fire_due(s) {
            actions.push(Action::Tick);
        }
        for (c, phase) in s.clients.iter().enumerate() {
            let c = c as u8;
            match phase {
                // Its timers stopped; the node's comes back when due.
                Phase::Holding(h) if h.stalled.is_some() && s.now >= h.due => {
                    actions.push(Action::Fire(c));
                }
                Phase::Holding(h) if h.stalled.is_some() => {}
                Phase::Holding(h)
                    if s.faults[7] > 0
                        && h.mint == Mint::None
                        && h.until > s.now.saturating_add(self.tick).saturating_add(2) =>
                {
                    actions.push(Action::Stall(c));
                    self.holding_actions(s, c, h, actions);
                }
                Phase::Idle => actions.push(Action::Start(c)),
                Phase::Trying {
                    yes, no, failed, ..
                } if s.faults[1] > 0 => {
                    for n in self.unheard(yes | no | failed) {
                        actions.push(Action::Timeout(c, n, None));
                    }
                }
                Phase::Holding(h) => self.holding_actions(s, c, h, actions),
                _ => {}
            }
        }
        for (i, m) in s.net.iter().enumerate() {
            // A client's messages to one node arrive in the order sent (the
            // node layer never lets a release overtake its own SET): only
            // the first of each pair (sent SET before release) may arrive.
            let earlier = s.net[..i]
                .iter()
                .any(|x| x.client == m.client && x.node == m.node);
            if earlier {
                continue;
            }
            actions.push(Action::Deliver(m.clone()));
            if s.faults[0] > 0 {
                actions.push(Action::Drop(m.clone()));
            }
        }
        for (n, node) in s.nodes.iter().enumerate() {
            if node.up && s.faults[2] > 0 {
                actions.push(Action::Crash(n as u8));
            }
            if !node.up && s.now >= node.down_since.saturating_add(self.restart_delay) {
                actions.push(Action::Restart(n as u8));
            }
            self.step_actions(s, n as u8, actions);
            if node.up && node.key.is_some() && s.faults[6] > 0 {
                actions.push(Action::Evict(n as u8));
            }
            if self.flush.is_some() && node.up && node.mark != Some(node.flushed) {
                actions.push(Action::Remark(n as u8));
            }
        }
        if self.grows && !s.grown {
            actions.push(Action::Grow);
        }
    }

    fn next_state(&self, s: &State, action: Action) -> Option<State> {
        let mut s = s.clone();
        match action {
            Action::Tick => {
                s.now += 1;
                // An expired key is no key: one state for both.
                let now = s.now;
                for node in &mut s.nodes {
                    if node.key.is_some_and(|(_, expires)| expires <= now) {
                        node.key = None;
                    }
                    if node.quarantined_until <= now {
                        node.quarantined_until = 0;
                    }
                }
                for q in s.clock_q.iter_mut().flatten().filter(|q| **q <= now) {
                    *q = 0;
                }
            }
            Action::Start(c) => {
                s.clients[c as usize] = Phase::Trying {
                    start: s.now,
                    yes: 0,
                    no: 0,
                    failed: 0,
                };
                if self.mint_before_acquire {
                    s.counter += 1;
                    s.premint[c as usize] = s.counter;
                }
                send(&mut s.net, c, self.all(), Kind::Set);
            }
            Action::Deliver(m) if !s.nodes[m.node as usize].up => {
                take_one(&mut s.net, &m)?;
            }
            Action::Deliver(m) => {
                take_one(&mut s.net, &m)?;
                self.deliver(&mut s, &m);
            }
            Action::Drop(m) => {
                take_one(&mut s.net, &m)?;
                s.faults[0] -= 1;
            }
            Action::Timeout(c, n, ext) => {
                s.faults[1] -= 1;
                let failed = Vote::Failed(NodeErrorKind::UnexpectedReply);
                match ext {
                    None => self.vote(&mut s, c, n, failed),
                    Some(seq) => self.ext_vote(&mut s, c, seq, n, failed),
                }
            }
            Action::Extend(c, ttl) => {
                s.faults[3] -= 1;
                let (now, bound) = (s.now, s.now + self.left(s.grown, ttl, 0, self.all()));
                let Phase::Holding(h) = &mut s.clients[c as usize] else {
                    return None;
                };
                h.sent += 1;
                let seq = h.sent;
                h.exts.push(Ext {
                    seq,
                    ttl,
                    start: now,
                    bound,
                    before: h.until,
                    yes: 0,
                    no: 0,
                    failed: 0,
                    decided: false,
                });
                if self.lower_before_send {
                    h.until = h.until.min(bound);
                }
                send(&mut s.net, c, self.all(), Kind::Extend { seq, ttl });
            }
            Action::Mint(c) => {
                s.counter += 1;
                let token = s.counter;
                let Phase::Holding(h) = &mut s.clients[c as usize] else {
                    return None;
                };
                h.mint = Mint::Minted(token);
            }
            Action::Minted(c) => {
                let now = s.now;
                let Phase::Holding(h) = &mut s.clients[c as usize] else {
                    return None;
                };
                let Mint::Minted(token) = h.mint else {
                    return None;
                };
                if self.check_mint && now >= h.until {
                    // Expired while minting: released, the attempt failed.
                    s.clients[c as usize] = Phase::Done;
                    send(&mut s.net, c, self.all(), Kind::Release);
                } else {
                    (h.mint, h.token) = (Mint::None, token);
                    let acquired = h.acquired;
                    insert_sorted(&mut s.returned, (acquired, token));
                }
            }
            Action::Release(c) => {
                s.clients[c as usize] = Phase::Done;
                send(&mut s.net, c, self.all(), Kind::Release);
            }
            Action::Write(c) => self.write(&mut s, c),
            Action::Step(n) => s.step_clock(n, self.jump),
            Action::Evict(n) => s.evict(n, self.flush.is_some()),
            Action::Remark(n) => s.remark(n),
            Action::Grow => self.grow(&mut s),
            Action::Stall(c) => self.stall(&mut s, c),
            Action::Fire(c) => self.fire(&mut s, c),
            Action::Probe(c, n) => {
                s.faults[5] = s.faults[5].saturating_sub(1);
                // A reply from a restarted node comes on a new connection,
                // checked first.
                self.probe(&mut s.nodes[n as usize], s.now);
                self.read_clock(&mut s, c, n);
            }
            Action::Crash(n) => s.crash(n),
            Action::Restart(n) => self.restart(&mut s, n),
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        Self::checked()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::check_symmetric;
    use crate::model::lock_rules::{fence_admits, safe, unsafe_, FENCED_WRITES};
    use crate::model::lock_symmetry::representative_for;

    #[test]
    fn model_lock_representative_is_the_least_of_every_renaming() {
        use crate::model::lock_symmetry::{representative, representative_built_whole};
        let m = LockModel {
            fenced: true,
            writes: Some(fence_admits),
            crashes: 1,
            ..LockModel::shipped()
        };
        let states = crate::model::walked(&m, 1_000, 80);
        assert!(states.len() > 10_000, "{} states", states.len());
        for s in &states {
            assert_eq!(representative(s), representative_built_whole(s), "{s:?}");
        }
    }

    const EXCLUSION: &str = "no two clients hold a valid lock at once";
    const RELEASE_RULE: &str = "a release or an extension never deletes another holder's key";

    /// Extensions as shipped: TTL 7 ms (a key lives 6 ms on a fast node;
    /// validity 4 ms), extensions with the TTL or with 3 ms (a key then
    /// lives 2 ms; it leaves no validity), two of them in flight at once,
    /// 4 ms of time, no timeouts (a failed extension fails on refusals).
    fn extending() -> LockModel {
        LockModel {
            ttl: 7,
            short_ttl: 3,
            extends: 2,
            horizon: 4,
            timeouts: 0,
            ..LockModel::shipped()
        }
    }

    /// [`extending`] over 3 ms: long enough for each weakened
    /// extension rule's counterexample, short enough to find it quickly.
    fn extending_short() -> LockModel {
        LockModel {
            horizon: 3,
            ..extending()
        }
    }

    #[test]
    fn model_lock_finds_a_foreign_delete_when_a_failed_extend_deletes() {
        let m = LockModel {
            failed_extend_deletes: true,
            ..extending_short()
        };
        unsafe_(
            "lock, weakened: a failed extension deletes",
            m,
            RELEASE_RULE,
        );
    }

    #[test]
    fn model_lock_safe_with_loss_slow_nodes_and_fast_clocks() {
        let m = LockModel {
            drops: 1,
            ..LockModel::shipped()
        };
        safe("lock: loss, a slow node, clocks 10 % fast", m);
    }

    #[test]
    fn model_lock_safe_with_a_crash_and_persistence() {
        let m = LockModel {
            crashes: 1,
            timeouts: 0,
            ..LockModel::shipped()
        };
        safe("lock: a node crashes, keeps its keys (AOF)", m);
    }

    #[test]
    fn model_lock_safe_with_a_crash_and_a_delayed_restart() {
        let m = LockModel {
            crashes: 1,
            timeouts: 0,
            restart: Restart::Empty,
            restart_delay: 5,
            ..LockModel::shipped()
        };
        safe("lock: a node restarts empty after one max TTL", m);
    }

    #[test]
    fn model_lock_safe_with_quarantine_when_a_node_restarts_empty_at_once() {
        // The check dates a restart empty, a long-running process swapped
        // in behind the address (marked for another node list or not) and
        // an uptime stepped ahead alike, from the check that finds them,
        // whatever the uptime: the four explore the same states, so one run
        // covers them (5.6 M states).
        let q = 1;
        for uptime in [0, 1, 60, 200] {
            let left = |kind| check_after(checked, kind, uptime, q).remaining;
            assert_eq!(left(Restart::Empty), q);
            assert_eq!(left(Restart::Swapped), q);
            assert_eq!(left(Restart::Stepped), q);
            assert_eq!(left(Restart::Adopted), q);
        }
        let m = LockModel {
            crashes: 1,
            timeouts: 0,
            restart: Restart::Empty,
            ..LockModel::shipped()
        };
        safe("lock: a node restarts empty at once, quarantined", m);
    }

    /// A node restarts empty at once; client 0's clock runs four times as
    /// fast as real time, so its quarantine (4 ms), on its clock alone,
    /// ends after a quarter; one extension (the holder's, which the
    /// restarted node may be first to see); 4 ms of time.
    fn fast_client() -> LockModel {
        LockModel {
            horizon: 4,
            extends: 1,
            crashes: 1,
            timeouts: 0,
            restart: Restart::Empty,
            fast_client: true,
            ..LockModel::shipped()
        }
    }

    #[test]
    fn model_lock_safe_when_a_client_clock_runs_fast_through_a_quarantine() {
        safe(
            "lock: a node restarts empty, a client's clock runs four times as fast",
            fast_client(),
        );
    }

    #[test]
    fn model_lock_finds_two_holders_when_a_fast_client_clock_alone_ends_a_quarantine() {
        let m = LockModel {
            both_clocks: false,
            ..fast_client()
        };
        unsafe_(
            "lock, weakened: a quarantine ends on the client's fast clock alone",
            m,
            EXCLUSION,
        );
    }

    /// As [`fast_client`], with the client's clock eight times as fast
    /// (so that the quarantine a step starts on its clock ends within the
    /// holder's validity), and the restarted node's clock stepping 16 ms
    /// ahead once, at a moment the checker picks; the fast client may read
    /// it before that node's vote.
    fn fast_step() -> LockModel {
        LockModel {
            steps: 1,
            jump: 8,
            fast_rate: 8,
            // The fast client's own reply is a first sight too (`Probe`);
            // with the holder's extension as well, safe in 12 min (once).
            extends: 0,
            ..fast_client()
        }
    }

    #[test]
    fn model_lock_safe_when_a_restarted_node_clock_steps_under_a_fast_client() {
        safe(
            "lock: a node restarts empty and its clock steps, a client's clock runs fast",
            fast_step(),
        );
    }

    #[test]
    fn model_lock_finds_two_holders_when_a_step_read_in_a_quarantine_does_not_count_it_anew() {
        // 3 ms of time: the counterexample (12 steps) in a space a
        // breadth-first search holds.
        // Without the members' clocks, which would end it no sooner
        // (`node/trust/panel.rs`): the rule guards where they cannot be read.
        let m = LockModel {
            rebegin: false,
            panel: Members::Off,
            horizon: 3,
            ..fast_step()
        };
        unsafe_(
            "lock, weakened: a step read in a quarantine extends it on our clock only",
            m,
            EXCLUSION,
        );
    }

    #[test]
    fn model_lock_finds_two_holders_when_the_node_clock_alone_ends_a_quarantine_for_a_fast_client()
    {
        // A step the fast client's sparse readings let pass unseen ends it
        // on the node's clock, and the fast one is over early.
        let m = LockModel {
            panel: Members::Off,
            ..fast_step()
        };
        unsafe_(
            "lock, weakened: the node's clock and ours alone end a quarantine",
            m,
            EXCLUSION,
        );
    }

    #[test]
    fn model_lock_safe_when_a_member_refuses_time_under_a_fast_client() {
        // Node 2's `TIME` refused: node 0's clock and node 1's must both
        // show a quarantine of node 0 over.
        let m = LockModel {
            panel: Members::Refusing {
                member: 2,
                shows: false,
            },
            ..fast_step()
        };
        safe(
            "lock: a node's clock steps under a fast client, another member refuses TIME",
            m,
        );
    }

    #[test]
    fn model_lock_finds_two_holders_when_a_member_refusing_time_shows_a_quarantine_over() {
        // The rule before: the refusing member and the stepped clock make
        // a majority without the one sound clock.
        let m = LockModel {
            panel: Members::Refusing {
                member: 2,
                shows: true,
            },
            ..fast_step()
        };
        unsafe_(
            "lock, weakened: a member whose TIME is refused counts as showing it over",
            m,
            EXCLUSION,
        );
    }

    /// A node evicts a holder's key while every client stays connected
    /// (no connection check runs): one eviction, one timeout.
    fn evicting() -> LockModel {
        LockModel {
            evictions: 1,
            ..LockModel::shipped()
        }
    }

    #[test]
    fn model_lock_safe_when_a_node_evicts_while_connected() {
        safe(
            "lock: a node evicts a held key while connected, read in the round",
            evicting(),
        );
    }

    #[test]
    fn model_lock_finds_two_holders_when_evictions_are_read_only_at_connection() {
        let m = LockModel {
            connected_reads: false,
            ..evicting()
        };
        unsafe_(
            "lock, weakened: evictions read only when a connection is made",
            m,
            EXCLUSION,
        );
    }

    /// A node that cannot evict is flushed while every client stays
    /// connected, within the second after their last look (no connection
    /// check runs): its key and our marker gone, written anew by a client
    /// outside the model at any moment after; one timeout.
    fn flushing(read: MarkerRead) -> LockModel {
        LockModel {
            evictions: 1,
            flush: Some(read),
            ..LockModel::shipped()
        }
    }

    #[test]
    fn model_lock_safe_when_a_node_flushes_while_connected() {
        safe(
            "lock: a node flushed while connected, our marker's writing read in the round",
            flushing(MarkerRead::Writing),
        );
    }

    #[test]
    fn model_lock_finds_two_holders_when_a_round_only_asks_whether_a_marker_exists() {
        unsafe_(
            "lock, weakened: a round asks only whether our marker exists",
            flushing(MarkerRead::Exists),
            EXCLUSION,
        );
    }

    #[test]
    fn model_lock_finds_two_holders_when_the_marker_is_read_only_with_stale_evidence() {
        unsafe_(
            "lock, weakened: our marker read only with a look a second old",
            flushing(MarkerRead::Stale),
            EXCLUSION,
        );
    }

    /// The address leads to another process, or a restarted node's uptime
    /// jumps with its wall clock, while a lock is held.
    fn reappears(restart: Restart) -> LockModel {
        LockModel {
            crashes: 1,
            timeouts: 0,
            restart,
            ..LockModel::shipped()
        }
    }

    #[test]
    fn model_lock_finds_two_holders_when_losses_are_dated_by_uptime() {
        for restart in [Restart::Swapped, Restart::Stepped] {
            let m = LockModel {
                detect: dated_by_uptime,
                ..reappears(restart)
            };
            unsafe_(
                &format!("lock, weakened: losses dated by the node's uptime, {restart:?}"),
                m,
                EXCLUSION,
            );
        }
    }

    #[test]
    fn model_lock_finds_two_holders_when_a_marker_of_another_node_list_is_trusted() {
        // The table alone (the rule before tags): a process marked for
        // another node list, swapped in behind an address, counts at once.
        let m = LockModel {
            detect: crate::node::trust::amnesia::assess,
            ..reappears(Restart::Adopted)
        };
        unsafe_(
            "lock, weakened: another node list's marker trusted, Adopted",
            m,
            EXCLUSION,
        );
    }

    #[test]
    fn model_lock_safe_with_an_undetected_failover_and_amnesia_tolerance() {
        // A replicated member fails over (loses the key at once, no
        // quarantine: nothing shows it), with quorums that overlap in more
        // than one node (amnesia_tolerance 1: 3 of 3).
        let m = LockModel {
            crashes: 1,
            timeouts: 0,
            restart: Restart::Empty,
            quarantine: false,
            quorum: |n| quorum_tolerating(n, 1),
            ..LockModel::shipped()
        };
        safe("lock: an undetected failover, amnesia tolerance 1", m);
    }

    /// A node crashes and comes back with durable settings but without
    /// the lock's key: wiped, or restored from an old backup.
    fn durable_but_lost(restart: Restart) -> LockModel {
        LockModel {
            crashes: 1,
            timeouts: 0,
            restart,
            ..LockModel::shipped()
        }
    }

    #[test]
    fn model_lock_safe_when_a_durable_node_comes_back_wiped_or_from_an_old_backup() {
        // The table finds both losses alike (the backup's marker names the
        // process before), so the two explore the same states: one run.
        let q = 4;
        assert!(restart_seen_as_loss(checked, Restart::OldBackup, q));
        assert!(restart_seen_as_loss(checked, Restart::Wiped, q));
        safe(
            "lock: a durable node comes back wiped (or from an old backup), detected by the table",
            durable_but_lost(Restart::Wiped),
        );
    }

    #[test]
    fn model_lock_finds_two_holders_when_durable_settings_are_trusted() {
        for restart in [Restart::Wiped, Restart::OldBackup] {
            let m = LockModel {
                detect: trusts_durable_settings,
                ..durable_but_lost(restart)
            };
            unsafe_(
                &format!("lock, weakened: durable settings trusted, {restart:?}"),
                m,
                EXCLUSION,
            );
        }
    }

    #[test]
    fn model_lock_finds_two_holders_without_quarantine() {
        let m = LockModel {
            crashes: 1,
            timeouts: 0,
            restart: Restart::Empty,
            quarantine: false,
            ..LockModel::shipped()
        };
        unsafe_(
            "lock, weakened: a node restarts empty at once, no quarantine",
            m,
            EXCLUSION,
        );
    }

    #[test]
    fn model_lock_safe_when_a_node_clock_jumps_ahead() {
        let m = LockModel {
            steps: 1,
            ..LockModel::shipped()
        };
        safe(
            "lock: a node's clock jumps ahead, seen in the TIME behind a reply",
            m,
        );
    }

    /// A step while the lock is held, one holder's probe of every node
    /// after it: its validity is cut by the step's excess.
    fn probed_step() -> LockModel {
        LockModel {
            steps: 1,
            probes: 1,
            timeouts: 0,
            ..LockModel::shipped()
        }
    }

    #[test]
    fn model_lock_holder_cut_by_a_step_it_read() {
        safe(
            "lock: a node's clock jumps ahead under a holder, which reads it",
            probed_step(),
        );
    }

    #[test]
    fn model_lock_finds_a_holder_counting_on_a_dropped_key_without_the_cut() {
        let m = LockModel {
            holder_cut: false,
            ..probed_step()
        };
        unsafe_(
            "lock, weakened: a holder that read a step keeps its validity",
            m,
            LockModel::CUT,
        );
    }

    /// Node 1's clock 1.6 times as fast, measured by the clients: a key
    /// there lives 5 ms of a 9 ms TTL, where the drift factor's validity
    /// is 6 ms.
    fn fast_node() -> LockModel {
        LockModel {
            ttl: 9,
            horizon: 6,
            fast: Some((1, 1.6)),
            ..LockModel::shipped()
        }
    }

    #[test]
    fn model_lock_safe_with_a_node_clock_beyond_the_allowance() {
        safe(
            "lock: a node's clock runs 1.6 times as fast, counted at its rate",
            fast_node(),
        );
    }

    #[test]
    fn model_lock_finds_two_holders_when_a_measured_rate_is_ignored() {
        let m = LockModel {
            rate_counted: false,
            ..fast_node()
        };
        unsafe_(
            "lock, weakened: validity at the drift factor on a node measured faster",
            m,
            EXCLUSION,
        );
    }

    #[test]
    fn model_lock_safe_when_a_rate_grows_under_a_held_lock() {
        let m = LockModel {
            grows: true,
            ..fast_node()
        };
        safe("lock: a node's clock starts running 1.6 times as fast", m);
    }

    #[test]
    fn model_lock_finds_two_holders_when_a_grown_rate_leaves_held_locks_alone() {
        let m = LockModel {
            grows: true,
            rebound: false,
            ..fast_node()
        };
        unsafe_(
            "lock, weakened: a holder keeps its validity when a node's rate grows",
            m,
            EXCLUSION,
        );
    }

    /// A holder's own clock stops (one stall) while a timer kept on a
    /// node's clock comes back every 3 ms and reads every node's clock:
    /// TTL 12 ms (a key lives 10 ms on a fast node, validity about 7 ms),
    /// 12 ms of time, no other fault.
    fn stalling() -> LockModel {
        LockModel {
            ttl: 12,
            horizon: 12,
            timeouts: 0,
            stalls: 1,
            tick: 3,
            ..LockModel::shipped()
        }
    }

    #[test]
    fn model_lock_safe_when_a_holders_own_clock_stalls() {
        safe(
            "lock: a holder's clock stalls; a node's timer reads every clock",
            stalling(),
        );
    }

    #[test]
    fn model_lock_finds_two_holders_when_a_stalled_clock_is_cut_only_by_each_excess() {
        let m = LockModel {
            odd_clock: false,
            ..stalling()
        };
        // Depth first: breadth first walks 19 million states to the 20th
        // step where the counterexample is.
        let name = "lock, weakened: a quorum ahead of a stalled holder cuts only each excess";
        check_symmetric(name, m, representative_for(false, false)).assert_violates(name, EXCLUSION);
    }

    #[test]
    fn model_lock_finds_two_holders_when_a_jumped_node_counts() {
        let m = LockModel {
            steps: 1,
            clock_check: false,
            ..LockModel::shipped()
        };
        unsafe_(
            "lock, weakened: a node whose clock jumped ahead counts at once",
            m,
            EXCLUSION,
        );
    }

    #[test]
    fn model_lock_finds_two_holders_when_validity_ignores_drift() {
        let m = LockModel {
            validity: |ttl, elapsed, _| validity(ttl, elapsed, Duration::ZERO),
            ..LockModel::shipped()
        };
        unsafe_("lock, weakened: validity without the drift", m, EXCLUSION);
    }

    #[test]
    fn model_lock_finds_two_holders_when_validity_ignores_elapsed_time() {
        let m = LockModel {
            validity: |ttl, _, drift| validity(ttl, Duration::ZERO, drift),
            ..LockModel::shipped()
        };
        unsafe_(
            "lock, weakened: validity without the elapsed time",
            m,
            EXCLUSION,
        );
    }

    #[test]
    fn model_lock_finds_two_holders_with_a_quorum_of_half() {
        let m = LockModel {
            quorum: |n| n / 2,
            ..LockModel::shipped()
        };
        unsafe_("lock, weakened: quorum n/2", m, EXCLUSION);
    }

    #[test]
    fn model_lock_safe_with_extensions_of_two_ttls_in_flight() {
        safe(
            "lock: two extensions in flight, TTL 7 or 3 ms, messages delayed",
            extending(),
        );
    }

    #[test]
    fn model_lock_finds_two_holders_when_an_extension_does_not_lower_validity() {
        let m = LockModel {
            lower_before_send: false,
            ..extending_short()
        };
        unsafe_(
            "lock, weakened: a short extension leaves the validity as it was",
            m,
            EXCLUSION,
        );
    }

    #[test]
    fn model_lock_finds_two_holders_when_extensions_count_as_they_finish() {
        let m = LockModel {
            dispatch_order: false,
            ..extending_short()
        };
        unsafe_(
            "lock, weakened: the last extension to finish sets the validity",
            m,
            EXCLUSION,
        );
    }

    #[test]
    fn model_lock_fenced_tokens_follow_acquisition_order() {
        let m = LockModel {
            fenced: true,
            ..LockModel::shipped()
        };
        safe("lock: fenced, a slow node, clocks 10 % fast", m);
    }

    /// Fenced holders write to storage that checks tokens, each at any
    /// moment it still holds (a pause past validity included).
    #[test]
    fn model_lock_fenced_writes_land_in_acquisition_order() {
        let m = LockModel {
            fenced: true,
            writes: Some(fence_admits),
            ..LockModel::shipped()
        };
        safe("lock: fenced writes, a slow node, clocks 10 % fast", m);
    }

    #[test]
    fn model_lock_finds_a_lost_update_where_the_store_admits_lower_tokens() {
        let m = LockModel {
            fenced: true,
            writes: Some(|_, _| true),
            ..LockModel::shipped()
        };
        unsafe_(
            "lock, weakened: a store that admits any token",
            m,
            FENCED_WRITES,
        );
    }

    #[test]
    fn model_lock_finds_tokens_out_of_order_when_a_lock_expired_while_minting() {
        let m = LockModel {
            fenced: true,
            check_mint: false,
            ..LockModel::shipped()
        };
        unsafe_(
            "lock, weakened: a fenced lock returned however long minting took",
            m,
            FENCING,
        );
    }

    #[test]
    fn model_lock_finds_a_foreign_delete_when_release_does_not_compare() {
        let m = LockModel {
            compare_on_release: false,
            ..LockModel::shipped()
        };
        unsafe_("lock, weakened: release without compare", m, RELEASE_RULE);
    }
}
