//! The multi-resource lock, model-checked: mutual exclusion per resource,
//! and no wait cycle.
//!
//! Three clients each want two resources, named in opposite orders (the
//! first and third `a` then `b`, the second `b` then `a`), over three
//! nodes of which one may crash for good. A client starts waiting (its
//! ticket: the order of starts, as the crate's is the time it started),
//! then sends its attempt to every node. A node runs the crate's script
//! rule ([`admits`], the decision of `QUEUED_TAKE_ALL`): join every
//! resource's waiting list, and take every key only if the client is the
//! first in every list and every key is free. Requests from one client to
//! one node arrive in the order sent (the crate's connections are ordered),
//! at any time relative to everything else. The client counts the replies
//! with the real [`Tally`]: a quorum of yes holds, else it undoes on the
//! nodes that said yes and tries again at any later time (the crate's
//! waiter tries on news of a change of its keys, or at the latest after its
//! retry cap). A winner leaves the waiting lists; a holder releases.
//!
//! Properties: no resource held by two clients at once; and no wait cycle:
//! whenever nothing is on its way and nobody holds all it wanted, the
//! waiter first by ticket would take what it wants on a quorum if it tried
//! now (so waiting always ends, in the order of tickets). The weakened
//! rule the checker must break: a client queues per resource in its own
//! order and takes one resource at a time, keeping the first while it
//! waits for the second (the textbook deadlock: each of two clients holds
//! what the other waits for).
//!
//! [`Tally`]: crate::quorum::tally::Tally

use stateright::{Model, Property};

use crate::model::tally_of;
use crate::quorum::tally::{node_bit, quorum, NodeSet};

/// Nodes.
const NODES: usize = 3;
/// Clients.
const CLIENTS: usize = 3;
/// Resources.
const RESOURCES: usize = 2;

/// Exclusion.
const EXCLUSION: &str = "no resource is held by two clients at once";
/// No wait cycle.
const NO_WAIT_CYCLE: &str = "when all is quiet, the first waiter can take what it wants";

/// A set of resources, one bit each.
type Mask = u8;

/// What a client sends one node.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Msg {
    /// An attempt on these resources, as a listed waiter.
    Attempt(Mask),
    /// Undo a lost attempt: delete these keys where they are ours.
    Undo(Mask),
    /// Leave these waiting lists.
    Leave(Mask),
    /// Release these keys.
    Release(Mask),
}

/// One node.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, Default)]
pub(crate) struct Node {
    /// Per resource, the client whose key is there.
    holder: [Option<u8>; RESOURCES],
    /// Per resource, the clients listed as waiters (ordered by ticket).
    listed: [u8; RESOURCES],
    /// Crashed for good: takes nothing, answers nothing.
    down: bool,
}

/// Where a client is.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Phase {
    /// Not started.
    Idle,
    /// An attempt on `want` out: nodes that replied, those that said yes.
    Round {
        want: Mask,
        replied: NodeSet,
        yes: NodeSet,
    },
    /// Lost; tries again.
    Waiting,
    /// Holds every resource it wanted.
    Holding,
    /// Released.
    Done,
}

/// A client.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Client {
    /// Its place in every list (the order it started in).
    ticket: u8,
    /// The resources it holds on a quorum.
    held: Mask,
    /// Where it is.
    phase: Phase,
    /// Per node, what it sent and the node has not run yet, in order.
    out: [Vec<Msg>; NODES],
}

/// The whole system.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct State {
    nodes: [Node; NODES],
    clients: [Client; CLIENTS],
    /// Clients started so far (the next ticket).
    started: u8,
    /// Crashes so far.
    crashes: u8,
}

/// A step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    /// A client starts waiting and sends its first attempt.
    Start(usize),
    /// A node runs the next request of a client.
    Deliver(usize, usize),
    /// A waiting client with news tries again.
    Retry(usize),
    /// A holder releases everywhere.
    Release(usize),
    /// A node crashes for good.
    Crash(usize),
}

/// The run's rules.
#[derive(Clone)]
pub(crate) struct MultiModel {
    /// Each client's resources in the order it names them.
    pub(crate) orders: [[usize; RESOURCES]; CLIENTS],
    /// Crashes allowed.
    pub(crate) crashes: u8,
    /// The weakened rule: one resource at a time, in the caller's order.
    pub(crate) one_by_one: bool,
}

impl MultiModel {
    /// The shipped rule, opposite orders, one crash.
    pub(crate) fn shipped() -> Self {
        Self {
            orders: [[0, 1], [1, 0], [0, 1]],
            crashes: 1,
            one_by_one: false,
        }
    }

    /// What client `c` asks for next, having `held`.
    fn want(&self, c: usize, held: Mask) -> Mask {
        if !self.one_by_one {
            return ((1 << RESOURCES) - 1) & !held;
        }
        let next = self.orders[c].iter().find(|r| held & (1 << **r) == 0);
        next.map_or(0, |r| 1 << r)
    }
}

/// The script's decision on node `n` for client `c` with `ticket` asking
/// for `want` (`QUEUED_TAKE_ALL`): list it in every resource's list, then
/// take every key if it is first by ticket in each list and each key is
/// free. Returns whether it took them.
pub(crate) fn admits(s: &mut State, n: usize, c: usize, want: Mask) -> bool {
    let ticket = s.clients[c].ticket;
    let tickets: Vec<u8> = s.clients.iter().map(|k| k.ticket).collect();
    let node = &mut s.nodes[n];
    let mut first_everywhere = true;
    let mut free = true;
    for r in (0..RESOURCES).filter(|r| want & (1 << r) != 0) {
        node.listed[r] |= 1 << c;
        let ahead = (0..CLIENTS).any(|o| node.listed[r] & (1 << o) != 0 && tickets[o] < ticket);
        first_everywhere &= !ahead;
        free &= node.holder[r].is_none();
    }
    let take = first_everywhere && free;
    if take {
        for r in (0..RESOURCES).filter(|r| want & (1 << r) != 0) {
            node.holder[r] = Some(c as u8);
        }
    }
    take
}

impl State {
    /// Nodes that crashed.
    fn down(&self) -> NodeSet {
        (0..NODES)
            .filter(|n| self.nodes[*n].down)
            .fold(0, |a, n| a | node_bit(n))
    }

    /// Whether client `c` would take what it wants on a quorum if it tried
    /// now, every node running its attempt before anything else.
    fn would_win(&self, c: usize, m: &MultiModel) -> bool {
        let want = m.want(c, self.clients[c].held);
        let mut s = self.clone();
        let yes = (0..NODES)
            .filter(|n| !s.nodes[*n].down && admits(&mut s, *n, c, want))
            .fold(0, |a, n| a | node_bit(n));
        let tally = tally_of(NODES, quorum(NODES), yes, !yes & !s.down(), s.down());
        tally.decided() == Some(true)
    }

    /// Nothing on its way, nobody in a round, nobody holding all it
    /// wanted, and somebody waiting: the first waiter by ticket.
    fn quiet_first_waiter(&self) -> Option<usize> {
        let quiet = self.clients.iter().all(|c| {
            c.out.iter().all(Vec::is_empty)
                && !matches!(c.phase, Phase::Round { .. } | Phase::Holding)
        });
        let waiting = self.clients.iter().enumerate();
        let first = waiting
            .filter(|(_, c)| c.phase == Phase::Waiting)
            .min_by_key(|(_, c)| c.ticket)
            .map(|(i, _)| i);
        first.filter(|_| quiet)
    }

    /// Sends `msg` from `c` to every node that is up (`only`: those).
    fn send(&mut self, c: usize, msg: Msg, only: NodeSet) {
        for n in 0..NODES {
            if !self.nodes[n].down && only & node_bit(n) != 0 {
                self.clients[c].out[n].push(msg);
            }
        }
    }

    /// Client `c` starts a round on what it wants next.
    fn round(&mut self, c: usize, m: &MultiModel) {
        let want = m.want(c, self.clients[c].held);
        self.clients[c].phase = Phase::Round {
            want,
            replied: 0,
            yes: 0,
        };
        self.send(c, Msg::Attempt(want), NodeSet::MAX);
    }

    /// Decides client `c`'s round once every node that is up replied.
    fn decide(&mut self, c: usize, m: &MultiModel) {
        let Phase::Round { want, replied, yes } = self.clients[c].phase else {
            return;
        };
        let down = self.down();
        let all = (1 << NODES) - 1;
        if (replied | down) & all != all {
            return;
        }
        let tally = tally_of(NODES, quorum(NODES), yes, replied & !yes, down);
        if tally.decided() == Some(true) {
            let client = &mut self.clients[c];
            client.held |= want;
            self.send(c, Msg::Leave(want), NodeSet::MAX);
            if m.want(c, self.clients[c].held) == 0 {
                self.clients[c].phase = Phase::Holding;
            } else {
                self.round(c, m);
            }
        } else {
            self.send(c, Msg::Undo(want), yes);
            self.clients[c].phase = Phase::Waiting;
        }
    }

    /// Node `n` runs client `c`'s next request.
    fn deliver(&mut self, n: usize, c: usize, m: &MultiModel) {
        let msg = self.clients[c].out[n].remove(0);
        let mine = Some(c as u8);
        match msg {
            Msg::Attempt(want) => {
                let took = admits(self, n, c, want);
                if let Phase::Round { replied, yes, .. } = &mut self.clients[c].phase {
                    *replied |= node_bit(n);
                    if took {
                        *yes |= node_bit(n);
                    }
                }
            }
            Msg::Undo(keys) | Msg::Release(keys) => {
                let node = &mut self.nodes[n];
                for r in (0..RESOURCES).filter(|r| keys & (1 << r) != 0) {
                    if node.holder[r] == mine {
                        node.holder[r] = None;
                    }
                }
            }
            Msg::Leave(keys) => {
                for r in (0..RESOURCES).filter(|r| keys & (1 << r) != 0) {
                    self.nodes[n].listed[r] &= !(1 << c);
                }
            }
        }
        self.decide(c, m);
    }
}

impl Model for MultiModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let client = Client {
            ticket: u8::MAX,
            held: 0,
            phase: Phase::Idle,
            out: Default::default(),
        };
        vec![State {
            nodes: Default::default(),
            clients: [client.clone(), client.clone(), client],
            started: 0,
            crashes: 0,
        }]
    }

    fn actions(&self, s: &State, out: &mut Vec<Action>) {
        for (c, client) in s.clients.iter().enumerate() {
            match client.phase {
                Phase::Idle => out.push(Action::Start(c)),
                Phase::Waiting => out.push(Action::Retry(c)),
                Phase::Holding => out.push(Action::Release(c)),
                _ => {}
            }
            for n in 0..NODES {
                if !client.out[n].is_empty() {
                    out.push(Action::Deliver(c, n));
                }
            }
        }
        if s.crashes < self.crashes {
            out.extend((0..NODES).filter(|n| !s.nodes[*n].down).map(Action::Crash));
        }
    }

    fn next_state(&self, s: &State, a: Action) -> Option<State> {
        let mut s = s.clone();
        match a {
            Action::Start(c) => {
                s.clients[c].ticket = s.started;
                s.started += 1;
                s.round(c, self);
            }
            Action::Retry(c) => s.round(c, self),
            Action::Deliver(c, n) => s.deliver(n, c, self),
            Action::Release(c) => {
                let held = s.clients[c].held;
                s.send(c, Msg::Release(held), NodeSet::MAX);
                s.clients[c].held = 0;
                s.clients[c].phase = Phase::Done;
            }
            Action::Crash(n) => {
                s.nodes[n].down = true;
                s.crashes += 1;
                for c in 0..CLIENTS {
                    s.clients[c].out[n].clear();
                    s.decide(c, self);
                }
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(EXCLUSION, |_: &Self, s: &State| {
                (0..RESOURCES)
                    .all(|r| s.clients.iter().filter(|c| c.held & (1 << r) != 0).count() <= 1)
            }),
            Property::always(NO_WAIT_CYCLE, |m: &Self, s: &State| {
                s.quiet_first_waiter().is_none_or(|c| s.would_win(c, m))
            }),
            Property::sometimes("all quiet with a waiter", |_: &Self, s: &State| {
                s.quiet_first_waiter().is_some()
            }),
            Property::sometimes("every client finished", |_: &Self, s: &State| {
                s.clients.iter().all(|c| c.phase == Phase::Done)
            }),
            Property::sometimes("a client waited and then held", |_: &Self, s: &State| {
                s.clients.iter().any(|c| c.phase == Phase::Holding)
                    && s.clients.iter().any(|c| c.phase == Phase::Waiting)
            }),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::multi_scripts::QUEUED_TAKE_ALL;
    use crate::model::check;

    /// The model's [`admits`] decides as the crate's script does: every
    /// node state of two resources (each free or held by one of two
    /// clients, each list any set of the three clients), every client
    /// asking, on a real node.
    #[test]
    fn admits_decides_as_the_script_does() {
        let (_node, mut conn) = crate::scratch::node();
        let c = &mut conn;
        let keys = ["a", "b", "qa", "qb", "la", "lb"];
        let holders = [None, Some(0u8), Some(1u8)];
        let mut cases = 0;
        for (ha, hb) in holders
            .iter()
            .flat_map(|a| holders.iter().map(move |b| (*a, *b)))
        {
            for lists in 0..64u8 {
                for who in 0..CLIENTS {
                    let mut s = MultiModel::shipped().init_states().remove(0);
                    for (i, client) in s.clients.iter_mut().enumerate() {
                        client.ticket = i as u8;
                    }
                    s.nodes[0].holder = [ha, hb];
                    s.nodes[0].listed = [lists & 7, lists >> 3];
                    redis::cmd("FLUSHALL").query::<()>(c).expect("flush");
                    for (r, holder) in [ha, hb].iter().enumerate() {
                        if let Some(h) = holder {
                            let value = format!("v{h}");
                            redis::cmd("SET")
                                .arg(keys[r])
                                .arg(value)
                                .query::<()>(c)
                                .expect("set");
                        }
                        for w in (0..CLIENTS).filter(|w| s.nodes[0].listed[r] & (1 << w) != 0) {
                            let id = format!("c{w}");
                            let (q, l) = (keys[2 + r], keys[4 + r]);
                            redis::cmd("ZADD")
                                .arg(q)
                                .arg(w)
                                .arg(&id)
                                .query::<()>(c)
                                .expect("q");
                            redis::cmd("ZADD")
                                .arg(l)
                                .arg("+inf")
                                .arg(&id)
                                .query::<()>(c)
                                .expect("l");
                        }
                    }
                    let took = admits(&mut s, 0, who, 0b11);
                    let reply: Vec<i64> = redis::cmd("EVAL")
                        .arg(QUEUED_TAKE_ALL.src)
                        .arg(6)
                        .arg(&keys[..])
                        .arg(format!("v{who}"))
                        .arg(10_000)
                        .arg(format!("c{who}"))
                        .arg(who)
                        .arg(60_000)
                        .query(c)
                        .expect("EVAL");
                    let case = format!("holders {ha:?} {hb:?}, lists {lists:06b}, client {who}");
                    assert_eq!(reply[0] == 1, took, "{case}");
                    for r in 0..RESOURCES {
                        let listed: Vec<String> = redis::cmd("ZRANGE")
                            .arg(keys[2 + r])
                            .arg(0)
                            .arg(-1)
                            .query(c)
                            .expect("zrange");
                        let model: Vec<String> = (0..CLIENTS)
                            .filter(|w| s.nodes[0].listed[r] & (1 << w) != 0)
                            .map(|w| format!("c{w}"))
                            .collect();
                        assert_eq!(listed, model, "{case}: list {r}");
                    }
                    cases += 1;
                }
            }
        }
        assert_eq!(cases, 9 * 64 * 3);
    }

    #[test]
    fn model_multilock_excludes_and_never_deadlocks() {
        let r = check(
            "multi-lock: opposite orders, one node crash",
            MultiModel::shipped(),
        );
        r.assert_safe("multi-lock", 1_000, "every client finished");
        assert!(r.reached.contains(&"a client waited and then held"));
        assert!(r.reached.contains(&"all quiet with a waiter"));
    }

    #[test]
    fn model_multilock_finds_the_deadlock_of_one_resource_at_a_time() {
        let m = MultiModel {
            one_by_one: true,
            ..MultiModel::shipped()
        };
        let r = check(
            "multi-lock, weakened: one resource at a time, caller's order",
            m,
        );
        r.assert_violates("one at a time", NO_WAIT_CYCLE);
    }
}
