//! Acquisition, for every primitive: one attempt ([`attempt`]), the
//! waiting loop around attempts ([`waiting`], with a caller's entry in the
//! nodes' waiting lists, [`waiter`], and its [`patience`]), the lock an
//! attempt won ([`won`]), and the builder every primitive's acquisition
//! returns ([`acquisition`]), with the lock's own forms ([`onelock`]).

pub(crate) mod acquisition;
pub(crate) mod attempt;
pub(crate) mod onelock;
pub(crate) mod patience;
pub(crate) mod waiter;
pub(crate) mod waiting;
pub(crate) mod won;
