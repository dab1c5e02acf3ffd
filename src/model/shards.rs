//! A member that is a Redis Cluster, model-checked: which shard's trust a
//! member's yes to a lock rests on, when shards fail over and slots move.
//!
//! Three members, one resource. Members 1 and 2 are single nodes, each
//! answering a `SET NX` as it arrives. Member 0 is a cluster of two
//! shards: A (master link 0, replica link 2) serves the resource's slot
//! at first, B (link 1) serves others and has the cluster's greatest
//! epoch. Two faults, each at most once, at any moment: shard A **fails
//! over** (its replica, which had not received the key, is promoted: link
//! 2 serves the slot, with an epoch above B's) or, where
//! [`ShardsModel::restart`] says, **restarts empty in place** (link 0, a
//! new process, without the key or our marker); and the slot **moves** to
//! shard B, its key going with it as `MIGRATE` moves it.
//!
//! Each client has its own slot map, read again at any moment (a real
//! client reads it after a redirection), and its own connections, checked
//! on first use (again after a restart broke them) by the crate's table
//! ([`assess`]) fed what the node shows, as Redis shows it: a promoted
//! replica says so; a restarted node has a new process and no marker; a
//! shard that took the slot over shows, when [`Rules::imports`] counts
//! them, a damage count above our marker's where its epoch grew (only
//! when a failover had put another shard's epoch above its own) or a key
//! was restored into it, and, when [`Rules::slots`] reads them, a slot our
//! marker did not record. Client 0
//! has used both shards before the faults; client 1 has used shard A, or
//! (`fresh`) nothing: it reads its first map after the faults, or, where
//! [`ShardsModel::unrouted`] says, makes its request before it has a map
//! at all: member 0 sends it once its first map is read (at any moment),
//! to the link that map names over a connection checked first, and the
//! client does not know which link answered.
//!
//! Member 0's request goes to the link the client's map names when it is
//! sent; a link that no longer serves the slot answers `MOVED` (a failed
//! vote). Its reply may arrive after the map changed. A yes from member 0
//! counts only if the link(s) [`judges`](crate::node::cluster::shard_rules::judges) names are out of the client's
//! quarantine (every link seen, for a reply to a request whose link the
//! client does not know); a slot that moved between two of a client's maps
//! quarantines the link that took it for one TTL ([`received`]). Votes are
//! counted with the crate's [`Tally`](crate::quorum::tally::Tally) and the
//! holder's validity is the crate's [`validity`] (clocks run true here:
//! the clock rules are the lock model's).
//!
//! Properties: no two clients hold a valid lock at the same real instant;
//! sometimes, member 0's yes to a request for a resource in shard B's
//! slots counts while the client holds link 2 quarantined (the quarantine
//! is the shard's, not the member's).

use std::time::Duration;

use stateright::{Model, Property};

use crate::client::redlock::validity;
use crate::model::shards_rules::Rules;
use crate::model::shards_state::{set_nx, Action, Client, Msg, Phase, State, LINKS};
use crate::model::{check, insert_sorted, take_one, tally_of};
use crate::node::cluster::shard_rules::{received, Judges};
use crate::node::trust::amnesia::assess;
use crate::node::trust::evidence::{Marker, Probe};
use crate::quorum::tally::{node_bit, quorum};

/// The exclusion property's name.
pub(crate) const EXCLUSION: &str = "no two clients hold a valid lock";

/// The per-shard property's name.
pub(crate) const PER_SHARD: &str = "a shard's yes counts while another shard is quarantined";

/// Members.
const MEMBERS: usize = 3;

/// One run's bounds and rules.
#[derive(Clone)]
pub(crate) struct ShardsModel {
    /// The TTL, ms (also the quarantine, in the model's units).
    pub(crate) ttl: u8,
    /// Last real instant (ms) explored.
    pub(crate) horizon: u8,
    /// Client 1 reads its first map after the faults (else it has used
    /// shard A before them).
    pub(crate) fresh: bool,
    /// Shard A's fault is a restart without its data in place of a
    /// failover.
    pub(crate) restart: bool,
    /// Client 1 (`fresh`) may make its request before it has a slot map:
    /// member 0 sends it once the member's first map is read, to the link
    /// that map names, and the client does not know which link answered.
    pub(crate) unrouted: bool,
    /// The slot lies below shard B's lowest: once B serves it, our
    /// marker's key on B (in its lowest slot) is another, and a check
    /// finds no marker there.
    pub(crate) below: bool,
    /// The rules.
    pub(crate) rules: Rules,
}

impl ShardsModel {
    /// The rules as shipped: TTL 2 ms, 2 ms of time (a lock taken at 0
    /// expires at 2; a quarantine one ms short ends at 1), client 1 has
    /// used shard A.
    pub(crate) fn shipped() -> Self {
        Self {
            ttl: 2,
            horizon: 2,
            fresh: false,
            restart: false,
            unrouted: false,
            below: false,
            rules: Rules::shipped(),
        }
    }

    /// A client's connection check of `link`, at `now`: the quarantine the
    /// crate's table gives it, ms from now (0: trusted).
    fn check(&self, s: &State, link: u8) -> u8 {
        let promoted = link == 2;
        let epoch = u64::from(link == 1 && s.imported && self.rules.imports);
        let (run, repl) = if promoted {
            ("a", "h-a")
        } else {
            ("mine", "h")
        };
        // Shard B served slot 1 when its marker was written; slot 0 is the
        // resource's.
        let b = link == 1 && self.rules.slots;
        let slots = b.then(|| if s.moved { "0-1" } else { "1" }.to_owned());
        // Shard A restarted empty: a new process, up since the fault.
        let (run_id, uptime, marker) = match s.restarted {
            Some(at) if link == 0 => ("new", u64::from(s.now - at), None),
            _ if link == 1 && s.moved && self.below => ("mine", 100 + u64::from(s.now), None),
            _ => (
                "mine",
                100 + u64::from(s.now),
                Some(Marker::Found {
                    run: run.into(),
                    loss: None,
                    seen: Some(0),
                    repl: Some(repl.into()),
                    slots: b.then(|| "1".to_owned()),
                    served: false,
                    why: None,
                    tags: None,
                }),
            ),
        };
        let probe = Probe {
            run_id: run_id.into(),
            uptime,
            damage: Some(0),
            epoch,
            promoted,
            replid: "h".into(),
            durable: Some(true),
            evicted: Some(0),
            commands: None,
            times: None,
            evicts: false,
            slots,
            marker,
        };
        let a = assess(&probe, &Default::default(), self.ttl.into());
        u8::try_from(a.remaining).unwrap_or(u8::MAX)
    }

    /// `client` reads the slot map: it names the serving link now, and a
    /// link that took the slot over since the client's last map is
    /// quarantined for one TTL ([`received`]).
    fn read_map(&self, s: &mut State, client: u8) {
        let (serving, until) = (s.serving, s.now + self.ttl);
        let c = &mut s.clients[usize::from(client)];
        let before = c.map.map(Some);
        c.map = Some(serving);
        if let Some(l) = received(before, Some(serving)).filter(|_| self.rules.received) {
            let q = &mut c.quarantined[usize::from(l)];
            *q = (*q).max(until - self.rules.short);
        }
    }

    /// Checks `client`'s connection to `link` where none checked is open,
    /// and quarantines the link for what the check found.
    fn check_once(&self, s: &mut State, client: u8, link: u8) {
        if s.clients[usize::from(client)].checked[usize::from(link)] {
            return;
        }
        let left = self.check(s, link);
        let c = &mut s.clients[usize::from(client)];
        c.checked[usize::from(link)] = true;
        let q = &mut c.quarantined[usize::from(link)];
        *q = (*q).max(s.now.saturating_add(left));
    }

    /// Counts `vote` (`Some(true)` yes, `Some(false)` no, `None` failed)
    /// from `member` for `client`, and decides if the tally does.
    fn vote(&self, s: &mut State, client: u8, member: u8, vote: Option<bool>) {
        let now = s.now;
        let Phase::Trying {
            start,
            yes,
            no,
            failed,
        } = &mut s.clients[usize::from(client)].phase
        else {
            return;
        };
        let bit = node_bit(member.into());
        match vote {
            Some(true) => *yes |= bit,
            Some(false) => *no |= bit,
            None => *failed |= bit,
        }
        let tally = tally_of(MEMBERS, quorum(MEMBERS), *yes, *no, *failed);
        let phase = match tally.decided() {
            None => return,
            Some(false) => Phase::Done,
            Some(true) => {
                let ttl = Duration::from_millis(self.ttl.into());
                let elapsed = Duration::from_millis((now - *start).into());
                match validity(ttl, elapsed, Duration::ZERO) {
                    Some(left) => Phase::Holding(now + left.as_millis() as u8),
                    None => Phase::Done,
                }
            }
        };
        s.clients[usize::from(client)].phase = phase;
    }

    /// Whether member 0's yes over `link` to `client` counts now (`known`:
    /// the client knows the link its request went to).
    fn counts(&self, s: &State, client: u8, link: u8, known: bool) -> bool {
        if !self.rules.quarantine {
            return true;
        }
        let c = &s.clients[usize::from(client)];
        let quarantined = |l: u8| s.now < c.quarantined[usize::from(l)];
        match (self.rules.judge)(known.then_some(link), c.map.unwrap_or(link)) {
            Judges::Sent(l) => !quarantined(l),
            Judges::Every => !(0..LINKS as u8).any(quarantined),
        }
    }
}

impl Model for ShardsModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let used = Client {
            phase: Phase::Idle,
            map: Some(0),
            quarantined: [0; LINKS],
            checked: [true, true, false],
            queued: false,
        };
        let second = Client {
            map: (!self.fresh).then_some(0),
            checked: [!self.fresh, false, false],
            ..used.clone()
        };
        vec![State {
            now: 0,
            keys: [None; LINKS],
            imported: false,
            restarted: None,
            serving: 0,
            failed_over: false,
            moved: false,
            others: [None, None],
            unsent: [[false; 2]; 2],
            clients: [used, second],
            net: Vec::new(),
            per_shard: false,
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        if s.now < self.horizon {
            actions.push(Action::Tick);
        }
        let faulty = if self.restart { 0 } else { 2 };
        for (c, client) in s.clients.iter().enumerate() {
            let c = c as u8;
            // A client that holds the lock or gave up reads no map again.
            let active = matches!(client.phase, Phase::Idle | Phase::Trying { .. });
            let may_read = !self.fresh || c == 0 || s.moved;
            if active && client.map != Some(s.serving) && may_read && !client.queued {
                actions.push(Action::Refresh(c));
            }
            let unrouted = self.unrouted && self.fresh && c == 1;
            if client.phase == Phase::Idle && (client.map.is_some() || unrouted) {
                actions.push(Action::Start(c));
            }
            if client.queued {
                actions.push(Action::Route(c));
            }
            for m in 0..2u8 {
                if s.unsent[usize::from(c)][usize::from(m)] {
                    actions.push(Action::Other(c, m + 1));
                }
            }
            if active && !s.per_shard && s.now < client.quarantined[faulty] {
                actions.push(Action::Elsewhere(c));
            }
        }
        let mut last = None;
        for m in &s.net {
            if last != Some(m) {
                actions.push(Action::Deliver(m.clone()));
            }
            last = Some(m);
        }
        if !s.failed_over && s.serving == 0 {
            actions.push(Action::Failover);
        }
        if !s.moved {
            actions.push(Action::Reshard);
        }
    }

    fn next_state(&self, s: &State, action: Action) -> Option<State> {
        let mut s = s.clone();
        let now = s.now;
        let until = now + self.ttl;
        match action {
            Action::Tick => {
                s.now += 1;
                // What has run out is gone: one state for both.
                let now = s.now;
                let gone = |k: &mut Option<(u8, u8)>| {
                    if k.is_some_and(|(_, expires)| expires <= now) {
                        *k = None;
                    }
                };
                s.keys.iter_mut().for_each(gone);
                s.others.iter_mut().for_each(gone);
                for c in &mut s.clients {
                    c.quarantined
                        .iter_mut()
                        .filter(|q| **q <= now)
                        .for_each(|q| *q = 0);
                    if matches!(c.phase, Phase::Holding(until) if until <= now) {
                        c.phase = Phase::Done;
                    }
                }
            }
            Action::Refresh(c) => self.read_map(&mut s, c),
            Action::Start(c) if s.clients[usize::from(c)].map.is_none() => {
                // Made before the client has a map: it waits at member 0.
                let client = &mut s.clients[usize::from(c)];
                client.queued = true;
                client.phase = Phase::Trying {
                    start: now,
                    yes: 0,
                    no: 0,
                    failed: 0,
                };
                s.unsent[usize::from(c)] = [true, true];
            }
            Action::Route(c) => {
                // The member's first map: the request goes to the link it
                // names, over a connection checked first.
                let serving = s.serving;
                s.clients[usize::from(c)].queued = false;
                self.read_map(&mut s, c);
                self.check_once(&mut s, c, serving);
                let msg = Msg {
                    client: c,
                    link: serving,
                    reply: None,
                    known: false,
                };
                insert_sorted(&mut s.net, msg);
            }
            Action::Start(c) => {
                let link = s.clients[usize::from(c)].map?;
                self.check_once(&mut s, c, link);
                s.clients[usize::from(c)].phase = Phase::Trying {
                    start: now,
                    yes: 0,
                    no: 0,
                    failed: 0,
                };
                s.unsent[usize::from(c)] = [true, true];
                let (client, reply) = (c, None);
                insert_sorted(
                    &mut s.net,
                    Msg {
                        client,
                        link,
                        reply,
                        known: true,
                    },
                );
            }
            Action::Other(c, m) => {
                s.unsent[usize::from(c)][usize::from(m) - 1] = false;
                let set = set_nx(&mut s.others[usize::from(m) - 1], c, now, until);
                self.vote(&mut s, c, m, Some(set));
            }
            Action::Deliver(msg) => {
                take_one(&mut s.net, &msg)?;
                let Msg {
                    client,
                    link,
                    reply,
                    known,
                } = msg;
                match reply {
                    None => {
                        let set = (link == s.serving)
                            .then(|| set_nx(&mut s.keys[usize::from(link)], client, now, until));
                        let reply = Some(set);
                        insert_sorted(
                            &mut s.net,
                            Msg {
                                client,
                                link,
                                reply,
                                known,
                            },
                        );
                    }
                    Some(Some(true)) => {
                        let ok = self.counts(&s, client, link, known);
                        self.vote(&mut s, client, 0, ok.then_some(true));
                    }
                    Some(Some(false)) => self.vote(&mut s, client, 0, Some(false)),
                    Some(None) => self.vote(&mut s, client, 0, None),
                }
            }
            Action::Elsewhere(c) => s.per_shard = self.counts(&s, c, 1, true),
            Action::Failover if self.restart => {
                s.failed_over = true;
                s.restarted = Some(now);
                s.keys[0] = None;
                // Every connection to it broke: checked again on next use.
                for c in &mut s.clients {
                    c.checked[0] = false;
                }
                // A request on its way there is sent again over a new
                // connection, checked before it goes out (the old process
                // may or may not have run it: both are explored, as a
                // reply it sent may still arrive).
                let resent: Vec<u8> = s
                    .net
                    .iter()
                    .filter(|m| m.link == 0 && m.reply.is_none())
                    .map(|m| m.client)
                    .collect();
                for c in resent {
                    self.check_once(&mut s, c, 0);
                }
            }
            Action::Failover => {
                s.failed_over = true;
                s.serving = 2;
                s.keys[2] = None;
            }
            Action::Reshard => {
                s.moved = true;
                let key = s.keys[usize::from(s.serving)].take();
                // B's epoch grows only if a promotion put A's above it;
                // a key moved in is a `RESTORE-ASKING`.
                s.imported = s.serving == 2 || key.is_some();
                s.keys[1] = key;
                s.serving = 1;
            }
        }
        // What a client that holds the lock or gave up knows no longer
        // matters: one state for all it may know.
        for c in &mut s.clients {
            if matches!(c.phase, Phase::Holding(_) | Phase::Done) {
                c.map = None;
                c.quarantined = [0; LINKS];
                c.checked = [false; LINKS];
                c.queued = false;
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(EXCLUSION, |_, s: &State| {
                s.clients
                    .iter()
                    .filter(|c| matches!(c.phase, Phase::Holding(until) if s.now < until))
                    .count()
                    <= 1
            }),
            Property::sometimes(PER_SHARD, |_, s: &State| s.per_shard),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::shards_rules::{member_wide, seed};

    /// Safe: no counterexample, and the per-shard case reached.
    fn safe(name: &str, m: ShardsModel) {
        check(name, m).assert_safe(name, 1_000, PER_SHARD);
    }

    /// The shipped model with `rules` changed by `f`.
    fn weakened(fresh: bool, f: impl FnOnce(&mut Rules)) -> ShardsModel {
        let mut m = ShardsModel {
            fresh,
            ..ShardsModel::shipped()
        };
        f(&mut m.rules);
        m
    }

    #[test]
    fn model_shards_safe_with_a_failover_and_a_reshard() {
        safe(
            "shards: a shard fails over, its slot moves; clients that used both",
            ShardsModel::shipped(),
        );
    }

    #[test]
    fn model_shards_safe_with_a_failover_a_reshard_and_a_fresh_client() {
        let m = ShardsModel {
            fresh: true,
            ..ShardsModel::shipped()
        };
        safe(
            "shards: a shard fails over, its slot moves, a fresh client",
            m,
        );
    }

    #[test]
    fn model_shards_finds_two_holders_without_quarantine() {
        let name = "shards, weakened: no quarantine";
        let m = weakened(false, |r| r.quarantine = false);
        check(name, m).assert_violates(name, EXCLUSION);
    }

    #[test]
    fn model_shards_finds_two_holders_when_a_moved_slot_is_trusted_where_it_went() {
        let name = "shards, weakened: a slot moved is trusted on the shard that took it";
        let m = weakened(false, |r| r.received = false);
        check(name, m).assert_violates(name, EXCLUSION);
    }

    #[test]
    fn model_shards_finds_two_holders_when_a_moved_slot_is_distrusted_too_briefly() {
        let name = "shards, weakened: a slot moved is distrusted one ms short of a TTL";
        let m = weakened(false, |r| r.short = 1);
        check(name, m).assert_violates(name, EXCLUSION);
    }

    #[test]
    fn model_shards_finds_two_holders_when_slots_taken_over_are_not_damage() {
        // Either evidence alone catches a slot taken over after a failover
        // (the slots a shard serves, or its epoch and imports): without
        // both, a fresh client trusts the shard that took it.
        let name = "shards, weakened: slots taken over are not damage (a fresh client)";
        let m = weakened(true, |r| {
            r.imports = false;
            r.slots = false;
        });
        check(name, m).assert_violates(name, EXCLUSION);
        let name = "shards: slots taken over seen by the slots a shard serves alone";
        safe(name, weakened(true, |r| r.imports = false));
    }

    /// The model where shard A restarts without its data instead of
    /// failing over, and client 1 is fresh, with `rules` changed by `f`.
    fn restarting(f: impl FnOnce(&mut Rules)) -> ShardsModel {
        ShardsModel {
            restart: true,
            ..weakened(true, f)
        }
    }

    #[test]
    fn model_shards_safe_when_a_shard_restarts_empty_and_its_slot_moves() {
        safe(
            "shards: a shard restarts empty, its slot moves, a fresh client",
            restarting(|_| {}),
        );
    }

    #[test]
    fn model_shards_safe_when_the_slot_goes_below_the_lowest_of_the_shard_taking_it() {
        let m = ShardsModel {
            below: true,
            ..restarting(|_| {})
        };
        safe(
            "shards: a shard restarts empty, its slot moves below another's lowest, a fresh client",
            m,
        );
    }

    #[test]
    fn model_shards_finds_two_holders_when_slots_a_shard_serves_are_not_read() {
        let name = "shards, weakened: the check reads no slots (a restart empty, a fresh client)";
        let m = restarting(|r| r.slots = false);
        check(name, m).assert_violates(name, EXCLUSION);
    }

    /// [`restarting`], client 1 making its request before it has a map.
    fn unrouted(f: impl FnOnce(&mut Rules)) -> ShardsModel {
        ShardsModel {
            unrouted: true,
            ..restarting(f)
        }
    }

    #[test]
    fn model_shards_safe_when_a_request_is_made_before_the_first_map() {
        safe(
            "shards: a shard restarts empty, its slot moves, a request made before any map",
            unrouted(|_| {}),
        );
        let m = ShardsModel {
            restart: false,
            ..unrouted(|_| {})
        };
        safe(
            "shards: a shard fails over, its slot moves, a request made before any map",
            m,
        );
    }

    #[test]
    fn model_shards_finds_two_holders_when_a_reply_of_unknown_link_is_judged_by_the_seed() {
        let name =
            "shards, weakened: a reply to a request made before any map is judged by the seed";
        let m = unrouted(|r| r.judge = seed);
        check(name, m).assert_violates(name, EXCLUSION);
    }

    #[test]
    fn model_shards_member_wide_quarantine_never_counts_another_shard() {
        let name = "shards, weakened: the quarantine is member-wide";
        let checked = check(name, weakened(false, |r| r.judge = member_wide));
        assert!(
            checked.counterexample.is_none(),
            "{name}: safe, only costly"
        );
        assert!(!checked.reached.contains(&PER_SHARD), "{name}");
    }
}
