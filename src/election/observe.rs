//! Watching an election: [`Observer::changed`] returns each new leader (or
//! its absence), woken by the nodes when the election's lock key or its
//! record changes, or when the lock's TTL runs out; it rereads the quorum's
//! view then. Nothing here polls on a timer shorter than the election's
//! TTL.

use std::time::Duration;

use tokio::time::Instant;

use crate::election::{Election, Leader};
use crate::error::Result;
use crate::wait::queue::Observation;

/// Follows an election's leader. Made by [`Election::observe`].
///
/// # Examples
///
/// ```no_run
/// # async fn f(redlock: redquorum::Redlock) -> redquorum::Result<()> {
/// let election = redlock.election("scheduler", std::time::Duration::from_secs(10))?;
/// let mut observer = election.observe();
/// loop {
///     match observer.changed().await? {
///         Some(leader) => println!("leader {} (term {})", leader.value, leader.term),
///         None => println!("no leader"),
///     }
/// }
/// # }
/// ```
#[derive(Debug)]
pub struct Observer {
    /// The election.
    election: Election,
    /// The registration for the nodes' news.
    observation: Observation,
    /// The last leader returned (`None` before the first call).
    last: Option<Option<Leader>>,
}

impl Election {
    /// Follows this election: see [`Observer::changed`].
    pub fn observe(&self) -> Observer {
        let queues = &self.redlock.waiting().queues;
        Observer {
            observation: queues.observe(&self.keys),
            election: self.clone(),
            last: None,
        }
    }
}

impl Observer {
    /// The current leader on the first call; then waits until the leader a
    /// quorum agrees on differs from the last one returned (a new leader,
    /// or `None` once it is gone) and returns it.
    ///
    /// # Errors
    ///
    /// [`Error::NoQuorum`](crate::Error::NoQuorum) when too few nodes
    /// answered; call again to keep watching.
    pub async fn changed(&mut self) -> Result<Option<Leader>> {
        let signal = self.observation.signal();
        let waiting = self.election.redlock.waiting();
        loop {
            let round = signal.reset();
            let (leader, expires) = self.election.read().await?;
            let every = self.election.redlock.nodes().all();
            for key in &self.election.keys {
                waiting.arm((key, None), every, signal, round);
            }
            if self.last.as_ref() != Some(&leader) {
                self.last = Some(leader.clone());
                return Ok(leader);
            }
            // Sleep until a node says a key changed, or a lock key runs out
            // by TTL (active expiry also tells, this is the fallback).
            let ttl = self.election.ttl;
            let wake = crate::wait::deadline_in(expires.map_or(ttl, |e| e.min(ttl)))
                + Duration::from_millis(1);
            loop {
                let heard = signal.news();
                if signal.dirty() != 0 || Instant::now() >= wake {
                    break;
                }
                tokio::select! {
                    () = heard => {}
                    () = tokio::time::sleep_until(wake) => break,
                }
            }
        }
    }
}
