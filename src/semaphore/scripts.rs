//! The semaphore's Lua: a permit is one of K slot keys, taken in the
//! waiting list's order, released naming the waiters it lets in, each
//! script run atomically on one node.
//!
//! Every script has the same keys: KEYS[1] and KEYS[2] the semaphore's
//! waiting list `Q` and its leases `L`; KEYS[3] the name's lock key `N`
//! (the key `Redlock::lock`, a read-write lock's writer, an election's
//! leader and every other Redlock client's `SET NX` take); KEYS[4] and
//! KEYS[5] the name's waiting list and its leases (the plain lock's);
//! KEYS[6..] the slot keys, in slot order.
//!
//! A name is one lock whichever kind takes it: while a slot is held on a
//! node, `N` there holds the permits' mark, which expires when the last
//! slot held there does (set so by every take, move, fill, extension and
//! release, `keep_permits`), so a plain lock's `SET NX` fails where a
//! permit holds; and a slot is taken, moved to, filled or extended only
//! where `N` is free or holds the mark, so no permit is taken where a
//! lock holds the name. A permit's quorum and a lock's quorum share a
//! node, whose state admits one of them only. A permit not yet taken
//! also yields to a live waiter on the name's list (a plain lock, a
//! writer, a candidate waiting for `N`) that started waiting before it
//! (tickets are the instants waiting started): a stream of permits never
//! keeps `lock N` out for good, and a waiter of the name that came later
//! does not keep a waiting permit out.

use crate::lua::{Script, ANY_KEYS};
use crate::wait::scripts::{join_waiting_list, node_now, register_waiter};

/// The first slot's index in KEYS, less one: slot number `i` (from 1) is
/// `KEYS[i + 5]`.
macro_rules! slot_keys {
    () => {
        "local N, FIRST = KEYS[3], 6\n"
    };
}

/// `name_taken`: whether `N` holds anything but the permits' mark (a
/// lock's value, a writer's, the readers' mark, a leader's).
macro_rules! name_taken {
    () => {
        concat!(
            "local held_name = redis.call(\"GET\", N)\n",
            "local name_taken = held_name and held_name ~= \"",
            crate::keys::permits_mark!(),
            "\"\n"
        )
    };
}

/// After the slots changed on this node (and with `name_taken` false),
/// keeps the permits' mark on `N` until exactly the end of the last slot
/// held here: not longer, so the name is free to a plain lock when the
/// permits end, however long an earlier one was; and not shorter. The
/// slots' PTTLs are read before the mark's, and the mark is set after
/// both: a mark read as ending before the last slot does end before it,
/// and one set from a slot's PTTL ends no earlier than that slot. Written
/// only where its end must move (each write wakes whoever waits on `N`);
/// deleted where no slot is held.
macro_rules! keep_permits {
    () => {
        concat!(
            r#"local top = -2
for i = FIRST, #KEYS do
  local p = redis.call("PTTL", KEYS[i])
  if p > top then
    top = p
  end
end
local m = redis.call("PTTL", N)
if top < 0 then
  if m ~= -2 then
    redis.call("DEL", N)
  end
elseif m < top or m > top + 1 then
  redis.call("SET", N, ""#,
            crate::keys::permits_mark!(),
            r#"", "PX", top)
end
"#
        )
    };
}

/// Names the waiters a semaphore's free slots are for (see
/// `wait/named.rs`): with `Q` and `L` its waiting list and leases and
/// KEYS[6..] its slots, `wake(channel, skip)` publishes on `channel` the
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
  for i = 6, #KEYS do
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
/// KEYS as every semaphore script's (see above). ARGV = value, ttl ms,
/// waiter id (empty for a plain attempt, which does not join the list),
/// ticket, lease ms.
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
/// every slot is held; {0, `N`'s PTTL, 2} where the name's lock key holds
/// anything but the permits' mark, and {0, `N`'s PTTL, 3} where a live
/// waiter on the name's list started waiting before this one (a plain
/// attempt: any live waiter there; a slot is free, but the name's lock
/// goes first).
pub(crate) static SEMAPHORE_TAKE: Script<ANY_KEYS> = Script::new(concat!(
    "local Q, L = KEYS[1], KEYS[2]\n",
    slot_keys!(),
    join_waiting_list!(),
    name_taken!(),
    r#"if name_taken then
  return {0, redis.call("PTTL", N), 2}
end
local free, soonest = {}, -1
for i = FIRST, #KEYS do
  local held = redis.call("GET", KEYS[i])
  if held == ARGV[1] then
    if id ~= "" then
      redis.call("ZREM", Q, id)
      redis.call("ZREM", L, id)
    end
    return {i - FIRST + 1, 0, 0}
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
  local before = "+inf"
  if id ~= "" then
    before = "(" .. ARGV[4]
  end
  for _, w in ipairs(redis.call("ZRANGEBYSCORE", KEYS[4], "-inf", before)) do
    local lease = redis.call("ZSCORE", KEYS[5], w)
    if lease and tonumber(lease) > now then
      return {0, redis.call("PTTL", N), 3}
    end
  end
  local slot = free[ahead + 1]
  redis.call("SET", KEYS[slot], ARGV[1], "PX", ARGV[2])
  if id ~= "" then
    redis.call("ZREM", Q, id)
    redis.call("ZREM", L, id)
  end
"#,
    keep_permits!(),
    r#"  return {slot - FIRST + 1, #free - ahead - 1, 0}
end
if #free > 0 then
  return {0, -2, 1}
end
return {0, soonest, 0}"#
));

/// Moves a semaphore attempt on a node to slot number ARGV[2] (from 1),
/// after a round in which the nodes took different slots: sets it to our
/// value (ARGV[1]) for ARGV[3] ms where it is free or already ours, and
/// deletes our other slots here. Returns 1; 0 (and changes nothing) where
/// another holds it, or where the name's lock key holds anything but the
/// permits' mark. KEYS as every semaphore script's.
pub(crate) static SEMAPHORE_MOVE: Script<ANY_KEYS> = Script::new(concat!(
    slot_keys!(),
    name_taken!(),
    r#"local to = tonumber(ARGV[2]) + FIRST - 1
local held = redis.call("GET", KEYS[to])
if name_taken or (held and held ~= ARGV[1]) then
  return 0
end
redis.call("SET", KEYS[to], ARGV[1], "PX", ARGV[3])
for i = FIRST, #KEYS do
  if i ~= to and redis.call("GET", KEYS[i]) == ARGV[1] then
    redis.call("DEL", KEYS[i])
  end
end
"#,
    keep_permits!(),
    "return 1"
));

/// Undoes a semaphore attempt on a node: deletes every slot that holds
/// our value (ARGV[1]) except slot number ARGV[2] (from 1; 0 keeps none).
/// KEYS as every semaphore script's.
///
/// A waiter that took a slot here left the waiting list here; if it waits
/// on (ARGV[3], its id, not empty), it joins again with its ticket
/// (ARGV[4]) and lease in ms (ARGV[5]). Otherwise the waiters behind it
/// would be ranked one place higher here than on the nodes it did not
/// take, and take other slots here than there.
///
/// A winner (ARGV[2] its slot, ARGV[6] its TTL in ms, 0: none) also sets
/// its slot here where it is free (`SET NX`) and the name's lock key is
/// free or holds the permits' mark: a node that did not take it would
/// otherwise show it free, and the next waiter would take it here and
/// another slot elsewhere. The fill counts for nothing (the permit's
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
"#,
    slot_keys!(),
    name_taken!(),
    r#"local won = tonumber(ARGV[2])
local n = 0
for i = FIRST, #KEYS do
  if i - FIRST + 1 ~= won and redis.call("GET", KEYS[i]) == ARGV[1] then
    n = n + redis.call("DEL", KEYS[i])
  end
end
local freed = n
if won > 0 and tonumber(ARGV[6]) > 0 and not name_taken then
  if redis.call("SET", KEYS[won + FIRST - 1], ARGV[1], "NX", "PX", ARGV[6]) then
    freed = freed - 1
  end
end
if not name_taken then
"#,
    keep_permits!(),
    r#"end
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

/// Extends a held permit on a node: KEYS as every semaphore script's;
/// ARGV = our value, our slot number (from 1), the new TTL in ms. A new
/// TTL only while the slot holds our value and the name's lock key is
/// free or holds the permits' mark, which then ends with the last slot
/// held here. Returns 1 if extended, 0 otherwise (as the lock's `EXTEND`).
pub(crate) static SEMAPHORE_EXTEND: Script<ANY_KEYS> = Script::new(concat!(
    slot_keys!(),
    name_taken!(),
    r#"local k = tonumber(ARGV[2]) + FIRST - 1
if name_taken or redis.call("GET", KEYS[k]) ~= ARGV[1] then
  return 0
end
redis.call("PEXPIRE", KEYS[k], ARGV[3])
"#,
    keep_permits!(),
    "return 1"
));

/// Releases a semaphore's permit on a node and names the waiters it lets
/// in: KEYS as every semaphore script's; ARGV = our value, our slot
/// number (from 1), the semaphore's channel. Deletes the slot only while
/// it holds our value (the permits' mark on the name's lock key then ends
/// with the last slot left, or goes); then, if the slot is free here
/// (deleted, or already gone: expired, or lost by the node), publishes
/// the ids of the first live waiters, one per free slot (`wake_waiters`),
/// so that only their clients try, not every waiter of every client, and
/// every node tells them, whichever one they hear. Returns 0 if the slot
/// was not ours, 1 if deleted, 2 if deleted while a live waiter waits (as
/// the lock's `RELEASE_TELLING_WAITERS`). Always delivered, like a release.
pub(crate) static SEMAPHORE_RELEASE: Script<ANY_KEYS> = Script::cleanup(concat!(
    r#"redis.replicate_commands()
local Q, L = KEYS[1], KEYS[2]
"#,
    slot_keys!(),
    r#"local k = tonumber(ARGV[2]) + FIRST - 1
local held = redis.call("GET", KEYS[k])
if held and held ~= ARGV[1] then
  return 0
end
if held then
  redis.call("DEL", KEYS[k])
"#,
    name_taken!(),
    r#"  if not name_taken then
"#,
    keep_permits!(),
    r#"  end
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
            .arg(8)
            .arg(&["q", "l", "n", "nq", "nl", "s1", "s2", "s3"])
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
            run(c, &["DEL", "q", "l", "n", "s1", "s2", "s3"]);
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
            run(c, &["DEL", "q", "l", "n", "s1", "s2", "s3"]);
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
        run(c, &["DEL", "q", "l", "n", "s2", "s3"]);
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
            let slot = slot.to_string();
            ints(eval(c, super::SEMAPHORE_RELEASE.src, &["v", &slot, "ch"]))[0]
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
            let args = ["v", &won.to_string(), id, "2", "5000", "1000", "ch"];
            ints(eval(c, super::SEMAPHORE_UNDO.src, &args))[0]
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

    /// Runs semaphore script `script` over slots s1, s2 (the name's key
    /// `n`, its list `nq`, `nl`) with `args`.
    fn eval(c: &mut redis::Connection, script: &str, args: &[&str]) -> redis::Value {
        redis::cmd("EVAL")
            .arg(script)
            .arg(7)
            .arg(&["q", "l", "n", "nq", "nl", "s1", "s2"])
            .arg(args)
            .query(c)
            .expect("EVAL")
    }

    /// An integer reply, or an array's items.
    fn ints(v: redis::Value) -> Vec<i64> {
        match v {
            redis::Value::Int(n) => vec![n],
            v => redis::from_redis_value(v).expect("integers"),
        }
    }

    /// PTTL of `key`.
    fn pttl(c: &mut redis::Connection, key: &str) -> i64 {
        redis::cmd("PTTL").arg(key).query(c).expect("PTTL")
    }

    /// While a slot is held on a node, the name's lock key holds the
    /// permits' mark, ending exactly with the last slot held there (set
    /// by a take, moved on by an extension, moved back by the release of
    /// the last, gone with the last); a plain lock's `SET NX` fails on it.
    /// A lock on the name keeps permits out (take, move, fill, extension);
    /// a live waiter on the name's list goes before a permit not taken.
    #[test]
    fn permits_keep_the_name_from_a_plain_lock_while_they_hold() {
        use super::SEMAPHORE_UNDO;
        use super::{SEMAPHORE_EXTEND, SEMAPHORE_MOVE, SEMAPHORE_RELEASE, SEMAPHORE_TAKE};
        let mark = crate::keys::permits_mark!();
        let (_node, mut conn) = crate::scratch::node();
        let c = &mut conn;
        let take = |c: &mut redis::Connection, v: &str, ttl: &str| {
            ints(eval(c, SEMAPHORE_TAKE.src, &[v, ttl, "", "0", "0"]))
        };
        let name = |c: &mut redis::Connection| -> Option<String> {
            redis::cmd("GET").arg("n").query(c).expect("GET")
        };
        assert_eq!(take(c, "a", "1000")[0], 1);
        assert_eq!(name(c).as_deref(), Some(mark));
        assert!(pttl(c, "n") >= pttl(c, "s1"), "the mark ends with the slot");
        let set_nx: Option<String> = redis::cmd("SET")
            .arg(&["n", "lock", "NX", "PX", "1000"])
            .query(c)
            .expect("SET");
        assert_eq!(set_nx, None, "a plain lock is kept out");
        assert_eq!(take(c, "b", "5000")[0], 2);
        assert!(pttl(c, "n") > 4000, "the mark ends with the longer slot");
        assert_eq!(ints(eval(c, SEMAPHORE_RELEASE.src, &["b", "2", ""])), [1]);
        let (slot, mark_left) = (pttl(c, "s1"), pttl(c, "n"));
        assert!(
            (slot..=slot + 2).contains(&mark_left),
            "{mark_left} ms, slot {slot}"
        );
        assert_eq!(
            ints(eval(c, SEMAPHORE_EXTEND.src, &["a", "1", "6000"])),
            [1]
        );
        assert!(pttl(c, "n") >= pttl(c, "s1") && pttl(c, "n") > 5000);
        assert_eq!(
            ints(eval(c, SEMAPHORE_EXTEND.src, &["x", "1", "6000"])),
            [0]
        );
        assert_eq!(ints(eval(c, SEMAPHORE_RELEASE.src, &["a", "1", ""])), [1]);
        assert_eq!(name(c), None, "the last release takes the mark away");
        // A lock on the name keeps permits out.
        run(c, &["SET", "n", "lock", "PX", "3000"]);
        let refused = take(c, "a", "1000");
        assert_eq!((refused[0], refused[2]), (0, 2), "{refused:?}");
        assert!(refused[1] > 2000, "the lock's PTTL: {refused:?}");
        run(c, &["SET", "s1", "a", "PX", "1000"]);
        assert_eq!(
            ints(eval(c, SEMAPHORE_EXTEND.src, &["a", "1", "6000"])),
            [0]
        );
        assert_eq!(ints(eval(c, SEMAPHORE_MOVE.src, &["a", "2", "1000"])), [0]);
        let undo = ["b", "2", "", "0", "0", "1000", ""];
        eval(c, SEMAPHORE_UNDO.src, &undo);
        let filled: i64 = redis::cmd("EXISTS").arg("s2").query(c).expect("EXISTS");
        assert_eq!(filled, 0, "no fill under a lock");
        assert_eq!(name(c).as_deref(), Some("lock"), "the lock's key untouched");
        run(c, &["DEL", "n", "s1"]);
        // A live waiter on the name's list goes first; one whose lease
        // ended does not.
        let t: Vec<i64> = redis::cmd("TIME").query(c).expect("TIME");
        let live = (t[0] * 1000 + 10_000).to_string();
        run(c, &["ZADD", "nq", "1", "w"]);
        run(c, &["ZADD", "nl", &live, "w"]);
        let yielded = take(c, "a", "1000");
        assert_eq!((yielded[0], yielded[2]), (0, 3), "{yielded:?}");
        // A waiting permit yields to a waiter of the name that came
        // before it (ticket 1), not to one that came after.
        let as_waiter = |c: &mut redis::Connection, id: &str, ticket: &str| {
            ints(eval(
                c,
                SEMAPHORE_TAKE.src,
                &["b", "1000", id, ticket, "5000"],
            ))
        };
        let early = as_waiter(c, "p0", "0");
        assert_eq!((early[0], early[2]), (1, 0), "came first: {early:?}");
        run(c, &["DEL", "s1", "q", "l"]);
        let late = as_waiter(c, "p2", "2");
        assert_eq!((late[0], late[2]), (0, 3), "came after: {late:?}");
        run(c, &["DEL", "q", "l"]);
        run(c, &["ZADD", "nl", "1", "w"]);
        assert_eq!(take(c, "a", "1000")[0], 1);
    }
}
