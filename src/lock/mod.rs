//! The lock: the [`Redlock`](redlock::Redlock) client handle and its builder,
//! one attempt, the waiting loop around attempts, and the held
//! [`Lock`](guard::Lock) guard. The semaphore and the election are built on
//! these files (a permit and a leadership are locks).

pub(crate) mod acquire;
pub(crate) mod acquisition;
pub(crate) mod attempt;
pub(crate) mod builder;
pub(crate) mod config;
pub(crate) mod guard;
pub(crate) mod held;
pub(crate) mod inspect;
pub(crate) mod keyset;
pub(crate) mod mint;
pub(crate) mod multi;
pub(crate) mod multi_scripts;
pub(crate) mod patience;
pub(crate) mod redlock;
pub(crate) mod renewal;
pub(crate) mod scripts;
pub(crate) mod shared;
pub(crate) mod standing;
pub(crate) mod turns;
pub(crate) mod urls;
pub(crate) mod waiter;
pub(crate) mod waiting;
pub(crate) mod won;
