//! A node's clock, as this client sees it: [`clockwatch`] reads it from
//! the `TIME` behind each request (a jump ahead keeps the node out of lock
//! quorums and cuts its holders' validity), [`clockrate`] measures its
//! rate against ours from two agreeing spans, and [`tick`] keeps a timer by
//! it (a stalled clock of ours cannot stall that).

pub(crate) mod clockrate;
pub(crate) mod clockwatch;
pub(crate) mod tick;
