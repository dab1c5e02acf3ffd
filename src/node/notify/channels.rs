//! The channels one notification connection hears, and when one has gone
//! unasked long enough to be given up.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

/// The channels one connection hears.
#[derive(Debug, Default)]
pub(crate) struct Channels {
    /// The connection's generation.
    pub(crate) generation: u64,
    /// Channels subscribed (or being subscribed), with when a waiter last
    /// asked for each.
    pub(crate) heard: HashMap<String, Instant>,
    /// The node refused a subscription on this connection (an ACL without
    /// the channel): not asked again on it.
    pub(crate) refused: bool,
}

impl Channels {
    /// The channels of the connection of `generation` (a new connection
    /// hears none yet).
    pub(crate) fn of(&mut self, generation: u64) -> &mut Self {
        if self.generation != generation {
            *self = Self {
                generation,
                ..Self::default()
            };
        }
        self
    }

    /// Whether `channel` (raw bytes of its name), heard on the connection
    /// of `generation`, went unasked for `idle`; if so it is taken off the
    /// list (the caller unsubscribes).
    pub(crate) fn take_idle(&mut self, channel: &[u8], generation: u64, idle: Duration) -> bool {
        let Ok(name) = std::str::from_utf8(channel) else {
            return false;
        };
        if self.generation != generation {
            return false;
        }
        let gone = self
            .heard
            .get(name)
            .is_some_and(|asked| asked.elapsed() >= idle);
        if gone {
            self.heard.remove(name);
        }
        gone
    }
}
