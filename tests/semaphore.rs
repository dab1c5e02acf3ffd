//! The quorum semaphore on real nodes: never more than K valid holders
//! under load, with a minority of nodes down; waiters served in arrival
//! order and woken when a permit frees; a dead holder's permit free within
//! its TTL; fencing tokens; a name's permits and its lock exclude each
//! other.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use redquorum::Redlock;
use support::{internal_key, wait_until, Cluster};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn client(c: &Cluster) -> Redlock {
    c.builder().retry_count(0).build().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_more_than_k_valid_holders_under_load() {
    let c = Cluster::start(3);
    let clients: Vec<Redlock> = (0..3).map(|_| client(&c)).collect();
    let held = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let slots = Arc::new(Mutex::new(vec![false; 2]));
    let mut tasks = Vec::new();
    for redlock in &clients {
        for _ in 0..4 {
            let sem = redlock.semaphore("pool", 2).unwrap();
            let (held, most, slots) = (held.clone(), most.clone(), slots.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..15 {
                    let permit = sem
                        .acquire(ms(2_000))
                        .wait(Duration::from_secs(20))
                        .await
                        .unwrap();
                    let now = held.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    {
                        let mut s = slots.lock().unwrap();
                        assert!(!s[permit.slot()], "slot {} held twice", permit.slot());
                        s[permit.slot()] = true;
                    }
                    assert!(permit.is_valid());
                    tokio::time::sleep(ms(2)).await;
                    slots.lock().unwrap()[permit.slot()] = false;
                    held.fetch_sub(1, Ordering::SeqCst);
                    permit.release().await.unwrap();
                }
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    let most = most.load(Ordering::SeqCst);
    assert_eq!(most, 2, "at most 2 holders, and the pool was used fully");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn k_permits_with_a_minority_down_and_the_next_waiter_woken() {
    let mut c = Cluster::start(5);
    c.nodes[3].kill();
    c.nodes[4].stop();
    let (a, b) = (client(&c), client(&c));
    let sem_a = a.semaphore("licences", 3).unwrap();
    let sem_b = b.semaphore("licences", 3).unwrap();
    let mut permits = Vec::new();
    for _ in 0..3 {
        permits.push(sem_a.acquire(ms(5_000)).try_once().await.unwrap());
    }
    let mut taken: Vec<usize> = permits.iter().map(|p| p.slot()).collect();
    taken.sort_unstable();
    assert_eq!(taken, [0, 1, 2]);
    let err = sem_b.acquire(ms(5_000)).try_once().await.unwrap_err();
    assert!(err.is_contended(), "{err}");
    let waiter = tokio::spawn(async move {
        let p = sem_b
            .acquire(ms(5_000))
            .wait(Duration::from_secs(4))
            .await
            .unwrap();
        let slot = p.slot();
        p.release().await.unwrap();
        slot
    });
    let key = "redquorum:semaphore:{licences}:licences";
    assert!(
        wait_until(Duration::from_secs(3), || c.waiting_on(key) >= 2).await,
        "b registers as a waiter"
    );
    let freed = permits.remove(1);
    let slot = freed.slot();
    freed.release().await.unwrap();
    let started = std::time::Instant::now();
    assert_eq!(waiter.await.unwrap(), slot, "b takes the slot that freed");
    // Woken by the nodes, not by the 200 ms retry cap or the TTL.
    assert!(started.elapsed() < ms(150), "{:?}", started.elapsed());
    for p in permits {
        p.release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_of_several_clients_are_served_in_arrival_order() {
    let c = Cluster::start(3);
    let holder = client(&c);
    let sem = holder.semaphore("fifo", 2).unwrap();
    // Held far longer than the test can take, even on a loaded machine: only
    // the releases below free a permit.
    let p1 = sem.acquire(ms(60_000)).try_once().await.unwrap();
    let p2 = sem.acquire(ms(60_000)).try_once().await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let key = "redquorum:semaphore:{fifo}:fifo";
    let mut waiters = Vec::new();
    for i in 0..3 {
        let s = client(&c).semaphore("fifo", 2).unwrap();
        let order = order.clone();
        // Counted before it starts: it may register before the count.
        let n = c.nodes[0].waiters(key);
        waiters.push(tokio::spawn(async move {
            let p = s
                .acquire(ms(5_000))
                .wait(Duration::from_secs(50))
                .await
                .unwrap();
            order.lock().unwrap().push(i);
            p
        }));
        // Each registers before the next starts.
        assert!(
            wait_until(Duration::from_secs(20), || c.nodes[0].waiters(key) > n).await,
            "waiter {i} registers"
        );
    }
    p1.release().await.unwrap();
    assert!(wait_until(Duration::from_secs(20), || order.lock().unwrap().len() == 1).await);
    p2.release().await.unwrap();
    assert!(wait_until(Duration::from_secs(20), || order.lock().unwrap().len() == 2).await);
    assert_eq!(*order.lock().unwrap(), [0, 1], "first come, first served");
    let first = waiters.remove(0).await.unwrap();
    first.release().await.unwrap();
    for w in waiters {
        w.await.unwrap().release().await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), [0, 1, 2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_holders_permit_frees_within_its_ttl() {
    let c = Cluster::start(3);
    let dead = client(&c);
    let sem = dead.semaphore("crash", 1).unwrap();
    let permit = sem.acquire(ms(800)).try_once().await.unwrap();
    // The holder vanishes without releasing (as a killed process would).
    std::mem::forget(permit);
    let other = client(&c).semaphore("crash", 1).unwrap();
    let started = std::time::Instant::now();
    let p = other
        .acquire(ms(5_000))
        .wait(Duration::from_secs(3))
        .await
        .unwrap();
    let took = started.elapsed();
    assert!(took <= ms(800 + 150), "{took:?}");
    p.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_permits_carry_increasing_tokens() {
    let c = Cluster::start(3);
    let redlock = client(&c);
    let sem = redlock.semaphore("jobs", 2).unwrap();
    let a = sem.acquire(ms(5_000)).fenced().await.unwrap();
    let b = sem.acquire(ms(5_000)).fenced().await.unwrap();
    let (ta, tb) = (a.fencing_token().unwrap(), b.fencing_token().unwrap());
    assert!(tb > ta, "{ta} then {tb}");
    a.release().await.unwrap();
    let c2 = sem.acquire(ms(5_000)).fenced().await.unwrap();
    assert!(c2.fencing_token().unwrap() > tb);
    for p in [b, c2] {
        p.release().await.unwrap();
    }
    assert!(redlock.semaphore("jobs", 0).is_err());
    assert!(redlock.semaphore("redquorum:x", 1).is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_winner_fills_its_slot_where_it_is_free_and_only_there() {
    let c = Cluster::start(5);
    let sem = client(&c).semaphore("fill", 1).unwrap();
    let line = "redquorum:semaphore:{fill}:fill";
    let slot = "redquorum:permit:{fill}:fill:0";
    // On node 4 a waiter that never comes is first in line (its lease ends
    // in 2100): node 4 refuses us though the slot is free there.
    ghosts_on(&c, 4, line, &["ghost"]);
    let mut n4 = c.nodes[4].conn();
    let permit = sem.acquire(ms(5_000)).try_once().await.unwrap();
    // Won on a quorum: node 0's reply may still be on its way.
    let mut ours = None;
    assert!(
        wait_until(Duration::from_secs(3), || {
            ours = c.nodes[0].get(slot);
            ours.is_some()
        })
        .await,
        "the slot on node 0"
    );
    let ours = ours.unwrap();
    assert!(
        wait_until(Duration::from_secs(3), || c.nodes[4].get(slot).as_deref()
            == Some(&*ours))
        .await,
        "the won slot is filled on node 4 too"
    );
    assert!(c.nodes[4].pttl(slot) > 0, "with a TTL");
    permit.release().await.unwrap();
    assert!(
        wait_until(Duration::from_secs(3), || c
            .nodes
            .iter()
            .all(|n| n.get(slot).is_none()))
        .await,
        "released everywhere, the fill too"
    );

    // Where another holds the slot, a fill leaves it alone: node 4 refuses
    // for want of a free slot, and still has the other's key after our
    // take, undo-and-fill and release reached it.
    let _: () = redis::cmd("ZREM")
        .arg(support::internal_key("waiters", line))
        .arg("ghost")
        .query(&mut n4)
        .unwrap();
    c.nodes[4].set(slot, "theirs", ms(60_000));
    let before = c.nodes[4].script_calls();
    let permit = sem.acquire(ms(5_000)).try_once().await.unwrap();
    permit.release().await.unwrap();
    assert!(
        wait_until(Duration::from_secs(3), || c.nodes[4].script_calls()
            >= before + 3)
        .await,
        "take, undo and release reach node 4"
    );
    assert_eq!(c.nodes[4].get(slot).as_deref(), Some("theirs"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_lost_a_split_is_back_in_line_at_once_where_it_took_a_slot() {
    let c = Cluster::start(3);
    let line = "redquorum:semaphore:{rejoin}:rejoin";
    let slot = "redquorum:permit:{rejoin}:rejoin:0";
    // Another holds the slot on nodes 0 and 1, and it is free on node 2
    // (which lost it): the waiter takes it there (and leaves the list
    // there), loses, and undoes it.
    // (Once its client settled: a fill of the slot still on its way to a
    // node whose reply came late would take the slot there again.)
    let other_client = client(&c);
    let other = other_client.semaphore("rejoin", 1).unwrap();
    let theirs = other.acquire(ms(60_000)).try_once().await.unwrap();
    other_client.settle().await;
    assert_eq!(c.set_on(slot), 3);
    let _: () = redis::cmd("DEL")
        .arg(slot)
        .query(&mut c.nodes[2].conn())
        .unwrap();
    // Its sleeps (a minute: the slot's TTL, and its retry cap) are longer
    // than the test: only the undo can put it back, and only news wakes it.
    let waiter = c.builder().wait_cap(ms(60_000)).build().unwrap();
    let sem = waiter.semaphore("rejoin", 1).unwrap();
    let task = tokio::spawn(async move { sem.acquire(ms(5_000)).wait(ms(50_000)).await });
    let listed = |n: usize| c.nodes[n].waiters(line) == 1;
    // (It may try more than once: wait until an undo was the last word.)
    let undone = || c.nodes[2].get(slot).is_none();
    assert!(
        wait_until(Duration::from_secs(20), || listed(0)
            && listed(1)
            && listed(2)
            && undone())
        .await,
        "listed on every node, also where it took the slot and lost, and its slot there undone: \
         listed {:?}, slot {:?}",
        (0..3).map(|n| c.nodes[n].waiters(line)).collect::<Vec<_>>(),
        c.values(slot)
    );
    let score = |n: usize| -> Option<String> {
        redis::cmd("ZRANGE")
            .arg(support::internal_key("waiters", line))
            .arg(0)
            .arg(0)
            .arg("WITHSCORES")
            .query::<Vec<String>>(&mut c.nodes[n].conn())
            .unwrap()
            .get(1)
            .cloned()
    };
    // Listed on node 2 again (it may be trying once more: then it is
    // between its take there and the undo), with its first ticket.
    let mut again = None;
    assert!(
        wait_until(Duration::from_secs(20), || {
            again = score(2);
            again.is_some()
        })
        .await,
        "back in line on node 2"
    );
    assert_eq!(again, score(0), "with its first ticket");
    // The other releases: every node names the waiter, which takes it.
    let started = std::time::Instant::now();
    theirs.release().await.unwrap();
    let permit = task.await.unwrap().unwrap();
    // Woken by the release's news: neither the slot's expiry nor the retry
    // cap could have woken it within half a minute.
    assert!(started.elapsed() < ms(30_000), "{:?}", started.elapsed());
    permit.release().await.unwrap();
    assert!(
        wait_until(Duration::from_secs(3), || (0..3)
            .all(|n| c.nodes[n].waiters(line) == 0))
        .await
    );
}

/// Nodes with a notification connection (client tracking on), and how
/// many in all.
fn listening(c: &Cluster) -> (Vec<usize>, usize) {
    let each: Vec<usize> = c
        .nodes
        .iter()
        .map(|n| {
            if n.is_running() {
                n.tracking_clients()
            } else {
                0
            }
        })
        .collect();
    let all = each.iter().sum();
    (each, all)
}

/// Releases `held` and returns the waiter's permit, taken within 500 ms
/// (so woken by news, not by its 10 s cap).
async fn handed_over(
    held: redquorum::Permit,
    waiter: tokio::task::JoinHandle<redquorum::Result<redquorum::Permit>>,
) -> redquorum::Permit {
    held.release().await.unwrap();
    let started = std::time::Instant::now();
    let permit = waiter.await.unwrap().unwrap();
    assert!(started.elapsed() < ms(500), "{:?}", started.elapsed());
    permit
}

/// Client a holds the only permit of `name`; client b, whose sleeps
/// outlast the test (only news or a release of its own wakes it), gets a
/// handle on the same semaphore. b's node timeout is 1 s: it also bounds
/// its notification reads and subscriptions, and one that a loaded
/// machine delays past the default 100 ms falls back to other news than
/// the tests here wait for.
async fn held_by_a(c: &Cluster, name: &str) -> (redquorum::Permit, Redlock, redquorum::Semaphore) {
    held_by_a_and(c, name, c.builder().node_timeout(ms(1_000))).await
}

/// [`held_by_a`], with b made by `b`.
async fn held_by_a_and(
    c: &Cluster,
    name: &str,
    b: redquorum::RedlockBuilder,
) -> (redquorum::Permit, Redlock, redquorum::Semaphore) {
    let held = client(c)
        .semaphore(name, 1)
        .unwrap()
        .acquire(ms(10_000))
        .try_once()
        .await
        .unwrap();
    held_everywhere(c, name).await;
    let b = b.wait_cap(ms(10_000)).build().unwrap();
    let sem_b = b.semaphore(name, 1).unwrap();
    (held, b, sem_b)
}

/// Waits until the one slot of semaphore `name` is set on every node (a
/// won permit's slower nodes are set in the background), so that a waiter
/// started now finds it held everywhere.
async fn held_everywhere(c: &Cluster, name: &str) {
    let slot = format!("redquorum:permit:{{{name}}}:{name}:0");
    assert!(
        wait_until(ms(3000), || c.set_on(&slot) == c.nodes.len()).await,
        "the permit is held on every node"
    );
}

/// As [`held_by_a`], with b waiting (up to 8 s) for the permit: returns
/// once b is listed on every node and `also` holds, with a's permit, b and
/// b's wait.
async fn b_waits_on_every_node(
    c: &Cluster,
    name: &str,
    also: impl Fn() -> bool,
) -> (
    redquorum::Permit,
    Redlock,
    tokio::task::JoinHandle<redquorum::Result<redquorum::Permit>>,
) {
    let (held, b, sem_b) = held_by_a(c, name).await;
    let waiter = tokio::spawn(async move { sem_b.acquire(ms(10_000)).wait(ms(8_000)).await });
    let line = format!("redquorum:semaphore:{{{name}}}:{name}");
    assert!(
        wait_until(Duration::from_secs(3), || c.waiting_on(&line) == 5
            && also())
        .await,
        "b waits on every node: {:?} listening",
        listening(c)
    );
    (held, b, waiter)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_listens_to_one_node_and_still_takes_a_freed_permit_at_once() {
    let c = Cluster::start(5);
    let (held, b, waiter) = b_waits_on_every_node(&c, "one-ear", || listening(&c).1 == 1).await;
    let permit = handed_over(held, waiter).await;
    // (A node that was slow to answer a read may have been swapped for
    // another meanwhile; that is news too, and still no cap.)
    let stats = b.stats();
    assert!(stats.woken_by_notification >= 1, "{stats:?}");
    assert_eq!(stats.woken_by_cap, 0, "{stats:?}");
    permit.release().await.unwrap();
}

/// A waiter's winning take leaves the waiting list on the node that ran
/// it, so leaving afterwards asks only the nodes that did not take a slot
/// (at most the 2 stragglers of a quorum of 3 in 5), not all five.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_winning_waiter_leaves_the_list_where_its_take_took_it_off() {
    let c = Cluster::start(5);
    let (held, b, waiter) = b_waits_on_every_node(&c, "off-list", || true).await;
    let line = "redquorum:semaphore:{off-list}:off-list";
    // A taking script and a leaving one each remove the waiter from both
    // of the list's sets; nothing else here does.
    let removals = || -> u64 { c.nodes.iter().map(|n| n.command_calls("zrem")).sum() };
    let (before, tried) = (removals(), b.stats().attempts);
    let permit = handed_over(held, waiter).await;
    b.settle().await;
    assert_eq!(c.waiting_on(line), 0, "b is off every node's list");
    let removed = removals() - before;
    // A loaded machine may fail an attempt first (a reply too slow): its
    // take removes the waiter where it ran, 2 per node, and it rejoins.
    let extra = (b.stats().attempts - tried).saturating_sub(1);
    assert!(
        (10..=14 + 10 * extra).contains(&removed),
        "{removed} removals: 2 per node took it off, 2 more at most on each of 2 stragglers \
         ({extra} attempts before the winning one); leaving everywhere makes 20"
    );
    permit.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_node_dies_listens_to_another() {
    let mut c = Cluster::start(5);
    let (held, _b, sem_b) = held_by_a(&c, "deaf").await;
    let waiter = tokio::spawn(async move { sem_b.acquire(ms(10_000)).wait(ms(9_000)).await });
    let mut ear = None;
    assert!(
        wait_until(Duration::from_secs(3), || {
            let (each, all) = listening(&c);
            ear = each.iter().position(|n| *n == 1).filter(|_| all == 1);
            ear.is_some()
        })
        .await,
        "b listens to one node: {:?}",
        listening(&c)
    );
    let ear = ear.unwrap();
    c.nodes[ear].kill();
    // The lost connection is news: b tries, and hears the channel on a
    // node that answered (on a loaded machine, a node slow to answer may
    // be passed over for another meanwhile, whose connection stays open).
    let line = "redquorum:semaphore:{deaf}:deaf";
    assert!(
        wait_until(Duration::from_secs(10), || subscribers(&c, line) >= 1).await,
        "b hears the channel on another node: {:?} listening",
        listening(&c)
    );
    let permit = handed_over(held, waiter).await;
    permit.release().await.unwrap();
}

/// No node takes a new connection (`maxclients` reached once the
/// clients' request connections are open): the waiter can hear the
/// channel nowhere, nor read the slots with tracking on. Nothing can tell
/// it of a release, so it tries again within two node timeouts, not at
/// its 10 s retry cap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_no_node_can_tell_tries_again_soon() {
    let c = Cluster::start(3);
    // The default node timeout: the retry comes within two of them.
    let (held, _b, sem_b) = held_by_a_and(&c, "unheard", c.builder()).await;
    // b's request connections open (a refused try opens no notification
    // connection).
    assert!(sem_b
        .acquire(ms(10_000))
        .try_once()
        .await
        .unwrap_err()
        .is_contended());
    let mut conns: Vec<redis::Connection> = c.nodes.iter().map(|n| n.conn()).collect();
    for conn in &mut conns {
        support::refuse_new_connections(conn);
    }
    let waiter = tokio::spawn(async move { sem_b.acquire(ms(10_000)).wait(ms(9_000)).await });
    let list = support::internal_key("waiters", "redquorum:semaphore:{unheard}:unheard");
    let listed = |conn: &mut redis::Connection| {
        redis::cmd("ZCARD").arg(&list).query::<u64>(conn).unwrap() == 1
    };
    assert!(
        wait_until(ms(3_000), || conns.iter_mut().all(&listed)).await,
        "b waits on every node"
    );
    // Past the first tries that the failed connections caused.
    tokio::time::sleep(ms(1_000)).await;
    let started = std::time::Instant::now();
    held.release().await.unwrap();
    let permit = waiter.await.unwrap().unwrap();
    // Two node timeouts (a one-shard cluster member's are 1 s), far from
    // the retry cap (5 to 10 s).
    assert!(started.elapsed() < ms(4_000), "{:?}", started.elapsed());
    permit.release().await.unwrap();
}

/// A release that names a waiter while its subscription to the channel is
/// still being made, after a later attempt of the waiter found the
/// channel being subscribed to (so that attempt armed nothing of its
/// own): the subscription, once made, is news for that later attempt, and
/// the waiter takes the freed permit at once, not at its next retry cap.
/// b's notification connections are held by its proxies until then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_made_after_a_later_attempt_is_news_for_it() {
    let c = Cluster::start(3);
    let (name, line) = ("late-ear", "redquorum:semaphore:{late-ear}:late-ear");
    let held = client(&c).semaphore(name, 1).unwrap();
    let held = held.acquire(ms(10_000)).try_once().await.unwrap();
    held_everywhere(&c, name).await;
    let (proxies, b) = c.far_builder(0);
    // The connect timeout (the node timeout, at least 1 s) outlasts the
    // hold below: one retry cap.
    let b = b
        .node_timeout(ms(4_000))
        .wait_cap(ms(2_000))
        .build()
        .unwrap();
    let sem_b = b.semaphore(name, 1).unwrap();
    // b's request connections open; then new connections are held.
    assert!(sem_b
        .acquire(ms(10_000))
        .try_once()
        .await
        .unwrap_err()
        .is_contended());
    for p in &proxies {
        p.set_mode(support::ProxyMode::HoldNew);
    }
    let scripts = || -> u64 { c.nodes.iter().map(|n| n.script_calls()).sum() };
    let waiter = tokio::spawn(async move { sem_b.acquire(ms(10_000)).wait(ms(9_000)).await });
    // The first attempt subscribes (held); the retry cap makes the next,
    // refused on every node (3 takes), while the subscription is held.
    assert!(
        wait_until(ms(3_000), || c.waiting_on(line) == 3).await,
        "b waits"
    );
    let first = scripts();
    assert!(
        wait_until(ms(5_000), || b.stats().woken_by_cap >= 1
            && scripts() >= first + 3)
        .await,
        "{:?}",
        b.stats()
    );
    assert_eq!(subscribers(&c, line), 0, "the subscription is held");
    held.release().await.unwrap();
    for p in &proxies {
        p.set_mode(support::ProxyMode::Pass);
    }
    let permit = waiter.await.unwrap().unwrap();
    assert_eq!(b.stats().woken_by_cap, 1, "{:?}", b.stats());
    permit.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_caller_of_a_crowded_line_waits_for_news_before_it_tries() {
    let c = Cluster::start(3);
    let (held, b, sem_b) = held_by_a(&c, "crowd").await;
    let sem_b = Arc::new(sem_b);
    let first = {
        let sem = Arc::clone(&sem_b);
        tokio::spawn(async move { sem.acquire(ms(10_000)).wait(ms(8_000)).await })
    };
    let line = "redquorum:semaphore:{crowd}:crowd";
    assert!(
        wait_until(Duration::from_secs(3), || c.waiting_on(line) == 3).await,
        "b's first caller waits"
    );
    // The second caller joins b's line behind the first.
    let mut second = Box::pin(async move { sem_b.acquire(ms(10_000)).wait(ms(8_000)).await });
    assert!(futures::poll!(&mut second).is_pending());
    held.release().await.unwrap();
    let permit = first.await.unwrap().unwrap();
    // From here on only the second caller tries or sleeps in b: attempts
    // and wake-ups (of any kind) since now.
    let since = |s0: &redquorum::Stats| {
        let s = b.stats();
        (s.attempts - s0.attempts, wake_ups(&s) - wake_ups(s0))
    };
    let s0 = b.stats();
    // The first had to wait, so the second does not try before news
    // wakes it: no attempt that no wake-up came before. (News other than
    // the release, a connection's hiccup on a busy machine, may wake it
    // while the permit is held; then it tries, is refused and waits again.)
    let second = tokio::spawn(second);
    assert!(
        !wait_until(ms(500), || {
            let (attempts, woken) = since(&s0);
            attempts > woken
        })
        .await,
        "the second caller tried before any news, while the permit was held: {:?}",
        since(&s0)
    );
    permit.release().await.unwrap();
    let permit = second.await.unwrap().unwrap();
    let (attempts, woken) = since(&s0);
    assert!(
        attempts >= 1 && attempts <= woken,
        "every attempt after news: {attempts} attempts, {woken} wake-ups"
    );
    permit.release().await.unwrap();
}

/// Every wake-up and pause a client's waiters had, of any kind.
fn wake_ups(s: &redquorum::Stats) -> u64 {
    s.woken_by_notification
        + s.woken_by_ttl
        + s.woken_by_own_release
        + s.woken_by_cap
        + s.woken_by_deadline
        + s.paused
}

/// Puts `ghosts` waiters that never come at the head of `line`'s waiting
/// list on node `n` (their leases end in 2100).
fn ghosts_on(c: &Cluster, n: usize, line: &str, ghosts: &[&str]) {
    ghosts_until(c, n, line, ghosts, 4_102_444_800_000);
}

/// [`ghosts_on`], their leases ending at `lease_end` (ms of the node's
/// clock).
fn ghosts_until(c: &Cluster, n: usize, line: &str, ghosts: &[&str], lease_end: i64) {
    let mut conn = c.nodes[n].conn();
    for g in ghosts {
        let _: () = redis::cmd("ZADD")
            .arg(support::internal_key("waiters", line))
            .arg(0)
            .arg(g)
            .query(&mut conn)
            .unwrap();
        let _: () = redis::cmd("ZADD")
            .arg(support::internal_key("leases", line))
            .arg(lease_end)
            .arg(g)
            .query(&mut conn)
            .unwrap();
    }
}

/// Node `n`'s clock in ms.
fn node_ms(c: &Cluster, n: usize) -> i64 {
    let (s, us): (i64, i64) = redis::cmd("TIME").query(&mut c.nodes[n].conn()).unwrap();
    s * 1000 + us / 1000
}

/// The nodes take different slots for one attempt (their waiting lists
/// differ), so no slot has a quorum though a quorum took one: the node on
/// the other slot moves to the slot the others took, and the attempt wins
/// it in the same call. Its validity counts from the first round's start,
/// not the move's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_attempt_wins_by_moving_to_one_slot() {
    let c = Cluster::start(3);
    let line = "redquorum:semaphore:{split}:split";
    let slot = |i: usize| format!("redquorum:permit:{{split}}:split:{i}");
    let slow = support::Proxy::start(c.nodes[1].port);
    let urls = vec![c.nodes[0].url(), slow.url(), c.nodes[2].url()];
    let redlock = Redlock::builder()
        .nodes(&urls)
        .node_timeout(ms(2_000))
        .retry_count(0)
        .build()
        .unwrap();
    let sem = redlock.semaphore("split", 2).unwrap();
    let ttl = ms(5_000);
    // Connections made and the number of permits pinned first.
    sem.acquire(ttl)
        .try_once()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    // Node 0: one waiter ahead, so we take its second free slot (1); node
    // 1: none, slot 0; node 2: two ahead, so it refuses.
    ghosts_on(&c, 0, line, &["ghost"]);
    ghosts_on(&c, 2, line, &["ghost", "ghost2"]);
    // Node 1's replies are slow: the first round takes 300 ms or more.
    slow.set_mode(support::ProxyMode::Delay(150));
    let before = tokio::time::Instant::now();
    let permit = sem.acquire(ttl).try_once().await.unwrap();
    let ours = c.nodes[0].get(&slot(0)).expect("slot 0 on node 0");
    assert_eq!(c.nodes[1].get(&slot(0)).as_deref(), Some(&*ours));
    assert_eq!(c.nodes[0].get(&slot(1)), None, "moved off slot 1");
    let stats = redlock.stats();
    assert_eq!(
        (stats.permit_moves, stats.permit_moves_won),
        (1, 1),
        "{stats:?}"
    );
    // Valid until the first round's start + TTL - drift (50 ms + 2 ms): a
    // validity counted from the move would end 300 ms or more later.
    let bound = before + ttl - ms(52) + ms(150);
    assert!(
        permit.valid_until() <= bound,
        "valid {:?} past the first round's bound",
        permit.valid_until() - bound
    );
    permit.release().await.unwrap();
}

/// A split whose move would take a slot another holds wins nothing: the
/// node that holds it for someone else refuses the move, and every slot the
/// attempt took is undone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_never_takes_a_slot_another_holds() {
    let c = Cluster::start(3);
    let line = "redquorum:semaphore:{held}:held";
    let slot = |i: usize| format!("redquorum:permit:{{held}}:held:{i}");
    // Node 0: slot 0 held by another, so we take slot 1; node 1: slot 0;
    // node 2: two waiters ahead, so it refuses. The move is to slot 0 (the
    // lowest of a tie), which node 0 must refuse.
    c.nodes[0].set(&slot(0), "another", ms(60_000));
    ghosts_on(&c, 2, line, &["ghost", "ghost2"]);
    let redlock = c.builder().retry_count(0).build().unwrap();
    let sem = redlock.semaphore("held", 2).unwrap();
    let err = sem.acquire(ms(5_000)).try_once().await.unwrap_err();
    assert!(err.is_contended(), "{err:?}");
    let stats = redlock.stats();
    assert_eq!(
        (stats.permit_moves, stats.permit_moves_won),
        (1, 0),
        "{stats:?}"
    );
    assert_eq!(c.nodes[0].get(&slot(0)).as_deref(), Some("another"));
    redlock.settle().await;
    for (n, node) in c.nodes.iter().enumerate() {
        for s in [0, 1] {
            let v = node.get(&slot(s));
            assert!(
                v.is_none() || v.as_deref() == Some("another"),
                "node {n} slot {s}: {v:?}"
            );
        }
    }
}

/// An attempt dropped midway (its caller gave up) is undone on every node,
/// also on those that take a slot for it only after the drop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_attempt_leaves_no_slot_taken() {
    let mut c = Cluster::start(5);
    let redlock = c.builder().node_timeout(ms(2_000)).build().unwrap();
    let sem = redlock.semaphore("dropped", 2).unwrap();
    // With three nodes hung the attempt cannot decide; drop it midway.
    for i in 0..3 {
        c.nodes[i].pause();
    }
    let attempt = sem.acquire(ms(60_000)).try_once();
    assert!(tokio::time::timeout(ms(200), attempt).await.is_err());
    let slots: Vec<String> = (0..2)
        .map(|i| format!("redquorum:permit:{{dropped}}:dropped:{i}"))
        .collect();
    let taken = |c: &Cluster| {
        slots
            .iter()
            .flat_map(|s| c.values(s))
            .filter(Option::is_some)
            .count()
    };
    c.resume_all();
    // The two nodes that answered took a slot; the undo follows the
    // takes of the three hung ones too.
    assert!(wait_until(Duration::from_secs(3), || taken(&c) == 0).await);
}

/// A semaphore caller that waits behind another of its own client, taking
/// `sem`'s permit when its turn comes (within 8 s), and saying so in `order`.
fn caller(
    sem: &Arc<redquorum::Semaphore>,
    name: &'static str,
    order: &Arc<Mutex<Vec<&'static str>>>,
) -> tokio::task::JoinHandle<redquorum::Permit> {
    let (sem, order) = (Arc::clone(sem), Arc::clone(order));
    tokio::spawn(async move {
        let p = sem.acquire(ms(10_000)).wait(ms(8_000)).await.unwrap();
        order.lock().unwrap().push(name);
        p
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_behind_its_own_client_keeps_its_arrival_place_among_other_clients() {
    let c = Cluster::start(3);
    let line = "redquorum:semaphore:{arrival}:arrival";
    let sem = |r: &Redlock| Arc::new(r.semaphore("arrival", 1).unwrap());
    let held = sem(&client(&c))
        .acquire(ms(10_000))
        .try_once()
        .await
        .unwrap();
    let (a, b) = (sem(&client(&c)), sem(&client(&c)));
    let order = Arc::new(Mutex::new(Vec::new()));
    let listed = |n: usize| (0..3).all(|i| c.nodes[i].waiters(line) == n);
    let a1 = caller(&a, "a1", &order);
    assert!(wait_until(Duration::from_secs(3), || listed(1)).await);
    // a2 waits behind a1 in a's line, and is on the nodes' list already.
    let a2 = caller(&a, "a2", &order);
    assert!(
        wait_until(Duration::from_secs(3), || listed(2)).await,
        "a2 joins the nodes' list as it arrives"
    );
    let b1 = caller(&b, "b1", &order);
    assert!(wait_until(Duration::from_secs(3), || listed(3)).await);
    held.release().await.unwrap();
    a1.await.unwrap().release().await.unwrap();
    // b1 came after a2: it does not take the permit a1 released.
    assert!(wait_until(Duration::from_secs(5), || order.lock().unwrap().len() == 2).await);
    assert_eq!(*order.lock().unwrap(), ["a1", "a2"]);
    a2.await.unwrap().release().await.unwrap();
    b1.await.unwrap().release().await.unwrap();
    assert_eq!(*order.lock().unwrap(), ["a1", "a2", "b1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_winner_with_a_permit_to_spare_lets_the_next_caller_try_at_once() {
    let c = Cluster::start(3);
    let line = "redquorum:semaphore:{spare}:spare";
    // Two waiters ahead on every node, gone 1.5 s from now: a's first
    // caller is refused (two permits free, two waiters ahead) and sleeps
    // until its cap, 2 s at least (no notifications), then takes a permit
    // with the other one to spare.
    for n in 0..3 {
        let end = node_ms(&c, n) + 1_500;
        ghosts_until(&c, n, line, &["ghost", "ghost2"], end);
    }
    let a = c
        .builder()
        .notifications(false)
        .wait_cap(ms(4_000))
        .build()
        .unwrap();
    let sem = Arc::new(a.semaphore("spare", 2).unwrap());
    let order = Arc::new(Mutex::new(Vec::new()));
    let listed = |n: usize| (0..3).all(|i| c.nodes[i].waiters(line) == n);
    let first = caller(&sem, "first", &order);
    assert!(wait_until(Duration::from_secs(3), || listed(3)).await);
    let second = caller(&sem, "second", &order);
    let (p1, p2) = (first.await.unwrap(), second.await.unwrap());
    // The first caller had to wait, but its permit left one to spare: the
    // second tried at once instead of sleeping until news (here: its cap).
    let s = a.stats();
    assert_eq!(wake_ups(&s), 1, "only the first caller slept: {s:?}");
    assert_eq!(*order.lock().unwrap(), ["first", "second"]);
    p1.release().await.unwrap();
    p2.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_gives_its_place_up_lets_its_own_clients_next_caller_go_first() {
    let c = Cluster::start(3);
    // A 4 ms permit with a drift allowance of 0.49 x 4 + 2 = 3.96 ms is
    // never valid once a round took 40 µs: every attempt of a1 wins a slot
    // too late, and gives its place in the nodes' list up. a2, behind it
    // in a's line, joined the list as it arrived, so it is ahead of a1
    // there now; a1 lets it try first, here too.
    let a = c.builder().drift_factor(0.49).build().unwrap();
    let sem = Arc::new(a.semaphore("yield", 1).unwrap());
    let order = Arc::new(Mutex::new(Vec::new()));
    let a1 = {
        let (sem, order) = (Arc::clone(&sem), Arc::clone(&order));
        tokio::spawn(async move {
            let err = sem.acquire(ms(4)).wait(ms(2_000)).await.unwrap_err();
            order.lock().unwrap().push("a1 gave up");
            err
        })
    };
    let a2 = caller(&sem, "a2", &order);
    let a2 = a2.await.unwrap();
    let err = a1.await.unwrap();
    assert_eq!(
        *order.lock().unwrap(),
        ["a2", "a1 gave up"],
        "a2 went first: {err}"
    );
    a2.release().await.unwrap();
}

/// How many connections hear the channel of the semaphore whose waiters
/// line up on `line`, over every running node.
fn subscribers(c: &Cluster, line: &str) -> usize {
    let channel = support::internal_key("wake", line);
    c.nodes
        .iter()
        .filter(|n| n.is_running())
        .map(|n| {
            let reply: (String, usize) = redis::cmd("PUBSUB")
                .arg("NUMSUB")
                .arg(&channel)
                .query(&mut n.conn())
                .expect("PUBSUB NUMSUB");
            reply.1
        })
        .sum()
}

/// A release wakes only the waiters it lets in, and a take wakes nobody:
/// with one permit held by a and b, then c waiting, a's release is news to
/// b alone (c hears the channel too, and is not named), b's take is news
/// to nobody, and b's release is news to c.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_only_the_waiter_it_lets_in() {
    let c = Cluster::start(5);
    let line = "redquorum:semaphore:{named}:named";
    let (held, b, sem_b) = held_by_a(&c, "named").await;
    let waiter_b = tokio::spawn(async move { sem_b.acquire(ms(10_000)).wait(ms(8_000)).await });
    let listed = |k| c.nodes.iter().all(|n| n.waiters(line) == k);
    assert!(wait_until(ms(3000), || listed(1)).await, "b is listed");
    let cl = c.builder().wait_cap(ms(10_000)).build().unwrap();
    let sem_c = cl.semaphore("named", 1).unwrap();
    let waiter_c = tokio::spawn(async move { sem_c.acquire(ms(10_000)).wait(ms(8_000)).await });
    assert!(
        wait_until(ms(3000), || listed(2) && subscribers(&c, line) == 2).await,
        "b and c are listed and hear the channel: {}",
        subscribers(&c, line)
    );
    let b_permit = handed_over(held, waiter_b).await;
    // b holds: neither a's release (which named b) nor b's take is news to
    // c. (How often b itself was woken depends on the nodes' pace: under
    // load a release may reach the node b hears before the others, and b
    // tries again once they have it.)
    b.settle().await;
    let c_woken = || cl.stats().notifications > 0;
    assert!(
        !wait_until(ms(300), c_woken).await,
        "c heard a's release or b's take"
    );
    assert!(b.stats().notifications >= 1, "a's release woke b");
    let c_permit = handed_over(b_permit, waiter_c).await;
    assert!(cl.stats().notifications >= 1, "b's release woke c");
    c_permit.release().await.unwrap();
}

/// Two clients that give one semaphore different numbers of permits: the
/// first pins its number on the nodes, the second is refused with the
/// conflict before it takes a slot (it took slot 3, which a client with
/// K = 2 never looks at, and both admitted their own K).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_with_another_number_of_permits_is_refused() {
    let c = Cluster::start(3);
    let two = c.redlock().semaphore("sized", 2).unwrap();
    let a = two.acquire(ms(5_000)).try_once().await.unwrap();
    let b = two.acquire(ms(5_000)).try_once().await.unwrap();
    let three = c.redlock().semaphore("sized", 3).unwrap();
    match three.acquire(ms(5_000)).try_once().await {
        Err(redquorum::Error::SemaphoreConflict { pinned, asked, .. }) => {
            assert_eq!((pinned.as_str(), asked), ("2", 3));
        }
        other => panic!("{other:?}"),
    }
    let slot3 = "redquorum:permit:{sized}:sized:2";
    assert_eq!(c.set_on(slot3), 0, "no third slot was taken");
    // The same number from another client is fine.
    let again = c.redlock().semaphore("sized", 2).unwrap();
    assert!(again
        .acquire(ms(5_000))
        .try_once()
        .await
        .unwrap_err()
        .is_contended());
    a.release().await.unwrap();
    b.release().await.unwrap();
}

/// A channel nobody waits on any more is given up after 30 s idle, though
/// no message arrives on it (it stayed subscribed for good).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_wake_channel_is_given_up() {
    let c = Cluster::start(5);
    let line = "redquorum:semaphore:{idle}:idle";
    let (held, _b, waiter) = b_waits_on_every_node(&c, "idle", || subscribers(&c, line) == 1).await;
    let permit = handed_over(held, waiter).await;
    permit.release().await.unwrap();
    assert!(
        wait_until(ms(45_000), || subscribers(&c, line) == 0).await,
        "still subscribed: {}",
        subscribers(&c, line)
    );
}

/// A waiter whose notification connection is cut hears the channel again
/// on a new one, and the next release still wakes it at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_hears_the_channel_again_after_its_connection_is_cut() {
    let c = Cluster::start(5);
    let line = "redquorum:semaphore:{cut}:cut";
    let (held, b, waiter) = b_waits_on_every_node(&c, "cut", || subscribers(&c, line) == 1).await;
    let cut: usize = c.nodes.iter().map(|n| n.kill_tracking_clients()).sum();
    assert!(cut >= 1, "b's notification connections");
    assert!(
        wait_until(ms(10_000), || subscribers(&c, line) == 1).await,
        "b hears the channel again: {} subscribers, {:?} listening, waiter done: {}, {:?}",
        subscribers(&c, line),
        listening(&c),
        waiter.is_finished(),
        b.stats()
    );
    let permit = handed_over(held, waiter).await;
    permit.release().await.unwrap();
}

/// Where the nodes refuse the channel (an ACL without it), a waiter is
/// still woken by the release at once: it reads the slots with client
/// tracking on instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_refused_the_channel_is_woken_through_the_slots() {
    let c = Cluster::start(3);
    for n in &c.nodes {
        let acl = [
            "SETUSER",
            "nochan",
            "on",
            ">pw",
            "~*",
            "resetchannels",
            "+@all",
        ];
        let _: () = redis::cmd("ACL").arg(&acl).query(&mut n.conn()).unwrap();
    }
    let urls = c.urls_as("redis://nochan:pw@");
    let a = Redlock::builder()
        .nodes(&urls)
        .retry_count(0)
        .build()
        .unwrap();
    let b = Redlock::builder()
        .nodes(&urls)
        .wait_cap(ms(10_000))
        .build()
        .unwrap();
    let held = a.semaphore("denied", 1).unwrap();
    let held = held.acquire(ms(10_000)).try_once().await.unwrap();
    held_everywhere(&c, "denied").await;
    let sem_b = b.semaphore("denied", 1).unwrap();
    let waiter = tokio::spawn(async move { sem_b.acquire(ms(10_000)).wait(ms(8_000)).await });
    let line = "redquorum:semaphore:{denied}:denied";
    assert!(
        wait_until(ms(3000), || c.waiting_on(line) == 3 && listening(&c).1 >= 1).await,
        "b waits, with a notification connection"
    );
    let permit = handed_over(held, waiter).await;
    assert_eq!(subscribers(&c, line), 0, "the channel was refused");
    assert!(b.stats().woken_by_notification >= 1);
    permit.release().await.unwrap();
}

/// Which node hears `line`'s channel (for one subscriber in all).
fn ear_of(c: &Cluster, line: &str) -> Option<usize> {
    let channel = support::internal_key("wake", line);
    c.nodes.iter().position(|n| {
        let reply: (String, usize) = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(&channel)
            .query(&mut n.conn())
            .expect("PUBSUB NUMSUB");
        reply.1 == 1
    })
}

/// The slots a waiter reads after a split (a release that named it had
/// not reached the other nodes yet) wake it once, for that release; the
/// tracking those reads leave does not wake the next caller at other
/// clients' takes and releases (each would be an attempt the nodes
/// refuse).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slots_read_after_a_split_wake_a_waiter_once() {
    let c = Cluster::start(3);
    let (name, line) = ("once", "redquorum:semaphore:{once}:once");
    let listed = |k| c.nodes.iter().all(|n| n.waiters(line) == k);
    let (proxies, far) = c.far_builder(0);
    let held_a = far.retry_count(0).build().unwrap();
    let held_a = held_a.semaphore(name, 2).unwrap();
    let held_a = held_a.acquire(ms(10_000)).try_once().await.unwrap();
    // c's take must find a's permit on every node, or c takes a's slot
    // where a's is still to be set, and its own is on two nodes only.
    held_everywhere(&c, name).await;
    let held_c = client(&c).semaphore(name, 2).unwrap();
    let held_c = held_c.acquire(ms(10_000)).try_once().await.unwrap();
    let slot_c = format!("redquorum:permit:{{{name}}}:{name}:1");
    assert!(
        wait_until(ms(3000), || c.set_on(&slot_c) == 3).await,
        "c's permit everywhere"
    );
    // b1 waits first and hears node `ear`; then d; then b2, b's second.
    let b = c.builder().wait_cap(ms(10_000)).build().unwrap();
    let sem_b = b.semaphore(name, 2).unwrap();
    let wait = |s: redquorum::Semaphore| async move { s.acquire(ms(10_000)).wait(ms(8_000)).await };
    let b1 = tokio::spawn(wait(sem_b.clone()));
    assert!(wait_until(ms(3000), || listed(1) && subscribers(&c, line) == 1).await);
    let ear = ear_of(&c, line).expect("b1 hears one node");
    let d = c.builder().wait_cap(ms(10_000)).build().unwrap();
    let d1 = tokio::spawn(wait(d.semaphore(name, 2).unwrap()));
    assert!(wait_until(ms(3000), || listed(2)).await, "d is listed");
    let b2 = tokio::spawn(wait(sem_b.clone()));
    assert!(wait_until(ms(3000), || listed(3)).await, "b2 is listed");
    // a's release reaches b1's node at once and the others 300 ms later:
    // b1's attempt takes a slot there only (a split), and it reads the
    // slots on one of the others, whose change lets it in.
    for (i, p) in proxies.iter().enumerate() {
        if i != ear {
            p.set_mode(support::ProxyMode::Delay(300));
        }
    }
    let released = tokio::spawn(held_a.release());
    let b1 = b1.await.unwrap().expect("b1 let in by a's release");
    released.await.unwrap().unwrap();
    // c's release lets d in (it names d); the node b1 read tells b of
    // the change to c's slot too, which must not wake b2.
    let (woken, news) = (b.stats().woken_by_notification, b.stats().notifications);
    let d1_permit = handed_over(held_c, d1).await;
    assert!(
        wait_until(ms(3000), || b.stats().notifications > news).await,
        "the node b1 read tells b of the change to c's slot"
    );
    assert!(
        !wait_until(ms(500), || b.stats().woken_by_notification > woken).await,
        "b2 was woken by a change that was not for it"
    );
    let b2 = handed_over(d1_permit, b2).await;
    b1.release().await.unwrap();
    b2.release().await.unwrap();
}

/// A name's permits and its plain lock exclude each other: the lock is
/// refused while a permit holds (also past the permit's first TTL, through
/// an extension), a waiting lock goes before permits not yet taken and
/// takes the name within a round trip or so of the last permit's release,
/// and a permit waiting behind the lock is woken by its release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_names_plain_lock_and_its_permits_exclude_each_other() {
    let c = Cluster::start(3);
    let (a, b) = (c.redlock(), c.redlock());
    let sem = a.semaphore("two", 2).unwrap();
    let p1 = sem.acquire(ms(2_000)).try_once().await.expect("a permit");
    let err = b
        .lock("two", ms(5_000))
        .try_once()
        .await
        .expect_err("a permit holds the name");
    assert!(err.is_contended(), "{err}");
    p1.extend(ms(10_000)).await.expect("extend");
    tokio::time::sleep(ms(2_500)).await;
    // A node that missed the permit's request may take it; a majority
    // never does.
    let got = c.bare_set_nx("two");
    assert!(
        got < 2,
        "a bare SET NX got the name on {got} of 3 nodes beside a permit"
    );
    // A plain lock waits behind the permit; a permit after it waits too,
    // though a slot is free.
    let waiter = c.builder().wait_cap(ms(10_000)).build().expect("client");
    let plain = tokio::spawn(async move {
        let lock = waiter.lock("two", ms(5_000)).wait(ms(30_000)).await;
        (lock, Instant::now())
    });
    assert!(
        wait_until(ms(15_000), || c.waiting_on("two") == 3).await,
        "the plain lock is listed on every node"
    );
    // (A long cap: only the nodes' news wakes it in time.)
    let patient = c.builder().wait_cap(ms(10_000)).build().expect("client");
    let late = patient.semaphore("two", 2).unwrap();
    let err = late
        .acquire(ms(5_000))
        .try_once()
        .await
        .expect_err("a permit behind a waiting plain lock");
    assert!(err.is_contended(), "{err}");
    let released = Instant::now();
    p1.release().await.expect("release");
    let (lock, at) = plain.await.unwrap();
    let lock = lock.expect("the plain lock, once the permit ended");
    assert!(
        at.duration_since(released) < ms(2_000),
        "taken {:?} after the permit ended",
        at.duration_since(released)
    );
    // A permit waits behind the lock and is woken by its release.
    let err = late
        .acquire(ms(5_000))
        .try_once()
        .await
        .expect_err("the plain lock holds the name");
    assert!(err.is_contended(), "{err}");
    let waiting = tokio::spawn(async move {
        let permit = late.acquire(ms(5_000)).wait(ms(30_000)).await;
        (permit, Instant::now())
    });
    assert!(
        wait_until(ms(15_000), || c
            .waiting_on(&internal_key("semaphore", "two"))
            >= 2)
        .await,
        "the permit waits on a quorum"
    );
    let released = Instant::now();
    lock.release().await.unwrap();
    let (permit, at) = waiting.await.unwrap();
    let permit = permit.expect("a permit, once the lock ended");
    assert!(
        at.duration_since(released) < ms(2_000),
        "taken {:?} after the lock ended (its TTL was 5 s)",
        at.duration_since(released)
    );
    permit.release().await.unwrap();
    b.settle().await;
    let free = a
        .lock("two", ms(1_000))
        .try_once()
        .await
        .expect("no mark left");
    free.release().await.unwrap();
}

/// A waiting permit is not kept out by plain locks of the name that came
/// after it: with three clients taking the lock one after another, each
/// waiting for it, the permit waiting since before them gets in when the
/// first lock is released (with the old rule, permits yielding to every
/// waiter of the name, it gave up after 20 s and 95 plain holds).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_permit_is_not_kept_out_by_later_plain_locks() {
    use std::sync::atomic::AtomicBool;
    let c = Cluster::start(3);
    let first = c
        .redlock()
        .lock("race", ms(5_000))
        .try_once()
        .await
        .unwrap();
    let patient = c.builder().wait_cap(ms(10_000)).build().unwrap();
    let permit = tokio::spawn(async move {
        let sem = patient.semaphore("race", 2).unwrap();
        let permit = sem.acquire(ms(2_000)).wait(ms(20_000)).await;
        (permit, Instant::now())
    });
    assert!(
        wait_until(ms(10_000), || c
            .waiting_on(&internal_key("semaphore", "race"))
            >= 2)
        .await,
        "the permit waits"
    );
    let stop = Arc::new(AtomicBool::new(false));
    let mut plains = Vec::new();
    for _ in 0..3 {
        let client = c.builder().wait_cap(ms(10_000)).build().unwrap();
        let stop = stop.clone();
        plains.push(tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                if let Ok(lock) = client.lock("race", ms(2_000)).wait(ms(3_000)).await {
                    tokio::time::sleep(ms(200)).await;
                    let _ = lock.release().await;
                }
            }
        }));
    }
    assert!(
        wait_until(ms(10_000), || c.waiting_on("race") >= 2).await,
        "the plain locks wait"
    );
    let released = Instant::now();
    first.release().await.unwrap();
    let (permit, at) = permit.await.unwrap();
    stop.store(true, Ordering::SeqCst);
    let permit = permit.expect("the permit, though plain locks came after it");
    assert!(
        at.duration_since(released) < ms(10_000),
        "{:?}",
        at.duration_since(released)
    );
    permit.release().await.unwrap();
    for p in plains {
        p.await.unwrap();
    }
}
