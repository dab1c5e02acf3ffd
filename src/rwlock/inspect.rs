//! Reading a read-write lock without taking it ([`RwLock::inspect`]): its
//! writer, as a lock is read (`lock/inspect.rs`), and its readers: a
//! reader's value whose lease is live on a quorum of the nodes, with the
//! quorum-th longest of its leases' time left.

use std::collections::BTreeMap;
use std::time::Duration;

use redis::Value;
use tokio::time::Instant;

use crate::error::Result;
use crate::lock::inspect::{combine, nth_smallest, Holder, KeyView, LockState};
use crate::node::connection::request::Request;
use crate::rwlock::scripts as rw_scripts;
use crate::rwlock::RwLock;

/// A read-write lock's state on the nodes, as [`RwLock::inspect`] read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RwState {
    /// The writer's key, as a lock's ([`LockState::waiting`]: readers and
    /// writers waiting), but for [`LockState::free_in`]: when a writer
    /// could take it, once a quorum of nodes hold neither a writer's key
    /// nor a live reader's lease.
    pub writer: LockState,
    /// The readers a quorum of nodes hold a live lease for, each with the
    /// time a quorum of those leases still has (unless renewed).
    pub readers: Vec<Holder>,
}

impl RwState {
    /// Whether a writer could take it now: a quorum of nodes hold no
    /// writer's key and no live lease.
    pub fn is_free(&self) -> bool {
        self.writer.free_in == Some(Duration::ZERO)
    }
}

/// What one node said: live waiters, the writer's key, live readers.
#[derive(Clone, Debug, PartialEq, Eq)]
struct NodeView {
    /// Waiters whose lease has not ended.
    waiting: usize,
    /// The writer's key.
    writer: KeyView,
    /// Each live reader's value and ms its lease has left.
    readers: Vec<(String, u64)>,
    /// In how many ms a writer could take the node: once the writer's key
    /// and every live lease there end (`None`: a key without a TTL).
    write_free: Option<u64>,
}

/// A node's `RW_INSPECT` reply.
fn read_view(v: &Value) -> Option<NodeView> {
    let Value::Array(items) = v else { return None };
    let text = |v: &Value| match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    let int = |v: &Value| match v {
        Value::Int(i) => Some(*i),
        _ => None,
    };
    let [waiting, value, pttl, rest @ ..] = items.as_slice() else {
        return None;
    };
    if rest.len() % 2 != 0 {
        return None;
    }
    let readers = rest
        .chunks(2)
        .map(|pair| Some((text(&pair[0])?, u64::try_from(int(&pair[1])?).ok()?)))
        .collect::<Option<Vec<_>>>()?;
    let (value, pttl) = (text(value)?, int(pttl)?);
    let writer_left = match (value.is_empty(), u64::try_from(pttl)) {
        (true, _) => Some(0),
        (false, Ok(ms)) => Some(ms),
        (false, Err(_)) => None,
    };
    let leases_left = readers.iter().map(|(_, ms)| *ms).max().unwrap_or(0);
    Some(NodeView {
        waiting: usize::try_from(int(waiting)?).ok()?,
        writer: KeyView::new(value, pttl),
        write_free: writer_left.map(|ms| ms.max(leases_left)),
        readers,
    })
}

/// The readers live on `quorum` of `views`, with their quorum-th longest
/// time left, less `elapsed`.
fn readers(views: &[NodeView], quorum: usize, elapsed: Duration) -> Vec<Holder> {
    let mut leases: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for view in views {
        for (value, left) in &view.readers {
            leases.entry(value).or_default().push(*left);
        }
    }
    leases
        .into_iter()
        .filter(|(_, lefts)| lefts.len() >= quorum)
        .map(|(value, mut lefts)| {
            lefts.sort_unstable_by(|a, b| b.cmp(a));
            Holder {
                value: value.to_owned(),
                time_left: Some(Duration::from_millis(lefts[quorum - 1]).saturating_sub(elapsed)),
            }
        })
        .collect()
}

impl RwLock {
    /// Reads the lock on every node without taking it: the writer (holding
    /// or not, as [`Redlock::inspect`](crate::Redlock::inspect) reads a
    /// lock), the readers a quorum of nodes hold, and how many wait. A
    /// snapshot: it may change a moment later.
    ///
    /// # Errors
    ///
    /// [`Error::NoQuorum`](crate::Error::NoQuorum) when fewer than a quorum
    /// of nodes answered.
    pub async fn inspect(&self) -> Result<RwState> {
        let redlock = &self.redlock;
        let keys = &self.keys;
        let req = Request::script(
            &rw_scripts::RW_INSPECT,
            [&keys.writer, &keys.readers, &keys.waits.leases],
            |_| {},
        );
        let started = Instant::now();
        let views = redlock.read_every_node(&req, &self.name, read_view).await?;
        let quorum = redlock.quorum();
        let elapsed = started.elapsed();
        let writers: Vec<&KeyView> = views.iter().map(|v| &v.writer).collect();
        let mut writer = combine(&writers, quorum, elapsed);
        writer.waiting = views.iter().map(|v| v.waiting).max().unwrap_or(0);
        // A writer needs a quorum of nodes with neither a writer nor a
        // live lease: a lease left on a node by a reader that lost its
        // quorum counts there too.
        let frees = views.iter().map(|v| v.write_free).collect();
        writer.free_in = nth_smallest(frees, quorum)
            .flatten()
            .map(Duration::from_millis);
        Ok(RwState {
            writer,
            readers: readers(&views, quorum, elapsed),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(readers: &[(&str, u64)]) -> NodeView {
        NodeView {
            waiting: 0,
            writer: KeyView::new(String::new(), -2),
            readers: readers.iter().map(|(v, l)| ((*v).to_owned(), *l)).collect(),
            write_free: readers.iter().map(|(_, l)| *l).max().or(Some(0)),
        }
    }

    #[test]
    fn a_reader_is_one_with_a_live_lease_on_a_quorum() {
        let views = [
            view(&[("a", 9_000), ("b", 5_000)]),
            view(&[("a", 4_000)]),
            view(&[("a", 7_000), ("b", 5_000)]),
            view(&[("c", 1_000)]),
            view(&[]),
        ];
        let r = readers(&views, 3, Duration::from_millis(10));
        assert_eq!(
            r,
            vec![Holder {
                value: "a".into(),
                time_left: Some(Duration::from_millis(3_990)),
            }],
            "b on two of five, c on one"
        );
    }

    #[test]
    fn replies_of_another_shape_are_refused() {
        let ok = Value::Array(vec![
            Value::Int(1),
            Value::BulkString(b"".to_vec()),
            Value::Int(-2),
            Value::BulkString(b"r1".to_vec()),
            Value::Int(800),
        ]);
        assert_eq!(
            read_view(&ok).map(|v| v.readers),
            Some(vec![("r1".into(), 800)])
        );
        assert_eq!(read_view(&Value::Array(vec![Value::Int(1)])), None);
    }
}
