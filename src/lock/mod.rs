//! The lock: its scripts, the held [`Lock`](guard::Lock) guard and the
//! record its holders share, where it stands, its renewal, inspection, and
//! the lock on several resources. The client handle is in `client/`, the
//! acquisition (attempts, waiting, the builder) in `acquire/`; the
//! semaphore, the election and the read-write lock are built on these
//! files (a permit, a leadership and a reader's lease are locks).

pub(crate) mod guard;
pub(crate) mod held;
pub(crate) mod inspect;
pub(crate) mod keyset;
pub(crate) mod multi;
pub(crate) mod multi_scripts;
pub(crate) mod renewal;
pub(crate) mod scripts;
pub(crate) mod shared;
pub(crate) mod standing;
