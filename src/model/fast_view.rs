//! The lock model's clients' view of a node's quarantine. Client 0's
//! clocks may run several times as fast as real time
//! (`LockModel::fast_client`): on its clock alone a quarantine would end
//! early, so the crate also asks the node's clock (`node/nodebound.rs`),
//! and a step of the node's clock read while a quarantine is on counts it
//! anew there
//! (`TrustState::extend`). The fast client's view is the crate's own
//! `TrustState`, fed what that client saw of the node, in order: the
//! restart found at `quarantined_from`, the step read at `step_seen`, and
//! the node's clock as each of those replies and the one being counted
//! showed it.

use std::time::{Duration, Instant};

use crate::model::lock::LockModel;
use crate::model::lock_state::{Action, Phase, State};
use crate::node::truststate::TrustState;

impl LockModel {
    /// Node `n`'s clock steps (with a fast client, only once the node
    /// restarted), and the fast client may read the step before that
    /// node's vote, with a reply to an earlier request of its.
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
        if self.fast_client && node.up && node.jumped > 0 && node.step_seen == 0 && unasked {
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
        // The node's clock at real ms `t`, as a reply then showed it: the
        // drift fast, and its step from the reply that first showed it.
        let node_us = |t: u8| {
            let steady = (f64::from(t) * 1e3 * (1.0 + self.drift_factor)) as u64;
            let step = match seen {
                Some(j) if t >= j => u64::from(node.jumped) * 1000,
                _ => 0,
            };
            1_000_000_000 + steady + step
        };
        // The events in order (at one instant, the probe comes before the
        // reply's reading: `deliver`).
        let mut events: Vec<(u8, bool)> = restart.map(|(f, _)| (f, false)).into_iter().collect();
        if let Some(j) = seen {
            events.push((j, true));
        }
        events.sort_unstable();
        let mut st = TrustState::default();
        // Clients read every clock at 0 (`read_clock`).
        let mut before = Some((ours(0), node_us(0)));
        let drift = self.drift_factor;
        for (t, step) in events {
            let (at, reading) = (ours(t), (ours(t), node_us(t)));
            if step {
                // The reading comes in first, then the verdict on it: a
                // clock that ran ahead, a quarantine of one TTL from now.
                st.node_reading(before, reading, drift);
                let until = at + ms(self.ttl);
                if self.rebegin {
                    st.extend(until, at);
                } else {
                    // The rule before: a start only where none was on.
                    st.begin_if_off(at);
                    st.until = st.until.max(Some(until));
                }
            } else {
                let length = restart.map_or(0, |(_, l)| l);
                st.checked_until(at + ms(length), at);
                st.node_reading(before, reading, drift);
            }
            before = Some(reading);
        }
        // The reply now being counted.
        let now = ours(s.now);
        st.node_reading(before, (now, node_us(s.now)), drift);
        if self.both_clocks {
            st.on_at(now, true).is_some()
        } else {
            st.until.is_some_and(|u| u > now)
        }
    }
}
