//! Model checking the protocols with `stateright`: every interleaving of
//! message delivery, loss, duplication and node faults within stated bounds,
//! against the crate's own decision code (the quorum tally, the counter's
//! compare-and-set rule and round rules, its plan step, the lock's validity).
//!
//! Each model runs once with the rules as shipped, in conditions
//! `docs/guarantees.md` calls safe (no counterexample may exist), and once in conditions it calls
//! unsafe, or with one rule weakened, where the checker must find one. The
//! tests print the states explored, the time, and the shortest
//! counterexample. `cargo test --release --lib model` runs them all.

mod counter;
mod counter_state;
mod counts;
mod detection;
mod election;
mod fast_view;
mod lock;
mod lock_connected;
mod lock_rules;
mod lock_state;
mod lock_symmetry;
mod loss_seen;
mod mint;
mod multilock;
mod permits_name;
mod permits_state;
mod pin;
mod rwlock;
mod rwlock_state;
mod semaphore;
mod semaphore_state;
mod served;
mod shards;
mod shards_rules;
mod shards_state;

use std::cmp::Ordering;
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::OnceLock;
use std::time::Instant;

use stateright::{Checker, Model};

use crate::error::NodeErrorKind;
use crate::quorum::tally::{node_bit, NodeSet, Tally, Vote};

/// What one check found.
pub(crate) struct Checked<M: Model> {
    /// States explored (unique).
    pub(crate) states: usize,
    /// The `sometimes` properties reached (the model is not vacuous).
    pub(crate) reached: Vec<&'static str>,
    /// The shortest path to the first violated property, if any: its name
    /// and the actions along it.
    pub(crate) counterexample: Option<(&'static str, Vec<M::Action>)>,
}

impl<M: Model> Checked<M> {
    /// Asserts what a check called safe must show: more than `min_states`
    /// states explored, no counterexample, and `reached` (a `sometimes`
    /// property) seen, so the model is not vacuous.
    pub(crate) fn assert_safe(&self, name: &str, min_states: usize, reached: &str) {
        assert!(
            self.states > min_states,
            "{name}: only {} states",
            self.states
        );
        assert!(self.counterexample.is_none(), "{name}");
        assert!(self.reached.contains(&reached), "{name}: vacuous");
    }

    /// Asserts that the check found a counterexample, to `property`.
    pub(crate) fn assert_violates(&self, name: &str, property: &str) {
        let (violated, _) = self.counterexample.as_ref().expect(name);
        assert_eq!(*violated, property, "{name}");
    }
}

/// Checks a model expected to be safe depth-first, with symmetry reduction
/// (`representative` maps a state to one of its class of states equal but
/// for the names of interchangeable nodes and clients), which explores the
/// same behaviours in fewer states. A counterexample it finds is real, but
/// not necessarily a shortest one.
pub(crate) fn check_symmetric<M>(
    name: &str,
    model: M,
    representative: fn(&M::State) -> M::State,
) -> Checked<M>
where
    M: Model + Send + Sync + 'static,
    M::State: Clone + Debug + Hash + PartialEq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq + Send + Sync + 'static,
{
    explore(name, model, Some(representative))
}

/// Validity left `elapsed` ms after a round started, for a TTL of `ttl`
/// ms, by the crate's rule (`validity()`) with a drift allowance of
/// `drift_factor`, in whole ms.
pub(crate) fn validity_left(ttl: u8, drift_factor: f64, elapsed: u8) -> u8 {
    let config = crate::client::config::Config {
        drift_factor,
        ..crate::client::config::Config::default()
    };
    let ttl = std::time::Duration::from_millis(ttl.into());
    let elapsed = std::time::Duration::from_millis(elapsed.into());
    crate::client::redlock::validity(ttl, elapsed, config.drift(ttl))
        .map_or(0, |v| v.as_millis().min(255) as u8)
}

/// Real ms a key of TTL `ttl` ms lives on a node whose clock runs
/// `drift_factor` fast.
pub(crate) fn real_ttl(ttl: u8, drift_factor: f64) -> u8 {
    (f64::from(ttl) / (1.0 + drift_factor)).floor() as u8
}

/// Every ordering of `0..n`, computed once per `n` (a representative asks
/// for them at every state).
pub(crate) fn permutations(n: usize) -> &'static [Vec<usize>] {
    static ORDERINGS: [OnceLock<Vec<Vec<usize>>>; 8] = [const { OnceLock::new() }; 8];
    match ORDERINGS.get(n) {
        Some(cell) => cell.get_or_init(|| orderings(n)),
        // Beyond the models' sizes: computed, and kept, once per call.
        None => Vec::leak(orderings(n)),
    }
}

/// The identity ordering of `0..n` alone (names that are not exchanged).
pub(crate) fn unchanged(n: usize) -> Vec<Vec<usize>> {
    vec![(0..n).collect()]
}

/// Every ordering of `0..n`, computed.
fn orderings(n: usize) -> Vec<Vec<usize>> {
    if n == 0 {
        return vec![Vec::new()];
    }
    let mut out = Vec::new();
    for rest in orderings(n - 1) {
        for at in 0..=rest.len() {
            let mut p = rest.clone();
            p.insert(at, n - 1);
            out.push(p);
        }
    }
    out
}

/// Checks `model` breadth-first (so a counterexample is a shortest one),
/// printing what was explored.
pub(crate) fn check<M>(name: &str, model: M) -> Checked<M>
where
    M: Model + Send + Sync + 'static,
    M::State: Clone + Debug + Hash + PartialEq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq + Send + Sync + 'static,
{
    explore(name, model, None)
}

/// A state's representative under symmetry.
type Representative<M> = fn(&<M as Model>::State) -> <M as Model>::State;

/// [`check`], or [`check_symmetric`] with a representative.
fn explore<M>(name: &str, model: M, representative: Option<Representative<M>>) -> Checked<M>
where
    M: Model + Send + Sync + 'static,
    M::State: Clone + Debug + Hash + PartialEq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq + Send + Sync + 'static,
{
    let started = Instant::now();
    // Stops at the first violated `always` property (breadth-first, so at
    // a shortest counterexample); a safe model is explored to the end.
    let builder = model
        .checker()
        .threads(2)
        .finish_when(stateright::HasDiscoveries::AnyFailures);
    match representative {
        Some(r) => summarize(name, started, builder.symmetry_fn(r).spawn_dfs().join()),
        None => summarize(name, started, builder.spawn_bfs().join()),
    }
}

/// What a finished check found, printed.
fn summarize<M, C>(name: &str, started: Instant, checker: C) -> Checked<M>
where
    M: Model + Send + Sync + 'static,
    M::State: Clone + Debug + Hash + PartialEq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq + Send + Sync + 'static,
    C: Checker<M>,
{
    let states = checker.unique_state_count();
    let properties: Vec<&'static str> = checker
        .model()
        .properties()
        .iter()
        .map(|p| p.name)
        .collect::<Vec<&'static str>>();
    let reached =
        properties
            .iter()
            .copied()
            .filter(|name| {
                checker.discovery(name).is_some()
                    && checker.model().properties().iter().any(|p| {
                        p.name == *name && p.expectation == stateright::Expectation::Sometimes
                    })
            })
            .collect();
    let counterexample = properties.iter().find_map(|name| {
        let path = checker.discovery(name)?;
        checker
            .model()
            .properties()
            .iter()
            .find(|p| p.name == *name)
            .filter(|p| p.expectation == stateright::Expectation::Always)
            .map(|_| (*name, path.into_actions()))
    });
    println!(
        "model {name}: {states} states in {:.1} s, {}",
        started.elapsed().as_secs_f64(),
        match &counterexample {
            None => "no counterexample".to_owned(),
            Some((p, actions)) => format!("\"{p}\" violated in {} steps:", actions.len()),
        }
    );
    if let Some((_, actions)) = &counterexample {
        for (i, a) in actions.iter().enumerate() {
            println!("  {:>2}. {a:?}", i + 1);
        }
    }
    Checked {
        states,
        reached,
        counterexample,
    }
}

/// A real [`Tally`] of `n` nodes needing `needed` votes, holding the votes
/// so far: `yes`, `no`, and `failed` (given up on).
pub(crate) fn tally_of(
    n: usize,
    needed: usize,
    yes: NodeSet,
    no: NodeSet,
    failed: NodeSet,
) -> Tally {
    let mut tally = Tally::new(n, n);
    tally.quorum = needed;
    for node in 0..n {
        let bit = node_bit(node);
        let vote = if yes & bit != 0 {
            Vote::Yes
        } else if no & bit != 0 {
            Vote::No
        } else if failed & bit != 0 {
            Vote::Failed(NodeErrorKind::UnexpectedReply)
        } else {
            continue;
        };
        tally.record(node, "", vote);
    }
    tally
}

/// Adds `item` to a sorted multiset (messages in flight: their order does
/// not matter, so one sorted list stands for every order).
pub(crate) fn insert_sorted<T: Ord>(set: &mut Vec<T>, item: T) {
    let at = set.partition_point(|x| *x <= item);
    set.insert(at, item);
}

/// Takes one copy of `item` out of a multiset.
pub(crate) fn take_one<T: PartialEq>(set: &mut Vec<T>, item: &T) -> Option<T> {
    let at = set.iter().position(|x| x == item)?;
    Some(set.remove(at))
}

/// The node set `old` with node `i` renamed `nodes[i]`.
pub(crate) fn renamed_set(old: NodeSet, nodes: &[usize]) -> NodeSet {
    (0..nodes.len())
        .filter(|i| old & node_bit(*i) != 0)
        .fold(0, |acc, i| acc | node_bit(nodes[i]))
}

/// The least of `s` renamed (by `renamed`) with each of `node_orders`
/// and each of `client_orders`: one representative per class of states
/// that differ only in the names of alike nodes and clients.
///
/// `leading` gives a renaming's leading fields, compared before the rest
/// (the state's order is its fields' in turn): where it is greater, so is
/// the whole renamed state. Only the renamings whose leading fields are
/// least are built whole, which gives the same representative at a
/// fraction of the cost (building a state allocates; most renamings differ
/// in their nodes already).
pub(crate) fn least_renaming<'s, S: Ord + Clone, K: Ord>(
    s: &'s S,
    node_orders: &[Vec<usize>],
    client_orders: &[Vec<usize>],
    leading: impl Fn(&'s S, &[usize], &[usize]) -> K,
    renamed: fn(&S, &[usize], &[usize]) -> S,
) -> S {
    let mut least: Option<K> = None;
    let mut ties: Vec<(&[usize], &[usize])> = Vec::new();
    for nodes in node_orders {
        for clients in client_orders {
            let key = leading(s, nodes, clients);
            match least.as_ref().map(|l| key.cmp(l)) {
                Some(Ordering::Greater) => continue,
                Some(Ordering::Equal) => {}
                None | Some(Ordering::Less) => {
                    least = Some(key);
                    ties.clear();
                }
            }
            ties.push((nodes, clients));
        }
    }
    ties.iter()
        .map(|(nodes, clients)| renamed(s, nodes, clients))
        .min()
        .unwrap_or_else(|| s.clone())
}

/// `items` with item `i` moved to `to[i]`, each made once by `make` (a
/// renamed copy, or a borrow: a key to compare).
pub(crate) fn moved<'a, T, U>(items: &'a [T], to: &[usize], make: impl Fn(&'a T) -> U) -> Vec<U> {
    // Where each place's item comes from: the models have a few items, so a
    // search beats building the inverse ordering.
    let mut out = Vec::with_capacity(items.len());
    for place in 0..items.len() {
        if let Some(from) = to.iter().position(|t| *t == place) {
            out.push(make(&items[from]));
        }
    }
    out
}

/// States `model` reaches on random walks from its initial states (a fixed
/// seed): `walks` of them, each of at most `steps` actions.
#[cfg(test)]
pub(crate) fn walked<M: Model>(model: &M, walks: usize, steps: usize) -> Vec<M::State>
where
    M::State: Clone,
{
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    let mut rng = StdRng::seed_from_u64(7);
    let mut out = Vec::new();
    let init = model.init_states();
    for _ in 0..walks {
        let Some(mut s) = init.get(rng.random_range(0..init.len().max(1))).cloned() else {
            return out;
        };
        for _ in 0..steps {
            let mut actions = Vec::new();
            model.actions(&s, &mut actions);
            if actions.is_empty() {
                break;
            }
            let a = actions.swap_remove(rng.random_range(0..actions.len()));
            let Some(next) = model.next_state(&s, a) else {
                continue;
            };
            out.push(s);
            s = next;
        }
        out.push(s);
    }
    out
}

/// The least of every renaming of `s`, each built whole: what
/// [`least_renaming`] must give.
#[cfg(test)]
pub(crate) fn least_built_whole<S: Ord + Clone>(
    s: &S,
    node_orders: &[Vec<usize>],
    client_orders: &[Vec<usize>],
    renamed: fn(&S, &[usize], &[usize]) -> S,
) -> S {
    node_orders
        .iter()
        .flat_map(|nodes| client_orders.iter().map(move |c| renamed(s, nodes, c)))
        .min()
        .unwrap_or_else(|| s.clone())
}
