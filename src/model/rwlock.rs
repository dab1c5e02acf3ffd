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

use std::time::Duration;

use stateright::{Model, Property};

use crate::client::config::Config;
use crate::client::redlock::validity;
use crate::model::tally_of;
use crate::quorum::tally::{node_bit, quorum, NodeSet};

/// Nodes; clients, readers first; the writer.
const NODES: usize = 3;
const CLIENTS: usize = 3;
const WRITER: usize = 2;

/// The properties: exclusion, each lease its own, phase fairness.
const EXCLUSION: &str = "no valid writer beside another valid holder";
const OWN_LEASE: &str = "a node counts a reader live only while its own lease is";
const NO_OVERTAKE: &str = "no reader that came after a listed writer holds before it";

/// One node.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, Default)]
pub(crate) struct Node {
    /// The writer's key: who, and the real instant it expires.
    writer: Option<(u8, u8)>,
    /// Per client, its lease's end (0: none); with one shared expiry, a
    /// mark that it is a member.
    readers: [u8; CLIENTS],
    /// The shared expiry (the weakened rule only).
    shared: u8,
    /// Listed waiters.
    listed: u8,
    /// Its votes count from this instant on (a restart's quarantine).
    trusted_from: u8,
    /// Per client, the end of the lease it last took here (what its own
    /// lease is, for the property).
    own: [u8; CLIENTS],
}

/// Where a client is.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Phase {
    /// Not started.
    Idle,
    /// An attempt out.
    Round {
        /// When it started.
        start: u8,
        /// Nodes it still waits for.
        pending: NodeSet,
        /// Counted yes, no, failed.
        yes: NodeSet,
        no: NodeSet,
        failed: NodeSet,
        /// A reader's round that started while the writer, ahead of it,
        /// waited listed on a quorum.
        behind: bool,
    },
    /// Lost a round; listed; may try again.
    Waiting,
    /// Holds until this instant; `behind` as its round's.
    Holding { until: u8, behind: bool },
    /// Released.
    Done,
}

/// A client.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Client {
    /// Its place in the lists; where it is; attempts it stopped waiting
    /// for, still on their way; rounds so far.
    ticket: u8,
    phase: Phase,
    late: NodeSet,
    rounds: u8,
}

/// The whole system.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct State {
    now: u8,
    nodes: [Node; NODES],
    clients: [Client; CLIENTS],
    started: u8,
    drops: u8,
    timeouts: u8,
    restarts: u8,
}

/// A step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    Start(usize),
    Retry(usize),
    Deliver(usize, usize),
    Late(usize, usize),
    Drop(usize, usize),
    Timeout(usize, usize),
    Release(usize),
    Restart(usize),
    Tick,
}

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
        }
    }

    /// Validity left `elapsed` ms after a round started, by the crate's
    /// rule with node clocks 10 % fast.
    fn left(&self, elapsed: u8) -> u8 {
        let config = Config {
            drift_factor: 0.1,
            ..Config::default()
        };
        let ttl = Duration::from_millis(self.ttl.into());
        validity(
            ttl,
            Duration::from_millis(elapsed.into()),
            config.drift(ttl),
        )
        .map_or(0, |v| v.as_millis().min(255) as u8)
    }

    /// Real ms a lease or key lives on a node 10 % fast.
    fn real_ttl(&self) -> u8 {
        (f64::from(self.ttl) / 1.1).floor() as u8
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
        let node = &mut s.nodes[n];
        if node.writer.is_some_and(|(_, at)| at <= now) {
            node.writer = None;
        }
        node.listed |= 1 << c;
        let ahead = |k: usize| node.listed & (1 << k) != 0 && tickets[k] < tickets[c];
        let expires = now + self.real_ttl();
        if c == WRITER {
            let first = !(0..CLIENTS).any(ahead);
            if first && node.writer.is_none() && !readers_live {
                node.writer = Some((c as u8, expires));
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
        true
    }

    /// Takes `c`'s hold off the nodes in `on`.
    fn undo(s: &mut State, c: usize, on: NodeSet) {
        for (n, node) in s.nodes.iter_mut().enumerate() {
            if on & node_bit(n) == 0 {
                continue;
            }
            if node.writer.is_some_and(|(w, _)| usize::from(w) == c) {
                node.writer = None;
            }
            node.readers[c] = 0;
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
            Self::undo(s, c, yes);
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
                    Self::undo(&mut s, c, node_bit(n));
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
                Self::undo(&mut s, c, (1 << NODES) - 1);
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
    use crate::model::check;
    use crate::rwlock::scripts::{READ_TAKE, WRITE_TAKE};

    /// The model's node rule ([`RwModel::run`]) decides as the crate's
    /// scripts do, on a real node: every state of one node (the writer's
    /// key held or not; each reader's lease none, live or ended; any set
    /// of the three clients listed, in every order of their tickets),
    /// every client asking, as a waiter and, where it is not listed, as a
    /// plain first attempt (the model's rule with the newest ticket; it is
    /// not listed by it). Compared: whether it took, and what the node
    /// holds after (the list, the live leases, the writer's key).
    #[test]
    fn run_decides_as_the_scripts_do() {
        let (_node, mut conn) = crate::scratch::node();
        let c = &mut conn;
        let m = RwModel::shipped();
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
        for writer in [false, true] {
            for leases in 0..9 {
                let lease = [leases % 3, leases / 3];
                for listed in 0..8u8 {
                    for order in orders {
                        for who in 0..CLIENTS {
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
                                let node = &mut s.nodes[0];
                                node.writer = writer.then_some((WRITER as u8, 20));
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
                                if writer {
                                    redis::cmd("SET")
                                        .arg(&["w", "v2", "PX", "60000"])
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
                                let (script, keys): (&str, &[&str]) = if who == WRITER {
                                    (WRITE_TAKE.src, &["w", "r", "q", "l", "p"])
                                } else {
                                    (READ_TAKE.src, &["w", "r", "q", "l"])
                                };
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
                                let case = format!(
                                    "writer {writer}, leases {lease:?}, listed {listed:03b}, \
                                     tickets {order:?}, client {who}, plain {plain}"
                                );
                                assert_eq!(reply[0] == 1, took, "{case}: took");
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
                                assert_eq!(held.is_some(), node.writer.is_some(), "{case}: writer");
                                cases += 1;
                            }
                        }
                    }
                }
            }
        }
        assert_eq!(cases, 2 * 9 * 6 * (8 * 3 + 4 * 3));
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
