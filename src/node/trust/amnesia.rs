//! Whether a node may have lost writes we were told it made, decided from
//! evidence (see [`evidence`](super::evidence) for what a connection's
//! probe reads), and the rule that keeps such a node from counting for a
//! while.
//!
//! Only what the node holds and what it reports about its own history
//! count, never its persistence settings: `appendfsync always` says what a
//! node would keep, not that its files survived (a new disk, a container
//! recreated without its volume, a restored backup). The one thing that
//! proves a process kept our writes is our marker naming *that process*,
//! written by a client that found no loss, with no key dropped since.
//!
//! Every loss is dated when *this client* first saw its evidence, on its
//! own monotonic clock, never by the node's uptime: Redis computes
//! `uptime_in_seconds` from its wall clock (a clock step moves it), and it
//! says when the process started, not when it appeared at this address (a
//! DNS name, a virtual IP, a proxy may lead to a process that has long
//! run elsewhere).
//!
//! The table ([`assess`]; `loss` identifies the loss, as the uptime second
//! at which a client first found it; "now" is the probe's):
//!
//! | what the probe finds | loss | why |
//! |---|---|---|
//! | `INFO` refused | now | nothing about the node can be told |
//! | something unreadable at our marker's key (not a refusal for the moment: a node loading its data or a cluster not yet serving gives no probe, and is probed again) | now | our evidence was overwritten |
//! | our marker names this process, but keys were dropped since it was written (damage count grew or was reset), or, on a Redis Cluster's shard, it took slots over (its epoch grew), or its replication history changed (a promotion), or the loss it records lies in the future | now | lost at an unknown moment up to now |
//! | a Redis Cluster's shard serving a slot our marker does not record, whatever else the marker says | now | it took the slot over since, and the shard it left may have lost writes that nothing on this one shows |
//! | our marker names this process, and this client saw another process there before, unless the marker says a client served the quarantine | now | a restart this client saw: the process may lack what the one before it had |
//! | our marker names this process, otherwise | as recorded | the marker is the process's history |
//! | another process's marker, replica promoted | now | it lacks what replication had not copied at an unknown moment |
//! | another process's marker, keys dropped in this process | now | as above |
//! | another process's marker, otherwise | now | a restart, a restore or another process at the address: the data it holds may be older than the process before it (an old backup, a lost disk); a complete replay looks the same |
//! | no marker, this client saw this process marked | now | our marker was deleted |
//! | no marker, replica promoted or keys dropped | now | as above |
//! | no marker, otherwise | now | new to us, or restarted without its data: the two look the same |
//!
//! Where this client already found a loss in the same process (with no
//! new evidence since, and its marker not yet written), that loss stands:
//! it is the same one, dated when first seen.
//!
//! The check then asks whose writes the process holds (`tags.rs`): one
//! that would count at once, but whose marker carries none of our
//! deployment's tags, is foreign, a loss from now.
//!
//! A `loss` makes the node *suspect* for counters for as long as its process
//! lives (time does not heal a counter: see `counter/mod.rs`), and keeps it out
//! of lock quorums for `quarantine` from when this client first saw it (see
//! `node/trust/mod.rs`): by then every lock it may have forgotten has expired (no
//! client uses a TTL above the quarantine). A loss the marker records
//! (found by another client, at a moment this one cannot date) is served
//! the same way, from this client's first sight of it, unless the marker
//! says it was *served*: a client that saw the same loss in the same
//! process, with nothing dropped since, watched a whole quarantine pass on
//! its own clock and wrote so ([`Marker::Found::served`]).
//!
//! So a node that has run for years but is new to our marker waits out a
//! quarantine once, from the first client's first look; later clients
//! count it at once when that client stayed to serve it, and otherwise
//! wait one quarantine from their own first look. A freshly started node
//! with none of our marks waits as well (it may be a node whose data
//! directory was wiped) unless an operator declares it new
//! (`redquorum init`). Deleting our marker and then `CONFIG RESETSTAT`
//! after a `FLUSHALL` erases the evidence: nothing on the node tells that
//! apart.

use crate::node::cluster::slotset::covered;
use crate::node::trust::evidence::{Marker, Probe};

/// Why a node may lack writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cause {
    /// `INFO` was refused: nothing about the node can be told.
    Unknown,
    /// Something we cannot read sits at our marker's key.
    Corrupt,
    /// Keys were evicted, or a database flushed or swapped, in this
    /// process (or its statistics were reset).
    Dropped,
    /// A replica was promoted in its master's place.
    Promoted,
    /// Our marker vanished from a process this client had seen marked.
    MarkerGone,
    /// A new process loaded data carrying another process's marker: a
    /// restart or a restore, whatever its persistence settings.
    Restarted,
    /// No marker of ours: new to us, or restarted without its data.
    Unmarked,
    /// An earlier client found one of the above (the marker says so).
    Marked,
    /// A shard of a Redis Cluster took slots over from another shard,
    /// whose keys may have lost writes there (see `shard_rules.rs`).
    Received,
    /// Our marker names the process, but not as our deployment's: marked
    /// by another node list, it never had our writes (see `tags.rs`).
    Foreign,
}

impl Cause {
    /// The word our marker records (`why`); `redquorum init` looks for
    /// `unmarked`.
    pub(crate) fn tag(self) -> &'static str {
        match self {
            Cause::Unknown => "unknown",
            Cause::Corrupt => "corrupt",
            Cause::Dropped => "dropped",
            Cause::Promoted => "promoted",
            Cause::MarkerGone => "marker gone",
            Cause::Restarted => "restarted",
            Cause::Unmarked => "unmarked",
            Cause::Marked => "marked",
            Cause::Received => "received",
            Cause::Foreign => "foreign",
        }
    }

    /// Words for logs and errors.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Cause::Unknown => "may not run INFO, so a restart cannot be seen",
            Cause::Corrupt => "holds something we cannot read at our marker's key",
            Cause::Dropped => "evicted keys or flushed a database since we marked it",
            Cause::Promoted => "is a replica promoted in its master's place",
            Cause::MarkerGone => "lost the marker we saw there",
            Cause::Restarted => {
                "restarted, and nothing on it proves the data it loaded is complete \
                 (persistence settings are not proof)"
            }
            Cause::Unmarked => {
                "carries none of our marks: new, restarted without its data, or a cluster's \
                 shard given slots (for nodes you know are new, not wiped: `redquorum init`)"
            }
            Cause::Marked => "may have lost writes (found by another client)",
            Cause::Received => {
                "took slots over from another shard, and writes lost there (a failover, \
                 a restart without data) moved with them"
            }
            Cause::Foreign => {
                "carries our marker from another node list (a spare marked by `redquorum init` \
                 alone, another deployment's node), so it never had our writes"
            }
        }
    }
}

/// What this client remembers of a node from its previous connections.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Memory {
    /// The process it saw last (empty: none yet).
    pub(crate) run_id: String,
    /// Whether our marker named that process (found or written by us).
    pub(crate) marked: bool,
    /// The loss its last check of that process found, if any.
    pub(crate) loss: Option<u64>,
}

/// What the rule concludes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Assessment {
    /// The loss, as the uptime second at which a client first found it
    /// (what our marker records), if any.
    pub(crate) loss: Option<u64>,
    /// Why, when `loss` is set.
    pub(crate) cause: Option<Cause>,
    /// Seconds of quarantine, counted from this client's first sight of
    /// the loss (0: counts now).
    pub(crate) remaining: u64,
}

/// How a loss without a moment is dated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dating {
    /// When this client first saw the evidence (as shipped).
    Sight,
    /// The rule before (a mutant for the models): from the process's
    /// start by its uptime, and a marker's loss by its uptime second.
    #[cfg_attr(not(test), allow(dead_code))]
    Uptime,
}

/// The rule, pure: what `probe` means to a client that remembers `seen`,
/// with `quarantine` seconds of quarantine. See the module docs' table.
pub(crate) fn assess(probe: &Probe, seen: &Memory, quarantine: u64) -> Assessment {
    assess_dated(probe, seen, quarantine, Dating::Sight)
}

/// [`assess`], with losses dated by `dating`.
pub(crate) fn assess_dated(
    probe: &Probe,
    seen: &Memory,
    quarantine: u64,
    dating: Dating,
) -> Assessment {
    let now = probe.uptime;
    let same = !seen.run_id.is_empty() && seen.run_id == probe.run_id;
    let restart_seen = !seen.run_id.is_empty() && !same;
    let dropped_since_start = probe.damage != Some(0);
    // A loss found without a moment: the one this client found in the same
    // process already, or now.
    let (sighted, start) = match dating {
        Dating::Sight => (seen.loss.filter(|_| same).unwrap_or(now), now),
        Dating::Uptime => (0, 0),
    };
    let mut served = false;
    let (loss, cause) = if probe.run_id.is_empty() {
        (Some(now), Some(Cause::Unknown))
    } else {
        match &probe.marker {
            Some(Marker::Corrupt) => (Some(now), Some(Cause::Corrupt)),
            Some(Marker::Found {
                run,
                loss,
                seen: damage,
                repl,
                served: s,
                ..
            }) if *run == probe.run_id => {
                if loss.is_some_and(|l| l > now) {
                    (Some(now), Some(Cause::Corrupt))
                } else if probe.seen() != Some(damage.unwrap_or(0)) {
                    (Some(now), Some(Cause::Dropped))
                } else if repl.as_ref().is_some_and(|r| *r != probe.replid) {
                    (Some(now), Some(Cause::Promoted))
                } else if restart_seen && !(*s && loss.is_some()) {
                    (Some(start), Some(Cause::Restarted))
                } else {
                    served = *s;
                    (*loss, loss.map(|_| Cause::Marked))
                }
            }
            Some(Marker::Found { .. }) if probe.promoted => (Some(now), Some(Cause::Promoted)),
            Some(Marker::Found { .. }) if dropped_since_start => (Some(now), Some(Cause::Dropped)),
            Some(Marker::Found { .. }) if restart_seen => (Some(start), Some(Cause::Restarted)),
            Some(Marker::Found { .. }) => (Some(sighted), Some(Cause::Restarted)),
            None if seen.marked && !restart_seen => (Some(now), Some(Cause::MarkerGone)),
            None if probe.promoted => (Some(now), Some(Cause::Promoted)),
            None if dropped_since_start => (Some(now), Some(Cause::Dropped)),
            // A shard's data is not all its own since its start: slots it
            // took over bring their losses (and one below its lowest moves
            // our marker's key, so no marker is found). One we saw restart
            // says so, so that `redquorum init` cannot declare it new.
            None if probe.slots.is_some() => {
                let cause = if restart_seen {
                    Cause::Restarted
                } else {
                    Cause::Unmarked
                };
                (Some(now), Some(cause))
            }
            None if restart_seen => (Some(start), Some(Cause::Restarted)),
            None => (Some(sighted), Some(Cause::Unmarked)),
        }
    };
    // A shard serving a slot our marker did not record took it over since,
    // with whatever the shard it left had lost: from now, unless a verdict
    // already says now.
    let (loss, cause) = match (&probe.slots, &probe.marker) {
        (
            Some(serves),
            Some(Marker::Found {
                slots: Some(had), ..
            }),
        ) if loss != Some(now) && !covered(serves, had) => {
            served = false;
            (Some(now), Some(Cause::Received))
        }
        _ => (loss, cause),
    };
    let remaining = match (loss, dating) {
        (None, _) => 0,
        (Some(_), Dating::Sight) if served => 0,
        (Some(_), Dating::Sight) => quarantine,
        // One second more than the readings say, for the uptime's grain
        // (a loss is never after the probe: checked above).
        (Some(l), Dating::Uptime) => l
            .saturating_add(quarantine)
            .saturating_add(1)
            .saturating_sub(now),
    };
    Assessment {
        loss,
        cause,
        remaining,
    }
}

/// How a link checks its new connections.
#[derive(Clone, Debug)]
pub(crate) struct AmnesiaCheck {
    /// The quarantine, in whole seconds (rounded up).
    pub(crate) quarantine_secs: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A probe of process `run_id` at `uptime` s, with nothing dropped and
    /// replication history `h`, finding `marker` (`run`, `loss`).
    fn probe(run_id: &str, uptime: u64, marker: Option<(&str, Option<u64>)>) -> Probe {
        Probe::sample(run_id, uptime, marker)
    }

    /// [`probe`] of a cluster's shard that serves `serves`, finding a
    /// marker that recorded `had`.
    fn shard(marker: Option<(&str, Option<u64>)>, serves: &str, had: Option<&str>) -> Probe {
        let mut p = probe("r", 500, marker);
        p.slots = Some(serves.into());
        if let Some(Marker::Found { slots, .. }) = &mut p.marker {
            *slots = had.map(Into::into);
        }
        p
    }

    #[test]
    fn a_shard_serving_a_slot_its_marker_lacks_took_it_over_now() {
        let q = 60;
        // Its marker, this process, no loss: the slots it served then.
        let same = assess(&shard(Some(("r", None)), "0-99", Some("0-99")), &fresh(), q);
        assert_eq!((same.loss, same.cause), (None, None));
        let gave = assess(&shard(Some(("r", None)), "0-9", Some("0-99")), &fresh(), q);
        assert_eq!(
            (gave.loss, gave.cause),
            (None, None),
            "giving slots away loses nothing"
        );
        let took = assess(
            &shard(Some(("r", None)), "0-100", Some("0-99")),
            &fresh(),
            q,
        );
        assert_eq!((took.loss, took.cause), (Some(500), Some(Cause::Received)));
        assert_eq!(took.remaining, q);
        // Whatever else the marker says: an older loss, another process.
        let marked = assess(&shard(Some(("r", Some(480))), "7", Some("")), &fresh(), q);
        assert_eq!(
            (marked.loss, marked.cause),
            (Some(500), Some(Cause::Received))
        );
        let other = assess(
            &shard(Some(("old", None)), "0-100", Some("0-99")),
            &fresh(),
            q,
        );
        // Another process: a restart, dated now all the same.
        assert_eq!(
            (other.loss, other.cause, other.remaining),
            (Some(500), Some(Cause::Restarted), q)
        );
        // A marker of an earlier version records no slots: nothing to go by.
        let old = assess(&shard(Some(("r", None)), "0-100", None), &fresh(), q);
        assert_eq!((old.loss, old.cause), (None, None));
        // No marker on a shard: from now, however long it has run (it may
        // have been given a slot below its lowest, where the marker's key
        // follows it).
        let unmarked = assess(&shard(None, "0-100", None), &fresh(), q);
        assert_eq!(
            (unmarked.loss, unmarked.cause),
            (Some(500), Some(Cause::Unmarked))
        );
        // The same on a shard this client saw restart: said as a restart,
        // which `redquorum init` refuses to declare new.
        let restarted = assess(&shard(None, "0-100", None), &saw("before"), q);
        assert_eq!(
            (restarted.loss, restarted.cause),
            (Some(500), Some(Cause::Restarted))
        );
        let node = assess(&probe("r", 500, None), &fresh(), q);
        assert_eq!(
            (node.loss, node.remaining),
            (Some(500), q),
            "a node: from our sight too"
        );
        // A verdict that already says now keeps its own cause.
        let mut promoted = shard(Some(("old", None)), "0-100", Some("0-99"));
        promoted.promoted = true;
        let p = assess(&promoted, &fresh(), q);
        assert_eq!((p.loss, p.cause), (Some(500), Some(Cause::Promoted)));
    }

    /// A client that saw nothing of the node before.
    fn fresh() -> Memory {
        Memory::default()
    }

    /// A client that saw process `run` marked.
    fn saw(run: &str) -> Memory {
        Memory {
            run_id: run.into(),
            marked: true,
            loss: None,
        }
    }

    fn verdict(p: &Probe, m: &Memory) -> (Option<u64>, Option<Cause>, u64) {
        let a = assess(p, m, 60);
        (a.loss, a.cause, a.remaining)
    }

    /// [`probe`] finding our marker naming `run`, with `loss`, served.
    fn served(run_id: &str, uptime: u64, run: &str, loss: Option<u64>) -> Probe {
        let mut p = probe(run_id, uptime, Some((run, loss)));
        if let Some(Marker::Found { served, .. }) = &mut p.marker {
            *served = true;
        }
        p
    }

    #[test]
    fn only_our_marker_on_this_process_proves_nothing_was_lost() {
        assert_eq!(
            verdict(&probe("r1", 5, Some(("r1", None))), &fresh()),
            (None, None, 0)
        );
        assert_eq!(
            verdict(&probe("r1", 5, Some(("r1", None))), &saw("r1")),
            (None, None, 0)
        );
    }

    #[test]
    fn a_durable_configuration_proves_nothing() {
        // Another process's marker: a restart or a restore from an old
        // backup look the same, whatever the persistence settings say.
        for durable in [Some(true), Some(false), None] {
            let p = Probe {
                durable,
                ..probe("r2", 5, Some(("r1", None)))
            };
            assert_eq!(verdict(&p, &fresh()), (Some(5), Some(Cause::Restarted), 60));
            // No marker at all: a wiped data directory, or a new node.
            let p = Probe {
                durable,
                ..probe("r2", 5, None)
            };
            assert_eq!(verdict(&p, &fresh()), (Some(5), Some(Cause::Unmarked), 60));
        }
    }

    #[test]
    fn a_restart_this_client_saw_is_a_loss_whatever_the_marker_says() {
        // Another client (an earlier version, or an operator's init on a
        // wiped node) marked the new process as having lost nothing.
        assert_eq!(
            verdict(&probe("r2", 5, Some(("r2", None))), &saw("r1")),
            (Some(5), Some(Cause::Restarted), 60)
        );
        assert_eq!(
            verdict(&probe("r2", 5, None), &saw("r1")),
            (Some(5), Some(Cause::Restarted), 60)
        );
        // Unless a client served the loss it recorded in that process.
        assert_eq!(
            verdict(&served("r2", 5, "r2", Some(2)), &saw("r1")),
            (Some(2), Some(Cause::Marked), 0)
        );
    }

    #[test]
    fn a_process_is_dated_from_our_sight_however_long_it_has_run() {
        // A process that has run for a long time elsewhere (a name now
        // leading to a standby, a proxy), or whose uptime jumped with its
        // wall clock: nothing it reports dates the loss.
        for uptime in [1000, 1_000_000] {
            assert_eq!(
                verdict(&probe("r1", uptime, None), &fresh()),
                (Some(uptime), Some(Cause::Unmarked), 60)
            );
            assert_eq!(
                verdict(&probe("r2", uptime, Some(("r1", None))), &fresh()),
                (Some(uptime), Some(Cause::Restarted), 60)
            );
            assert_eq!(
                verdict(&probe("r2", uptime, None), &saw("r1")),
                (Some(uptime), Some(Cause::Restarted), 60)
            );
        }
        // The rule before, kept for the models: from the process's start.
        let old = assess_dated(&probe("r1", 1000, None), &fresh(), 60, Dating::Uptime);
        assert_eq!((old.loss, old.remaining), (Some(0), 0));
    }

    #[test]
    fn a_loss_this_client_found_in_the_process_stays_the_same_loss() {
        // Our marker could not be written: the next check of the same
        // process finds the same loss, not a new one each time.
        let again = Memory {
            run_id: "r1".into(),
            marked: false,
            loss: Some(40),
        };
        assert_eq!(
            verdict(&probe("r1", 45, None), &again),
            (Some(40), Some(Cause::Unmarked), 60)
        );
        assert_eq!(
            verdict(&probe("r1", 45, Some(("r0", None))), &again),
            (Some(40), Some(Cause::Restarted), 60)
        );
        // Another process: a new loss.
        assert_eq!(
            verdict(&probe("r2", 45, None), &again),
            (Some(45), Some(Cause::Restarted), 60)
        );
    }

    #[test]
    fn keys_dropped_in_the_process_are_a_loss_from_now() {
        let dropped = |marker, damage| Probe {
            damage,
            ..probe("r1", 1000, marker)
        };
        // Never marked, something was flushed or evicted (or the counts
        // cannot be read): when is unknown.
        for damage in [Some(3), None] {
            assert_eq!(
                verdict(&dropped(None, damage), &fresh()),
                (Some(1000), Some(Cause::Dropped), 60)
            );
            assert_eq!(
                verdict(&dropped(Some(("r0", None)), damage), &fresh()),
                (Some(1000), Some(Cause::Dropped), 60)
            );
        }
        // Marked with 0 seen, 3 now; or the statistics were reset.
        let mut p = dropped(Some(("r1", None)), Some(3));
        assert_eq!(
            verdict(&p, &fresh()),
            (Some(1000), Some(Cause::Dropped), 60)
        );
        if let Some(Marker::Found { seen, .. }) = &mut p.marker {
            *seen = Some(5);
        }
        assert_eq!(
            verdict(&p, &fresh()),
            (Some(1000), Some(Cause::Dropped), 60)
        );
        // Marked after the drops: the marker's word stands.
        if let Some(Marker::Found { seen, .. }) = &mut p.marker {
            *seen = Some(3);
        }
        assert_eq!(verdict(&p, &fresh()), (None, None, 0));
        // A served loss with keys dropped since: a new loss.
        let mut p = served("r1", 1000, "r1", Some(900));
        p.damage = Some(1);
        assert_eq!(
            verdict(&p, &fresh()),
            (Some(1000), Some(Cause::Dropped), 60)
        );
    }

    #[test]
    fn a_promotion_is_a_loss_from_now() {
        let promoted = |marker| Probe {
            promoted: true,
            replid: "h2".into(),
            ..probe("r1", 1000, marker)
        };
        for marker in [None, Some(("r0", None))] {
            assert_eq!(
                verdict(&promoted(marker), &fresh()),
                (Some(1000), Some(Cause::Promoted), 60)
            );
        }
        // Marked under another replication history.
        assert_eq!(
            verdict(&promoted(Some(("r1", None))), &fresh()),
            (Some(1000), Some(Cause::Promoted), 60)
        );
    }

    #[test]
    fn a_marker_gone_from_a_process_we_saw_marked_is_a_loss_from_now() {
        assert_eq!(
            verdict(&probe("r1", 1000, None), &saw("r1")),
            (Some(1000), Some(Cause::MarkerGone), 60)
        );
    }

    #[test]
    fn a_corrupt_marker_is_a_loss() {
        let p = Probe {
            marker: Some(Marker::Corrupt),
            ..probe("r1", 7, None)
        };
        assert_eq!(verdict(&p, &fresh()), (Some(7), Some(Cause::Corrupt), 60));
        // A loss second after the uptime (near u64::MAX, say) is not ours.
        let p = probe("r1", 7, Some(("r1", Some(u64::MAX - 3))));
        assert_eq!(verdict(&p, &fresh()), (Some(7), Some(Cause::Corrupt), 60));
        assert_eq!(assess(&p, &fresh(), u64::MAX).remaining, u64::MAX);
    }

    #[test]
    fn a_later_client_serves_the_quarantine_the_marker_records_unless_served() {
        // Found by another client at a moment nothing dates: a whole
        // quarantine from this client's sight, however long ago the
        // uptime says it was.
        for uptime in [20, 90, 100_000] {
            assert_eq!(
                verdict(&probe("r2", uptime, Some(("r2", Some(0)))), &fresh()),
                (Some(0), Some(Cause::Marked), 60)
            );
        }
        // Served: counts at once, still suspect for the counter.
        assert_eq!(
            verdict(&served("r2", 20, "r2", Some(0)), &fresh()),
            (Some(0), Some(Cause::Marked), 0)
        );
        // A served mark on another process's marker proves nothing here.
        assert_eq!(
            verdict(&served("r3", 20, "r2", Some(0)), &fresh()),
            (Some(20), Some(Cause::Restarted), 60)
        );
    }

    #[test]
    fn without_info_nothing_is_trusted() {
        let p = Probe {
            run_id: String::new(),
            ..probe("", 0, None)
        };
        assert_eq!(verdict(&p, &fresh()), (Some(0), Some(Cause::Unknown), 60));
    }

    #[test]
    fn a_process_another_node_list_marked_is_a_loss_from_our_first_sight() {
        let trusted = Assessment {
            loss: None,
            cause: None,
            remaining: 0,
        };
        let p = probe("s", 500, None);
        let fresh = Memory::default();
        let a = crate::node::trust::tags::judged(trusted, &p, &fresh, 8, Some(false));
        assert_eq!(
            (a.loss, a.cause, a.remaining),
            (Some(500), Some(Cause::Foreign), 8)
        );
        assert_eq!(
            crate::node::trust::tags::judged(trusted, &p, &fresh, 8, None),
            a,
            "not told yet"
        );
        assert_eq!(
            crate::node::trust::tags::judged(trusted, &p, &fresh, 8, Some(true)),
            trusted
        );
        // The same process seen foreign before: the same loss.
        let saw = Memory {
            run_id: "s".into(),
            marked: true,
            loss: Some(490),
        };
        assert_eq!(
            crate::node::trust::tags::judged(trusted, &p, &saw, 8, Some(false)).loss,
            Some(490)
        );
    }
}
