//! (e) fenced locks at 64 callers: 64 tasks on distinct resources, each
//! taking its lock with a fencing token from one shared counter (the
//! per-entity setup: `fencing_counter`), against the same tasks taking
//! plain locks, in alternating slices of one run. A fenced lock costs a
//! lock round and a mint; concurrent mints on the counter share rounds.

use std::sync::Arc;
use std::time::Duration;

use crate::common::{run_tasks, Stats};

/// Callers.
pub const TASKS: usize = 64;

/// The TTL of every lock.
const TTL: Duration = Duration::from_secs(10);

/// A client on `urls`, fencing from one shared counter if `fenced`.
pub fn client(urls: &[String], fenced: bool) -> Arc<redquorum::Redlock> {
    let builder = redquorum::Redlock::builder().nodes(urls);
    let builder = if fenced {
        builder.fencing_counter("bench-fence")
    } else {
        builder
    };
    Arc::new(builder.build().expect("redquorum"))
}

/// One slice of `limit`: [`TASKS`] tasks, each locking its own resource
/// (fenced or not, as `fenced` says) and releasing it, again and again.
pub fn slice(
    rt: &tokio::runtime::Runtime,
    client: &Arc<redquorum::Redlock>,
    fenced: bool,
    limit: Duration,
) -> Stats {
    let client = client.clone();
    rt.block_on(run_tasks(TASKS, limit, usize::MAX, move |t, _| {
        let client = client.clone();
        async move {
            let resource = format!("e-res{t}");
            let lock = if fenced {
                client.lock(&resource, TTL).fenced().await
            } else {
                client.lock(&resource, TTL).await
            };
            let r = match lock {
                Ok(lock) => lock.release().await,
                Err(e) => Err(e),
            };
            if let Err(e) = &r {
                if std::env::var_os("BENCH_DEBUG").is_some() {
                    eprintln!("(e) op failed: {e:?}");
                }
            }
            r.is_ok()
        }
    }))
}
