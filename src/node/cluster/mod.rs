//! A member that is a Redis Cluster: [`slotset`] holds the slots a shard
//! serves as our marker records them, [`shard_rules`] says whose trust a
//! member's yes rests on, and [`shards`] (feature `cluster`) keeps a link
//! per shard and routes each request by its hash slot.

pub(crate) mod shard_rules;
#[cfg(feature = "cluster")]
pub(crate) mod shards;
pub(crate) mod slotset;
