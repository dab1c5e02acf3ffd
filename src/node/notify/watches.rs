//! A member's notification connections: its node's, or, on a member that
//! is a Redis Cluster, one more per shard master, picked by the slot of the
//! key read, so that a key is tracked on the shard that holds it (client
//! tracking tells of changes on the connection's own node only). Channels
//! are heard on the member's first connection: a Redis Cluster passes a
//! `PUBLISH` to every node.

use std::collections::HashMap;
use std::ops::Deref;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::ConnectionAddr;

use crate::mutex;
use crate::node::notify::watch::{Sink, Watch};

/// Where the key named is served now (`None`: not known, or not a
/// cluster): the address of its shard's master.
pub(crate) type Route = Arc<dyn Fn(&str) -> Option<ConnectionAddr> + Send + Sync>;

/// A member's notification connections. Cheap to clone (handles); reads
/// as its first connection's [`Watch`].
#[derive(Clone)]
pub(crate) struct Watches {
    /// The member's own connection (a cluster's first seed).
    main: Watch,
    /// A cluster's shard connections.
    shards: Option<Arc<Shards>>,
}

/// A cluster member's shard connections, made on first use.
struct Shards {
    /// Where each key is served.
    route: Route,
    /// The member's client (credentials, TLS), given each shard's address.
    client: redis::Client,
    /// Limits on a connection attempt and on a read.
    timeouts: (Duration, Duration),
    /// Where what they hear goes.
    sink: Sink,
    /// The connections made, by address.
    made: Mutex<HashMap<String, Watch>>,
}

impl Deref for Watches {
    type Target = Watch;

    fn deref(&self) -> &Watch {
        &self.main
    }
}

impl std::fmt::Debug for Watches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.main.fmt(f)
    }
}

impl Watches {
    /// Member `index`'s notification connections, to the node `client`
    /// points at and, where `route` says (a cluster), to each key's shard;
    /// opened on first use within `connect_timeout`, reads within
    /// `read_timeout`, what they hear sent to `sink`.
    pub(crate) fn new(
        index: usize,
        (client, route): (&redis::Client, Option<Route>),
        (connect_timeout, read_timeout): (Duration, Duration),
        sink: Sink,
    ) -> Self {
        let main = Watch::new(
            index,
            client,
            connect_timeout,
            read_timeout,
            Arc::clone(&sink),
        );
        let shards = route.map(|route| {
            Arc::new(Shards {
                route,
                client: client.clone(),
                timeouts: (connect_timeout, read_timeout),
                sink,
                made: Mutex::default(),
            })
        });
        Self { main, shards }
    }

    /// Whether a notification connection of this member is open: its own,
    /// or on a cluster any shard's (where a cluster's notifications come).
    pub(crate) fn connected(&self) -> bool {
        self.main.connected()
            || self
                .shards
                .as_ref()
                .is_some_and(|shards| mutex::lock(&shards.made).values().any(Watch::connected))
    }

    /// The connection on which to read `key`: its shard's on a cluster
    /// (made now if need be), else the member's own.
    pub(crate) fn for_key(&self, key: &str) -> Watch {
        let Some(shards) = &self.shards else {
            return self.main.clone();
        };
        let Some(addr) = (shards.route)(key) else {
            return self.main.clone();
        };
        let mut made = mutex::lock(&shards.made);
        let name = addr.to_string();
        if let Some(watch) = made.get(&name) {
            return watch.clone();
        }
        let info = shards.client.get_connection_info().clone().set_addr(addr);
        let Ok(client) = redis::Client::open(info) else {
            return self.main.clone();
        };
        let (connect, read) = shards.timeouts;
        let watch = Watch::new(
            self.main.index(),
            &client,
            connect,
            read,
            Arc::clone(&shards.sink),
        );
        made.insert(name, watch.clone());
        watch
    }
}
