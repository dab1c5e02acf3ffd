//! Group-committed mints, model-checked: the fencing order with rounds that
//! serve several holders (`counter/batch.rs`, `counter/mint.rs`).
//!
//! Holders in two processes take one resource's lock in turn. The lock is
//! a lease here (one holder at a time, valid for a fixed time from its
//! acquisition; `model/lock.rs` checks the real lock), and the counter is
//! linearizable (`model/counter.rs` checks the real one). What is modelled
//! as the code decides it: each process keeps the crate's [`Queue`]; a
//! holder joins it after its lock was won, a round takes the holders
//! `Queue::next_round` gives it, its compare-and-set reaches a quorum at
//! some later instant and allocates one number per holder served, and each
//! holder gets its number in join order and keeps its lock only if the
//! lock was still valid then. Time, joins, rounds and answers interleave in
//! every order.
//!
//! Property: among fenced locks returned to their holders, tokens increase
//! with the order in which the locks were taken. Mutants the checker must
//! break: a round that allocates spare numbers and hands them to holders
//! that ask later (a hi/lo cache), and a holder that keeps its lock however
//! long the round took.

use stateright::{Model, Property};

use crate::counter::batch::Queue;
use crate::model::insert_sorted;

/// The property's name.
const FENCING: &str = "fenced locks returned carry tokens in acquisition order";

/// One run's bounds and rules.
#[derive(Clone)]
pub(crate) struct MintModel {
    /// Each holder's process (holders of one process share its queue).
    process_of: Vec<u8>,
    /// How long a lock stays valid after it was taken, ticks.
    lease: u8,
    /// Last instant explored.
    horizon: u8,
    /// Numbers a round allocates beyond one per holder served, kept by the
    /// process for holders that ask later (0 as shipped).
    spare: u8,
    /// Rule: a holder keeps its lock only if it is still valid when its
    /// number arrives (as shipped).
    check_valid: bool,
}

/// A holder's progress.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
enum Holder {
    /// Has not taken the lock.
    Idle,
    /// Took the lock (the `seq`-th acquisition), valid until `until`; not
    /// yet in its process's queue.
    Won { seq: u8, until: u8 },
    /// In its process's queue or round.
    Waiting { seq: u8, until: u8 },
    /// Its lock returned with its token; holds it until it releases.
    Holding { seq: u8 },
    /// Released, or its attempt failed.
    Done,
}

/// One process's round state.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct Process {
    /// The crate's queue of holders (by index).
    queue: Queue<u8>,
    /// The round in flight: holders it serves, and its first number once
    /// its compare-and-set reached a quorum.
    round: Option<(Vec<u8>, Option<u8>)>,
    /// Spare numbers this process keeps (the mutant's cache).
    cache: Vec<u8>,
}

/// The whole system.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub(crate) struct State {
    /// Real time.
    now: u8,
    /// The holders.
    holders: Vec<Holder>,
    /// The processes.
    processes: Vec<Process>,
    /// Who holds the lease, until when.
    lease: Option<(u8, u8)>,
    /// Acquisitions so far.
    acquired: u8,
    /// The counter's last number.
    counter: u8,
    /// Fenced locks returned: (acquisition, token).
    returned: Vec<(u8, u8)>,
}

/// What can happen next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    /// Time passes.
    Tick,
    /// A holder takes the free (or expired) lock.
    Acquire(u8),
    /// A holder that won asks its process for a token.
    Join(u8),
    /// A process's round task takes its next round from the queue.
    Start(u8),
    /// The round's compare-and-set reaches a quorum.
    Decide(u8),
    /// The round's numbers reach its holders.
    Answer(u8),
    /// A holder releases.
    Release(u8),
}

impl MintModel {
    /// As shipped: holders 0 and 1 in one process, holder 2 in another;
    /// a lock valid for 2 ticks, 5 ticks of time.
    pub(crate) fn shipped() -> Self {
        Self {
            process_of: vec![0, 0, 1],
            lease: 2,
            horizon: 5,
            spare: 0,
            check_valid: true,
        }
    }

    /// Holder `h` got `token`: it keeps its lock if still valid (or the
    /// rule is off), else releases it.
    fn answer(&self, s: &mut State, h: u8, token: u8) {
        let Holder::Waiting { seq, until } = s.holders[h as usize] else {
            return;
        };
        if self.check_valid && s.now >= until {
            s.holders[h as usize] = Holder::Done;
            free(s, h);
        } else {
            s.holders[h as usize] = Holder::Holding { seq };
            insert_sorted(&mut s.returned, (seq, token));
        }
    }
}

/// Frees the lease if `h` holds it.
fn free(s: &mut State, h: u8) {
    if s.lease.is_some_and(|(holder, _)| holder == h) {
        s.lease = None;
    }
}

impl Model for MintModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let processes = 1 + *self.process_of.iter().max().unwrap_or(&0) as usize;
        let process = Process {
            queue: Queue::default(),
            round: None,
            cache: Vec::new(),
        };
        vec![State {
            now: 0,
            holders: vec![Holder::Idle; self.process_of.len()],
            processes: vec![process; processes],
            lease: None,
            acquired: 0,
            counter: 0,
            returned: Vec::new(),
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        if s.now < self.horizon {
            actions.push(Action::Tick);
        }
        let free = s.lease.is_none_or(|(_, until)| s.now >= until);
        for (h, holder) in s.holders.iter().enumerate() {
            let h = h as u8;
            match holder {
                Holder::Idle if free => actions.push(Action::Acquire(h)),
                Holder::Won { .. } => actions.push(Action::Join(h)),
                Holder::Holding { .. } => actions.push(Action::Release(h)),
                _ => {}
            }
        }
        for (p, process) in s.processes.iter().enumerate() {
            let p = p as u8;
            // (A start with nobody queued leads nowhere: next_round says so.)
            actions.push(match &process.round {
                None => Action::Start(p),
                Some((_, None)) => Action::Decide(p),
                Some((_, Some(_))) => Action::Answer(p),
            });
        }
    }

    fn next_state(&self, s: &State, action: Action) -> Option<State> {
        let mut s = s.clone();
        match action {
            Action::Tick => s.now += 1,
            Action::Acquire(h) => {
                s.acquired += 1;
                let until = s.now + self.lease;
                s.lease = Some((h, until));
                s.holders[h as usize] = Holder::Won {
                    seq: s.acquired,
                    until,
                };
            }
            Action::Join(h) => {
                let Holder::Won { seq, until } = s.holders[h as usize] else {
                    return None;
                };
                s.holders[h as usize] = Holder::Waiting { seq, until };
                let process = &mut s.processes[self.process_of[h as usize] as usize];
                if process.cache.is_empty() {
                    // (Whether the caller must start the task: the model's
                    // task is always ready to take a round.)
                    let _ = process.queue.join(h);
                } else {
                    let token = process.cache.remove(0);
                    self.answer(&mut s, h, token);
                }
            }
            Action::Start(p) => {
                let process = &mut s.processes[p as usize];
                let served = process.queue.next_round()?;
                process.round = Some((served, None));
            }
            Action::Decide(p) => {
                let first = s.counter + 1;
                let process = &mut s.processes[p as usize];
                let (served, decided) = process.round.as_mut()?;
                let k = served.len() as u8;
                *decided = Some(first);
                process.cache.extend(first + k..first + k + self.spare);
                s.counter += k + self.spare;
            }
            Action::Answer(p) => {
                let (served, first) = s.processes[p as usize].round.take()?;
                let first = first?;
                for (token, h) in (first..).zip(served) {
                    self.answer(&mut s, h, token);
                }
            }
            Action::Release(h) => {
                s.holders[h as usize] = Holder::Done;
                free(&mut s, h);
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(FENCING, |_, s: &State| {
                s.returned.windows(2).all(|w| w[0].1 < w[1].1)
            }),
            Property::sometimes(
                "two holders of one process served by one round",
                |_, s: &State| {
                    s.processes
                        .iter()
                        .any(|p| p.round.as_ref().is_some_and(|(served, _)| served.len() > 1))
                },
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::check;

    const SHARED: &str = "two holders of one process served by one round";

    #[test]
    fn model_mint_group_commit_keeps_tokens_in_acquisition_order() {
        check("mint: group commit, two processes", MintModel::shipped())
            .assert_safe("mint", 1_000, SHARED);
    }

    #[test]
    fn model_mint_finds_tokens_out_of_order_when_a_round_keeps_spare_numbers() {
        let m = MintModel {
            spare: 1,
            ..MintModel::shipped()
        };
        check("mint, weakened: spare numbers for later holders", m)
            .assert_violates("mint", FENCING);
    }

    #[test]
    fn model_mint_finds_tokens_out_of_order_when_a_late_answer_is_kept() {
        let m = MintModel {
            check_valid: false,
            ..MintModel::shipped()
        };
        check("mint, weakened: a lock kept however long its round took", m)
            .assert_violates("mint", FENCING);
    }
}
