//! A node's connection: bottom to top, [`request`] encodes a command once
//! per round; [`wire`] hands it (or a pipeline) to a redis-rs multiplexed
//! connection; [`queue`] is the link's state and the requests queued in
//! it; [`open`] opens and checks one connection; [`scriptcache`] is what a
//! connection knows of the node's script cache (a script goes in full
//! once, then by digest); [`link`] is the state machine that connects,
//! keeps requests in order and batches them; [`slot`] is a directly sent
//! request's place on its connection, given up when the reply arrives;
//! [`call`] follows one request to its reply for the round that polls it.

pub(crate) mod call;
pub(crate) mod link;
pub(crate) mod open;
pub(crate) mod queue;
pub(crate) mod request;
pub(crate) mod scriptcache;
pub(crate) mod slot;
pub(crate) mod wire;
