//! Our one policy for a mutex whose holder panicked: take what it holds
//! as it is. Every critical section under our mutexes leaves its data
//! whole at each step (a few assignments, a push, a swap), so a panic in
//! one (a bug) never leaves half-made state behind, and one panicked task
//! must not take the whole client down with it.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `m`, whatever a panicked holder left.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What `m` holds, whatever a panicked holder left.
pub(crate) fn into_inner<T>(m: Mutex<T>) -> T {
    m.into_inner().unwrap_or_else(PoisonError::into_inner)
}
