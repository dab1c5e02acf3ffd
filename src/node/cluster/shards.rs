//! A member that is a Redis Cluster (feature `cluster`): a link of our own
//! to each shard's master, and the slot map that sends each request to the
//! shard serving its first key.
//!
//! Each shard is a [`Link`] like a member that is one node: its connections
//! are checked for lost writes before anything of ours goes out, so a
//! shard whose master changed (a replica promoted, a node replaced, a shard
//! restarted empty) is quarantined for that (member, shard) alone, by the
//! same evidence and the same table. Its marker lives in a slot it serves
//! (`redquorum:node:{tag}`, the tag hashing to the shard's lowest slot).
//!
//! Redirections are not followed: a `MOVED` or `ASK` reply, a broken
//! connection or a shard that misses a round's deadline fails that request
//! (the member counts as failed for that round, as a failed node does) and
//! has the slot map read again, so the next request goes where the cluster
//! now says. A request is never sent a second time to another shard: a
//! late `SET` there could outlive its own release.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use redis::{
    AsyncConnectionConfig, ConnectionAddr, ConnectionInfo, RedisError, RedisResult, Value,
};
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::keys::{tag_for_slot, SLOTS};
use crate::mutex;
use crate::node::clock::clockwatch::ClockNews;
use crate::node::cluster::shard_rules::received;
use crate::node::connection::call::Call;
use crate::node::connection::link::Link;
use crate::node::connection::request::Request;
use crate::node::trust::amnesia::{AmnesiaCheck, Cause};

/// No shard serves the slot (in [`SlotMap::owner`]).
const NONE: u16 = u16::MAX;

/// The least time between two reads of the slot map: trouble on many
/// requests at once reads it once.
const REFRESH_GAP: Duration = Duration::from_millis(100);

/// While no read of the map has succeeded, the time from a failed read to
/// the next: as long as a link waits before it connects again.
const FIRST_READ_GAP: Duration = Duration::from_millis(50);

/// What each shard's link is made with.
pub(crate) struct LinkSettings {
    /// Limit on one connection attempt.
    pub(crate) connect_timeout: Duration,
    /// How each new connection is checked for lost writes.
    pub(crate) amnesia: Option<AmnesiaCheck>,
    /// The drift factor a shard's clock is judged by.
    pub(crate) allowance: f64,
    /// Where a shard's clock jump ahead is told.
    pub(crate) news: ClockNews,
    /// Where a shard's clock readings go (`panel.rs`).
    pub(crate) panel: Arc<crate::node::trust::panel::Panel>,
}

/// A member that is a Redis Cluster.
pub(crate) struct Shards {
    /// The member's position in the configured list.
    index: usize,
    /// The member's settings (credentials, TLS, database), which every
    /// shard's connection uses with the shard's address.
    info: ConnectionInfo,
    /// Where the slot map is first read: the addresses given.
    seeds: Vec<ConnectionAddr>,
    /// What each shard's link is made with.
    settings: LinkSettings,
    /// The map and the requests waiting for one.
    state: Mutex<State>,
    /// This, for the tasks and callbacks it starts.
    me: Weak<Shards>,
}

/// Where the shards stand.
struct State {
    /// The slot map, once read.
    map: Option<Arc<SlotMap>>,
    /// Every shard link made, by address, with the slot its marker is in.
    links: HashMap<String, (u16, Arc<Link>)>,
    /// Requests made before the first map: sent in order once it is read.
    unrouted: Vec<(Arc<Request>, oneshot::Sender<RedisResult<Value>>)>,
    /// A read of the map is under way.
    refreshing: bool,
    /// Another read was asked for while one was under way.
    again: bool,
    /// When the last read ended.
    last: Option<Instant>,
}

/// Which shard serves each slot.
pub(crate) struct SlotMap {
    /// The index in `links` of each slot's shard, or [`NONE`].
    owner: Vec<u16>,
    /// The shards' links.
    links: Vec<Arc<Link>>,
}

impl SlotMap {
    /// The link of the shard serving `slot`; for a request that names no
    /// key, the first shard's.
    fn route(&self, slot: Option<u16>) -> Option<&Arc<Link>> {
        match slot {
            Some(slot) => {
                let owner = *self.owner.get(usize::from(slot))?;
                self.links.get(usize::from(owner))
            }
            None => self.links.first(),
        }
    }
}

impl Shards {
    /// A member reached through `info`'s settings and the seed addresses
    /// `seeds` (at least one); reads nothing yet.
    pub(crate) fn new(
        index: usize,
        info: ConnectionInfo,
        seeds: Vec<ConnectionAddr>,
        settings: LinkSettings,
    ) -> Arc<Self> {
        Arc::new_cyclic(|me| Self {
            index,
            info,
            seeds,
            settings,
            state: Mutex::new(State {
                map: None,
                links: HashMap::new(),
                unrouted: Vec::new(),
                refreshing: false,
                again: false,
                last: None,
            }),
            me: me.clone(),
        })
    }

    /// Locks the state, also after a panic elsewhere.
    fn state(&self) -> MutexGuard<'_, State> {
        mutex::lock(&self.state)
    }

    /// Sends `req` to the shard serving its first key (see
    /// [`Node::call`](crate::node::Node::call)); before the first slot map is
    /// read, queues it to go out in order once it is.
    pub(crate) fn call(&self, req: &Arc<Request>) -> Call {
        let mut st = self.state();
        if let Some(map) = &st.map {
            let Some(link) = map.route(req.slot()).cloned() else {
                drop(st);
                self.refresh_soon();
                return Call::failed(req, unserved(req.slot()));
            };
            drop(st);
            return Call::start(&link, req);
        }
        // After a failed read too, the request waits for the next one
        // rather than failing at once with what an earlier one met: a
        // member that is restarting is usually back by then, and the
        // round's own timeout still bounds the wait.
        let (tx, rx) = oneshot::channel();
        st.unrouted.push((Arc::clone(req), tx));
        drop(st);
        self.refresh_soon();
        Call::queued(req, tokio::task::unconstrained(rx))
    }

    /// The connect timeout until a map read ended and its shards were tried.
    pub(crate) fn first_contact(&self) -> Option<Duration> {
        let st = self.state();
        let shards = st.map.as_ref().map_or(&[][..], |m| &m.links[..]);
        let untried = shards.iter().find_map(|l| l.first_contact());
        untried.or(st.last.is_none().then_some(self.settings.connect_timeout))
    }

    /// The links of every shard seen, in no particular order.
    pub(crate) fn links(&self) -> Vec<Arc<Link>> {
        self.state()
            .links
            .values()
            .map(|(_, l)| Arc::clone(l))
            .collect()
    }

    /// The address of the master serving `slot` now, if the map is known.
    pub(crate) fn master_of(&self, slot: u16) -> Option<ConnectionAddr> {
        let st = self.state();
        Some(st.map.as_ref()?.route(Some(slot))?.addr().clone())
    }

    /// The links of the shards the slot map names now (every shard seen
    /// while no map was read): an old master left behind by a failover is
    /// not one of the member's shards any more.
    pub(crate) fn current(&self) -> Vec<Arc<Link>> {
        let st = self.state();
        match &st.map {
            Some(map) => map.links.clone(),
            None => st.links.values().map(|(_, l)| Arc::clone(l)).collect(),
        }
    }

    /// Reads the slot map again soon: at once unless a read is under way
    /// or the last ended less than [`REFRESH_GAP`] ago ([`FIRST_READ_GAP`]
    /// while none has succeeded).
    pub(crate) fn refresh_soon(&self) {
        let mut st = self.state();
        if st.refreshing {
            st.again = true;
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        st.refreshing = true;
        drop(st);
        let me = self.me.clone();
        runtime.spawn(async move {
            loop {
                let Some(shards) = me.upgrade() else { return };
                if let Some(at) = shards.next_read() {
                    drop(shards);
                    tokio::time::sleep_until(at).await;
                    continue;
                }
                let read = shards.read_map().await;
                if !shards.take_map(read) {
                    return;
                }
            }
        });
    }

    /// When the next read of the map may start, if not now.
    fn next_read(&self) -> Option<Instant> {
        let st = self.state();
        let gap = if st.map.is_some() {
            REFRESH_GAP
        } else {
            FIRST_READ_GAP
        };
        st.last
            .map(|last| last + gap)
            .filter(|at| *at > Instant::now())
    }

    /// Takes in a read of the map (or its failure); whether to read again.
    fn take_map(&self, read: RedisResult<Vec<(u16, u16, ConnectionAddr)>>) -> bool {
        let mut st = self.state();
        st.last = Some(Instant::now());
        match read {
            Ok(ranges) => {
                let map = self.build_map(&mut st, &ranges);
                // Requests made before the first map go out in the order
                // they were made, before any made after it.
                for (req, tx) in std::mem::take(&mut st.unrouted) {
                    if tx.is_closed() && !req.cleanup {
                        continue;
                    }
                    let call = match map.route(req.slot()) {
                        Some(link) => Call::start(link, &req),
                        None => Call::failed(&req, unserved(req.slot())),
                    };
                    tokio::spawn(forward(call, tx));
                }
                st.map = Some(map);
            }
            Err(e) => {
                tracing::debug!(node = self.index, error = %e, "cluster slot map not read");
                for (_, tx) in std::mem::take(&mut st.unrouted) {
                    let _ = tx.send(Err(e.clone()));
                }
            }
        }
        let again = std::mem::take(&mut st.again);
        st.refreshing = again;
        again
    }

    /// The map `ranges` (first slot, last slot, master) describe, making
    /// a link for each shard not seen before, or whose marker's slot it no
    /// longer serves.
    fn build_map(&self, st: &mut State, ranges: &[(u16, u16, ConnectionAddr)]) -> Arc<SlotMap> {
        let mut lowest: HashMap<String, (u16, &ConnectionAddr)> = HashMap::new();
        for (first, _, addr) in ranges {
            let e = lowest.entry(addr.to_string()).or_insert((*first, addr));
            e.0 = e.0.min(*first);
        }
        let serves = |addr: &str, slot: u16| {
            ranges
                .iter()
                .any(|(a, b, m)| (*a..=*b).contains(&slot) && m.to_string() == addr)
        };
        let mut links = Vec::with_capacity(lowest.len());
        let mut position = HashMap::new();
        for (name, (first, addr)) in &lowest {
            let keep = st
                .links
                .get(name)
                .filter(|(marker, _)| serves(name, *marker))
                .map(|(_, l)| Arc::clone(l));
            let link = match keep {
                Some(link) => link,
                None => {
                    let Some(link) = self.new_link(addr, *first) else {
                        continue;
                    };
                    st.links.insert(name.clone(), (*first, Arc::clone(&link)));
                    link
                }
            };
            position.insert(name.clone(), links.len() as u16);
            links.push(link);
        }
        let mut owner = vec![NONE; SLOTS];
        for (first, last, addr) in ranges {
            let at = position.get(&addr.to_string()).copied().unwrap_or(NONE);
            for slot in *first..=(*last).min(SLOTS as u16 - 1) {
                owner[usize::from(slot)] = at;
            }
        }
        let map = SlotMap { owner, links };
        self.distrust_receivers(st.map.as_deref(), &map);
        Arc::new(map)
    }

    /// Takes the slots that moved between the map `before` (`None`: a
    /// first read) and the map `after` as lost writes where they went (see
    /// [`received`]), unless lost writes are not checked for.
    fn distrust_receivers(&self, before: Option<&SlotMap>, after: &SlotMap) {
        let Some(check) = &self.settings.amnesia else {
            return;
        };
        let id = |link: Option<&Arc<Link>>| link.map(Arc::as_ptr);
        let mut taken: Vec<*const Link> = Vec::new();
        for slot in 0..SLOTS as u16 {
            let was = before.map(|m| id(m.route(Some(slot))));
            if let Some(link) = received(was, id(after.route(Some(slot)))) {
                if !taken.contains(&link) {
                    taken.push(link);
                }
            }
        }
        let quarantine = Duration::from_secs(check.quarantine_secs);
        let until = std::time::Instant::now() + quarantine;
        for link in after
            .links
            .iter()
            .filter(|l| taken.contains(&Arc::as_ptr(l)))
        {
            if link.trust.slots_received(until) {
                tracing::warn!(
                    target: crate::telemetry::targets::LOSS,
                    node = self.index,
                    "a shard of node {} ({}) {}: it does not count toward a lock quorum for {}s, \
                     until no lock it may lack can still be valid",
                    self.index,
                    link.addr(),
                    Cause::Received.describe(),
                    quarantine.as_secs()
                );
            }
        }
    }

    /// A link to the master at `addr`, whose marker is in slot `slot`
    /// (`None` if the member's settings do not open with that address:
    /// not expected, they opened with the seed's).
    fn new_link(&self, addr: &ConnectionAddr, slot: u16) -> Option<Arc<Link>> {
        let client =
            crate::node::connection::open::nodelay(self.info.clone().set_addr(addr.clone()))?;
        let s = &self.settings;
        let me = self.me.clone();
        let marker = format!("redquorum:node:{{{}}}", tag_for_slot(slot));
        Some(Arc::new(
            Link::new(
                self.index,
                client,
                s.connect_timeout,
                s.amnesia.clone(),
                (s.allowance, &s.news, &s.panel),
            )
            .with_shard(
                marker,
                Box::new(move || {
                    if let Some(shards) = me.upgrade() {
                        shards.refresh_soon();
                    }
                }),
            ),
        ))
    }

    /// Reads the slot map from the seeds, then from every shard seen: the
    /// first that answers. `(first slot, last slot, master)` per range.
    async fn read_map(&self) -> RedisResult<Vec<(u16, u16, ConnectionAddr)>> {
        let mut asked: Vec<ConnectionAddr> = self.seeds.clone();
        let known: Vec<ConnectionAddr> = self
            .links()
            .iter()
            .map(|l| l.addr().clone())
            .filter(|a| !asked.contains(a))
            .collect();
        asked.extend(known);
        let mut last = RedisError::from((redis::ErrorKind::Io, "no seed address"));
        for addr in asked {
            match self.read_map_at(&addr).await {
                Ok(ranges) if !ranges.is_empty() => return Ok(ranges),
                Ok(_) => {
                    last = RedisError::from((
                        redis::ErrorKind::Server(redis::ServerErrorKind::ClusterDown),
                        "the cluster serves no slot",
                    ));
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// `CLUSTER SLOTS` as the node at `addr` answers it.
    async fn read_map_at(
        &self,
        addr: &ConnectionAddr,
    ) -> RedisResult<Vec<(u16, u16, ConnectionAddr)>> {
        let limit = self.settings.connect_timeout;
        let client = redis::Client::open(self.info.clone().set_addr(addr.clone()))?;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(limit))
            .set_response_timeout(Some(limit));
        let mut conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        let reply: Value = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query_async(&mut conn)
            .await?;
        Ok(parse_slots(&reply, addr))
    }
}

/// A `CLUSTER SLOTS` reply as (first slot, last slot, master address); a
/// master named with an empty host is the node asked (`asked`).
fn parse_slots(reply: &Value, asked: &ConnectionAddr) -> Vec<(u16, u16, ConnectionAddr)> {
    let Value::Array(ranges) = reply else {
        return Vec::new();
    };
    let int = |v: &Value| match v {
        Value::Int(i) => u16::try_from(*i).ok(),
        _ => None,
    };
    ranges
        .iter()
        .filter_map(|range| {
            let Value::Array(parts) = range else {
                return None;
            };
            let (first, last) = (int(parts.first()?)?, int(parts.get(1)?)?);
            let Value::Array(master) = parts.get(2)? else {
                return None;
            };
            let host = redis::from_redis_value_ref::<String>(master.first()?).ok()?;
            let port = int(master.get(1)?)?;
            let host = if host.is_empty() || host == "?" {
                match asked {
                    ConnectionAddr::Tcp(h, _) | ConnectionAddr::TcpTls { host: h, .. } => h.clone(),
                    _ => return None,
                }
            } else {
                host
            };
            Some((
                first,
                last,
                crate::node::connection::open::addr_like(asked, (host, port)),
            ))
        })
        .collect()
}

/// Passes a routed request's reply to the round that made it before the
/// map was read.
async fn forward(mut call: Call, tx: oneshot::Sender<RedisResult<Value>>) {
    let reply = std::future::poll_fn(|cx| call.poll_reply(cx)).await;
    let _ = tx.send(reply);
}

/// The error for a request whose slot no shard serves.
fn unserved(slot: Option<u16>) -> RedisError {
    RedisError::from((
        redis::ErrorKind::Server(redis::ServerErrorKind::ClusterDown),
        "no shard serves the slot",
        format!("slot {}", slot.unwrap_or(0)),
    ))
}
