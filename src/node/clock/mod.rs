//! A node's clock, as this client sees it: [`clockwatch`] reads it from
//! the `TIME` behind each request (a jump ahead keeps the node out of lock
//! quorums and cuts its holders' validity), [`clockrate`] measures its
//! rate against ours from two agreeing spans, [`firstsight`] keeps the
//! jumps seen before that rate was known (a rate that accounts for them
//! ends their quarantine), [`jumps`] keeps the jumps ahead for the locks
//! held there, and [`tick`] keeps a timer by
//! it (a stalled clock of ours cannot stall that).

pub(crate) mod clockrate;
pub(crate) mod clockwatch;
pub(crate) mod firstsight;
pub(crate) mod jumps;
pub(crate) mod tick;
