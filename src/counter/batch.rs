//! Group commit's queue: callers that ask one counter for numbers while a
//! round is running wait for the next round, which serves all of them with
//! one allocation (serial numbers, fencing tokens, terms).
//!
//! The rule the fencing order rests on: a round serves exactly the callers
//! that joined before it started, so its compare-and-set is sent after each
//! of them asked (after each one's lock was won), and it keeps no number for
//! later. A caller that joins while a round runs waits for the next one. A
//! token handed out from a range allocated before its lock was won could be
//! below the token of a holder in between (the model in `model/mint.rs`
//! finds that).
//!
//! Beside its queue, a process keeps per counter what it knows of it (see
//! [`Turns`]), and a bounded map of counters.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::counter::Record;
use crate::mutex::lock;

/// After a round that found somebody else had allocated since our last,
/// this process's allocations take the counter's lock for this long.
pub(crate) const CONTENDED_FOR: Duration = Duration::from_secs(1);

/// The most counters a [`Batches`] remembers; when full it starts over (a
/// forgotten counter costs one more compare-and-set round, and a round
/// already running goes on beside the new one's: numbers stay unique).
const MAX_COUNTERS: usize = 4096;

/// Callers waiting for the next round of one counter, and whether a round
/// task is running to serve them.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub(crate) struct Queue<W> {
    /// Callers that joined since the running round started.
    waiters: Vec<W>,
    /// A round task is running and will serve `waiters` next.
    running: bool,
}

impl<W> Default for Queue<W> {
    fn default() -> Self {
        Self {
            waiters: Vec::new(),
            running: false,
        }
    }
}

impl<W> Queue<W> {
    /// Adds a caller; true when no round task is running, so the caller
    /// must start one.
    pub(crate) fn join(&mut self, waiter: W) -> bool {
        self.waiters.push(waiter);
        !std::mem::replace(&mut self.running, true)
    }

    /// The callers the next round serves: every one that joined before now,
    /// in the order they joined. `None` when nobody waits: the round task
    /// then ends (the next caller starts another).
    pub(crate) fn next_round(&mut self) -> Option<Vec<W>> {
        if self.waiters.is_empty() {
            self.running = false;
            return None;
        }
        Some(std::mem::take(&mut self.waiters))
    }
}

/// What this process knows of one counter: the record its last round
/// wrote (the next proposal starts there, one round trip while nobody else
/// allocates) and until when its rounds take the counter's lock.
#[derive(Debug, Default)]
pub(crate) struct Turns {
    /// The record our last allocation wrote.
    hint: Mutex<Option<Record>>,
    /// Until when allocations take the counter's lock.
    contended_until: Mutex<Option<Instant>>,
}

impl Turns {
    /// The record our last allocation wrote, if any.
    pub(crate) fn hint(&self) -> Option<Record> {
        lock(&self.hint).clone()
    }

    /// Whether rounds take the counter's lock now.
    pub(crate) fn contended(&self) -> bool {
        lock(&self.contended_until).is_some_and(|t| Instant::now() < t)
    }

    /// Records a won round that proposed `expected -> new`, started from
    /// `hint`: if somebody else allocated since our last round (the record
    /// moved on from what we wrote), take turns for [`CONTENDED_FOR`].
    /// Returns whether that began.
    pub(crate) fn won(&self, hint: Option<&Record>, expected: &Record, new: Record) -> bool {
        let moved_on = hint.is_some_and(|h| h != expected);
        if moved_on {
            *lock(&self.contended_until) = Some(Instant::now() + CONTENDED_FOR);
        }
        *lock(&self.hint) = Some(new);
        moved_on
    }
}

/// One counter's callers waiting for a round, and what this process knows
/// of the counter.
#[derive(Debug)]
pub(crate) struct Batch<W> {
    /// Callers waiting, and whether a round task serves them.
    pub(crate) queue: Mutex<Queue<W>>,
    /// The record our last round wrote, and whether others allocate too.
    pub(crate) turns: Turns,
}

impl<W> Default for Batch<W> {
    fn default() -> Self {
        Self {
            queue: Mutex::default(),
            turns: Turns::default(),
        }
    }
}

/// This process's [`Batch`] per counter key, at most [`MAX_COUNTERS`].
#[derive(Debug)]
pub(crate) struct Batches<W> {
    /// Counter key to its batch.
    counters: Mutex<HashMap<String, Arc<Batch<W>>>>,
}

impl<W> Default for Batches<W> {
    fn default() -> Self {
        Self {
            counters: Mutex::default(),
        }
    }
}

impl<W> Batches<W> {
    /// The batch of the counter at `key`.
    pub(crate) fn get(&self, key: &str) -> Arc<Batch<W>> {
        let mut counters = lock(&self.counters);
        if counters.len() >= MAX_COUNTERS && !counters.contains_key(key) {
            counters.clear();
        }
        Arc::clone(counters.entry(key.to_owned()).or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_serves_those_who_joined_before_it_started() {
        let mut q = Queue::default();
        assert!(q.join(1), "the first caller starts the task");
        assert!(!q.join(2), "a task is running");
        assert_eq!(q.next_round(), Some(vec![1, 2]));
        // Joins while the round runs: the next round's.
        assert!(!q.join(3));
        assert_eq!(q.next_round(), Some(vec![3]));
        assert_eq!(q.next_round(), None);
        assert!(q.join(4), "the task ended; the next caller starts another");
    }
}
