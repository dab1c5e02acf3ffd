//! [`Patience`]: how long an acquisition keeps trying, and the error it
//! gives up with.

use std::time::Duration;

use tokio::time::Instant;

use crate::client::redlock::Redlock;
use crate::error::Error;
use crate::wait::deadline_in;

/// How long `acquire` keeps trying, and what it says when it gives up.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Patience {
    /// No attempt starts after this instant (one always does).
    pub(crate) until: Instant,
    /// Give up with [`Error::Timeout`] (saying how long it waited) rather
    /// than the last attempt's error (one attempt only).
    timeout: bool,
    /// Pause and try again after an attempt that failed for want of nodes
    /// (not only while the lock is held by another).
    outwaits_failures: bool,
}

impl Patience {
    /// `lock()`'s patience: the retry count's worth of pauses; giving up
    /// says how long it waited unless it made only one attempt.
    pub(crate) fn default_for(redlock: &Redlock) -> Self {
        let patience = redlock.config().lock_patience();
        Self {
            until: deadline_in(patience),
            timeout: !patience.is_zero(),
            outwaits_failures: true,
        }
    }

    /// For a lock that only spaces its takers out (a counter's turns):
    /// waits, up to the retry count's worth of pauses, while another holds
    /// it, but gives up with the attempt's own error at the first attempt
    /// that fails for want of nodes (its taker goes on without it rather
    /// than waiting out a node that is down).
    pub(crate) fn while_held(redlock: &Redlock) -> Self {
        Self {
            until: deadline_in(redlock.config().lock_patience()),
            timeout: false,
            outwaits_failures: false,
        }
    }

    /// At most `wait`, then [`Error::Timeout`].
    pub(crate) fn within(wait: Duration) -> Self {
        Self {
            until: deadline_in(wait),
            timeout: true,
            outwaits_failures: true,
        }
    }

    /// Whether no attempt may start any more.
    pub(crate) fn run_out(&self) -> bool {
        Instant::now() >= self.until
    }

    /// Whether a pause of `pause` from now still ends before the patience
    /// does (an attempt after it may start).
    pub(crate) fn allows_pause(&self, pause: Duration) -> bool {
        deadline_in(pause) < self.until
    }

    /// Whether a retry pause after nodes failed (`pause`) is taken: the
    /// patience outwaits failures and allows it.
    pub(crate) fn allows_failure_pause(&self, pause: Duration) -> bool {
        self.outwaits_failures && self.allows_pause(pause)
    }

    /// The error to give up with, after `last`.
    pub(crate) fn give_up(self, resource: &str, started: Instant, last: Error) -> Error {
        if self.timeout {
            Error::Timeout {
                resource: resource.to_owned(),
                waited: started.elapsed(),
                last: Box::new(last),
            }
        } else {
            last
        }
    }
}
