//! Business serial numbers: `PREFIX` + period stamp + zero-padded counter,
//! e.g. `ORDER202611220001`, unique across every instance, on the quorum
//! counter (`counter/`).
//!
//! Bottom to top: [`period`] (reset periods, stamps in a time zone, and the
//! plan step of an allocation), [`number`] (the [`Serial`](number::Serial)
//! type), [`generator`] (the generator, its builder and group commit; a
//! prefix's period and width are pinned on the nodes with `pin.rs`).

pub(crate) mod generator;
pub(crate) mod number;
pub(crate) mod period;
