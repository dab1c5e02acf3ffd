//! A read-write lock's keys on the nodes (the writer's key, the readers'
//! leases, the mark of a writer waiting for reads to end, the waiting
//! list), and how a reader's lease and a writer's key are taken and kept
//! ([`Held`]), by the scripts in `rwlock/scripts.rs`.

use std::sync::Arc;

use crate::keys::{self, Kind};
use crate::lock::held::{Held, Takes};
use crate::lock::scripts;
use crate::node::connection::request::Request;
use crate::rwlock::scripts as rw_scripts;
use crate::wait::WaitKeys;

/// The keys of one read-write lock.
#[derive(Debug)]
pub(crate) struct RwKeys {
    /// The writer's key: the plain lock's key of the name, holding the
    /// readers' mark while readers hold; also the key waiters line up on
    /// (the plain lock's waiting list).
    pub(crate) writer: String,
    /// The readers' leases: values by the node-clock instant each ends.
    pub(crate) readers: String,
    /// The mark a writer kept out by readers sets, which lives until the
    /// first of their leases ends and goes with the release that leaves
    /// none live: what a waiting writer hears instead of every reader's
    /// release.
    pub(crate) reading: String,
    /// The waiting list of readers and writers.
    pub(crate) waits: WaitKeys,
}

impl RwKeys {
    /// The keys of the read-write lock at `anchor` (prefix + name), under
    /// `prefix`: in the reserved namespace, in `anchor`'s hash slot.
    pub(crate) fn new(prefix: &str, anchor: &str) -> Self {
        // The plain lock's key: a name is one lock, whichever way it is
        // taken (see `rwlock/scripts.rs`).
        let writer = anchor.to_owned();
        Self {
            readers: keys::internal(prefix, Kind::RwReaders, anchor),
            reading: keys::internal(prefix, Kind::RwReading, anchor),
            waits: WaitKeys::of(prefix, &writer),
            writer,
        }
    }

    /// A take by `script` (the reader's, which names `W R Q L`, or the
    /// writer's, which names `P` too).
    fn take<const KEYS: usize>(
        &self,
        script: &'static crate::lua::Script<KEYS>,
        value: &str,
        ttl_ms: u64,
        waiter: Option<(&str, u64, u64)>,
    ) -> Arc<Request> {
        let (id, ticket, lease_ms) = waiter.unwrap_or(("", 0, 0));
        let all = [
            &self.writer,
            &self.readers,
            &self.waits.queue,
            &self.waits.leases,
            &self.reading,
        ];
        // The first `KEYS` of the five (none of ours asks for more).
        let keys: [&str; KEYS] = std::array::from_fn(|i| all.get(i).map_or("", |k| k.as_str()));
        Request::script(script, keys, |cmd| {
            cmd.arg(value).arg(ttl_ms).arg(id).arg(ticket).arg(lease_ms);
        })
    }
}

/// A reader's lease, as an attempt takes it and its guard keeps it.
#[derive(Debug)]
pub(crate) struct ReadLease(pub(crate) Arc<RwKeys>);

impl Held for ReadLease {
    fn release_request(&self, value: &str, telling: bool) -> Arc<Request> {
        let keys = &self.0;
        let named = [
            &keys.readers,
            &keys.reading,
            &keys.writer,
            &keys.waits.leases,
        ]
        .map(String::as_str);
        let named = &named[..3 + usize::from(telling)];
        Request::script_any(&rw_scripts::READ_RELEASE, named, |cmd| {
            cmd.arg(value);
        })
    }

    fn extend_request(&self, value: &str, ttl_ms: u64) -> Arc<Request> {
        let keys = [self.0.readers.as_str(), self.0.writer.as_str()];
        Request::script(&rw_scripts::READ_EXTEND, keys, |cmd| {
            cmd.arg(value).arg(ttl_ms);
        })
    }

    fn held_request(&self, value: &str) -> Arc<Request> {
        Request::script(&rw_scripts::READ_HELD, [&self.0.readers], |cmd| {
            cmd.arg(value);
        })
    }
}

impl Takes for ReadLease {
    fn take_request(
        &self,
        value: &str,
        ttl_ms: u64,
        waiter: Option<(&str, u64, u64)>,
    ) -> Arc<Request> {
        self.0.take(&rw_scripts::READ_TAKE, value, ttl_ms, waiter)
    }
}

/// A writer's attempt: once won, the writer holds a plain lock key.
#[derive(Debug)]
pub(crate) struct WriteKey(pub(crate) Arc<RwKeys>);

impl Held for WriteKey {
    fn release_request(&self, value: &str, _telling: bool) -> Arc<Request> {
        Request::script(&scripts::RELEASE, [&self.0.writer], |cmd| {
            cmd.arg(value);
        })
    }

    fn extend_request(&self, value: &str, ttl_ms: u64) -> Arc<Request> {
        Request::script(&scripts::EXTEND, [&self.0.writer], |cmd| {
            cmd.arg(value).arg(ttl_ms);
        })
    }

    fn held_request(&self, _value: &str) -> Arc<Request> {
        Request::plain(redis::cmd("GET").arg(&self.0.writer).to_owned())
    }
}

impl Takes for WriteKey {
    fn take_request(
        &self,
        value: &str,
        ttl_ms: u64,
        waiter: Option<(&str, u64, u64)>,
    ) -> Arc<Request> {
        self.0.take(&rw_scripts::WRITE_TAKE, value, ttl_ms, waiter)
    }

    fn keeps(&self) -> bool {
        false
    }
}
