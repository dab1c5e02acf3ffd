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
//! The table ([`assess`]; `loss` is the uptime second from which the
//! process may lack writes, `now` its uptime at the probe):
//!
//! | what the probe finds | loss | why |
//! |---|---|---|
//! | `INFO` refused | now | nothing about the node can be told |
//! | something unreadable at our marker's key | now | our evidence was overwritten |
//! | our marker names this process, but keys were dropped since it was written (damage count grew or was reset), or, on a Redis Cluster's shard, it took slots over (its epoch grew), or its replication history changed (a promotion), or the loss it records lies in the future | now | lost at an unknown moment up to now |
//! | a Redis Cluster's shard serving a slot our marker does not record, whatever else the marker says | now | it took the slot over since, and the shard it left may have lost writes that nothing on this one shows |
//! | our marker names this process, and this client saw another process there before | start (0) | a restart this client saw: the process may lack what the one before it had |
//! | our marker names this process, otherwise | as recorded | the marker is the process's history |
//! | another process's marker, replica promoted | now | it lacks what replication had not copied at an unknown moment |
//! | another process's marker, keys dropped in this process | now | as above |
//! | another process's marker, otherwise | start (0) | a restart or a restore: the data it loaded may be older than the process before it (an old backup, a lost disk); a complete replay looks the same |
//! | no marker, this client saw this process marked | now | our marker was deleted |
//! | no marker, replica promoted or keys dropped | now | as above |
//! | no marker, a Redis Cluster's shard | now | slots it took over brought whatever their shard had lost, whenever that was (a slot below its lowest also moves our marker's key) |
//! | no marker, otherwise | start (0) | new to us, or restarted without its data: the two look the same |
//!
//! A `loss` makes the node *suspect* for counters for as long as its process
//! lives (time does not heal a counter: see `counter.rs`), and keeps it out
//! of lock quorums until its uptime reaches `loss + quarantine + 1`: by
//! then every lock it may have forgotten has expired (no client uses a TTL
//! above the quarantine). The extra second is the uptime's grain: Redis
//! reports it as the difference of two wall-clock readings, each cut to a
//! whole second, so it may run up to (not including) one second ahead of
//! the time that passed. A node started at x.97 s reports an uptime of 1 at
//! (x+1).02 s, 50 ms later; without the margin, its quarantine would end
//! almost a second early.
//!
//! So a node that has run longer than the quarantine with nothing dropped
//! counts for locks at once, whatever else it lost at its start: a lock it
//! forgot was taken before that start and has expired. A freshly started
//! node with none of our marks waits out the quarantine (it may be a node
//! whose data directory was wiped) unless an operator declares it new
//! ([`init_new`]). Deleting our marker and then `CONFIG RESETSTAT` after
//! a `FLUSHALL` erases the evidence: nothing on the node tells that apart.

use crate::node::evidence::{Marker, Probe};
use crate::node::slotset::covered;

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
}

/// What the rule concludes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Assessment {
    /// The uptime second from which the node may lack writes, if any.
    pub(crate) loss: Option<u64>,
    /// Why, when `loss` is set.
    pub(crate) cause: Option<Cause>,
    /// Seconds of quarantine left, counted from the probe (0: counts now).
    pub(crate) remaining: u64,
}

/// The rule, pure: what `probe` means to a client that remembers `seen`,
/// with `quarantine` seconds of quarantine. See the module docs' table.
pub(crate) fn assess(probe: &Probe, seen: &Memory, quarantine: u64) -> Assessment {
    let now = probe.uptime;
    let restart_seen = !seen.run_id.is_empty() && seen.run_id != probe.run_id;
    let dropped_since_start = probe.damage != Some(0);
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
                ..
            }) if *run == probe.run_id => {
                if loss.is_some_and(|l| l > now) {
                    (Some(now), Some(Cause::Corrupt))
                } else if probe.seen() != Some(damage.unwrap_or(0)) {
                    (Some(now), Some(Cause::Dropped))
                } else if repl.as_ref().is_some_and(|r| *r != probe.replid) {
                    (Some(now), Some(Cause::Promoted))
                } else if restart_seen {
                    (Some(0), Some(Cause::Restarted))
                } else {
                    (*loss, loss.map(|_| Cause::Marked))
                }
            }
            Some(Marker::Found { .. }) if probe.promoted => (Some(now), Some(Cause::Promoted)),
            Some(Marker::Found { .. }) if dropped_since_start => (Some(now), Some(Cause::Dropped)),
            Some(Marker::Found { .. }) => (Some(0), Some(Cause::Restarted)),
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
            None if restart_seen => (Some(0), Some(Cause::Restarted)),
            None => (Some(0), Some(Cause::Unmarked)),
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
        ) if loss != Some(now) && !covered(serves, had) => (Some(now), Some(Cause::Received)),
        _ => (loss, cause),
    };
    // One second more than the readings say: see the module docs. A loss
    // is never after the probe (checked above), so this stays within
    // `quarantine + 1`.
    let remaining = loss.map_or(0, |l| {
        l.saturating_add(quarantine)
            .saturating_add(1)
            .saturating_sub(now)
    });
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
        Probe {
            run_id: run_id.into(),
            uptime,
            damage: Some(0),
            epoch: 0,
            promoted: false,
            replid: "h".into(),
            durable: Some(true),
            evicted: Some(0),
            commands: None,
            evicts: false,
            slots: None,
            marker: marker.map(|(run, loss)| Marker::Found {
                run: run.into(),
                loss,
                seen: Some(0),
                repl: Some("h".into()),
                slots: None,
            }),
        }
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
        assert_eq!(took.remaining, q + 1);
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
        assert_eq!(
            (other.loss, other.cause),
            (Some(500), Some(Cause::Received))
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
            (Some(0), 0),
            "a node: from its start"
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
        }
    }

    fn verdict(p: &Probe, m: &Memory) -> (Option<u64>, Option<Cause>, u64) {
        let a = assess(p, m, 60);
        (a.loss, a.cause, a.remaining)
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
            assert_eq!(verdict(&p, &fresh()), (Some(0), Some(Cause::Restarted), 56));
            // No marker at all: a wiped data directory, or a new node.
            let p = Probe {
                durable,
                ..probe("r2", 5, None)
            };
            assert_eq!(verdict(&p, &fresh()), (Some(0), Some(Cause::Unmarked), 56));
        }
    }

    #[test]
    fn a_restart_this_client_saw_is_a_loss_whatever_the_marker_says() {
        // Another client (an earlier version, or an operator's init on a
        // wiped node) marked the new process as having lost nothing.
        assert_eq!(
            verdict(&probe("r2", 5, Some(("r2", None))), &saw("r1")),
            (Some(0), Some(Cause::Restarted), 56)
        );
        assert_eq!(
            verdict(&probe("r2", 5, None), &saw("r1")),
            (Some(0), Some(Cause::Restarted), 56)
        );
    }

    #[test]
    fn a_long_running_node_with_nothing_dropped_counts_for_locks_at_once() {
        // Whatever it lost, it lost at its start, more than a quarantine
        // ago; still suspect for counters.
        assert_eq!(
            verdict(&probe("r1", 1000, None), &fresh()),
            (Some(0), Some(Cause::Unmarked), 0)
        );
        assert_eq!(
            verdict(&probe("r2", 1000, Some(("r1", None))), &fresh()),
            (Some(0), Some(Cause::Restarted), 0)
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
                (Some(1000), Some(Cause::Dropped), 61)
            );
            assert_eq!(
                verdict(&dropped(Some(("r0", None)), damage), &fresh()),
                (Some(1000), Some(Cause::Dropped), 61)
            );
        }
        // Marked with 0 seen, 3 now; or the statistics were reset.
        let mut p = dropped(Some(("r1", None)), Some(3));
        assert_eq!(
            verdict(&p, &fresh()),
            (Some(1000), Some(Cause::Dropped), 61)
        );
        if let Some(Marker::Found { seen, .. }) = &mut p.marker {
            *seen = Some(5);
        }
        assert_eq!(
            verdict(&p, &fresh()),
            (Some(1000), Some(Cause::Dropped), 61)
        );
        // Marked after the drops: the marker's word stands.
        if let Some(Marker::Found { seen, .. }) = &mut p.marker {
            *seen = Some(3);
        }
        assert_eq!(verdict(&p, &fresh()), (None, None, 0));
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
                (Some(1000), Some(Cause::Promoted), 61)
            );
        }
        // Marked under another replication history.
        assert_eq!(
            verdict(&promoted(Some(("r1", None))), &fresh()),
            (Some(1000), Some(Cause::Promoted), 61)
        );
    }

    #[test]
    fn a_marker_gone_from_a_process_we_saw_marked_is_a_loss_from_now() {
        assert_eq!(
            verdict(&probe("r1", 1000, None), &saw("r1")),
            (Some(1000), Some(Cause::MarkerGone), 61)
        );
    }

    #[test]
    fn a_corrupt_marker_is_a_loss_and_never_overflows() {
        let p = Probe {
            marker: Some(Marker::Corrupt),
            ..probe("r1", 7, None)
        };
        assert_eq!(verdict(&p, &fresh()), (Some(7), Some(Cause::Corrupt), 61));
        // A loss second after the uptime (near u64::MAX, say) is not ours.
        let p = probe("r1", 7, Some(("r1", Some(u64::MAX - 3))));
        assert_eq!(verdict(&p, &fresh()), (Some(7), Some(Cause::Corrupt), 61));
        assert_eq!(assess(&p, &fresh(), u64::MAX).remaining, u64::MAX - 7);
    }

    #[test]
    fn a_later_client_keeps_the_quarantine_the_marker_records() {
        assert_eq!(
            verdict(&probe("r2", 20, Some(("r2", Some(0)))), &fresh()),
            (Some(0), Some(Cause::Marked), 41)
        );
        // Over, but still suspect for the counter.
        assert_eq!(
            verdict(&probe("r2", 90, Some(("r2", Some(0)))), &fresh()).2,
            0
        );
    }

    #[test]
    fn without_info_nothing_is_trusted() {
        let p = Probe {
            run_id: String::new(),
            ..probe("", 0, None)
        };
        assert_eq!(verdict(&p, &fresh()), (Some(0), Some(Cause::Unknown), 61));
    }

    /// Redis's uptime at wall-clock instant `at_ms` of a process started
    /// at `start_ms`: the difference of the two instants, each cut to a
    /// whole second.
    fn uptime(start_ms: u64, at_ms: u64) -> u64 {
        at_ms / 1000 - start_ms / 1000
    }

    #[test]
    fn the_quarantine_never_ends_early_whatever_the_uptime_grain() {
        // Every start within a second (10 ms steps), every probe up to 5 s
        // later (7 ms steps): the quarantine a probe computes ends no
        // earlier than `quarantine` after the loss. Without the margin
        // second, a start at 0.99 s probed at 1.0 s ends it 0.99 s early.
        let q = 3;
        for start in (0..1000).step_by(10) {
            for delay in (1..5000).step_by(7) {
                let at = start + delay;
                // Restarted empty: lost everything from its start.
                let a = assess(&probe("r2", uptime(start, at), None), &fresh(), q);
                assert!(
                    at + a.remaining * 1000 >= start + q * 1000,
                    "started at {start} ms, probed at {at} ms: {} s left",
                    a.remaining
                );
                // Marker gone at `at`: lost what it may from then on; a
                // later client reads the loss second from the marker.
                let loss = uptime(start, at);
                for later in [at + 1, at + 333, at + 999, at + 1500] {
                    let marker = Some(("r1", Some(loss)));
                    let b = assess(&probe("r1", uptime(start, later), marker), &fresh(), q);
                    assert!(
                        later + b.remaining * 1000 >= at + q * 1000,
                        "marked at {at} ms, probed at {later} ms: {} s left",
                        b.remaining
                    );
                }
            }
        }
    }
}
