//! The client: the [`Redlock`](redlock::Redlock) handle every primitive is
//! reached through, its settings, its builder, the member URLs it parses,
//! and connecting up front with what the connection checks found.

pub(crate) mod builder;
pub(crate) mod config;
pub(crate) mod connect;
pub(crate) mod redlock;
pub(crate) mod trust;
pub(crate) mod urls;
