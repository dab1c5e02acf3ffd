//! One attempt at a permit: every node takes a free slot for us in one
//! script (`SEMAPHORE_TAKE`: the free slot of our rank among the waiters,
//! so waiters woken together take distinct slots), the votes are counted per slot
//! (`slots.rs`), and the permit is the slot a quorum took, valid as a lock
//! taken in that round is. When the nodes took different slots but are
//! together a quorum, a move round (`SEMAPHORE_MOVE`) asks those on other
//! slots to move to the slot most took, where it is free or already ours;
//! the slot is then won if a quorum holds it, valid as counted from the
//! first round's start. Every other slot of ours is undone
//! (`SEMAPHORE_UNDO`), on every node that did not take the winning one,
//! also behind replies still on their way, and the winning slot is filled
//! there where it is free, so that every node shows it held; a failed or
//! dropped attempt is undone on every node that did not clearly refuse,
//! and a waiter that waits on joins the waiting list again where it took
//! a slot. Both keep the nodes' views of which slots are free, and of who
//! waits, alike: where they differ, one attempt takes different slots on
//! different nodes and wins none.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::Value;
use tokio::time::Instant;

use crate::acquire::attempt::{read_queued_reply, Ask, Attempts, Failed, UndoOnDrop};
use crate::acquire::waiter::Waiter;
use crate::acquire::won::{Place, Won};
use crate::client::redlock::valid_until;
use crate::clock;
use crate::error::Error;
use crate::lock::held::Held;
use crate::lock::standing::Basis;
use crate::mutex;
use crate::node::connection::request::Request;
use crate::quorum::fanout::Fanout;
use crate::quorum::tally::{node_bit, nodes_where, NodeSet, Tally};
use crate::quorum::Counts;
use crate::semaphore::handle::Semaphore;
use crate::semaphore::keys::SlotHold;
use crate::semaphore::scripts;
use crate::semaphore::slots::{best_slot, finished, move_plan, slot_tally, won};
use crate::telemetry::labels::Primitive;
use crate::wait::plan::Seen;
use crate::wait::Listen;

/// A semaphore's permits, as the waiting loop attempts them.
#[derive(Debug)]
pub(crate) struct SlotAttempt<'a> {
    /// The semaphore.
    pub(crate) semaphore: &'a Semaphore,
    /// The TTL, checked.
    pub(crate) ttl: Duration,
    /// The TTL in ms.
    pub(crate) ttl_ms: u64,
    /// The nodes where the last attempt found the name's lock key held by
    /// a lock, or a live waiter on the name's list.
    pub(crate) guarded: AtomicU64,
}

impl Attempts for SlotAttempt<'_> {
    fn resource(&self) -> &str {
        &self.semaphore.name
    }

    fn line(&self) -> &str {
        &self.semaphore.line
    }

    fn watched(&self) -> &[String] {
        self.semaphore.keys.slots()
    }

    fn channel(&self) -> Option<&str> {
        Some(self.semaphore.keys.channel())
    }

    fn heard(&self) -> &[String] {
        self.semaphore.keys.heard()
    }

    fn primitive(&self) -> Primitive {
        Primitive::Semaphore
    }

    fn listen(&self) -> Listen {
        Listen::One
    }

    fn joins_on_arrival(&self) -> bool {
        true
    }

    fn guard(&self) -> Option<(&str, NodeSet)> {
        let nodes = self.guarded.load(Ordering::Acquire);
        Some((self.semaphore.keys.name(), nodes))
    }

    async fn attempt(&self, ask: Ask<'_>) -> Result<Won, Failed> {
        let (result, guarded) = self.semaphore.attempt(self.ttl, self.ttl_ms, ask).await;
        self.guarded.store(guarded, Ordering::Release);
        result
    }
}

impl Semaphore {
    /// One attempt at a permit for `ttl` (`ttl_ms` in ms), and the nodes
    /// where the name's lock key kept it out (see [`name_in_the_way`]).
    async fn attempt(
        &self,
        ttl: Duration,
        ttl_ms: u64,
        ask: Ask<'_>,
    ) -> (Result<Won, Failed>, NodeSet) {
        let redlock = &self.redlock;
        let value = redlock.new_value();
        let undo = UndoOnDrop::new(|| {
            self.undo(&value, redlock.nodes().all(), Outcome::Lost(None));
        });
        let start = clock::now();
        let req = self.take_request(&value, ttl_ms, ask);
        let n = redlock.node_count();
        // Which slot each node took (a mutex only to keep the future `Send`:
        // the two closures below never run at once).
        let choices = Mutex::new(vec![None; n]);
        let mut seen = vec![Seen::Unknown; n];
        // The nodes that took a slot and had another to spare.
        let mut spare: NodeSet = 0;
        let mut guarded: NodeSet = 0;
        let slots = self.keys.slots().len();
        let classify = |i: usize, v: &Value| {
            let (took, now_seen) = read_queued_reply(v, Instant::now())?;
            let slot = match usize::try_from(took) {
                Ok(0) => None,
                Ok(s) if s <= slots => Some(s - 1),
                _ => return None,
            };
            seen[i] = now_seen;
            if name_in_the_way(v) {
                guarded |= node_bit(i);
            }
            if slot.is_some() && spare_in(v) {
                spare |= node_bit(i);
            }
            mutex::lock(&choices)[i] = slot;
            Some(slot.is_some())
        };
        let done = |t: &Tally, _: &Fanout<'_>| finished(t, &mutex::lock(&choices));
        let (tally, stragglers) = redlock
            .nodes()
            .vote_until(&req, "semaphore", Counts::Trusted, classify, done)
            .await;
        // Replies still on their way are waited for in the background: a
        // slot they take is undone by the request queued behind them.
        stragglers.finish_in_background();
        let choices = mutex::into_inner(choices);
        let all = redlock.nodes().all();
        // Counted from the first round's start, also for a moved permit:
        // its slot was set there first.
        let drift = redlock.drift_on(ttl, redlock.nodes().all());
        let validity = || valid_until(start, clock::now(), ttl, drift);
        let mut winner = won(&tally, &choices);
        if let Some(plan) = move_plan(&tally, &choices) {
            if validity().is_some() {
                winner = self.move_round(&value, ttl_ms, plan, tally.quorum).await;
                redlock.nodes().telemetry.permit_moved(winner.is_some());
            }
        }
        let valid_until = validity();
        undo.disarm();
        if let (Some((slot, holders)), Some(until)) = (winner, valid_until) {
            self.undo(&value, all & !holders, Outcome::Won { slot, ttl_ms });
            let queued = matches!(ask, Ask::Queued(_));
            if let Ask::Queued(w) = ask {
                w.set_spare((spare & holders).count_ones() as usize >= tally.quorum);
                // `SEMAPHORE_TAKE` took us off the list where it took a
                // slot (a later move changes slots, not the list).
                w.gone_from(nodes_where(&choices, Option::is_some));
            }
            let hold = Arc::new(SlotHold {
                keys: Arc::clone(&self.keys),
                slot,
            });
            let place = Place {
                key: hold.key(),
                line: &self.line,
                held: Some(Arc::clone(&hold) as Arc<dyn Held>),
            };
            let basis = Basis::new(holders, start, ttl, until);
            let won = Won::new(
                redlock.clone(),
                &self.name,
                place,
                value,
                ttl,
                basis,
                queued,
            );
            return (Ok(won), guarded);
        }
        let error = if winner.is_some() {
            Error::TtlTooShort {
                resource: self.name.clone(),
                ttl,
                took: start.elapsed(),
            }
        } else {
            let slot = best_slot(tally.yes, &choices).map_or(0, |(s, _)| s);
            redlock.failure(&self.name, &self.line, slot_tally(&tally, &choices, slot))
        };
        // A waiter that waits on joins the list again where it took a slot
        // (in the same request as the undo, so before its next attempt).
        let mut rejoin = None;
        if let Ask::Queued(w) = ask {
            if error.is_expired() || tally.failures_prevent_quorum() {
                w.yield_place();
            } else {
                rejoin = Some(w);
            }
        }
        let resent = redlock.nodes().reconnected_after(start.into_std());
        self.undo(&value, all & (!tally.no | resent), Outcome::Lost(rejoin));
        (Err(Failed { error, seen }), guarded)
    }

    /// The move round after a split (see [`move_plan`]): the nodes of
    /// `movers` move our slot to `slot`, which `holders` took. Returns the
    /// slot and every node that holds it for us, if they are a quorum of
    /// trusted nodes.
    async fn move_round(
        &self,
        value: &str,
        ttl_ms: u64,
        (slot, holders, movers): (usize, NodeSet, NodeSet),
        quorum: usize,
    ) -> Option<(usize, NodeSet)> {
        let req = Request::script_any(&scripts::SEMAPHORE_MOVE, &self.keys.keys(), |cmd| {
            cmd.arg(value).arg(slot + 1).arg(ttl_ms);
        });
        let nodes = self.redlock.nodes();
        let need = quorum.saturating_sub(holders.count_ones() as usize);
        let asked = movers.count_ones() as usize;
        let classify = |_: usize, v: &Value| match v {
            Value::Int(1) => Some(true),
            Value::Int(0) => Some(false),
            _ => None,
        };
        // Only the movers are asked: every yes is one of them.
        let done = |t: &Tally, _: &Fanout<'_>| {
            let yes = t.yes_count();
            yes >= need || yes + asked.saturating_sub(t.heard()) < need
        };
        let fan = nodes.fanout(&req, movers);
        let (tally, stragglers) = nodes
            .count(fan, "semaphore move", Counts::Trusted, classify, done)
            .await;
        stragglers.finish_in_background();
        let all = holders | tally.yes;
        (all.count_ones() as usize >= quorum).then_some((slot, all))
    }

    /// The attempt's request.
    fn take_request(&self, value: &str, ttl_ms: u64, ask: Ask<'_>) -> Arc<Request> {
        Request::script_any(&scripts::SEMAPHORE_TAKE, &self.keys.keys(), |cmd| {
            cmd.arg(value).arg(ttl_ms);
            match ask {
                Ask::Plain => cmd.arg("").arg(0).arg(0),
                Ask::Queued(w) => {
                    let (_, id, ticket, lease_ms) = w.register();
                    cmd.arg(id).arg(ticket).arg(lease_ms)
                }
            };
        })
    }

    /// Deletes our slots on `targets` but the one won, as `outcome` says,
    /// without waiting for replies.
    fn undo(&self, value: &str, targets: NodeSet, outcome: Outcome<'_, '_>) {
        let req = Request::script_any(&scripts::SEMAPHORE_UNDO, &self.keys.keys(), |cmd| {
            cmd.arg(value);
            match outcome {
                Outcome::Won { slot, ttl_ms } => {
                    cmd.arg(slot + 1).arg("").arg(0).arg(0).arg(ttl_ms)
                }
                Outcome::Lost(Some(w)) => {
                    let (_, id, ticket, lease_ms) = w.register();
                    cmd.arg(0).arg(id).arg(ticket).arg(lease_ms).arg(0)
                }
                Outcome::Lost(None) => cmd.arg(0).arg("").arg(0).arg(0).arg(0),
            };
            cmd.arg(self.keys.channel());
        });
        self.redlock.nodes().send_quietly(&req, targets);
    }
}

/// Whether a node's reply to a winning `SEMAPHORE_TAKE` says a slot is
/// left to spare (its second item, more than 0).
fn spare_in(v: &Value) -> bool {
    matches!(v, Value::Array(items) if matches!(items.get(1), Some(Value::Int(s)) if *s > 0))
}

/// Whether a node's reply to `SEMAPHORE_TAKE` says the name's lock key
/// kept the attempt out there (its third item 2: a lock holds it; 3: a
/// live waiter on the name's list goes first).
fn name_in_the_way(v: &Value) -> bool {
    matches!(v, Value::Array(items) if matches!(items.get(2), Some(Value::Int(2 | 3))))
}

/// How an attempt ended, for its undo.
#[derive(Clone, Copy)]
enum Outcome<'a, 'w> {
    /// It won `slot` (from 0), held for `ttl_ms` ms: that slot stays, and
    /// is filled where it is free.
    Won {
        /// The slot won.
        slot: usize,
        /// The TTL in ms.
        ttl_ms: u64,
    },
    /// It won nothing, or was dropped: every slot of ours goes; a waiter
    /// that waits on joins the list again where it took one.
    Lost(Option<&'a Waiter<'w>>),
}
