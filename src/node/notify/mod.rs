//! How a node tells this client of changes: [`push`] reads what its
//! pushes say, [`armed`] what a waiter's read of a key found, [`channels`] are the channels one notification connection
//! hears, [`watch`] is that connection (client tracking, channels), and
//! [`watches`] a member's such connections (a cluster's per shard).

pub(crate) mod armed;
pub(crate) mod channels;
pub(crate) mod push;
pub(crate) mod watch;
pub(crate) mod watches;
