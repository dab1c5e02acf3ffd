//! The read-write lock, model-checked.
//!
//! Three nodes whose clocks run 10 % fast (a lease or key of TTL 4 ms lives
//! 3 ms there), two readers and a writer, one acquisition each, time in
//! 1 ms ticks, up to two rounds per client (the checks below bound these
//! further: the state space grows about fifteenfold per tick). A client
//! starts waiting (its ticket: the order of starts), sends its attempt to
//! every node, and counts the replies with the real
//! `Tally` over nodes out of quarantine (`Counts::Trusted`): a quorum of
//! yes holds for the crate's `validity` from the round's start, else it
//! undoes where it won and waits, listed, to try again. A node runs the
//! scripts' rule (`rwlock/scripts.rs`; `run`, checked against them on a real
//! node for every state of one node): ended leases and an expired writer's
//! key are dropped; the client is listed; a reader takes a lease of its
//! own while no writer holds and no listed writer is ahead of it; a writer
//! takes the key while no lease is live and it is first in the list.
//! Faults: a lost attempt, a client that stops waiting for a node whose
//! attempt lands later (before anything the client sends there after it,
//! as on the crate's ordered connections), a node that restarts empty (its
//! votes then do not count for a TTL), a holder that never releases.
//!
//! Properties: no valid writer at the same instant as another valid holder;
//! a node counts a reader's lease live only while that reader's own lease
//! is; a reader that started after a waiting writer was listed on a quorum
//! never holds before it (phase fairness). The weakened rules the checker
//! must break, one property each: the readers' leases as one shared
//! expiry, renewed by every reader (a crashed reader then keeps writers out
//! past its own lease); readers admitted whenever no writer holds (a
//! waiting writer is overtaken); a client that holds on one node's yes.

use stateright::{Model, Property};

use crate::model::rwlock_state::{Action, Client, Node, Phase, State, CLIENTS, NODES};
use crate::model::{real_ttl, tally_of, validity_left};
use crate::quorum::tally::{node_bit, quorum, NodeSet};

/// The writer (the last client).
const WRITER: usize = 2;

/// The properties: exclusion, each lease its own, phase fairness.
const EXCLUSION: &str = "no valid writer beside another valid holder";
const OWN_LEASE: &str = "a node counts a reader live only while its own lease is";
const NO_OVERTAKE: &str = "no reader that came after a listed writer holds before it";
const MARK_ENDS: &str = "a node's readers' mark ends no earlier than a live lease there";

/// One run's bounds and rules.
#[derive(Clone)]
pub(crate) struct RwModel {
    pub(crate) ttl: u8,
    pub(crate) horizon: u8,
    pub(crate) drops: u8,
    pub(crate) timeouts: u8,
    pub(crate) restarts: u8,
    /// Rounds each client makes at most; the clients that take part.
    pub(crate) rounds: u8,
    pub(crate) present: u8,
    /// Weakened: the readers' leases as one shared expiry.
    pub(crate) shared_lease: bool,
    /// Weakened: a reader enters whenever no writer holds.
    pub(crate) greedy_readers: bool,
    /// Weakened: one node's yes holds.
    pub(crate) one_node: bool,
    /// The writer is a plain lock of the name (`Redlock::lock`, or any
    /// Redlock client): its first round a bare `SET NX` on the writer's
    /// key (not listed, blind to the readers' leases), its later rounds
    /// the lock's queued take (`QUEUED_SET`).
    pub(crate) plain_writer: bool,
    /// How readers keep the name's key from a plain lock.
    pub(crate) mark: Mark,
}

/// How readers keep the name's key from a plain lock: their mark on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mark {
    /// As shipped: each reader's take sets the mark to end with the last
    /// live lease; a release that leaves live leases does the same, and
    /// the one that leaves none deletes it.
    Kept,
    /// Weakened: the mark ends with the first live lease to end (the
    /// sorted set read from the wrong end).
    EarliestLease,
    /// Weakened: readers leave no mark.
    Unmarked,
    /// Weakened: any reader's release deletes the mark.
    DroppedByAnyRelease,
}

impl RwModel {
    /// The rules as shipped: TTL 4 ms, 5 ms of time, no faults.
    pub(crate) fn shipped() -> Self {
        Self {
            ttl: 4,
            horizon: 5,
            drops: 0,
            timeouts: 0,
            restarts: 0,
            rounds: 2,
            present: 0b111,
            shared_lease: false,
            greedy_readers: false,
            one_node: false,
            plain_writer: false,
            mark: Mark::Kept,
        }
    }

    /// Validity left `elapsed` ms after a round started, by the crate's
    /// rule with node clocks 10 % fast.
    fn left(&self, elapsed: u8) -> u8 {
        validity_left(self.ttl, 0.1, elapsed)
    }

    /// Real ms a lease or key lives on a node 10 % fast.
    fn real_ttl(&self) -> u8 {
        real_ttl(self.ttl, 0.1)
    }

    /// Whether node `n` counts reader `c`'s lease live now.
    fn live(&self, s: &State, n: usize, c: usize) -> bool {
        let node = &s.nodes[n];
        match self.shared_lease {
            false => node.readers[c] > s.now,
            true => node.readers[c] != 0 && node.shared > s.now,
        }
    }

    /// Node `n` runs client `c`'s attempt; whether it took.
    fn run(&self, s: &mut State, n: usize, c: usize) -> bool {
        let now = s.now;
        for r in 0..CLIENTS {
            if !self.live(s, n, r) {
                s.nodes[n].readers[r] = 0;
            }
        }
        let tickets: Vec<u8> = s.clients.iter().map(|k| k.ticket).collect();
        let readers_live = (0..CLIENTS).any(|r| self.live(s, n, r));
        // A bare `SET NX`: the plain writer's first round.
        let bare = c == WRITER && self.plain_writer && s.clients[c].rounds <= 1;
        let node = &mut s.nodes[n];
        if node.writer.is_some_and(|(_, at)| at <= now) {
            node.writer = None;
        }
        if node.mark <= now {
            node.mark = 0;
        }
        if !bare {
            node.listed |= 1 << c;
        }
        let ahead = |k: usize| node.listed & (1 << k) != 0 && tickets[k] < tickets[c];
        let expires = now + self.real_ttl();
        if c == WRITER {
            let first = bare || !(0..CLIENTS).any(ahead);
            // The plain lock takes the key only where it is free; the
            // read-write lock's writer writes over a mark no live lease
            // keeps.
            let free = match self.plain_writer {
                true => node.writer.is_none() && node.mark == 0,
                false => node.writer.is_none() && !readers_live,
            };
            if first && free {
                node.writer = Some((c as u8, expires));
                node.mark = 0;
                return true;
            }
            return false;
        }
        let writer_ahead = !self.greedy_readers && ahead(WRITER);
        if writer_ahead || node.writer.is_some() {
            return false;
        }
        node.own[c] = expires;
        if self.shared_lease {
            node.readers[c] = 1;
            node.shared = node.shared.max(expires);
        } else {
            node.readers[c] = expires;
        }
        if self.mark != Mark::Unmarked {
            node.mark = self.mark_end(node, now);
        }
        true
    }

    /// When the readers' mark on `node` ends, by the rule: with the last
    /// live lease (the first, weakened); 0 where none is live.
    fn mark_end(&self, node: &Node, now: u8) -> u8 {
        let ends = self.live_ends(node, now);
        match self.mark {
            Mark::EarliestLease => ends.min(),
            _ => ends.max(),
        }
        .unwrap_or(0)
    }

    /// The ends of the live leases on `node`.
    fn live_ends<'a>(&self, node: &'a Node, now: u8) -> impl Iterator<Item = u8> + 'a {
        let shared = self.shared_lease;
        (0..WRITER).filter_map(move |r| match shared {
            false => Some(node.readers[r]).filter(|e| *e > now),
            true => (node.readers[r] != 0 && node.shared > now).then_some(node.shared),
        })
    }

    /// Takes `c`'s hold off the nodes in `on`: a reader's release also
    /// deletes the readers' mark where no live lease is left.
    fn undo(&self, s: &mut State, c: usize, on: NodeSet) {
        for n in (0..NODES).filter(|n| on & node_bit(*n) != 0) {
            let node = &mut s.nodes[n];
            if node.writer.is_some_and(|(w, _)| usize::from(w) == c) {
                node.writer = None;
            }
            if c == WRITER {
                continue;
            }
            node.readers[c] = 0;
            let none_live = !(0..WRITER).any(|r| self.live(s, n, r));
            let node = &mut s.nodes[n];
            if none_live || self.mark == Mark::DroppedByAnyRelease {
                node.mark = 0;
            } else if node.mark != 0 {
                node.mark = self.mark_end(node, s.now);
            }
        }
    }

    /// Client `c` starts a round.
    fn round(&self, s: &mut State, c: usize) {
        s.clients[c].rounds += 1;
        let listed = s
            .nodes
            .iter()
            .filter(|n| n.listed & (1 << WRITER) != 0)
            .count();
        let w = &s.clients[WRITER];
        let waiting = matches!(w.phase, Phase::Round { .. } | Phase::Waiting);
        let behind =
            c != WRITER && waiting && listed >= quorum(NODES) && w.ticket < s.clients[c].ticket;
        s.clients[c].phase = Phase::Round {
            start: s.now,
            pending: (1 << NODES) - 1,
            yes: 0,
            no: 0,
            failed: 0,
            behind,
        };
    }

    /// Decides client `c`'s round once it can.
    fn decide(&self, s: &mut State, c: usize) {
        let Phase::Round {
            start,
            pending,
            yes,
            no,
            failed,
            behind,
        } = s.clients[c].phase
        else {
            return;
        };
        let decided = match self.one_node {
            true => (yes != 0).then_some(true),
            false => tally_of(NODES, quorum(NODES), yes, no, failed).decided(),
        };
        let won = match decided {
            Some(won) => won,
            None if pending == 0 => false,
            None => return,
        };
        let left = self.left(s.now - start);
        if won && left > 0 {
            s.clients[c].late |= pending;
            for node in &mut s.nodes {
                node.listed &= !(1 << c);
            }
            s.clients[c].phase = Phase::Holding {
                until: s.now + left,
                behind,
            };
        } else {
            self.undo(s, c, yes);
            s.clients[c].late |= pending;
            s.clients[c].phase = Phase::Waiting;
        }
    }

    /// Node `n`'s answer to `c` counts: yes, no, or failed in quarantine.
    fn answer(&self, s: &mut State, c: usize, n: usize, took: bool) {
        let trusted = s.now >= s.nodes[n].trusted_from;
        if let Phase::Round {
            pending,
            yes,
            no,
            failed,
            ..
        } = &mut s.clients[c].phase
        {
            *pending &= !node_bit(n);
            match (trusted, took) {
                (false, _) => *failed |= node_bit(n),
                (true, true) => *yes |= node_bit(n),
                (true, false) => *no |= node_bit(n),
            }
        }
        self.decide(s, c);
    }
}

impl Model for RwModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let client = Client {
            ticket: u8::MAX,
            phase: Phase::Idle,
            late: 0,
            rounds: 0,
        };
        vec![State {
            now: 0,
            nodes: Default::default(),
            clients: [client.clone(), client.clone(), client],
            started: 0,
            drops: 0,
            timeouts: 0,
            restarts: 0,
        }]
    }

    fn actions(&self, s: &State, out: &mut Vec<Action>) {
        for (c, client) in s.clients.iter().enumerate() {
            match client.phase {
                Phase::Idle if self.present & (1 << c) != 0 => out.push(Action::Start(c)),
                Phase::Waiting if client.rounds < self.rounds => out.push(Action::Retry(c)),
                Phase::Holding { .. } => out.push(Action::Release(c)),
                Phase::Round { pending, .. } => {
                    // A client's requests reach a node in the order sent:
                    // an earlier round's late attempt (and its undo) first.
                    let ready = pending & !client.late;
                    for n in (0..NODES).filter(|n| ready & node_bit(*n) != 0) {
                        out.push(Action::Deliver(c, n));
                        if s.drops < self.drops {
                            out.push(Action::Drop(c, n));
                        }
                        if s.timeouts < self.timeouts {
                            out.push(Action::Timeout(c, n));
                        }
                    }
                }
                Phase::Idle | Phase::Waiting | Phase::Done => {}
            }
            for n in (0..NODES).filter(|n| client.late & node_bit(*n) != 0) {
                out.push(Action::Late(c, n));
            }
        }
        if s.restarts < self.restarts {
            out.extend((0..NODES).map(Action::Restart));
        }
        if s.now < self.horizon {
            out.push(Action::Tick);
        }
    }

    fn next_state(&self, s: &State, a: Action) -> Option<State> {
        let mut s = s.clone();
        match a {
            Action::Start(c) => {
                s.clients[c].ticket = s.started;
                s.started += 1;
                self.round(&mut s, c);
            }
            Action::Retry(c) => self.round(&mut s, c),
            Action::Deliver(c, n) => {
                let took = self.run(&mut s, n, c);
                self.answer(&mut s, c, n, took);
            }
            Action::Late(c, n) => {
                s.clients[c].late &= !node_bit(n);
                let took = self.run(&mut s, n, c);
                // A late take of a round that was lost is undone behind it.
                if took && !matches!(s.clients[c].phase, Phase::Holding { .. }) {
                    self.undo(&mut s, c, node_bit(n));
                }
            }
            Action::Drop(c, n) | Action::Timeout(c, n) => {
                if a == Action::Drop(c, n) {
                    s.drops += 1;
                } else {
                    s.timeouts += 1;
                    s.clients[c].late |= node_bit(n);
                }
                if let Phase::Round {
                    pending, failed, ..
                } = &mut s.clients[c].phase
                {
                    *pending &= !node_bit(n);
                    *failed |= node_bit(n);
                }
                self.decide(&mut s, c);
            }
            Action::Release(c) => {
                self.undo(&mut s, c, (1 << NODES) - 1);
                s.clients[c].phase = Phase::Done;
            }
            Action::Restart(n) => {
                s.restarts += 1;
                s.nodes[n] = Node {
                    trusted_from: s.now + self.ttl + 1,
                    ..Node::default()
                };
            }
            Action::Tick => {
                s.now += 1;
                // What has ended is alike however long ago it ended.
                let now = s.now;
                for node in &mut s.nodes {
                    for (r, own) in node.readers.iter_mut().zip(node.own.iter_mut()) {
                        if !self.shared_lease && *r <= now {
                            *r = 0;
                        }
                        if *own <= now {
                            *own = 0;
                        }
                    }
                    if node.writer.is_some_and(|(_, at)| at <= now) {
                        node.writer = None;
                    }
                    if node.mark <= now {
                        node.mark = 0;
                    }
                    if node.shared <= now {
                        node.shared = 0;
                    }
                    if node.trusted_from <= now {
                        node.trusted_from = 0;
                    }
                }
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(EXCLUSION, |_: &Self, s: &State| {
                let valid = |c: usize| matches!(s.clients[c].phase, Phase::Holding { until, .. } if s.now < until);
                !valid(WRITER) || (0..WRITER).all(|r| !valid(r))
            }),
            Property::always(OWN_LEASE, |m: &Self, s: &State| {
                (0..NODES)
                    .all(|n| (0..WRITER).all(|r| !m.live(s, n, r) || s.nodes[n].own[r] > s.now))
            }),
            Property::always(MARK_ENDS, |m: &Self, s: &State| {
                (0..NODES).all(|n| {
                    let node = &s.nodes[n];
                    node.mark == 0 || m.live_ends(node, s.now).all(|e| e <= node.mark)
                })
            }),
            Property::always(NO_OVERTAKE, |_: &Self, s: &State| {
                s.clients.iter().all(|c| {
                    !matches!(c.phase, Phase::Holding { behind: true, .. })
                        || matches!(s.clients[WRITER].phase, Phase::Holding { .. } | Phase::Done)
                })
            }),
            Property::sometimes("a reader held", |_: &Self, s: &State| {
                (0..WRITER).any(|r| matches!(s.clients[r].phase, Phase::Holding { .. }))
            }),
            Property::sometimes("the writer held", |_: &Self, s: &State| {
                matches!(s.clients[WRITER].phase, Phase::Holding { .. })
            }),
            Property::sometimes("two readers held at once", |_: &Self, s: &State| {
                (0..WRITER).all(
                    |r| matches!(s.clients[r].phase, Phase::Holding { until, .. } if s.now < until),
                )
            }),
            Property::sometimes("the writer held after waiting", |_: &Self, s: &State| {
                matches!(s.clients[WRITER].phase, Phase::Holding { .. })
                    && s.clients.iter().any(|c| c.phase == Phase::Done)
            }),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::readers_mark;
    use crate::lock::scripts::QUEUED_SET;
    use crate::model::check;
    use crate::rwlock::scripts::{READ_TAKE, WRITE_TAKE};

    /// The model's node rule ([`RwModel::run`]) decides as the crate's
    /// scripts do, on a real node: every state of one node (the writer's
    /// key free, held by a writer or holding the readers' mark; each
    /// reader's lease none, live or ended; any set of the three clients
    /// listed, in every order of their tickets), every client asking, as a
    /// waiter and, where it is not listed, as a plain first attempt (the
    /// model's rule with the newest ticket; it is not listed by it); the
    /// writer also as a plain lock of the name (its bare `SET NX`, its
    /// queued take). Compared: whether it took, and what the node holds
    /// after (the list, the live leases, the writer's key and the mark).
    #[test]
    fn run_decides_as_the_scripts_do() {
        let (_node, mut conn) = crate::scratch::node();
        let c = &mut conn;
        let id = |k: usize| {
            if k == WRITER {
                "c2:w".to_string()
            } else {
                format!("c{k}")
            }
        };
        let orders = [
            [0, 1, 2],
            [0, 2, 1],
            [1, 0, 2],
            [1, 2, 0],
            [2, 0, 1],
            [2, 1, 0],
        ];
        let mut cases = 0;
        for (key, plain_lock) in [0, 1, 2].into_iter().flat_map(|k| [(k, false), (k, true)]) {
            let writer = key == 1;
            let m = RwModel {
                plain_writer: plain_lock,
                ..RwModel::shipped()
            };
            for leases in 0..9 {
                let lease = [leases % 3, leases / 3];
                for listed in 0..8u8 {
                    for order in orders {
                        for who in 0..CLIENTS {
                            if plain_lock && who != WRITER {
                                continue;
                            }
                            for plain in [false, true] {
                                if plain && listed & (1 << who) != 0 {
                                    continue;
                                }
                                let mut s = m.init_states().remove(0);
                                s.now = 10;
                                for (k, client) in s.clients.iter_mut().enumerate() {
                                    client.ticket = order[k];
                                }
                                if plain {
                                    s.clients[who].ticket = 3;
                                }
                                // A later round: the plain lock's is queued.
                                s.clients[who].rounds = if plain { 1 } else { 2 };
                                let node = &mut s.nodes[0];
                                node.writer = writer.then_some((WRITER as u8, 20));
                                node.mark = if key == 2 { 20 } else { 0 };
                                for r in 0..2 {
                                    node.readers[r] = [0, 20, 5][lease[r]];
                                }
                                node.listed = listed;
                                let took = m.run(&mut s, 0, who);
                                if plain {
                                    s.nodes[0].listed &= !(1 << who);
                                }

                                redis::cmd("FLUSHALL").query::<()>(c).expect("flush");
                                let (secs, micros): (i64, i64) =
                                    redis::cmd("TIME").query(c).expect("TIME");
                                let now = secs * 1000 + micros / 1000;
                                if key > 0 {
                                    let held = if writer { "v2" } else { readers_mark!() };
                                    redis::cmd("SET")
                                        .arg(&["w", held, "PX", "60000"])
                                        .query::<()>(c)
                                        .expect("set");
                                }
                                for r in 0..2 {
                                    let ends = [0, now + 60_000, 1][lease[r]];
                                    if ends != 0 {
                                        redis::cmd("ZADD")
                                            .arg("r")
                                            .arg(ends)
                                            .arg(format!("v{r}"))
                                            .query::<()>(c)
                                            .expect("lease");
                                    }
                                }
                                for k in (0..CLIENTS).filter(|k| listed & (1 << k) != 0) {
                                    redis::cmd("ZADD")
                                        .arg("q")
                                        .arg(order[k])
                                        .arg(id(k))
                                        .query::<()>(c)
                                        .expect("q");
                                    redis::cmd("ZADD")
                                        .arg("l")
                                        .arg("+inf")
                                        .arg(id(k))
                                        .query::<()>(c)
                                        .expect("l");
                                }
                                // The keys the crate's requests name.
                                let (script, keys): (&str, &[&str]) = match (who, plain_lock) {
                                    (WRITER, false) => (WRITE_TAKE.src, &["w", "r", "q", "l", "p"]),
                                    (WRITER, true) => (QUEUED_SET.src, &["w", "q", "l"]),
                                    _ => (READ_TAKE.src, &["w", "r", "q", "l"]),
                                };
                                let real_took = if plain_lock && plain {
                                    let set: Option<String> = redis::cmd("SET")
                                        .arg(&["w", "v2", "NX", "PX", "10000"])
                                        .query(c)
                                        .expect("SET NX");
                                    set.is_some()
                                } else {
                                    let reply: Vec<i64> = redis::cmd("EVAL")
                                        .arg(script)
                                        .arg(keys.len())
                                        .arg(keys)
                                        .arg(format!("v{who}"))
                                        .arg(10_000)
                                        .arg(if plain { String::new() } else { id(who) })
                                        .arg(s.clients[who].ticket)
                                        .arg(60_000)
                                        .query(c)
                                        .expect("EVAL");
                                    reply[0] == 1
                                };
                                let case = format!(
                                    "key {key}, plain lock {plain_lock}, leases {lease:?}, \
                                     listed {listed:03b}, tickets {order:?}, client {who}, \
                                     plain {plain}"
                                );
                                assert_eq!(real_took, took, "{case}: took");
                                let node = &s.nodes[0];
                                let mut model: Vec<String> = (0..CLIENTS)
                                    .filter(|k| node.listed & (1 << k) != 0)
                                    .map(id)
                                    .collect();
                                model.sort_by_key(|i| {
                                    (0..CLIENTS)
                                        .find(|k| id(*k) == *i)
                                        .map(|k| s.clients[k].ticket)
                                });
                                let real: Vec<String> = redis::cmd("ZRANGE")
                                    .arg(&["q", "0", "-1"])
                                    .query(c)
                                    .expect("zrange");
                                assert_eq!(real, model, "{case}: list");
                                let live: Vec<String> = redis::cmd("ZRANGEBYSCORE")
                                    .arg("r")
                                    .arg(format!("({now}"))
                                    .arg("+inf")
                                    .query(c)
                                    .expect("leases");
                                let mut live = live;
                                live.sort();
                                let model: Vec<String> = (0..2)
                                    .filter(|r| node.readers[*r] > s.now)
                                    .map(|r| format!("v{r}"))
                                    .collect();
                                assert_eq!(live, model, "{case}: leases");
                                let held: Option<String> =
                                    redis::cmd("GET").arg("w").query(c).expect("get");
                                let marked = held.as_deref() == Some(readers_mark!());
                                assert_eq!(
                                    held.is_some() && !marked,
                                    node.writer.is_some(),
                                    "{case}: writer"
                                );
                                assert_eq!(marked, node.mark > s.now, "{case}: mark");
                                // Which lease it ends with: one that was
                                // live (60 s) or the one just given (10 s).
                                if marked {
                                    let pttl: i64 =
                                        redis::cmd("PTTL").arg("w").query(c).expect("pttl");
                                    assert_eq!(
                                        pttl > 30_000,
                                        node.mark == 20,
                                        "{case}: mark's end"
                                    );
                                }
                                cases += 1;
                            }
                        }
                    }
                }
            }
        }
        // Per state of the key: the read-write lock's three clients, then
        // the plain lock (as a waiter where listed, else both ways).
        assert_eq!(cases, 3 * 9 * 6 * ((8 * 3 + 4 * 3) + (8 + 4)));
    }

    /// A reader and the writer, time passing, a lost attempt, a slow node
    /// whose attempt lands late, a node restarting empty.
    #[test]
    fn model_rwlock_excludes_with_faults() {
        let m = RwModel {
            drops: 1,
            timeouts: 1,
            restarts: 1,
            horizon: 4,
            rounds: 1,
            present: 0b101,
            ..RwModel::shipped()
        };
        let r = check("rw lock: a loss, a slow node, a node restarting empty", m);
        r.assert_safe("rw lock with faults", 1_000_000, "the writer held");
        assert!(r.reached.contains(&"a reader held"));
    }

    /// Two readers and the writer, every order of requests and releases
    /// (no time passes: leases end by release only).
    #[test]
    fn model_rwlock_readers_share_and_never_overtake_a_listed_writer() {
        let m = RwModel {
            horizon: 0,
            ..RwModel::shipped()
        };
        let r = check("rw lock: two readers and a writer, in any order", m);
        r.assert_safe("rw lock fairness", 100_000, "two readers held at once");
        assert!(r.reached.contains(&"the writer held after waiting"));
    }

    /// The name's plain lock as the writer (a bare `SET NX`, then the
    /// lock's queued take), two readers, every order of requests and
    /// releases (no time passes: leases end by release only).
    fn plain_lock(mark: Mark) -> RwModel {
        RwModel {
            plain_writer: true,
            mark,
            horizon: 0,
            ..RwModel::shipped()
        }
    }

    #[test]
    fn model_rwlock_readers_exclude_a_plain_lock_of_the_name() {
        let r = check(
            "rw lock: the name's plain lock and two readers",
            plain_lock(Mark::Kept),
        );
        r.assert_safe("plain lock and readers", 500_000, "the writer held");
        assert!(r.reached.contains(&"two readers held at once"));
    }

    /// A reader and the name's plain lock with time passing: leases, the
    /// mark and the lock's key expire, a late attempt, a lost one.
    #[test]
    fn model_rwlock_a_readers_mark_outlives_its_lease_and_no_more() {
        let m = RwModel {
            horizon: 2,
            drops: 1,
            timeouts: 1,
            present: 0b101,
            ..plain_lock(Mark::Kept)
        };
        let r = check("rw lock: the name's plain lock and a reader, in time", m);
        r.assert_safe(
            "plain lock and a reader",
            100_000,
            "the writer held after waiting",
        );
        assert!(r.reached.contains(&"a reader held"));
    }

    #[test]
    fn model_rwlock_finds_a_plain_lock_beside_readers_that_leave_no_mark() {
        check(
            "rw lock, weakened: readers leave no mark on the name's key",
            plain_lock(Mark::Unmarked),
        )
        .assert_violates("unmarked", EXCLUSION);
    }

    /// Two readers taking and releasing over 4 ms (leases end at 3): a mark ends with the
    /// last live lease on its node, never before (a plain `SET NX` there
    /// is refused while any reader's lease is live).
    #[test]
    fn model_rwlock_a_readers_mark_ends_with_the_last_lease() {
        let m = RwModel {
            horizon: 4,
            present: 0b011,
            ..plain_lock(Mark::Kept)
        };
        let r = check("rw lock: two readers' mark, in time", m);
        r.assert_safe("two readers' mark", 10_000, "two readers held at once");
    }

    #[test]
    fn model_rwlock_finds_a_mark_that_ends_with_the_first_lease() {
        let m = RwModel {
            horizon: 2,
            present: 0b011,
            ..plain_lock(Mark::EarliestLease)
        };
        check("rw lock, weakened: the mark ends with the first lease", m)
            .assert_violates("earliest", MARK_ENDS);
    }

    #[test]
    fn model_rwlock_finds_a_plain_lock_let_in_by_a_release_that_leaves_a_lease() {
        check(
            "rw lock, weakened: any reader's release deletes the mark",
            plain_lock(Mark::DroppedByAnyRelease),
        )
        .assert_violates("dropped", EXCLUSION);
    }

    #[test]
    fn model_rwlock_finds_a_crashed_reader_kept_alive_by_a_shared_lease() {
        let m = RwModel {
            shared_lease: true,
            ..RwModel::shipped()
        };
        check("rw lock, weakened: one shared lease", m).assert_violates("shared", OWN_LEASE);
    }

    #[test]
    fn model_rwlock_finds_a_writer_overtaken_by_greedy_readers() {
        let m = RwModel {
            greedy_readers: true,
            ..RwModel::shipped()
        };
        let r = check(
            "rw lock, weakened: readers enter whenever no writer holds",
            m,
        );
        r.assert_violates("greedy", NO_OVERTAKE);
    }

    #[test]
    fn model_rwlock_finds_two_holders_on_one_nodes_yes() {
        let m = RwModel {
            one_node: true,
            ..RwModel::shipped()
        };
        check("rw lock, weakened: one node's yes holds", m).assert_violates("one node", EXCLUSION);
    }
}
