//! Minting fencing tokens (and terms, and permit tokens), group-committed:
//! holders that ask one counter for a token while a round is running share
//! the next round, one compare-and-set for all of them, and take turns with
//! other processes after a lost round (see `turns.rs`).
//!
//! The fencing order rule holds per holder as it did for a round of its
//! own: a round serves only holders that joined before it started (see
//! `counter/batch.rs`), so its compare-and-set is decided after each of their locks
//! was won; each holder then checks that its lock outlived the round.

use tokio::sync::oneshot;

use crate::client::redlock::{MintWaiter as Waiter, Redlock};
use crate::counter::batch::Batch;
use crate::counter::{CounterKeys, Record};
use crate::error::{Error, Result};
use crate::mutex::lock;

impl Redlock {
    /// Mints the next number of the counter at `keys`, in a round shared
    /// with every holder of this client that asks the same counter while
    /// the round before it runs.
    ///
    /// # Errors
    ///
    /// Those of [`Redlock::allocate_in_turn`], named after the counter;
    /// [`Error::Shutdown`] if the runtime drops the round.
    pub(crate) async fn mint(&self, keys: &CounterKeys) -> Result<u64> {
        let counter = self.inner.mints.get(&keys.key);
        let (tx, rx) = oneshot::channel();
        if lock(&counter.queue).join(tx) {
            // The rounds run in a task of their own, so a holder that gives
            // up (drops its future) never strands the others.
            tokio::spawn(mint_rounds(self.clone(), keys.clone(), counter));
        }
        rx.await.map_err(|_| Error::Shutdown)?
    }
}

/// Serves the counter's holders until none waits: each round mints one
/// number for every holder waiting when it starts, in the order they
/// joined.
async fn mint_rounds(redlock: Redlock, keys: CounterKeys, counter: std::sync::Arc<Batch<Waiter>>) {
    loop {
        // Let holders that were just woken (and those on other workers)
        // join first: a bigger round costs the same one round trip.
        tokio::task::yield_now().await;
        let Some(waiters) = lock(&counter.queue).next_round() else {
            return;
        };
        let k = waiters.len() as u64;
        let mut plan = |e: &Record| -> Result<Record> {
            let n = e.n.checked_add(k).ok_or_else(|| {
                Error::InvalidConfig(format!(
                    "fencing counter {:?} has no {k} numbers left below u64::MAX",
                    keys.name
                ))
            })?;
            Ok(Record {
                period: String::new(),
                n,
            })
        };
        match redlock
            .allocate_in_turn(&keys, &counter.turns, &mut plan)
            .await
        {
            Ok((_, new)) => {
                let first = new.n - (k - 1);
                for (token, tx) in (first..).zip(waiters) {
                    let _ = tx.send(Ok(token));
                }
            }
            Err(e) => {
                for tx in waiters {
                    let _ = tx.send(Err(e.clone()));
                }
            }
        }
    }
}
