//! The [`Leadership`] guard: the election's lock (renewed in the
//! background from the moment it is returned) with its term.

use std::ops::Deref;

use crate::error::Result;
use crate::lock::guard::Lock;

/// This instance leads an [`Election`](crate::Election).
///
/// It is the election's lock, renewed in the background: everything a
/// [`Lock`] offers works through `Deref` ([`Lock::validity`](crate::Lock::validity),
/// [`Lock::ensure_valid`](crate::Lock::ensure_valid), [`Lock::lost`](crate::Lock::lost)); its fencing token is the term.
/// Check [`Lock::ensure_valid`](crate::Lock::ensure_valid) before acting as leader, pass the term to
/// storage that can reject an older leader's writes, and stop leading when
/// [`Lock::lost`](crate::Lock::lost) resolves. Dropping it resigns in the background.
#[must_use = "dropping a Leadership resigns in the background; call resign().await"]
#[derive(Debug)]
pub struct Leadership {
    /// The election's lock.
    lock: Lock,
    /// The term.
    term: u64,
    /// What it campaigned with.
    value: String,
}

impl Leadership {
    /// Wraps the election's lock, won for `term`.
    pub(crate) fn new(lock: Lock, term: u64, value: &str) -> Self {
        Self {
            lock,
            term,
            value: value.to_owned(),
        }
    }

    /// The term: strictly larger than every earlier leader's term of this
    /// election.
    pub fn term(&self) -> u64 {
        self.term
    }

    /// What this leader campaigned with.
    pub fn value(&self) -> &str {
        &self.value
    }

    /// Steps down: releases the election's lock on every node, and the
    /// longest-waiting candidate is woken by the nodes.
    ///
    /// # Errors
    ///
    /// As [`Lock::release`](crate::Lock::release).
    pub async fn resign(self) -> Result<()> {
        self.lock.release().await
    }
}

impl Leadership {
    /// The election's lock itself (still renewed in the background).
    pub fn into_lock(self) -> Lock {
        self.lock
    }
}

impl Deref for Leadership {
    type Target = Lock;

    fn deref(&self) -> &Lock {
        &self.lock
    }
}
