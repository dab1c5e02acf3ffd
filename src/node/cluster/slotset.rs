//! The hash slots a Redis Cluster shard serves, as its own `CLUSTER NODES`
//! line says, in the one text form our marker records them in
//! (`0-5460,6000`: ranges, ascending, merged), and whether a shard now
//! serves a slot that a recorded set lacks: it took that slot over since.

use crate::keys::SLOTS;

/// The slots the node that answered `CLUSTER NODES` (`reply`) serves, in
/// our text form; `None` where the reply has no line for the node itself
/// (not a cluster: the command was refused). Slots it is importing or
/// migrating (`[slot-<-id]`, `[slot->-id]`) are not counted: a slot is its
/// own once the move ends.
pub(crate) fn own_slots(reply: &str) -> Option<String> {
    let line = reply.lines().find(|l| {
        l.split(' ')
            .nth(2)
            .is_some_and(|flags| flags.split(',').any(|f| f == "myself"))
    })?;
    let mut served = vec![false; SLOTS];
    for part in line.split(' ').skip(8).filter(|p| !p.starts_with('[')) {
        let Some((first, last)) = range(part) else {
            continue;
        };
        served[first..=last].iter_mut().for_each(|s| *s = true);
    }
    Some(text(&served))
}

/// Whether every slot in `now` is in `recorded` (both in our text form):
/// `false` when the shard took a slot over since `recorded` was written.
/// A text that does not read as slots is taken as none for `recorded`
/// and as every slot for `now`, so that it never hides a slot taken.
pub(crate) fn covered(now: &str, recorded: &str) -> bool {
    let (Some(now), Some(recorded)) = (set(now), set(recorded)) else {
        return false;
    };
    now.iter().zip(&recorded).all(|(n, r)| !*n || *r)
}

/// `first-last` or `slot` as a range of slot indexes.
fn range(part: &str) -> Option<(usize, usize)> {
    let (first, last) = part.split_once('-').unwrap_or((part, part));
    let (first, last): (usize, usize) = (first.parse().ok()?, last.parse().ok()?);
    (first <= last && last < SLOTS).then_some((first, last))
}

/// Our text form as one flag per slot; `None` if it does not read.
fn set(text: &str) -> Option<Vec<bool>> {
    let mut served = vec![false; SLOTS];
    for part in text.split(',').filter(|p| !p.is_empty()) {
        let (first, last) = range(part)?;
        served[first..=last].iter_mut().for_each(|s| *s = true);
    }
    Some(served)
}

/// One flag per slot in our text form.
fn text(served: &[bool]) -> String {
    let mut out = Vec::new();
    let mut slot = 0;
    while slot < served.len() {
        if !served[slot] {
            slot += 1;
            continue;
        }
        let first = slot;
        while slot + 1 < served.len() && served[slot + 1] {
            slot += 1;
        }
        out.push(if first == slot {
            first.to_string()
        } else {
            format!("{first}-{slot}")
        });
        slot += 1;
    }
    out.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODES: &str = "\
07c3 127.0.0.1:30004@40004 slave e7d1 0 1426238317239 4 connected
67ed 127.0.0.1:30002@40002 master - 0 1426238316232 2 connected 5461-10922
e7d1 127.0.0.1:30001@40001 myself,master - 0 0 1 connected 0-5460 10930 10931-10933 \
[10940->-67ed] [10941-<-67ed]
";

    #[test]
    fn a_shard_reads_its_own_slots_merged_and_without_those_moving() {
        assert_eq!(own_slots(NODES).as_deref(), Some("0-5460,10930-10933"));
        // A master serving nothing: an empty set, not none.
        let idle = "e7d1 127.0.0.1:30001@40001 myself,master - 0 0 1 connected\n";
        assert_eq!(own_slots(idle).as_deref(), Some(""));
        // Not a cluster: no line for the node itself.
        assert_eq!(own_slots(""), None);
        assert_eq!(
            own_slots("ERR This instance has cluster support disabled"),
            None
        );
    }

    #[test]
    fn a_slot_taken_over_is_not_covered_one_given_away_is() {
        assert!(covered("0-5460", "0-5460"));
        assert!(covered("0-100", "0-5460"), "slots given away");
        assert!(covered("", "0-5460"));
        assert!(!covered("0-5461", "0-5460"), "one slot taken over");
        assert!(!covered("0-5460,9000", "0-5460"));
        assert!(!covered("7", ""));
        // What does not read never hides a slot taken.
        assert!(!covered("0-5460", "junk"));
        assert!(!covered("junk", "0-5460"));
        assert!(!covered("5-3", "0-16383"));
        assert!(!covered("16384", "0-16383"));
    }
}
