//! One attempt at a read-write lock, as a reader or as a writer: what the
//! waiting loop attempts.

use std::sync::Arc;
use std::time::Duration;

use crate::acquire::attempt::{Ask, Attempts, Failed};
use crate::acquire::won::Won;
use crate::client::redlock::Redlock;
use crate::lock::held::Takes;
use crate::rwlock::keys::{ReadLease, RwKeys, WriteKey};
use crate::telemetry::labels::Primitive;

/// Which side of the lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    /// Many at once.
    Read,
    /// One, alone.
    Write,
}

/// A reader's or a writer's attempt.
#[derive(Debug)]
pub(crate) struct RwAttempt<'a> {
    /// The client.
    redlock: &'a Redlock,
    /// The lock's name.
    name: &'a str,
    /// How it is taken and kept.
    held: Arc<dyn Takes>,
    /// Which side.
    side: Side,
    /// The keys whose change may let it in: the writer's key; for a
    /// writer, the mark it sets while readers keep it out, which the
    /// release that leaves no reader's lease live deletes (not the leases
    /// themselves: their every change would wake it).
    watched: Vec<String>,
    /// What its line hears: those keys and the waiting list, which a
    /// waiter kept out by one listed ahead of it reads where the keys are
    /// free (the one ahead may take and release the lock before that
    /// read, or leave without taking it).
    heard: Vec<String>,
    /// The TTL, checked.
    ttl: Duration,
    /// The TTL in ms.
    ttl_ms: u64,
}

impl<'a> RwAttempt<'a> {
    /// An attempt on `side` of the lock `name` at `keys`, for `ttl`
    /// (checked: `ttl_ms`).
    pub(crate) fn new(
        redlock: &'a Redlock,
        name: &'a str,
        keys: &Arc<RwKeys>,
        side: Side,
        (ttl, ttl_ms): (Duration, u64),
    ) -> Self {
        let (held, watched): (Arc<dyn Takes>, _) = match side {
            Side::Read => (
                Arc::new(ReadLease(Arc::clone(keys))),
                vec![keys.writer.clone()],
            ),
            Side::Write => (
                Arc::new(WriteKey(Arc::clone(keys))),
                vec![keys.writer.clone(), keys.reading.clone()],
            ),
        };
        let mut heard = watched.clone();
        heard.push(keys.waits.queue.clone());
        Self {
            redlock,
            name,
            held,
            side,
            watched,
            heard,
            ttl,
            ttl_ms,
        }
    }
}

impl Attempts for RwAttempt<'_> {
    fn resource(&self) -> &str {
        self.name
    }

    fn line(&self) -> &str {
        &self.watched[0]
    }

    fn watched(&self) -> &[String] {
        &self.watched
    }

    fn heard(&self) -> &[String] {
        &self.heard
    }

    fn reads_list_when_ahead(&self) -> bool {
        true
    }

    fn kept_out_by(&self) -> &'static str {
        match self.side {
            // A reader waits only for the writers listed ahead of it.
            Side::Read => crate::acquire::attempt::EXCLUSIVE,
            Side::Write => "",
        }
    }

    fn primitive(&self) -> Primitive {
        Primitive::Lock
    }

    fn free_value(&self) -> Option<&'static str> {
        match self.side {
            Side::Read => Some(crate::keys::readers_mark!()),
            Side::Write => None,
        }
    }

    fn waiter_mark(&self) -> &'static str {
        match self.side {
            Side::Read => "",
            Side::Write => crate::acquire::attempt::EXCLUSIVE,
        }
    }

    async fn attempt(&self, ask: Ask<'_>) -> Result<Won, Failed> {
        let writer = &self.watched[0];
        self.redlock
            .attempt_on(
                self.name,
                writer,
                Some(&self.held),
                self.ttl,
                self.ttl_ms,
                ask,
            )
            .await
    }
}
