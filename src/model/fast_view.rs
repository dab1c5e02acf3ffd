//! The lock model's clients' view of a node's quarantine. Client 0's
//! clocks may run several times as fast as real time
//! (`LockModel::fast_client`): on its clock alone a quarantine would end
//! early, so the crate also asks the node's clock (`node/trust/nodebound.rs`)
//! and a majority of the members' (`node/trust/panel.rs`), and a step of the
//! node's clock seen while a quarantine is on counts it anew
//! (`TrustState::extend`). The fast client's view is the crate's own
//! `TrustState` and `Panel`, fed what that client read, in order: the
//! restart's check at `quarantined_from`, the reply that first showed a
//! step, and the reply being counted, each reading judged by the crate's
//! own rule against the one before (`judge`), on the fast clock: a step
//! between two readings far enough apart passes unseen.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::model::lock::LockModel;
use crate::model::lock_state::{Action, Members, Phase, State};
use crate::node::clock::clockrate::Reading;
use crate::node::clock::clockwatch::{judge, Verdict};
use crate::node::trust::panel::Panel;
use crate::node::trust::truststate::TrustState;

impl LockModel {
    /// Node `n`'s clock steps (with a fast client, only once the node
    /// restarted), and the fast client may read the step, or check the
    /// restart, before that node's vote, with a reply to an earlier
    /// request of its.
    pub(crate) fn step_actions(&self, s: &State, n: u8, actions: &mut Vec<Action>) {
        let node = &s.nodes[n as usize];
        let restarted = node.quarantined_until != 0 || node.unprobed_since.is_some();
        if s.faults[4] > 0 && (!self.fast_client || restarted) {
            actions.push(Action::Step(n));
        }
        let unasked = match &s.clients[0] {
            Phase::Idle => true,
            Phase::Trying {
                yes, no, failed, ..
            } => (yes | no | failed) & (1 << n) == 0,
            _ => false,
        };
        // Or a restart it has not checked yet: it checks it then, and may
        // read a later step only with its vote.
        let news = (node.jumped > 0 && node.step_seen == 0)
            || (self.steps > 0 && node.unprobed_since.is_some());
        if self.fast_client && node.up && news && unasked {
            actions.push(Action::Probe(0, n));
        }
    }

    /// Whether client `c` counts node `n` as quarantined now: by the real
    /// time, on a true clock; the fast client by the crate's rules on its
    /// own clock and the node's.
    pub(crate) fn quarantined(&self, s: &State, c: u8, n: u8) -> bool {
        let node = &s.nodes[n as usize];
        if !(self.fast_client && c == 0) {
            return s.now < node.quarantined_until;
        }
        let restart = (node.quarantined_until != 0).then(|| {
            let length = node.quarantined_until - node.quarantined_from;
            (node.quarantined_from, length)
        });
        let seen = node.step_seen.checked_sub(1);
        if restart.is_none() && seen.is_none() {
            return false;
        }
        let base = Instant::now();
        let ms = |t: u8| Duration::from_millis(u64::from(t));
        // The fast client's clock at real ms `t`.
        let ours = |t: u8| base + ms(t) * u32::from(self.fast_rate);
        // A node's clock at real ms `t`, as a reply then showed it: the
        // drift fast, and node `n`'s step in a reply from the first that
        // showed it on (`after_check`: not in the restart's check, which
        // comes before any step). The others never step: one node's clock
        // misbehaves.
        let clock_us = |k: usize, t: u8, after_check: bool| {
            let steady = (f64::from(t) * 1e3 * (1.0 + self.drift_factor)) as u64;
            let step = match seen {
                Some(j) if after_check && t >= j && k == n as usize => {
                    u64::from(node.jumped) * 1000
                }
                _ => 0,
            };
            1_000_000_000 + steady + step
        };
        // The members' clocks (`node/trust/panel.rs`): read, at the latest, at
        // each moment the client reads node `n` (the latest readings show
        // the most time passed: the rule's hardest case).
        let (refusing, shows) = match self.panel {
            Members::Refusing { member, shows } if member != n => (Some(member as usize), shows),
            _ => (None, false),
        };
        let mut panel = Panel::new(s.nodes.len(), String::new());
        panel.refused_shows = shows;
        let panel = Arc::new(panel);
        let seats: Vec<_> = (0..s.nodes.len()).map(|k| panel.seat(k)).collect();
        let read_all = |t: u8, after_check: bool| {
            for (k, seat) in seats.iter().enumerate() {
                if refusing == Some(k) {
                    seat.refused();
                } else {
                    seat.reading(ours(t), clock_us(k, t, after_check), self.drift_factor);
                }
            }
        };
        let reading = |(at, us): (Instant, u64)| {
            let at = tokio::time::Instant::from_std(at);
            Reading {
                sent: at,
                recv: at,
                node_us: us,
            }
        };
        // What the client hears of node `n`, in order: the restart's check
        // (`false`), the reply that first showed a step, and the reply now
        // being counted (`true`; at one instant, the check comes first).
        let mut events: Vec<(u8, bool)> = restart.map(|(f, _)| (f, false)).into_iter().collect();
        events.extend(seen.filter(|j| *j < s.now).map(|j| (j, true)));
        events.sort_unstable();
        events.push((s.now, true));
        let mut st = TrustState::default();
        st.panel = (self.panel != Members::Off).then_some(Arc::clone(&panel));
        // Clients read every clock at 0 (`read_clock`).
        read_all(0, true);
        let mut before = (ours(0), clock_us(n as usize, 0, true));
        let drift = self.drift_factor;
        for (t, after_check) in events {
            let at = ours(t);
            read_all(t, after_check);
            if !after_check {
                // A reply just before the restart is the reading before:
                // a client that polls has one, and it dates the start on
                // the node's clock latest.
                before = (at, clock_us(n as usize, t, false));
                let length = restart.map_or(0, |(_, l)| l);
                st.checked_until(at + ms(length), at);
            }
            // Each reading comes in, then the crate's verdict on it against
            // the one before (`clockwatch.rs`): on our fast clock, a step
            // between sparse readings may pass unseen.
            let now = (at, clock_us(n as usize, t, after_check));
            st.node_reading(Some(before), now, drift);
            if let Verdict::Ahead(_) = judge(&reading(before), &reading(now), drift) {
                // A clock that ran ahead: a quarantine of one TTL from now.
                let until = at + ms(self.ttl);
                if self.rebegin {
                    st.extend(until, at);
                } else {
                    // The rule before: a start only where none was on.
                    st.begin_if_off(at);
                    st.until = st.until.max(Some(until));
                }
            }
            before = now;
        }
        let now = ours(s.now);
        if self.both_clocks {
            st.on_at(now, true).is_some()
        } else {
            st.until.is_some_and(|u| u > now)
        }
    }
}
