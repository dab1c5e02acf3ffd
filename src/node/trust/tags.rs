//! Whose writes a node holds. Our marker says what a process kept since a
//! client marked it, not for which node list: a process marked by another
//! deployment (a spare on which `redquorum init` ran alone, a node of
//! another list) carries a marker naming it with no loss, yet it never had
//! our writes. Put behind one of our members' addresses, it would count at
//! once for a client that first looks afterwards, beside a lock it never
//! saw.
//!
//! So each marker also keeps *tags* (`tags`, comma-separated): the
//! deployments whose clients count the process. A deployment's tags are
//! those a majority of its members' markers carry ([`ours`]), as this
//! client last read them; a majority, because addresses do not name a
//! deployment (a service in a container and a tool on the host reach the
//! same nodes by different names), while a majority of the members is
//! what every lock already rests on. A process whose marker carries tags,
//! none of them ours, is *foreign* ([`belongs`]): a loss from this
//! client's first sight of it ([`judged`]), served as any other (a whole
//! quarantine on this client's clock, a majority of the members' clocks
//! showing it over); then this client adds our tag to its marker, and
//! later clients count it at once. Our tag goes into every marker a
//! client writes or finds served, and `redquorum init` writes it on the
//! nodes it declares new.
//!
//! Where no tag is on a majority (a client's first checks, before most
//! members answered; a majority out of reach; members marked by different
//! node lists), a marker with tags is neither ours nor foreign yet: the
//! check waits for the other members' checks, and where they do not tell
//! it, the node is foreign until they do (then it counts at once, if
//! they tell it is ours within its quarantine). Nodes marked by different
//! node lists (each declared new on its own) thus sit out one quarantine,
//! after which they carry one tag; `redquorum init` with the whole node
//! list marks them alike. A marker without the field (written before
//! tags existed) is ours only while a majority of the members carry no
//! tag (the deployment is from before tags too); a field with nothing
//! well-formed in it carries no tag. The tag a client writes
//! ([`Tags::tag`]) is the least of ours, else a random one of its own,
//! never one that only a minority carries (it may be a foreign
//! process's: written on our members, it would make that process ours).

use std::sync::Mutex;
use std::time::Duration;

use crate::mutex;
use crate::node::trust::amnesia::{Assessment, Cause, Memory};
use crate::node::trust::evidence::Probe;

/// Each member's tags (`None`: not read, or no marker).
type Sets = Vec<Option<Vec<String>>>;

/// The tags carried by a majority of `members` members, whose markers
/// carry `sets` (`None`: not read, or no marker), sorted.
pub(crate) fn ours(sets: &[Option<Vec<String>>], members: usize) -> Vec<String> {
    let mut all: Vec<&String> = sets.iter().flatten().flatten().collect();
    all.sort_unstable();
    all.dedup();
    all.into_iter()
        .filter(|t| {
            let on = sets
                .iter()
                .filter(|s| s.as_ref().is_some_and(|s| s.contains(t)))
                .count();
            on * 2 > members
        })
        .cloned()
        .collect()
}

/// Whether a process whose marker carries tags `set` holds our writes, to
/// a client whose deployment's tags are `ours`: yes where it carries one
/// of ours; no where it carries none of ours and ours are known; `None`
/// where they are not. A marker without the field (`set` `None`, written
/// before tags) is not ours once our deployment has tags; while it has
/// none, see [`Tags`] (ours where a majority of the members carry none).
pub(crate) fn belongs(set: Option<&[String]>, ours: &[String]) -> Option<bool> {
    match set {
        Some(set) if set.iter().any(|t| ours.contains(t)) => Some(true),
        _ if ours.is_empty() => None,
        _ => Some(false),
    }
}

/// The rule, pure: the verdict `verdict` on `probe` (by the table in
/// `amnesia.rs`), for a client that remembers `seen`, where the process
/// holds our writes by `belongs` (`None`: could not be told yet). A
/// process that may not hold them and would count at once is foreign: a
/// loss from this client's first sight (the one it found in the same
/// process already, or now), for `quarantine` seconds.
pub(crate) fn judged(
    verdict: Assessment,
    probe: &Probe,
    seen: &Memory,
    quarantine: u64,
    belongs: Option<bool>,
) -> Assessment {
    if belongs == Some(true) || verdict.remaining > 0 || quarantine == 0 {
        return verdict;
    }
    let same = !seen.run_id.is_empty() && seen.run_id == probe.run_id;
    Assessment {
        loss: Some(seen.loss.filter(|_| same).unwrap_or(probe.uptime)),
        cause: Some(Cause::Foreign),
        remaining: quarantine,
    }
}

/// One client's reading of its members' tags.
#[derive(Debug)]
pub(crate) struct Tags {
    /// How many members there are.
    members: usize,
    /// Each member's tags, by its latest check (`None`: none yet, or no
    /// marker), and which members' checks told anything yet.
    sets: Mutex<(Sets, Vec<bool>)>,
    /// Bumped at every change, for checks that wait.
    changed: tokio::sync::watch::Sender<u64>,
    /// A tag of this client's own, where no member carries one yet.
    fresh: String,
}

impl Tags {
    /// The tags of `members` members, none read yet.
    pub(crate) fn new(members: usize) -> Self {
        Self {
            members,
            sets: Mutex::new((vec![None; members], vec![false; members])),
            changed: tokio::sync::watch::Sender::new(0),
            fresh: format!("{:016x}", rand::random::<u64>()),
        }
    }

    /// Member `member`'s marker carries `set` (`None`: it has none).
    pub(crate) fn record(&self, member: usize, set: Option<Vec<String>>) {
        let mut guard = mutex::lock(&self.sets);
        let (sets, told) = &mut *guard;
        if let (Some(s), Some(r)) = (sets.get_mut(member), told.get_mut(member)) {
            *s = set;
            *r = true;
        }
        drop(guard);
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Our tag `tag` was added to member `member`'s marker.
    pub(crate) fn added(&self, member: usize, tag: &str) {
        let mut sets = mutex::lock(&self.sets);
        if let Some(s) = sets.0.get_mut(member) {
            let s = s.get_or_insert_with(Vec::new);
            if !s.iter().any(|t| t == tag) {
                s.push(tag.to_owned());
            }
        }
        drop(sets);
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Whether tags `set` are ours, by the members' tags as read so far;
    /// and whether every member's check told something.
    fn judge(&self, set: Option<&[String]>) -> (Option<bool>, bool) {
        let guard = mutex::lock(&self.sets);
        let (sets, told) = &*guard;
        let all = told.iter().all(|r| *r);
        let ours = ours(sets, self.members);
        // A marker from before tags, where a majority of the members told
        // and none of them carries a tag: the deployment is from before
        // tags too.
        let older = set.is_none()
            && ours.is_empty()
            && told.iter().filter(|r| **r).count() * 2 > self.members
            && sets.iter().flatten().all(Vec::is_empty);
        (
            if older {
                Some(true)
            } else {
                belongs(set, &ours)
            },
            all,
        )
    }

    /// Records member `member`'s `set`, then whether it is ours, waiting
    /// up to `wait` for the other members' checks where that cannot be
    /// told yet (`None`: it still could not).
    pub(crate) async fn settle(
        &self,
        member: usize,
        set: Option<&[String]>,
        wait: Duration,
    ) -> Option<bool> {
        self.record(member, Some(set.unwrap_or_default().to_vec()));
        self.told(set, wait).await
    }

    /// Whether tags `set` are ours, once that can be told, waiting up to
    /// `wait` while some member's check has told nothing yet (`None`: it
    /// still could not).
    pub(crate) async fn told(&self, set: Option<&[String]>, wait: Duration) -> Option<bool> {
        let mut news = self.changed.subscribe();
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            match self.judge(set) {
                (Some(b), _) => return Some(b),
                (None, true) => return None,
                (None, false) => {}
            }
            match tokio::time::timeout_at(deadline, news.changed()).await {
                Ok(Ok(())) => {}
                _ => return None,
            }
        }
    }

    /// The tag this client writes: the least of ours, else its own (never
    /// one that only a minority carries: that may be a foreign process's,
    /// and would make it ours).
    pub(crate) fn tag(&self) -> String {
        let sets = mutex::lock(&self.sets);
        ours(&sets.0, self.members)
            .into_iter()
            .next()
            .unwrap_or_else(|| self.fresh.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(tags: &[&str]) -> Option<Vec<String>> {
        Some(tags.iter().map(|t| (*t).to_owned()).collect())
    }

    fn v(tags: &[&str]) -> Vec<String> {
        tags.iter().map(|t| (*t).to_owned()).collect()
    }

    #[test]
    fn ours_are_the_tags_on_a_majority_of_all_members() {
        let sets = [set(&["a"]), set(&["a", "b"]), set(&["c"])];
        assert_eq!(ours(&sets, 3), v(&["a"]));
        // Two of five members' markers read: no majority yet.
        assert!(ours(&[set(&["a"]), set(&["a"]), None, None, None], 5).is_empty());
        assert_eq!(ours(&[set(&["a"]), set(&["a"]), set(&["a"])], 5), v(&["a"]));
    }

    #[test]
    fn a_marker_of_another_deployment_is_foreign_once_ours_are_known() {
        let (z, za, a) = (v(&["z"]), v(&["z", "a"]), v(&["a"]));
        assert_eq!(belongs(Some(&z), &a), Some(false));
        assert_eq!(belongs(Some(&za), &a), Some(true));
        assert_eq!(belongs(Some(&z), &[]), None);
        // A field with nothing we can read is no tag of ours.
        assert_eq!(belongs(Some(&[]), &a), Some(false));
        assert_eq!(belongs(Some(&[]), &[]), None);
        // A marker from before tags is not ours once ours are known.
        assert_eq!(belongs(None, &a), Some(false));
        assert_eq!(belongs(None, &[]), None);
    }

    #[tokio::test]
    async fn a_check_waits_for_the_majority_that_settles_it() {
        let tags = std::sync::Arc::new(Tags::new(3));
        let t = std::sync::Arc::clone(&tags);
        let first = tokio::spawn(async move {
            let z = v(&["z"]);
            t.settle(2, Some(&z), Duration::from_secs(5)).await
        });
        tags.record(0, set(&["a"]));
        tokio::task::yield_now().await;
        tags.record(1, set(&["a"]));
        assert_eq!(first.await.unwrap(), Some(false));
        assert_eq!(tags.tag(), "a");
        // Nobody else answers: it cannot be told.
        let a = v(&["a"]);
        let alone = Tags::new(3);
        let got = alone.settle(0, Some(&a), Duration::from_millis(20)).await;
        assert_eq!(got, None);
        // Every member told, none of them a majority's tag: no wait.
        let mixed = Tags::new(3);
        mixed.record(1, set(&["b"]));
        mixed.record(2, None);
        let got = mixed.settle(0, Some(&a), Duration::from_secs(60));
        let got = tokio::time::timeout(Duration::from_secs(5), got).await;
        assert_eq!(got, Ok(None));
        // Markers from before tags, on a majority that carries none: a
        // deployment from before tags; with a tag on one of them, not yet.
        let older = Tags::new(3);
        older.record(1, Some(vec![]));
        assert_eq!(
            older.settle(0, None, Duration::from_millis(20)).await,
            Some(true)
        );
        older.record(2, set(&["z"]));
        assert_eq!(older.told(None, Duration::from_millis(20)).await, None);
        // A tag only a minority carries is never taken up: it may be a
        // foreign process's.
        let own = alone.tag();
        assert_ne!(own, "a");
        assert_eq!(own.len(), 16);
    }
}
