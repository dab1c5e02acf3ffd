//! How a node tells this client of changes: [`push`] reads what its
//! pushes say, [`channels`] are the channels one notification connection
//! hears, [`watch`] is that connection (client tracking, channels), and
//! [`watches`] a member's such connections (a cluster's per shard).

pub(crate) mod channels;
pub(crate) mod push;
pub(crate) mod watch;
pub(crate) mod watches;
