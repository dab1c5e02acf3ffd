//! The detection step the models share: what a node that restarted shows a
//! client's connection check, handed to the crate's own table
//! ([`assess`]) or, as a mutant, to the rule it replaced.

use crate::node::trust::amnesia::{assess, assess_dated, Assessment, Dating, Memory};
use crate::node::trust::evidence::{Marker, Probe};
use crate::node::trust::tags;

/// How a node comes back from a crash, all with the same settings but
/// [`Restart::Empty`]'s.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Restart {
    /// AOF with `appendfsync always`: it replays everything it had.
    Kept,
    /// No persistence: empty.
    Empty,
    /// Durable settings, data directory wiped (a new disk, a container
    /// recreated without its volume): empty, no marker.
    Wiped,
    /// Durable settings, restored from a backup taken after it was marked
    /// and before the lock was taken: the old process's marker, no key.
    OldBackup,
    /// Another process answers at the address (a name or a virtual IP now
    /// leading to a standby, a proxy): one that has run far longer than
    /// the quarantine, without the lock's key or our marker.
    Swapped,
    /// Restarted empty, and its wall clock then stepped ahead, far beyond
    /// the quarantine, before the first check: its uptime jumped with it.
    Stepped,
    /// Another process answers at the address, one that has run far
    /// longer than the quarantine and carries our marker naming it with no
    /// loss, written for another node list (a spare on which `redquorum
    /// init` ran alone): none of our keys.
    Adopted,
}

impl Restart {
    /// Whether the node keeps its keys.
    pub(crate) fn keeps_keys(self) -> bool {
        self == Restart::Kept
    }

    /// Whether the marker of the process before survives.
    fn keeps_marker(self) -> bool {
        matches!(self, Restart::Kept | Restart::OldBackup)
    }

    /// What the process's uptime reads beyond the time since the fault,
    /// in the uptime's grains.
    pub(crate) fn uptime_offset(self) -> u64 {
        match self {
            Restart::Swapped | Restart::Adopted => 200,
            Restart::Stepped => 60,
            _ => 0,
        }
    }
}

/// Our deployment's tag, on the markers of the members that kept theirs.
const OURS: &str = "ours";

/// What the crate's connection check decides (`check.rs`): the table
/// ([`assess`]), then whose writes the process holds (`tags.rs`), judged
/// by the tags on a majority of three members, the other two carrying
/// ours.
pub(crate) fn checked(probe: &Probe, seen: &Memory, q: u64) -> Assessment {
    let belongs = match &probe.marker {
        Some(Marker::Found { tags: own, .. }) => {
            let sets = [
                Some(vec![OURS.to_owned()]),
                Some(vec![OURS.to_owned()]),
                Some(own.clone().unwrap_or_default()),
            ];
            tags::belongs(own.as_deref(), &tags::ours(&sets, sets.len()))
        }
        _ => Some(true),
    };
    tags::judged(assess(probe, seen, q), probe, seen, q, belongs)
}

/// A detection rule: the crate's ([`checked`]), or a mutant (the table
/// alone, [`assess`], is the rule before tags).
pub(crate) type Detect = fn(&Probe, &Memory, u64) -> Assessment;

/// What the connection check after a restart of `kind` concludes, by
/// `detect`, for a client that saw nothing of the node before (the client
/// that can tell least), the process reporting `uptime` (in the uptime's
/// grains, as `quarantine` is).
pub(crate) fn check_after(
    detect: Detect,
    kind: Restart,
    uptime: u64,
    quarantine: u64,
) -> Assessment {
    let found = |run: &str, tag: &str| Marker::Found {
        run: run.into(),
        loss: None,
        seen: Some(0),
        repl: Some("h".into()),
        slots: None,
        served: false,
        why: None,
        tags: Some(vec![tag.into()]),
    };
    let marker = match kind {
        Restart::Adopted => Some(found("after", "theirs")),
        _ => kind.keeps_marker().then(|| found("before", OURS)),
    };
    let probe = Probe {
        run_id: "after".into(),
        uptime,
        damage: Some(0),
        epoch: 0,
        promoted: false,
        replid: "h".into(),
        durable: Some(kind != Restart::Empty),
        evicted: Some(0),
        commands: None,
        times: None,
        evicts: false,
        slots: None,
        marker,
    };
    detect(&probe, &Memory::default(), quarantine)
}

/// Whether the connection check right after a restart of `kind` finds a
/// loss (see [`check_after`]).
pub(crate) fn restart_seen_as_loss(detect: Detect, kind: Restart, quarantine: u64) -> bool {
    check_after(detect, kind, 0, quarantine).loss.is_some()
}

/// The dating rule before "from our sight" (a mutant): a loss without a
/// moment dated from the process's start by its uptime, a marker's loss by
/// the uptime second it records.
pub(crate) fn dated_by_uptime(probe: &Probe, seen: &Memory, q: u64) -> Assessment {
    assess_dated(probe, seen, q, Dating::Uptime)
}

/// The rule before trust from evidence (a mutant): a durable node that
/// started within the quarantine, with no marker or another process's
/// marker recording no loss, was trusted as having replayed everything.
pub(crate) fn trusts_durable_settings(probe: &Probe, seen: &Memory, q: u64) -> Assessment {
    let recent = probe.uptime < q;
    let lossless = match &probe.marker {
        None => true,
        Some(Marker::Found { run, loss, .. }) => *run != probe.run_id && loss.is_none(),
        Some(Marker::Corrupt) => false,
    };
    if probe.durable == Some(true) && recent && lossless {
        return Assessment {
            loss: None,
            cause: None,
            remaining: 0,
        };
    }
    checked(probe, seen, q)
}
