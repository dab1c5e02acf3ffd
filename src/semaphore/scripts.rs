//! The semaphore's Lua: a permit is one of K slot keys, taken in the
//! waiting list's order, released naming the waiters it lets in, each
//! script run atomically on one node.

use crate::lua::{Script, ANY_KEYS};
use crate::wait::scripts::{join_waiting_list, node_now, register_waiter};

/// Names the waiters a semaphore's free slots are for (see
/// `wait/named.rs`): with `Q` and `L` its waiting list and leases and
/// KEYS[3..] its slots, `wake(channel, skip)` publishes on `channel` the
/// ids of the first live waiters (lease not ended), as many as slots are
/// free here, leaving out `skip`; returns how many it named. It runs only
/// commands `SEMAPHORE_TAKE` runs too, and `PUBLISH` with `pcall`: a node
/// whose ACL was written before (no `PUBLISH`, no channel) still releases,
/// and its waiters fall back to reading the slots.
macro_rules! wake_waiters {
    () => {
        r#"local function wake(channel, skip)
  local listed = redis.call("ZRANGE", Q, 0, #KEYS + 5)
  if #listed == 0 then
    return 0
  end
  local free = 0
  for i = 3, #KEYS do
    if redis.call("PTTL", KEYS[i]) == -2 then
      free = free + 1
    end
  end
  local t = redis.call("TIME")
  local now = t[1] * 1000 + math.floor(t[2] / 1000)
  local named = {}
  for _, w in ipairs(listed) do
    if #named >= free then
      break
    end
    local lease = redis.call("ZSCORE", L, w)
    if w ~= skip and lease and tonumber(lease) > now then
      named[#named + 1] = w
    end
  end
  if #named > 0 and channel ~= "" then
    redis.pcall("PUBLISH", channel, table.concat(named, " "))
  end
  return #named
end
"#
    };
}

/// A semaphore's attempt (see `semaphore/`): take a free slot on this
/// node, if the waiters ahead leave one.
///
/// KEYS[1] and KEYS[2] are the semaphore's waiting list and leases (as in
/// [`QUEUED_SET`]); KEYS[3..] its slot keys, in slot order. ARGV = value,
/// ttl ms, waiter id (empty for a plain attempt, which does not join the
/// list), ticket, lease ms.
///
/// A registered waiter may take a slot while fewer live waiters are ahead
/// of it than slots are free; a plain attempt only while more slots are
/// free than waiters wait. It takes the free slot that matches its rank:
/// with `r` waiters ahead (a plain attempt counts every waiter), the
/// `r + 1`-th free slot in slot order, and a waiter that takes one leaves
/// the list here at once. So waiters woken together take distinct slots,
/// and the same ones on every node whatever order their attempts arrive
/// in: the one ahead takes the first free slot and leaves, the one behind
/// is then first and takes the next. (A waiter that took a slot but lost
/// the round joins again with its first ticket on its next attempt.)
/// A slot that already holds our value is ours: the same attempt sent
/// again (its reply lost, the connection remade) gets it back, not a
/// second slot that would outlive the release by a whole TTL.
/// Returns {slot number from 1, spare, 0} when a slot was taken, `spare`
/// the free slots left beyond those of the waiters ahead (more than 0: the
/// next waiter may take one at once); else {0, -2, 1} if a slot is free but
/// others go first, {0, the soonest slot's PTTL (-1: none expires), 0} if
/// every slot is held.
pub(crate) static SEMAPHORE_TAKE: Script<ANY_KEYS> = Script::new(concat!(
    "local Q, L = KEYS[1], KEYS[2]\n",
    join_waiting_list!(),
    r#"local free, soonest = {}, -1
for i = 3, #KEYS do
  local held = redis.call("GET", KEYS[i])
  if held == ARGV[1] then
    if id ~= "" then
      redis.call("ZREM", Q, id)
      redis.call("ZREM", L, id)
    end
    return {i - 2, 0, 0}
  end
  if not held then
    free[#free + 1] = i
  else
    local pttl = redis.call("PTTL", KEYS[i])
    if pttl >= 0 and (soonest < 0 or pttl < soonest) then
      soonest = pttl
    end
  end
end
local ahead
if id ~= "" then
  ahead = redis.call("ZRANK", KEYS[1], id)
else
  ahead = redis.call("ZCARD", KEYS[1])
end
if #free > ahead then
  local slot = free[ahead + 1]
  redis.call("SET", KEYS[slot], ARGV[1], "PX", ARGV[2])
  if id ~= "" then
    redis.call("ZREM", Q, id)
    redis.call("ZREM", L, id)
  end
  return {slot - 2, #free - ahead - 1, 0}
end
if #free > 0 then
  return {0, -2, 1}
end
return {0, soonest, 0}"#
));

/// Moves a semaphore attempt on a node to slot number ARGV[2] (from 1, of
/// the slot keys KEYS[1..]), after a round in which the nodes took
/// different slots: sets it to our value (ARGV[1]) for ARGV[3] ms where it
/// is free or already ours, and deletes our other slots here. Returns 1;
/// 0 (and changes nothing) where another holds it.
pub(crate) static SEMAPHORE_MOVE: Script<ANY_KEYS> = Script::new(
    r#"local to = tonumber(ARGV[2])
local held = redis.call("GET", KEYS[to])
if held and held ~= ARGV[1] then
  return 0
end
redis.call("SET", KEYS[to], ARGV[1], "PX", ARGV[3])
for i = 1, #KEYS do
  if i ~= to and redis.call("GET", KEYS[i]) == ARGV[1] then
    redis.call("DEL", KEYS[i])
  end
end
return 1"#,
);

/// Undoes a semaphore attempt on a node: deletes every slot (KEYS[3..])
/// that holds our value (ARGV[1]) except slot number ARGV[2] (from 1; 0
/// keeps none).
///
/// A waiter that took a slot here left the waiting list (KEYS[1],
/// KEYS[2]) here; if it waits on (ARGV[3], its id, not empty), it joins
/// again with its ticket (ARGV[4]) and lease in ms (ARGV[5]). Otherwise the
/// waiters behind it would be ranked one place higher here than on the
/// nodes it did not take, and take other slots here than there.
///
/// A winner (ARGV[2] its slot, ARGV[6] its TTL in ms, 0: none) also sets
/// its slot here where it is free (`SET NX`): a node that did not take it
/// would otherwise show it free, and the next waiter would take it here
/// and another slot elsewhere. The fill counts for nothing (the permit's
/// validity comes from the quorum that took the slot) and never takes a
/// slot someone holds; a release or expiry removes it like the rest.
///
/// When it leaves more slots free here than it found (ARGV[7] the
/// semaphore's channel), it names the waiters they are for, as a release
/// does, leaving out the waiter itself. Returns how many slots it deleted.
/// Always delivered, like a release.
pub(crate) static SEMAPHORE_UNDO: Script<ANY_KEYS> = Script::cleanup(concat!(
    r#"redis.replicate_commands()
local Q, L, id = KEYS[1], KEYS[2], ARGV[3]
local won = tonumber(ARGV[2])
local n = 0
for i = 3, #KEYS do
  if i - 2 ~= won and redis.call("GET", KEYS[i]) == ARGV[1] then
    n = n + redis.call("DEL", KEYS[i])
  end
end
local freed = n
if won > 0 and tonumber(ARGV[6]) > 0 then
  if redis.call("SET", KEYS[won + 2], ARGV[1], "NX", "PX", ARGV[6]) then
    freed = freed - 1
  end
end
if n > 0 and id ~= "" then
"#,
    node_now!(),
    register_waiter!(),
    r#"end
"#,
    wake_waiters!(),
    r#"if freed > 0 then
  wake(ARGV[7] or "", id)
end
return n"#
));

/// Releases a semaphore's permit on a node and names the waiters it lets
/// in: KEYS as [`SEMAPHORE_TAKE`]'s; ARGV = our value, our slot number
/// (from 1), the semaphore's channel. Deletes the slot only while it holds
/// our value; then, if the slot is free here (deleted, or already gone:
/// expired, or lost by the node), publishes the ids of the first live
/// waiters, one per free slot (`wake_waiters`), so that only their clients
/// try, not every waiter of every client, and every node tells them,
/// whichever one they hear. Returns 0 if the slot was not ours, 1 if
/// deleted, 2 if deleted while a live waiter waits (as
/// the lock's `RELEASE_TELLING_WAITERS`). Always delivered, like a release.
pub(crate) static SEMAPHORE_RELEASE: Script<ANY_KEYS> = Script::cleanup(concat!(
    r#"redis.replicate_commands()
local Q, L = KEYS[1], KEYS[2]
local k = tonumber(ARGV[2]) + 2
local held = redis.call("GET", KEYS[k])
if held and held ~= ARGV[1] then
  return 0
end
if held then
  redis.call("DEL", KEYS[k])
end
"#,
    wake_waiters!(),
    r#"local named = wake(ARGV[3], "")
if not held then
  return 0
end
if named > 0 then
  return 2
end
return 1"#
));

#[cfg(test)]
mod tests {
    /// `SEMAPHORE_TAKE` over slots s1..s3 for waiter `id` (empty: a plain
    /// attempt) with `ticket`.
    fn take(conn: &mut redis::Connection, id: &str, ticket: u64) -> Vec<i64> {
        // Each attempt has a value of its own, as the client's do.
        static ATTEMPTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = ATTEMPTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        take_as(conn, &format!("v{n}"), id, ticket)
    }

    /// `SEMAPHORE_TAKE` as [`take`] does, with the attempt's value `value`.
    fn take_as(conn: &mut redis::Connection, value: &str, id: &str, ticket: u64) -> Vec<i64> {
        redis::cmd("EVAL")
            .arg(super::SEMAPHORE_TAKE.src)
            .arg(5)
            .arg(&["q", "l", "s1", "s2", "s3"])
            .arg(&[value, "1000", id, &ticket.to_string(), "5000"])
            .query(conn)
            .expect("EVAL")
    }

    /// A take sent again (its reply lost) gets the slot it took, not a
    /// second one; the waiter stays off the list.
    #[test]
    fn a_semaphore_take_sent_again_takes_no_second_slot() {
        let (_node, mut conn) = crate::scratch::node();
        let c = &mut conn;
        for id in ["", "w"] {
            run(c, &["DEL", "q", "l", "s1", "s2", "s3"]);
            let first = take_as(c, "mine", id, 1);
            assert_eq!(first[0], 1, "{first:?}");
            assert_eq!(take_as(c, "mine", id, 1)[0], 1);
            let held: i64 = redis::cmd("EXISTS")
                .arg(&["s1", "s2", "s3"])
                .query(c)
                .unwrap();
            assert_eq!(held, 1, "one slot taken");
            let listed: i64 = redis::cmd("ZCARD").arg("q").query(c).unwrap();
            assert_eq!(listed, 0);
        }
    }

    /// Runs one command.
    fn run(conn: &mut redis::Connection, args: &[&str]) {
        let _: redis::Value = redis::cmd(args[0])
            .arg(&args[1..])
            .query(conn)
            .expect(args[0]);
    }

    /// Two waiters woken together take distinct slots, the same ones in
    /// either arrival order, on a real node; a plain attempt leaves a slot
    /// to each waiter.
    #[test]
    fn semaphore_waiters_take_the_slot_of_their_rank() {
        let (_node, mut conn) = crate::scratch::node();
        let c = &mut conn;
        for (first, second) in [(("a", 1), ("b", 2)), (("b", 2), ("a", 1))] {
            run(c, &["DEL", "q", "l", "s1", "s2", "s3"]);
            run(c, &["MSET", "s1", "x", "s2", "x", "s3", "x"]);
            // Every slot held: both join the list, a first.
            assert_eq!(take(c, "a", 1), [0, -1, 0]);
            assert_eq!(take(c, "b", 2), [0, -1, 0]);
            run(c, &["DEL", "s2", "s3"]);
            let got = [take(c, first.0, first.1), take(c, second.0, second.1)];
            let slot = |id| got[usize::from(first.0 != id)][0];
            assert_eq!((slot("a"), slot("b")), (2, 3), "{first:?} first: {got:?}");
            // Slots to spare: a taking first leaves b's; b taking first
            // leaves only a's (a is ahead), which is not to spare.
            let spare = |id| got[usize::from(first.0 != id)][1];
            let a_first = i64::from(first.0 == "a");
            assert_eq!((spare("a"), spare("b")), (a_first, 0), "{got:?}");
            let left: i64 = redis::cmd("ZCARD").arg("q").query(c).expect("ZCARD");
            assert_eq!(left, 0, "a waiter that took a slot leaves the list");
        }
        run(c, &["DEL", "q", "l", "s2", "s3"]);
        run(c, &["ZADD", "q", "1", "w"]);
        run(c, &["ZADD", "l", "+inf", "w"]);
        assert_eq!(take(c, "", 0), [3, 0, 0], "slot 2 is left to the waiter");
        assert_eq!(take(c, "", 0), [0, -2, 1], "and not taken by another");
    }

    /// A permit's release names the first live waiters, one per free
    /// slot, on the channel; an undo names them only when it frees more
    /// than it fills, and never the waiter undoing.
    #[test]
    fn a_semaphore_release_names_the_waiters_it_lets_in() {
        let (node, mut conn) = crate::scratch::node();
        let mut sub = node.connection();
        let mut sub = sub.as_pubsub();
        sub.subscribe("ch").expect("SUBSCRIBE");
        sub.set_read_timeout(Some(std::time::Duration::from_secs(2)))
            .expect("timeout");
        let c = &mut conn;
        let release = |c: &mut redis::Connection, slot: u64| -> i64 {
            redis::cmd("EVAL")
                .arg(super::SEMAPHORE_RELEASE.src)
                .arg(4)
                .arg(&["q", "l", "s1", "s2"])
                .arg("v")
                .arg(slot)
                .arg("ch")
                .query(c)
                .expect("EVAL")
        };
        run(c, &["MSET", "s1", "v", "s2", "x"]);
        assert_eq!(release(c, 1), 1, "nobody waits");
        run(c, &["SET", "s1", "v"]);
        // a's lease ended: named are the live ones, as many as slots free.
        run(c, &["ZADD", "q", "1", "a", "2", "b", "3", "c", "4", "d"]);
        run(
            c,
            &["ZADD", "l", "1", "a", "+inf", "b", "+inf", "c", "+inf", "d"],
        );
        assert_eq!(release(c, 2), 0, "slot 2 is another's: nothing freed");
        assert_eq!(release(c, 1), 2, "deleted while others wait");
        let said = |sub: &mut redis::PubSub<'_>| -> String {
            sub.get_message()
                .expect("a message")
                .get_payload()
                .expect("text")
        };
        assert_eq!(said(&mut sub), "b", "one slot free: the first live waiter");
        assert_eq!(release(c, 1), 0, "gone already: not ours to delete");
        assert_eq!(said(&mut sub), "b", "but free here: named all the same");
        run(c, &["DEL", "s2"]);
        run(c, &["SET", "s1", "v"]);
        assert_eq!(release(c, 1), 2);
        assert_eq!(said(&mut sub), "b c", "two slots free");
        // An undo that frees a slot names others, not the waiter undoing.
        let undo = |c: &mut redis::Connection, id: &str, won: u64| -> i64 {
            redis::cmd("EVAL")
                .arg(super::SEMAPHORE_UNDO.src)
                .arg(4)
                .arg(&["q", "l", "s1", "s2"])
                .arg(&["v", &won.to_string(), id, "2", "5000", "1000", "ch"])
                .query(c)
                .expect("EVAL")
        };
        run(c, &["MSET", "s1", "v", "s2", "x"]);
        assert_eq!(undo(c, "b", 0), 1);
        assert_eq!(said(&mut sub), "c", "b is left out");
        // A winner's undo that moves its slot here frees nothing: silent.
        run(c, &["MSET", "s1", "v"]);
        run(c, &["DEL", "s2"]);
        assert_eq!(undo(c, "", 2), 1);
        run(c, &["PUBLISH", "ch", "end"]);
        assert_eq!(said(&mut sub), "end", "the undo named nobody");
    }
}
