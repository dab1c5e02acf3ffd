//! What a connected client reads in each round of the lock model, and the
//! faults it answers: a node evicts or flushes the key it holds while
//! every client stays connected (no connection check runs), and a client
//! outside the model checks a flushed node and writes our marker anew.
//! Each read is judged by the crate's rules (`node/trust/counts.rs`), as
//! `node/trust/vigil.rs` applies them to the replies behind a vote.

use crate::model::lock_state::State;
use crate::node::trust::counts::{dropped, remarked};
use crate::node::trust::evidence::MarkerId;

/// How a round reads our marker (the lock model's `flush`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MarkerRead {
    /// Rule: in every round, compared with the writing of it the client
    /// last saw or wrote (`counts::remarked`, as shipped).
    Writing,
    /// Mutant: in every round, whether one is there at all (`EXISTS`).
    Exists,
    /// Mutant: only with a look a second old or more (never within the
    /// model's horizon), as before.
    Stale,
}

/// The writing of our marker at damage count `seen`, as a round reads it:
/// one process; a writing after a flush records a loss.
fn writing(seen: u8) -> MarkerId {
    MarkerId {
        run: "p".to_owned(),
        loss: (seen > 0).then_some(seen.into()),
        seen: Some(seen.into()),
    }
}

impl State {
    /// Node `n` drops the key it holds while every client stays connected
    /// (one eviction fault): evicted, or (`flush`) flushed, which takes our
    /// marker too and adds to its damage count, not to its evictions.
    pub(crate) fn evict(&mut self, n: u8, flush: bool) {
        self.faults[6] -= 1;
        let node = &mut self.nodes[n as usize];
        node.key = None;
        if flush {
            node.flushed += 1;
            node.mark = None;
        } else {
            node.evicted += 1;
        }
    }

    /// A client outside the model checks node `n`, finds the flush, and
    /// writes our marker anew, at the damage count that includes it.
    pub(crate) fn remark(&mut self, n: u8) {
        let node = &mut self.nodes[n as usize];
        node.mark = Some(node.flushed);
    }

    /// Client `c` reads node `n`'s eviction count with a reply (where the
    /// node can evict, every reply to a request that asks for a vote
    /// carries it, read after the request ran): the crate's rule
    /// ([`dropped`]) against the client's last reading; keys dropped since
    /// keep the node's yes from counting for `quarantine` ms. Returns
    /// whether the yes counts.
    pub(crate) fn read_evictions(&mut self, (c, n): (u8, u8), quarantine: u8) -> bool {
        let (c, n) = (c as usize, n as usize);
        let read = self.nodes[n].evicted;
        let before = std::mem::replace(&mut self.evictions_read[c][n], read);
        if dropped(Some(before.into()), Some(read.into())) {
            self.clock_q[c][n] = self.now.saturating_add(quarantine);
        }
        self.now >= self.clock_q[c][n]
    }

    /// Client `c` reads our marker on node `n` with a reply, as `read`
    /// says (read after the request ran): a loss found keeps the node's
    /// yes from counting for `quarantine` ms, and the client's check (next,
    /// taken here at once) writes the marker anew where it is gone and
    /// takes the writing it finds. Returns whether the yes counts.
    pub(crate) fn read_marker(
        &mut self,
        (c, n): (u8, u8),
        quarantine: u8,
        read: MarkerRead,
    ) -> bool {
        let (c, n) = (c as usize, n as usize);
        let found = self.nodes[n].mark;
        let moved = match read {
            MarkerRead::Writing => {
                self.marks[c][n].is_some_and(|e| remarked(&writing(e), found.map(writing).as_ref()))
            }
            MarkerRead::Exists => found.is_none(),
            MarkerRead::Stale => false,
        };
        if moved {
            self.clock_q[c][n] = self.now.saturating_add(quarantine);
            let node = &mut self.nodes[n];
            node.mark = node.mark.or(Some(node.flushed));
            self.marks[c][n] = node.mark;
        }
        self.now >= self.clock_q[c][n]
    }
}
