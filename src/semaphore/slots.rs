//! Which slot a semaphore attempt won, as a pure rule (the model checker
//! runs it too).
//!
//! Every node takes a free slot for the attempt, or none. The
//! attempt holds a permit when a quorum of trusted nodes took the *same*
//! slot: that slot is then an ordinary quorum lock, and at most one holder
//! per slot means at most K holders. Nodes that took another slot, or
//! answered late, are undone.

use crate::quorum::tally::{nodes_where, NodeSet, Tally};

/// The slot taken by the most of the nodes in `yes` (ties: the lowest), with
/// those nodes. `choices[i]` is the slot node `i` took, if any.
pub(crate) fn best_slot(yes: NodeSet, choices: &[Option<usize>]) -> Option<(usize, NodeSet)> {
    let mut best: Option<(usize, NodeSet)> = None;
    for slot in choices.iter().flatten() {
        let set = took(yes, choices, *slot);
        let better = match best {
            None => true,
            Some((s, b)) => {
                set.count_ones() > b.count_ones()
                    || (set.count_ones() == b.count_ones() && *slot < s)
            }
        };
        if better {
            best = Some((*slot, set));
        }
    }
    best
}

/// The nodes of `yes` that took `slot`.
fn took(yes: NodeSet, choices: &[Option<usize>], slot: usize) -> NodeSet {
    nodes_where(choices, |c| *c == Some(slot)) & yes
}

/// The slot won, if a quorum of the nodes in the tally's yes took one.
pub(crate) fn won(tally: &Tally, choices: &[Option<usize>]) -> Option<(usize, NodeSet)> {
    best_slot(tally.yes, choices).filter(|(_, set)| set.count_ones() as usize >= tally.quorum)
}

/// A split that a move round may still win: no slot was won, but the
/// nodes that took a slot for us, together, are a quorum. Returns the slot
/// taken by the most of them (ties: the lowest), the nodes that took it,
/// and the nodes that took another slot, which are asked to move to it:
/// each sets it where it is free or already ours, and drops our other slot.
/// The slot is then a lock taken in two steps on different nodes, valid as
/// one taken in a round that began with the first step.
pub(crate) fn move_plan(
    tally: &Tally,
    choices: &[Option<usize>],
) -> Option<(usize, NodeSet, NodeSet)> {
    let (slot, holders) = best_slot(tally.yes, choices)?;
    let quorum = |set: NodeSet| set.count_ones() as usize >= tally.quorum;
    (!quorum(holders) && quorum(tally.yes)).then_some((slot, holders, tally.yes & !holders))
}

/// The round as a vote on `slot`: yes from the nodes that took it, no from
/// those that refused or took another slot, failures as they are. Its
/// [`Tally::refusals_prevent_quorum`] tells "every permit is taken (or the
/// nodes split)" from an outage.
pub(crate) fn slot_tally(tally: &Tally, choices: &[Option<usize>], slot: usize) -> Tally {
    let yes = took(tally.yes, choices, slot);
    Tally {
        quorum: tally.quorum,
        asked: tally.asked,
        yes,
        no: tally.no | (tally.yes & !yes),
        failures: tally.failures.clone(),
    }
}

/// Whether the attempt can stop counting: a slot is won, or no slot can be
/// won any more *and* the cause is known (the refusals alone, the failures
/// alone, or every node answered), as for the lock.
pub(crate) fn finished(tally: &Tally, choices: &[Option<usize>]) -> bool {
    let best = best_slot(tally.yes, choices).map_or(0, |(_, set)| set.count_ones() as usize);
    if best >= tally.quorum {
        return true;
    }
    if best + tally.asked.saturating_sub(tally.heard()) >= tally.quorum {
        return false;
    }
    tally.loss_explained()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quorum::tally::Vote;

    fn tally(votes: &[(usize, Option<bool>)], n: usize) -> Tally {
        let mut t = Tally::new(n / 2 + 1, n);
        for (i, v) in votes {
            let vote = match v {
                Some(true) => Vote::Yes,
                Some(false) => Vote::No,
                None => Vote::Failed(crate::error::NodeErrorKind::UnexpectedReply),
            };
            t.record(*i, "n", vote);
        }
        t
    }

    #[test]
    fn a_quorum_on_one_slot_wins_it() {
        let choices = [Some(0), Some(0), Some(1)];
        let t = tally(&[(0, Some(true)), (1, Some(true)), (2, Some(true))], 3);
        assert_eq!(won(&t, &choices), Some((0, 0b011)));
        assert!(finished(&t, &choices));
        let st = slot_tally(&t, &choices, 0);
        assert_eq!((st.yes, st.no), (0b011, 0b100));
    }

    #[test]
    fn a_split_wins_nothing_and_says_contended() {
        let choices = [Some(0), Some(1), None];
        let t = tally(&[(0, Some(true)), (1, Some(true))], 3);
        assert!(won(&t, &choices).is_none());
        assert!(!finished(&t, &choices), "node 2 may still take slot 0 or 1");
        let t = tally(&[(0, Some(true)), (1, Some(true)), (2, Some(false))], 3);
        assert!(finished(&t, &choices));
        assert!(slot_tally(&t, &choices, 0).refusals_prevent_quorum());
    }

    #[test]
    fn a_split_of_a_quorum_moves_to_the_slot_most_took() {
        let choices = [Some(1), Some(0), Some(1), None, Some(0)];
        let t = tally(
            &[
                (0, Some(true)),
                (1, Some(true)),
                (2, Some(true)),
                (3, Some(false)),
                (4, Some(true)),
            ],
            5,
        );
        // Two nodes each on slots 0 and 1: the lowest, slot 0, and the two
        // nodes on slot 1 move.
        assert_eq!(move_plan(&t, &choices), Some((0, 0b10010, 0b00101)));
        // Two of three split one each: the node on slot 1 moves to 0.
        let choices = [Some(0), Some(1), None];
        let t = tally(&[(0, Some(true)), (1, Some(true)), (2, Some(false))], 3);
        assert_eq!(move_plan(&t, &choices), Some((0, 0b001, 0b010)));
        // Fewer than a quorum took anything: nothing to move to.
        let t = tally(&[(0, Some(true)), (1, Some(false)), (2, Some(false))], 3);
        assert_eq!(move_plan(&t, &[Some(0), None, None]), None);
        // A won slot needs no move.
        let choices = [Some(0), Some(0), Some(1)];
        let t = tally(&[(0, Some(true)), (1, Some(true)), (2, Some(true))], 3);
        assert_eq!(move_plan(&t, &choices), None);
    }

    #[test]
    fn a_quarantined_yes_does_not_count() {
        // Node 1 took slot 0 but its yes was turned into a failure.
        let choices = [Some(0), Some(0), None];
        let t = tally(&[(0, Some(true)), (1, None), (2, Some(false))], 3);
        assert!(won(&t, &choices).is_none());
        assert!(finished(&t, &choices));
        assert!(!slot_tally(&t, &choices, 0).refusals_prevent_quorum());
    }
}
