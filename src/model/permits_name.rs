//! A name's permits and its plain lock, model-checked: one name, one lock
//! whichever kind takes it (`semaphore/scripts.rs`).
//!
//! Three nodes whose clocks run 10 % fast (a key of TTL 4 ms lives 3 ms
//! there), a semaphore of two permits with two clients, and a plain lock
//! of the same name, one acquisition each; time in 1 ms ticks. A permit
//! client sends its take to every node and counts the replies with the
//! crate's rule (`semaphore/slots.rs`: a quorum on one slot wins it, the
//! real `Tally`); a winner undoes its other slots and fills its slot where
//! it is free, a loser undoes everything; a holder may extend once (a
//! quorum of yes holds for the crate's `validity` from the extension's
//! start) and releases. The plain lock sends a bare `SET NX` of the name's
//! key and releases with compare-and-delete. Messages arrive in any order.
//! A node runs the scripts' rule ([`PermitsModel::take`] and the rest,
//! checked against the scripts on a real node for every state of one
//! node): a slot is taken, extended or filled only where the name's key is
//! free or holds the permits' mark, and after every change of the slots
//! the mark ends with the last slot held there (deleted with the last).
//!
//! Properties: no valid permit beside a valid plain lock; on every node,
//! while a slot is held, the name's key holds the mark, ending no earlier
//! than that slot. The weakened rules the checker must break: permits
//! leave no mark; a take ignores a lock on the name; the mark ends with the
//! first slot to end; an extension leaves the mark as it was.

use stateright::{Model, Property};

use crate::model::permits_state::{Action, Heard, Msg, Name, Node, Phase, State, NODES, SLOTS};
use crate::model::{insert_sorted, real_ttl, take_one, tally_of, validity_left};
use crate::quorum::tally::{node_bit, quorum, NodeSet};
use crate::semaphore::slots::{finished, won};

/// The plain lock (the last client; 0 and 1 take permits).
const LOCK: u8 = 2;

/// The properties.
const EXCLUSION: &str = "no valid permit beside a valid lock of the name";
const MARK_ENDS: &str = "a node's permits' mark ends no earlier than a slot held there";

/// The node rules: as shipped, or one weakened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rule {
    /// As shipped.
    Shipped,
    /// Permits leave no mark on the name's key.
    NoMark,
    /// A take ignores a lock on the name.
    IgnoreName,
    /// The mark ends with the first slot to end.
    EarliestSlot,
    /// An extension leaves the mark as it was.
    ExtensionKeepsNoMark,
}

/// One run's bounds and rules.
#[derive(Clone)]
pub(crate) struct PermitsModel {
    /// The TTL, ms.
    pub(crate) ttl: u8,
    /// Node clocks this much fast, and the clients' drift allowance.
    pub(crate) drift_factor: f64,
    /// Last real instant explored.
    pub(crate) horizon: u8,
    /// The node rules.
    pub(crate) rule: Rule,
}

impl PermitsModel {
    /// The rules as shipped: TTL 4 ms, 2 ms of time (1.5 M states, 9 s;
    /// over 3 ms, where keys also expire: 10.8 M states, 70 s, too long
    /// for every run).
    pub(crate) fn shipped() -> Self {
        Self {
            ttl: 4,
            drift_factor: 0.1,
            horizon: 2,
            rule: Rule::Shipped,
        }
    }

    /// Validity left after `elapsed` ms, by the crate's rule.
    fn left(&self, elapsed: u8) -> u8 {
        validity_left(self.ttl, self.drift_factor, elapsed)
    }

    /// Real ms a key lives on a node whose clock runs the drift fast.
    fn real_ttl(&self) -> u8 {
        real_ttl(self.ttl, self.drift_factor)
    }

    /// Whether permits may write slots on `node`: the name's key is free
    /// or holds their mark (`name_taken` in the scripts).
    fn may_write(&self, node: &Node) -> bool {
        self.rule == Rule::IgnoreName || !matches!(node.name, Name::Lock(_))
    }

    /// After the slots changed on `node`: the mark ends with the last slot
    /// held there, or goes (`keep_permits`); only where `may_write`.
    pub(crate) fn keep(&self, node: &mut Node) {
        if matches!(node.name, Name::Lock(_)) || self.rule == Rule::NoMark {
            return;
        }
        let ends = node.slots.iter().flatten().map(|(_, e)| *e);
        let end = if self.rule == Rule::EarliestSlot {
            ends.min()
        } else {
            ends.max()
        };
        node.name = end.map_or(Name::Free, Name::Permits);
    }

    /// `SEMAPHORE_TAKE` (a plain attempt, nobody waiting) for client `c`:
    /// the first free slot, or none.
    pub(crate) fn take(&self, node: &mut Node, c: u8, now: u8) -> Option<u8> {
        if !self.may_write(node) {
            return None;
        }
        if let Some(i) = node
            .slots
            .iter()
            .position(|s| s.is_some_and(|(h, _)| h == c))
        {
            return Some(i as u8);
        }
        let i = node.slots.iter().position(Option::is_none)?;
        node.slots[i] = Some((c, now + self.real_ttl()));
        self.keep(node);
        Some(i as u8)
    }

    /// `SEMAPHORE_EXTEND` of client `c`'s slot `slot`.
    pub(crate) fn extend(&self, node: &mut Node, c: u8, slot: u8, now: u8) -> bool {
        let slot = usize::from(slot);
        if !self.may_write(node) || node.slots[slot].is_none_or(|(h, _)| h != c) {
            return false;
        }
        node.slots[slot] = Some((c, now + self.real_ttl()));
        if self.rule != Rule::ExtensionKeepsNoMark {
            self.keep(node);
        }
        true
    }

    /// `SEMAPHORE_UNDO` (and, `keep` none, `SEMAPHORE_RELEASE`) of client
    /// `c`: its slots but `keep` go; a winner fills `keep` where it is free.
    pub(crate) fn undo(&self, node: &mut Node, c: u8, keep: Option<u8>, now: u8) {
        for (i, s) in node.slots.iter_mut().enumerate() {
            if Some(i as u8) != keep && s.is_some_and(|(h, _)| h == c) {
                *s = None;
            }
        }
        if let Some(k) = keep {
            if self.may_write(node) && node.slots[usize::from(k)].is_none() {
                node.slots[usize::from(k)] = Some((c, now + self.real_ttl()));
            }
        }
        self.keep(node);
    }

    /// `SEMAPHORE_RELEASE` of client `c`'s slot `slot`: deleted where it
    /// is ours, the mark then kept; elsewhere nothing changes.
    pub(crate) fn release(&self, node: &mut Node, c: u8, slot: u8) {
        let slot = usize::from(slot);
        if node.slots[slot].is_some_and(|(h, _)| h == c) {
            node.slots[slot] = None;
            self.keep(node);
        }
    }

    /// Every node but those of `on`, as a set.
    fn others(on: NodeSet) -> NodeSet {
        ((1 << NODES) - 1) & !on
    }

    /// Client `c` heard `what` from node `n` on its take; decides once it
    /// can.
    fn hear(&self, s: &mut State, c: u8, n: usize, what: Heard) {
        let now = s.now;
        let Phase::Trying { start, heard } = &mut s.clients[usize::from(c)] else {
            return;
        };
        heard[n] = what;
        let (mut yes, mut no) = (0, 0);
        let mut choices = vec![None; NODES];
        for (i, h) in heard.iter().enumerate() {
            match h {
                Heard::Nothing => {}
                Heard::Refused => no |= node_bit(i),
                Heard::Took(slot) => {
                    yes |= node_bit(i);
                    choices[i] = Some(usize::from(*slot));
                }
            }
        }
        let tally = tally_of(NODES, quorum(NODES), yes, no, 0);
        if !finished(&tally, &choices) {
            return;
        }
        let left = self.left(now - *start);
        let winner = won(&tally, &choices).filter(|_| left > 0);
        s.clients[usize::from(c)] = match winner {
            Some((slot, _)) => Phase::Holding {
                until: now + left,
                slot: slot as u8,
                may_extend: c != LOCK,
            },
            None => Phase::Done,
        };
        let on = match winner {
            Some((_, holders)) => Self::others(holders),
            None => Self::others(tally.no),
        };
        for (i, node) in s.nodes.iter_mut().enumerate() {
            if on & node_bit(i) == 0 {
                continue;
            }
            if c == LOCK {
                release_lock(node);
            } else {
                self.undo(node, c, winner.map(|(slot, _)| slot as u8), now);
            }
        }
    }

    /// Holder `c` heard from node `n` on its extension; decides once it can.
    fn hear_extension(&self, s: &mut State, c: u8, n: usize, ok: bool) {
        let now = s.now;
        let Phase::Extending {
            start,
            until,
            slot,
            yes,
            heard,
        } = &mut s.clients[usize::from(c)]
        else {
            return;
        };
        *heard |= node_bit(n);
        if ok {
            *yes |= node_bit(n);
        }
        let q = quorum(NODES) as u32;
        let left = self.left(now - *start);
        if yes.count_ones() >= q {
            let until = (*until).max(now + left);
            s.clients[usize::from(c)] = Phase::Holding {
                until,
                slot: *slot,
                may_extend: false,
            };
        } else if (NODES as u32 - heard.count_ones()) + yes.count_ones() < q {
            let (until, slot) = (*until, *slot);
            s.clients[usize::from(c)] = Phase::Holding {
                until,
                slot,
                may_extend: false,
            };
        }
    }
}

/// The plain lock's compare-and-delete on `node`.
fn release_lock(node: &mut Node) {
    if matches!(node.name, Name::Lock(_)) {
        node.name = Name::Free;
    }
}

impl Model for PermitsModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let node = Node {
            slots: [None; SLOTS],
            name: Name::Free,
        };
        vec![State {
            now: 0,
            nodes: [node.clone(), node.clone(), node],
            clients: [Phase::Idle, Phase::Idle, Phase::Idle],
            net: Vec::new(),
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        if s.now < self.horizon {
            actions.push(Action::Tick);
        }
        for (c, phase) in s.clients.iter().enumerate() {
            let c = c as u8;
            match phase {
                Phase::Idle => actions.push(Action::Start(c)),
                Phase::Holding { may_extend, .. } => {
                    if *may_extend {
                        actions.push(Action::Extend(c));
                    }
                    actions.push(Action::Release(c));
                }
                _ => {}
            }
        }
        for m in &s.net {
            actions.push(Action::Deliver(m.clone()));
        }
    }

    fn next_state(&self, s: &State, action: Action) -> Option<State> {
        let mut s = s.clone();
        match action {
            Action::Tick => {
                s.now += 1;
                let now = s.now;
                for node in &mut s.nodes {
                    for slot in &mut node.slots {
                        if slot.is_some_and(|(_, e)| e <= now) {
                            *slot = None;
                        }
                    }
                    if let Name::Permits(e) | Name::Lock(e) = node.name {
                        if e <= now {
                            node.name = Name::Free;
                        }
                    }
                }
            }
            Action::Start(c) => {
                s.clients[usize::from(c)] = Phase::Trying {
                    start: s.now,
                    heard: [Heard::Nothing; NODES],
                };
                for n in 0..NODES as u8 {
                    insert_sorted(&mut s.net, Msg(c, n, false));
                }
            }
            Action::Extend(c) => {
                let Phase::Holding { until, slot, .. } = s.clients[usize::from(c)] else {
                    return None;
                };
                s.clients[usize::from(c)] = Phase::Extending {
                    start: s.now,
                    until,
                    slot,
                    yes: 0,
                    heard: 0,
                };
                for n in 0..NODES as u8 {
                    insert_sorted(&mut s.net, Msg(c, n, true));
                }
            }
            Action::Deliver(m) => {
                take_one(&mut s.net, &m)?;
                let Msg(c, n, extension) = m;
                let (now, n) = (s.now, usize::from(n));
                let node = &mut s.nodes[n];
                if extension {
                    let slot = match &s.clients[usize::from(c)] {
                        Phase::Extending { slot, .. } => *slot,
                        _ => return Some(s),
                    };
                    let ok = self.extend(node, c, slot, now);
                    self.hear_extension(&mut s, c, n, ok);
                } else if c == LOCK {
                    let took = node.name == Name::Free;
                    if took {
                        node.name = Name::Lock(now + self.real_ttl());
                    }
                    let heard = if took { Heard::Took(0) } else { Heard::Refused };
                    self.hear(&mut s, c, n, heard);
                } else {
                    let heard = self.take(node, c, now).map_or(Heard::Refused, Heard::Took);
                    self.hear(&mut s, c, n, heard);
                }
            }
            Action::Release(c) => {
                let Phase::Holding { slot, .. } = s.clients[usize::from(c)] else {
                    return None;
                };
                s.clients[usize::from(c)] = Phase::Done;
                for node in &mut s.nodes {
                    if c == LOCK {
                        release_lock(node);
                    } else {
                        self.release(node, c, slot);
                    }
                }
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(EXCLUSION, |_: &Self, s: &State| {
                let valid = |c: usize| match s.clients[c] {
                    Phase::Holding { until, .. } | Phase::Extending { until, .. } => s.now < until,
                    _ => false,
                };
                !(valid(usize::from(LOCK)) && (valid(0) || valid(1)))
            }),
            // (Without a mark there is nothing to end: that rule is for
            // the exclusion to catch.)
            Property::always(MARK_ENDS, |m: &Self, s: &State| {
                m.rule == Rule::NoMark
                    || s.nodes.iter().all(|node| {
                        let last = node.slots.iter().flatten().map(|(_, e)| *e).max();
                        match (last, node.name) {
                            (None, _) => true,
                            (Some(last), Name::Permits(end)) => end >= last,
                            _ => false,
                        }
                    })
            }),
            Property::sometimes("a permit, then the lock", |_: &Self, s: &State| {
                matches!(s.clients[usize::from(LOCK)], Phase::Holding { .. })
                    && s.clients[..2].contains(&Phase::Done)
            }),
            Property::sometimes("an extended permit", |_: &Self, s: &State| {
                s.clients[..2].iter().any(|c| {
                    matches!(
                        c,
                        Phase::Holding {
                            may_extend: false,
                            ..
                        }
                    )
                })
            }),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::permits_mark;
    use crate::model::check_symmetric;
    use crate::model::permits_state::representative;
    use crate::semaphore::scripts::{
        SEMAPHORE_EXTEND, SEMAPHORE_RELEASE, SEMAPHORE_TAKE, SEMAPHORE_UNDO,
    };

    /// A model instant in ms on the real node (1 tick: 1 s).
    const TICK: i64 = 1_000;

    /// Writes `node` (at model instant 0) to the real node.
    fn write(c: &mut redis::Connection, node: &Node) {
        let _: () = redis::cmd("DEL")
            .arg(&["q", "l", "n", "nq", "nl", "s1", "s2"])
            .query(c)
            .unwrap();
        let mut set = |key: &str, value: &str, e: u8| {
            let _: () = redis::cmd("SET")
                .arg(key)
                .arg(value)
                .arg("PX")
                .arg(i64::from(e) * TICK)
                .query(c)
                .unwrap();
        };
        for (i, slot) in node.slots.iter().enumerate() {
            if let Some((h, e)) = slot {
                set(&format!("s{}", i + 1), &format!("c{h}"), *e);
            }
        }
        match node.name {
            Name::Free => {}
            Name::Permits(e) => set("n", permits_mark!(), e),
            Name::Lock(e) => set("n", "lock", e),
        }
    }

    /// Whether the real node holds what `node` says: the same values, each
    /// expiring within 100 ms before (or, the mark, 2 ms after) its instant.
    fn agrees(c: &mut redis::Connection, node: &Node) -> Result<(), String> {
        let mut read = |key: &str| -> (Option<String>, i64) {
            let v: Option<String> = redis::cmd("GET").arg(key).query(c).unwrap();
            let t: i64 = redis::cmd("PTTL").arg(key).query(c).unwrap();
            (v, t)
        };
        let close =
            |t: i64, e: u8| (i64::from(e) * TICK - 100..=i64::from(e) * TICK + 2).contains(&t);
        for (i, slot) in node.slots.iter().enumerate() {
            let (v, t) = read(&format!("s{}", i + 1));
            let ok = match slot {
                None => v.is_none(),
                Some((h, e)) => v == Some(format!("c{h}")) && close(t, *e),
            };
            if !ok {
                return Err(format!("slot {i}: {v:?} {t} ms"));
            }
        }
        let (v, t) = read("n");
        let ok = match node.name {
            Name::Free => v.is_none(),
            Name::Permits(e) => v.as_deref() == Some(permits_mark!()) && close(t, e),
            Name::Lock(e) => v.as_deref() == Some("lock") && close(t, e),
        };
        ok.then_some(()).ok_or(format!("name: {v:?} {t} ms"))
    }

    /// Runs `script` on the real node with `args`; an integer reply, or the
    /// first of an array's.
    fn eval(c: &mut redis::Connection, script: &str, args: &[String]) -> i64 {
        let v: redis::Value = redis::cmd("EVAL")
            .arg(script)
            .arg(7)
            .arg(&["q", "l", "n", "nq", "nl", "s1", "s2"])
            .arg(args)
            .query(c)
            .unwrap();
        match v {
            redis::Value::Int(n) => n,
            redis::Value::Array(items) => redis::from_redis_value(items[0].clone()).unwrap(),
            other => panic!("{other:?}"),
        }
    }

    /// The model's node rules ([`PermitsModel::take`], `extend`, `undo`,
    /// `release`) decide as the crate's scripts do, on a real node: every
    /// node state of two slots (each free, or either client's, ending at
    /// one of two instants) and the name's key (free, the mark ending at
    /// one of three instants, a lock), every request of either client
    /// (take; extension, release of either slot; undo keeping no slot or
    /// either). Compared: the reply, and what the node holds after.
    #[test]
    fn the_node_rules_decide_as_the_scripts_do() {
        let (_node, mut conn) = crate::scratch::node();
        let c = &mut conn;
        let m = PermitsModel::shipped();
        let ttl = (i64::from(m.real_ttl()) * TICK).to_string();
        let slot_states = [None, Some((0, 2)), Some((1, 2)), Some((0, 4)), Some((1, 4))];
        let names = [
            Name::Free,
            Name::Permits(1),
            Name::Permits(4),
            Name::Permits(6),
            Name::Lock(4),
        ];
        let mut cases = 0;
        for (a, b, name) in slot_states
            .iter()
            .flat_map(|a| slot_states.iter().map(move |b| (a, b)))
            .flat_map(|(a, b)| names.iter().map(move |n| (*a, *b, *n)))
        {
            let node = Node {
                slots: [a, b],
                name,
            };
            for who in 0..2u8 {
                let value = format!("c{who}");
                for op in 0..8u8 {
                    let mut after = node.clone();
                    let (script, args, want) = match op {
                        0 => {
                            let took = m.take(&mut after, who, 0);
                            let args = vec![
                                value.clone(),
                                ttl.clone(),
                                String::new(),
                                "0".into(),
                                "0".into(),
                            ];
                            (
                                SEMAPHORE_TAKE.src,
                                args,
                                took.map_or(0, |s| i64::from(s) + 1),
                            )
                        }
                        1 | 2 => {
                            let slot = op - 1;
                            let ok = m.extend(&mut after, who, slot, 0);
                            let args = vec![value.clone(), (slot + 1).to_string(), ttl.clone()];
                            (SEMAPHORE_EXTEND.src, args, i64::from(ok))
                        }
                        3 | 4 => {
                            let slot = op - 3;
                            let ours =
                                after.slots[usize::from(slot)].is_some_and(|(h, _)| h == who);
                            m.release(&mut after, who, slot);
                            let args = vec![value.clone(), (slot + 1).to_string(), String::new()];
                            (SEMAPHORE_RELEASE.src, args, i64::from(ours))
                        }
                        _ => {
                            let keep = (op > 5).then_some(op - 6);
                            let gone = after
                                .slots
                                .iter()
                                .enumerate()
                                .filter(|(i, s)| {
                                    Some(*i as u8) != keep && s.is_some_and(|(h, _)| h == who)
                                })
                                .count();
                            m.undo(&mut after, who, keep, 0);
                            let (won, fill) = keep.map_or(("0".into(), "0".into()), |k| {
                                ((k + 1).to_string(), ttl.clone())
                            });
                            let args = vec![
                                value.clone(),
                                won,
                                String::new(),
                                "0".into(),
                                "0".into(),
                                fill,
                                String::new(),
                            ];
                            (SEMAPHORE_UNDO.src, args, gone as i64)
                        }
                    };
                    write(c, &node);
                    let got = eval(c, script, &args);
                    let case = format!("{node:?}, client {who}, op {op}");
                    assert_eq!(got, want, "{case}: the reply");
                    if let Err(e) = agrees(c, &after) {
                        panic!("{case}: the model says {after:?}, the node: {e}");
                    }
                    cases += 1;
                }
            }
        }
        assert_eq!(cases, 2_000);
    }

    /// Safe: explored to the end, no counterexample, the sometimes reached.
    #[test]
    fn model_permits_and_the_names_lock_exclude_each_other() {
        let name = "a name's permits and its plain lock";
        let found = check_symmetric(name, PermitsModel::shipped(), representative);
        found.assert_safe(name, 1_000, "a permit, then the lock");
        found.assert_safe(name, 1_000, "an extended permit");
    }

    /// Each weakened rule is caught.
    #[test]
    fn model_permits_finds_each_weakened_rule() {
        for (rule, property) in [
            (Rule::NoMark, EXCLUSION),
            (Rule::IgnoreName, EXCLUSION),
            (Rule::EarliestSlot, MARK_ENDS),
            (Rule::ExtensionKeepsNoMark, MARK_ENDS),
        ] {
            let m = PermitsModel {
                rule,
                ..PermitsModel::shipped()
            };
            let name = format!("permits, weakened: {rule:?}");
            check_symmetric(&name, m, representative).assert_violates(&name, property);
        }
    }
}
