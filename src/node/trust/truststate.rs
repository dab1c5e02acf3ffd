//! The part of a node's [`Trust`](super::Trust) read off the hot
//! path, and the rules that set a quarantine's start and end: on our clock,
//! on the node's too (`nodebound.rs`), and on a majority of the members'
//! (`panel.rs`).

use std::time::{Duration, Instant};

use crate::node::trust::amnesia::Cause;
use crate::node::trust::evidence::{MarkerId, Probe};
use crate::node::trust::nodebound::NodeBound;
use crate::node::trust::panel::{Panel, Start};

/// The part of [`Trust`](super::Trust) read off the hot path.
#[derive(Clone, Debug, Default)]
pub(crate) struct TrustState {
    /// Whether a probe ever completed.
    pub(crate) probed: bool,
    /// The node's process, as of the last probe.
    pub(crate) run_id: String,
    /// Whether our marker named that process after the last probe: what
    /// this client will remember if the marker is gone next time.
    pub(crate) marked: bool,
    /// Our marker as this client last saw it, or wrote it, naming that
    /// process: what each round's read of it is compared with (`vigil.rs`;
    /// `None`: not read in rounds, until the next check).
    pub(crate) expect: Option<MarkerId>,
    /// The last probe, for declaring a new node ([`Trust::declared_new`](super::Trust::declared_new)).
    pub(crate) last: Option<Probe>,
    /// Why the node may lack writes, if it may.
    pub(crate) cause: Option<Cause>,
    /// The end of its quarantine (also after it passed).
    pub(crate) until: Option<Instant>,
    /// When the quarantine on now (or the last one) began, and the node's
    /// clock against it: it is over only once the node's clock shows it
    /// too (see `nodebound.rs`).
    pub(super) bound: NodeBound,
    /// Whether its end was logged.
    pub(super) left_logged: bool,
    /// Whether the quarantine on now is (also) for a clock that ran ahead.
    pub(crate) clock_ahead: bool,
    /// Whether the process took slots over from another shard (see
    /// [`Trust::slots_received`](super::Trust::slots_received)).
    pub(crate) received: bool,
    /// The loss second the last check found (see [`Assessment::loss`](super::amnesia::Assessment::loss)).
    pub(crate) loss: Option<u64>,
    /// When (our clock) a loss was last found that may have taken keys
    /// this client set on the node before: a restart, a drop, a flush, a
    /// marker gone, found by a check or while connected. A held lock whose
    /// quorum needed the node's yes from before then is cut.
    pub(crate) lost_at: Option<tokio::time::Instant>,
    /// When this client first saw the loss `loss` names, and when its
    /// quarantine for it ends: the quarantine counts from that first
    /// sight, on our clock, whatever later checks find (see `amnesia.rs`).
    pub(super) sight: Option<(Instant, Instant)>,
    /// The members' clocks, which must show a quarantine over too (see
    /// `panel.rs`; `None`: not asked).
    pub(crate) panel: Option<std::sync::Arc<Panel>>,
    /// Where they stood when the quarantine on now (or the last one) began.
    pub(super) start: Start,
}

impl TrustState {
    /// A loss found at `now` (a clock that ran ahead, keys dropped while
    /// connected, slots taken over): the quarantine lasts until `until` at
    /// least, and the node's clock counts it from `now`, also where one was
    /// on. What the node's clock showed before must not count toward its
    /// end: a step forward, the very loss a clock that ran ahead is, would
    /// end a quarantine at once on the node's clock, and a client whose own
    /// clock runs fast would then end it early (`nodebound.rs`). Every
    /// caller's `until` is a whole quarantine from `now`, so counting from
    /// `now` never asks less of the node's clock than before.
    pub(crate) fn extend(&mut self, until: Instant, now: Instant) {
        self.begin(now);
        if self.until.is_none_or(|u| u < until) {
            self.until = Some(until);
            self.left_logged = false;
        }
    }

    /// A quarantine begins at `now` unless one is on.
    pub(crate) fn begin_if_off(&mut self, now: Instant) {
        if self.until.is_none_or(|u| u <= now) {
            self.begin(now);
        }
    }

    /// A quarantine begins at `now`, on the node's clock and the members'.
    fn begin(&mut self, now: Instant) {
        self.bound.begin(now);
        if let Some(panel) = &self.panel {
            self.start = panel.start(now);
        }
    }

    /// A connection's check found a quarantine to last until `until`, from
    /// `at`: set outright, not only raised (a check of another process may
    /// end one sooner), dated on the node's clock from `at` unless one was
    /// on (a check of the same loss, each second, must not move its start).
    pub(crate) fn checked_until(&mut self, until: Instant, at: Instant) {
        self.begin_if_off(at);
        self.until = Some(until);
        self.left_logged = false;
    }

    /// A reading of the node's clock (see [`Trust::node_time`](super::Trust::node_time)).
    pub(crate) fn node_reading(
        &mut self,
        before: Option<(Instant, u64)>,
        reading: (Instant, u64),
        allowance: f64,
    ) {
        self.bound.reading(before, reading, allowance);
    }

    /// The quarantine's end, about, if it is still on at `now`: on our
    /// clock, or, once over there, on the node's too; `read`: whether the
    /// node's clock was ever read.
    pub(crate) fn on_at(&self, now: Instant, read: bool) -> Option<Instant> {
        match self.until {
            Some(u) if u > now => Some(u),
            Some(_) => self.node_left(read).map(|left| now + left),
            None => None,
        }
    }

    /// How much longer, about, the node's clock and a majority of the
    /// members' must run before the quarantine is over on them too
    /// (`None`: it is); `read`: whether the node's clock was ever read.
    pub(crate) fn node_left(&self, read: bool) -> Option<Duration> {
        let length = self.until?.saturating_duration_since(self.bound.since()?);
        let members = self
            .panel
            .as_ref()
            .and_then(|p| p.left(&self.start, length));
        self.bound.left(length, read).max(members)
    }

    /// Whether this client may vouch to others that the quarantine on
    /// now (or the last one) is over: a majority of the members' clocks,
    /// two at least, show it (see `panel.rs`).
    pub(crate) fn vouched(&self) -> bool {
        let (Some(until), Some(since)) = (self.until, self.bound.since()) else {
            return false;
        };
        let length = until.saturating_duration_since(since);
        self.panel
            .as_ref()
            .is_some_and(|p| p.vouches(&self.start, length))
    }

    /// Whether this client knows of a loss in the process there (not a
    /// clock that ran ahead) that our marker does not say was served.
    pub(crate) fn loss_unserved(&self) -> bool {
        let served = matches!(
            self.last.as_ref().and_then(|p| p.marker.as_ref()),
            Some(crate::node::trust::evidence::Marker::Found { served: true, .. })
        );
        self.loss.is_some() && self.cause.is_some() && !served
    }
}
