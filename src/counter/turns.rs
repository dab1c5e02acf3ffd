//! Allocating from a quorum counter in turns: the round that takes the
//! counter's lock while other processes allocate too.
//!
//! Alone on a counter, a process proposes from the record its last round
//! wrote and wins in one round trip. Once a round finds that somebody else
//! allocated in between, this process's rounds take the counter's lock for
//! a while (see [`Turns`]), so processes contending on one counter take
//! turns instead of invalidating each other's compare-and-sets until the
//! retries run out. The lock only spaces allocators out: the
//! compare-and-set keeps numbers unique without it.

use std::time::Duration;

use tracing::{debug, warn};

use crate::client::redlock::Redlock;
use crate::counter::batch::Turns;
use crate::counter::{self, CounterKeys, Record};
use crate::error::{Error, Result};

/// TTL of the counter's lock while contended: an allocation is a round trip
/// or two, far below this.
const COUNTER_LOCK_TTL: Duration = Duration::from_secs(5);

/// The plan step of an allocation: the new record to propose from the best
/// known high-water mark (see [`counter::allocate`]).
pub(crate) type Plan<'a> = dyn FnMut(&Record) -> Result<Record> + Send + 'a;

impl Redlock {
    /// Allocates from the counter at `keys` as [`counter::allocate`] does,
    /// from the record `turns` remembers, taking the counter's lock while
    /// other processes allocate too. Returns `(expected, new)`.
    ///
    /// # Errors
    ///
    /// Those of [`counter::allocate`]; the counter lock's own errors only
    /// where the input is unusable (a lock held past our patience, or not
    /// to be had, is allocated without).
    pub(crate) async fn allocate_in_turn(
        &self,
        keys: &CounterKeys,
        turns: &Turns,
        plan: &mut Plan<'_>,
    ) -> Result<(Record, Record)> {
        let hint = turns.hint();
        let name = keys.name.as_str();
        // Skip the lock while a node does not answer (an attempt would
        // wait for it) or quarantined nodes (which the counter does not
        // need) leave too few for a lock quorum.
        let result = if turns.contended() && self.nodes().lock_quorum_prompt() {
            let guard = match self
                .lock_internal(name, &keys.turns, COUNTER_LOCK_TTL)
                .await
            {
                Ok(guard) => Some(guard),
                Err(e @ Error::InvalidConfig(_)) => return Err(e),
                // Held past our patience (by an allocator paused, killed or
                // cut off until its TTL ends): the lock only spaces
                // allocators out, so allocate without it; the caller never
                // asked for this lock, and hears nothing of it.
                Err(e) => {
                    debug!(counter = name, error = %e, "allocating without the counter lock");
                    None
                }
            };
            let r = counter::allocate(self.nodes(), name, keys, hint.clone(), plan).await;
            let released = match guard {
                Some(g) => g.release().await,
                None => Ok(()),
            };
            if let Err(e) = released {
                warn!(target: crate::telemetry::targets::COUNTER, error = %e, "releasing the counter lock failed; it expires by itself");
            }
            r
        } else {
            counter::allocate(self.nodes(), name, keys, hint.clone(), plan).await
        };
        let (expected, new) = result?;
        if turns.won(hint.as_ref(), &expected, new.clone()) {
            debug!(
                counter = name,
                "counter contended; using its lock for a while"
            );
        }
        Ok((expected, new))
    }
}
