//! The state of the lock model: nodes, clients, messages in flight and
//! what can happen next (see `lock.rs`; its symmetry: `lock_symmetry.rs`).

use crate::model::insert_sorted;
use crate::node::clock::clockrate::Reading;
use crate::node::clock::clockwatch::{judge, Verdict};
use crate::quorum::probe::ours_is_odd;
use crate::quorum::tally::{node_bit, NodeSet};

/// How far a node's clock jumps in one step, ms: beyond the allowance's
/// 2 ms constant, and enough to drop a key with life left.
pub(crate) const JUMP: u8 = 3;

/// A node.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Node {
    /// The key: the holder's client and the real instant it expires.
    pub(crate) key: Option<(u8, u8)>,
    /// Running.
    pub(crate) up: bool,
    /// When it went down.
    pub(crate) down_since: u8,
    /// Until when (real ms) it is quarantined: it restarted empty, so its
    /// yes does not count toward a lock quorum (0: never was).
    pub(crate) quarantined_until: u8,
    /// When (real ms) that quarantine began.
    pub(crate) quarantined_from: u8,
    /// When it restarted empty, until a client's connection check has
    /// read its uptime and set `quarantined_until` (coarse uptime only).
    pub(crate) unprobed_since: Option<u8>,
    /// How far (ms) its clock has jumped ahead in all.
    pub(crate) jumped: u8,
    /// When (real ms, plus one; 0: never) the fast client (see
    /// `LockModel::fast_client`) first read a jump of its clock.
    pub(crate) step_seen: u8,
    /// Keys it evicted while up (its `evicted_keys`).
    pub(crate) evicted: u8,
    /// Its flushes (in its damage count).
    pub(crate) flushed: u8,
    /// Our marker: the damage count it was written at (`None`: gone).
    pub(crate) mark: Option<u8>,
}

/// Where a client is.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Phase {
    /// Not started.
    Idle,
    /// Counting votes of an attempt started at `start`.
    Trying {
        /// Start, ms.
        start: u8,
        /// Nodes that set the key.
        yes: NodeSet,
        /// Nodes that refused.
        no: NodeSet,
        /// Nodes given up on.
        failed: NodeSet,
    },
    /// Holds the lock.
    Holding(Hold),
    /// Released, or failed.
    Done,
}

/// What a holder knows and has in flight.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Hold {
    /// The guard's validity: valid until this real instant (exclusive).
    pub(crate) until: u8,
    /// When the acquisition decided (for the fencing order).
    pub(crate) acquired: u8,
    /// Extensions sent so far (the acquisition is number 0).
    pub(crate) sent: u8,
    /// The latest extension (by dispatch order) a quorum confirmed.
    pub(crate) confirmed: u8,
    /// Extensions sent after `confirmed`, in dispatch order.
    pub(crate) exts: Vec<Ext>,
    /// Where its fencing token stands.
    pub(crate) mint: Mint,
    /// The nodes whose yes counted in the round that last set its keys
    /// (the acquisition, then the latest confirmed extension).
    pub(crate) held: NodeSet,
    /// When that round started and the TTL it set.
    pub(crate) basis: (u8, u8),
    /// When its client's clock stopped (`None`: it runs): its timers fire
    /// no more, and it counts the lock valid while the instant its clock
    /// shows, this one, is before `until`.
    pub(crate) stalled: Option<u8>,
    /// When the timer kept on a node's clock comes back next (while
    /// stalled): every node's clock is read then.
    pub(crate) due: u8,
    /// The nodes its client read running ahead since `basis` began.
    pub(crate) ahead: NodeSet,
    /// Its fencing token, once returned to it (0: none).
    pub(crate) token: u8,
    /// It wrote to the fenced store.
    pub(crate) wrote: bool,
}

impl Hold {
    /// Whether its client counts the lock valid at real instant `now`.
    pub(crate) fn valid(&self, now: u8) -> bool {
        self.stalled.unwrap_or(now) < self.until
    }
}

/// One extension sent by a holder.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Ext {
    /// Its number, in dispatch order.
    pub(crate) seq: u8,
    /// Its TTL, ms.
    pub(crate) ttl: u8,
    /// When it was sent.
    pub(crate) start: u8,
    /// Valid until this instant if it takes effect (start + ttl - drift).
    pub(crate) bound: u8,
    /// The guard's validity when it was sent (it must finish before).
    pub(crate) before: u8,
    /// Nodes that extended.
    pub(crate) yes: NodeSet,
    /// Nodes that refused (not ours).
    pub(crate) no: NodeSet,
    /// Nodes given up on.
    pub(crate) failed: NodeSet,
    /// The outcome is known (won or lost).
    pub(crate) decided: bool,
}

/// A fencing token's progress.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Mint {
    /// Not fenced, or the lock was returned.
    None,
    /// Asked the counter; its compare-and-set has not reached a quorum.
    Asked,
    /// The counter issued this token; the answer is on its way back.
    Minted(u8),
}

/// What a client asks a node.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Kind {
    /// `SET NX` with the TTL.
    Set,
    /// Compare-and-pexpire to `ttl` (extension number `seq`): reset the
    /// TTL if the key is still ours.
    Extend {
        /// The extension's number, so a client's extensions to a node
        /// arrive in the order sent.
        seq: u8,
        /// Its TTL, ms.
        ttl: u8,
    },
    /// Compare-and-delete.
    Release,
}

/// A message in flight from a client to a node. Sorted so that a client's
/// messages to a node come in the order they are sent (`SET`, then an
/// extension, then the release).
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Msg {
    /// Sender.
    pub(crate) client: u8,
    /// Receiver.
    pub(crate) node: u8,
    /// What it asks.
    pub(crate) kind: Kind,
}

/// Most nodes and clients a lock model has (3 and 2 as shipped).
pub(crate) const MOST_NODES: usize = 3;
/// See [`MOST_NODES`].
pub(crate) const MOST_CLIENTS: usize = 2;

/// A value per client and node, in place: the state is cloned for every
/// step, and four tables of vectors were most of its allocations.
pub(crate) type PerNode<T> = [[T; MOST_NODES]; MOST_CLIENTS];

/// A table of `value` for a model's `clients` and `nodes`; a model larger
/// than the tables is refused here, with the fix.
pub(crate) fn per_node<T: Copy>(nodes: usize, clients: usize, value: T) -> PerNode<T> {
    assert!(
        nodes <= MOST_NODES && clients <= MOST_CLIENTS,
        "a lock model of {nodes} nodes and {clients} clients: raise MOST_NODES or MOST_CLIENTS"
    );
    [[value; MOST_NODES]; MOST_CLIENTS]
}

/// The whole system.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct State {
    /// Real time, ms.
    pub(crate) now: u8,
    /// The nodes.
    pub(crate) nodes: Vec<Node>,
    /// The clients.
    pub(crate) clients: Vec<Phase>,
    /// Messages in flight, sorted.
    pub(crate) net: Vec<Msg>,
    /// Faults left: drops, timeouts, crashes; extensions left; clock
    /// steps; holders' clock probes; evictions; clients' clocks that stall.
    pub(crate) faults: [u8; 8],
    /// A release or an extension deleted a key another client held.
    pub(crate) foreign_delete: bool,
    /// The fencing counter (linearizable: the counter model checks that).
    pub(crate) counter: u8,
    /// Fenced locks returned to their callers: (acquired at, token).
    pub(crate) returned: Vec<(u8, u8)>,
    /// Per client, a token taken before its attempt (the mutant that mints
    /// first; 0: none).
    pub(crate) premint: Vec<u8>,
    /// Per client and node, how far the node's clock had jumped at the
    /// client's last reading of it (with the last reply).
    pub(crate) readings: PerNode<u8>,
    /// Per client and node, until when (real ms) the client does not count
    /// the node's yes: it saw the node's clock run ahead, or keys evicted.
    pub(crate) clock_q: PerNode<u8>,
    /// Per client and node, the node's eviction count at the client's last
    /// reading of it.
    pub(crate) evictions_read: PerNode<u8>,
    /// Per client and node, the writing of our marker the client last saw
    /// or wrote (its damage count).
    pub(crate) marks: PerNode<Option<u8>>,
    /// The fast node's clock runs at its rate (see `LockModel::grows`).
    pub(crate) grown: bool,
    /// The storage that fenced holders write to.
    pub(crate) store: Store,
}

/// Storage that checks fencing tokens (`fenced_writes.rs`): one key.
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Store {
    /// Its fence: the highest token that wrote it (`None`: none yet).
    pub(crate) fence: Option<u8>,
    /// The writes that landed, in order: when each writer took its lock.
    pub(crate) landed: Vec<u8>,
}

/// What can happen next.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub(crate) enum Action {
    /// One millisecond passes.
    Tick,
    /// A client starts its attempt.
    Start(u8),
    /// A message arrives (an answer lost is a timeout before it).
    Deliver(Msg),
    /// A message is lost.
    Drop(Msg),
    /// A client stops waiting for a node (its attempt's answer, or if
    /// `Some(seq)` its extension's).
    Timeout(u8, u8, Option<u8>),
    /// A holder extends with this TTL.
    Extend(u8, u8),
    /// The counter's compare-and-set for a client's token reaches a quorum.
    Mint(u8),
    /// The minted token reaches the client.
    Minted(u8),
    /// A holder releases.
    Release(u8),
    /// A fenced holder writes to the store (at any time, valid or not).
    Write(u8),
    /// A node crashes.
    Crash(u8),
    /// A crashed node restarts.
    Restart(u8),
    /// A node's clock jumps ahead.
    Step(u8),
    /// A holder's client reads a node's clock (an idle node's probe).
    Probe(u8, u8),
    /// A node evicts (or flushes) the key it holds.
    Evict(u8),
    /// A client outside the model checks a flushed node: our marker anew.
    Remark(u8),
    /// The fast node's clock starts running at its rate.
    Grow,
    /// A holder's client's clock stops.
    Stall(u8),
    /// A stalled holder's timer on a node's clock comes back: it reads
    /// every node's clock.
    Fire(u8),
}

/// Sends client `c`'s message of `kind` to the nodes in `to`.
pub(crate) fn send(net: &mut Vec<Msg>, c: u8, to: NodeSet, kind: Kind) {
    for n in 0..64u8 {
        if to & node_bit(n.into()) != 0 {
            let m = Msg {
                client: c,
                node: n,
                kind,
            };
            insert_sorted(net, m);
        }
    }
}

impl State {
    /// Node `n`'s clock jumps `jump` ms ahead (one clock-step fault): its
    /// key expires that much sooner in real time (at once if that is now or
    /// past).
    pub(crate) fn step_clock(&mut self, n: u8, jump: u8) {
        self.faults[4] -= 1;
        let now = self.now;
        let node = &mut self.nodes[n as usize];
        node.jumped = node.jumped.saturating_add(jump);
        node.key = node
            .key
            .map(|(c, expires)| (c, expires.saturating_sub(jump)))
            .filter(|(_, expires)| *expires > now);
    }

    /// Node `n` crashes (one crash fault).
    pub(crate) fn crash(&mut self, n: u8) {
        self.faults[2] -= 1;
        let node = &mut self.nodes[n as usize];
        node.up = false;
        node.down_since = self.now;
    }

    /// Client `c` reads node `n`'s clock with a reply: the crate's rule
    /// ([`judge`]) against the client's last reading. The model's node
    /// clocks run exactly the allowance fast, so the time between two
    /// readings never tells anything: they are weighed as if taken at one
    /// instant, which leaves the rule the jumps between them (and keeps
    /// reading times out of the state). A jump ahead keeps the node's yes
    /// from counting for `quarantine` ms (when `rules.check`), and cuts the
    /// validity of the client's lock by its excess where the node's yes
    /// counted for it (when `rules.cut`: `lock/shared.rs`). Returns whether
    /// the yes counts.
    pub(crate) fn read_clock(&mut self, (c, n): (u8, u8), rules: ClockRules) -> bool {
        let at = tokio::time::Instant::now();
        let reading = |offset: u8| Reading {
            sent: at,
            recv: at,
            node_us: 1_000_000_000 + u64::from(offset) * 1000,
        };
        let (c, n) = (c as usize, n as usize);
        // How far the node's clock is ahead of ours: its jumps, and where
        // our clock stalled, the real time since.
        let stalled = match &self.clients[c] {
            Phase::Holding(Hold {
                stalled: Some(t), ..
            }) => self.now - t,
            _ => 0,
        };
        let now = self.nodes[n].jumped.saturating_add(stalled);
        let before = std::mem::replace(&mut self.readings[c][n], now);
        let Verdict::Ahead(excess) = judge(&reading(before), &reading(now), rules.allowance) else {
            return self.now >= self.clock_q[c][n];
        };
        if rules.check {
            self.clock_q[c][n] = self.now.saturating_add(rules.quarantine);
        }
        if let Phase::Holding(h) = &mut self.clients[c] {
            h.ahead |= node_bit(n);
            if rules.odd && ours_is_odd(h.ahead.count_ones() as usize, rules.needed) {
                h.until = 0;
            } else if rules.cut && h.held & node_bit(n) != 0 {
                let cut = excess.as_millis().min(255) as u8;
                h.until = h.until.saturating_sub(cut);
            }
        }
        self.now >= self.clock_q[c][n]
    }
}

/// The clock rules a reading is judged by.
#[derive(Clone, Copy)]
pub(crate) struct ClockRules {
    /// The drift factor.
    pub(crate) allowance: f64,
    /// How long a node seen running ahead does not count, ms.
    pub(crate) quarantine: u8,
    /// Whether a node seen running ahead does not count (as shipped).
    pub(crate) check: bool,
    /// Whether a holder's validity is cut by the excess (as shipped).
    pub(crate) cut: bool,
    /// Whether a holder keeps no validity once a quorum of nodes ran ahead
    /// of its client's clock (as shipped: `quorum/probe.rs`).
    pub(crate) odd: bool,
    /// Nodes that make a quorum.
    pub(crate) needed: usize,
}

/// Which members' clocks the fast client reads (`node/trust/panel.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Members {
    /// None: the node's clock and ours alone end a quarantine.
    Off,
    /// Every member's.
    Read,
    /// Every member's but `member`'s, whose `TIME` is refused (unless it
    /// is the node whose clock steps: its own bound reads it). `shows`:
    /// the rule before, that such a member counts as showing it over.
    Refusing {
        /// The member.
        member: u8,
        /// The rule before.
        shows: bool,
    },
}
