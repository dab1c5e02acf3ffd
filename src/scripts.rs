//! The Lua scripts, each run atomically on one node (the operator's
//! `INIT_NEW` lives beside its caller, in `trust.rs`, and the marker's
//! `MARKER_CAS` in `node/marker.rs`).
//!
//! The lock scripts are the ones every Redlock client uses (redsync,
//! node-redlock, redlock-py), so their keys interoperate with ours.

use crate::lua::{Lua, Native};

/// Compare-and-delete (`DELIFEQ` where the node has it): never releases a
/// lock that expired and was taken by someone else. 1 if deleted, else 0.
pub(crate) static RELEASE: Lua = Lua::cleanup(
    r#"if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("DEL", KEYS[1])
else
  return 0
end"#,
)
.or_native(Native::DelIfEq);

/// The first part of a waiter's attempt (`QUEUED_SET`, `SEMAPHORE_TAKE`),
/// with `Q` and `L` the waiting list and the leases, ARGV[3] the waiter id
/// (empty: not a registered waiter), ARGV[4] its ticket, ARGV[5] its lease
/// in ms: drops waiters whose lease ran out, joins or renews, keeps both
/// sets alive while waiters renew, and drops heads whose lease entry is
/// gone; leaves `head` the first live waiter and `id` ours.
macro_rules! join_waiting_list {
    () => {
        concat!(
            "redis.replicate_commands()\n",
            $crate::scripts::node_now!(),
            r#"local dead = redis.call("ZRANGEBYSCORE", L, "-inf", now)
for _, gone in ipairs(dead) do
  redis.call("ZREM", Q, gone)
  redis.call("ZREM", L, gone)
end
local id = ARGV[3]
if id ~= "" then
"#,
            $crate::scripts::register_waiter!(),
            r#"end
local head = redis.call("ZRANGE", Q, 0, 0)[1]
while head and head ~= id and not redis.call("ZSCORE", L, head) do
  redis.call("ZREM", Q, head)
  head = redis.call("ZRANGE", Q, 0, 0)[1]
end
"#
        )
    };
}

/// The node's clock in ms as `now` (a script that writes after it starts
/// with `redis.replicate_commands()`, so that a node older than Redis 5
/// replicates those writes).
macro_rules! node_now {
    () => {
        r#"local t = redis.call("TIME")
local now = t[1] * 1000 + math.floor(t[2] / 1000)
"#
    };
}

/// Registers waiter `id` in the waiting list `Q` (ticket ARGV[4], kept if
/// it is there) and renews its lease in `L` (ARGV[5] ms from `now`), and
/// keeps both sets alive twice as long: one place says how a waiter is
/// listed, for an attempt (`join_waiting_list`) and for an undo that puts
/// a waiter back (`SEMAPHORE_UNDO`).
macro_rules! register_waiter {
    () => {
        r#"redis.call("ZADD", Q, "NX", ARGV[4], id)
redis.call("ZADD", L, now + ARGV[5], id)
local keep = ARGV[5] * 2
for _, k in ipairs({Q, L}) do
  if redis.call("PTTL", k) < keep then
    redis.call("PEXPIRE", k, keep)
  end
end
"#
    };
}

/// The end of a release that says whether others wait (for every release
/// that does): with `now` the node's clock and KEYS[first..] lease sets,
/// 2 if a live waiter (lease not ended) is listed in one, else 1.
macro_rules! tell_live_waiters {
    () => {
        r#"for i = first, #KEYS do
  if redis.call("ZCOUNT", KEYS[i], "(" .. now, "+inf") > 0 then
    return 2
  end
end
return 1
"#
    };
}

pub(crate) use {join_waiting_list, node_now, register_waiter, tell_live_waiters};

/// [`RELEASE`] that also says whether others wait: KEYS[2] and KEYS[3] are
/// the lock's waiting list and its leases ([`QUEUED_SET`]). Returns 0 if
/// the key was not ours, 1 if deleted, 2 if deleted while a live waiter (one
/// whose lease has not ended) waits for it: the releasing client then queues
/// its own next `lock()` for the resource behind them instead of racing
/// them. Used only where this client has seen contention on the key, or in
/// strict-FIFO mode: the extra read costs the free path 13 % of its
/// throughput.
pub(crate) static RELEASE_TELLING_WAITERS: Lua = Lua::cleanup(concat!(
    "if redis.call(\"GET\", KEYS[1]) == ARGV[1] then\nredis.call(\"DEL\", KEYS[1])\n",
    node_now!(),
    "local first = 3\n",
    tell_live_waiters!(),
    "end\nreturn 0"
));

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

/// A waiter's attempt: join (or stay in) the resource's waiting list, and
/// take the lock only if the key is free and nobody live is ahead.
///
/// KEYS[1] is the lock; KEYS[2] the waiting list, a sorted set of waiter ids
/// scored by ticket (the time the waiter started waiting, so the list is in
/// arrival order, the same on every node); KEYS[3] the waiters' leases, the
/// same ids scored by the node-clock instant (ms) their lease ends. ARGV =
/// lock value, ttl ms, waiter id, ticket, lease ms.
///
/// Waiters whose lease ran out (they died or were cut off) are dropped
/// first, so a dead waiter blocks the others for one lease at most; so is a
/// head of the list whose lease entry is gone (evicted or deleted), which
/// would otherwise block everyone while others keep the list alive. A
/// waiter keeps its first ticket (`ZADD NX`) and renews its lease with
/// every call. Both sets expire when nobody renews them, so they never
/// outlive their waiters; their expiry only ever grows, so a client with a
/// short lease never cuts a longer one short. Safety does not depend on any
/// of this: the lock is still a plain `SET NX PX` on a quorum. The first
/// line lets a node older than Redis 5 replicate the writes made after
/// `TIME` (from 5.0 on it is the default and the call does nothing).
/// Returns {1,
/// 0, 0} when the lock was taken, else {0, PTTL of the lock, 1 if someone
/// live is ahead of us}.
pub(crate) static QUEUED_SET: Lua = Lua::new(concat!(
    "local Q, L = KEYS[2], KEYS[3]\n",
    join_waiting_list!(),
    r#"if head ~= ARGV[3] then
  return {0, redis.call("PTTL", KEYS[1]), 1}
end
if redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
  return {1, 0, 0}
end
return {0, redis.call("PTTL", KEYS[1]), 0}"#
));

/// Joins a resource's waiting list without an attempt (or renews the
/// entry): KEYS as for [`UNQUEUE`]; ARGV[3] the waiter id, ARGV[4] its
/// ticket, ARGV[5] its lease in ms (ARGV[1] and ARGV[2] are not used, so
/// the arguments line up with [`QUEUED_SET`]'s). A caller behind others of
/// its own client sends it when it starts waiting, so that its place among
/// other clients' waiters is its arrival, not the moment its own client's
/// line lets it try (see `lock/waiting.rs`). Returns 1.
pub(crate) static JOIN_WAITING_LIST: Lua = Lua::new(concat!(
    "local Q, L = KEYS[1], KEYS[2]\n",
    join_waiting_list!(),
    "return 1"
));

/// Leaves a resource's waiting list (after taking the lock, or giving up).
/// KEYS = the waiting list and the leases of [`QUEUED_SET`]; ARGV[1] = the
/// waiter id. Always delivered, like a release.
pub(crate) static UNQUEUE: Lua = Lua::cleanup(
    r#"redis.call("ZREM", KEYS[2], ARGV[1])
return redis.call("ZREM", KEYS[1], ARGV[1])"#,
);

/// Compare-and-pexpire (`SET … IFEQ … PX` where the node has it): a new TTL
/// only while the key holds our value; it never deletes, never creates.
/// Returns 1 if extended, 0 otherwise.
pub(crate) static EXTEND: Lua = Lua::new(
    r#"if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("PEXPIRE", KEYS[1], ARGV[2])
else
  return 0
end"#,
)
.or_native(Native::SetIfEqPx);

/// Pins a serial prefix's configuration (see `serial/pin.rs`): stores
/// ARGV[1] at KEYS[1] if nothing is there, never replaces what is. Returns
/// what the key holds afterwards.
pub(crate) static SERIAL_PIN: Lua = Lua::new(
    r#"local cur = redis.call("GET", KEYS[1])
if cur then
  return cur
end
redis.call("SET", KEYS[1], ARGV[1])
return ARGV[1]"#,
);

/// The counter's compare-and-set (see `counter.rs`). KEYS[1] is a hash with
/// fields `p` (period stamp, a fixed-width digit string, so string order is
/// time order) and `n` (last number issued in it, decimal); KEYS[2], if
/// given, where an older version kept the record: read while KEYS[1] does
/// not exist and KEYS[2] is a hash, so numbering goes on after an upgrade.
/// ARGV = expected period, expected n, new period, new n.
///
/// Accepts iff the stored record is <= expected in (period, n) order, then
/// stores the new record. Numbers are compared as decimal strings (shorter is
/// smaller, then byte order), never through Lua's doubles, which lose
/// precision above 2^53. A node that has a newer record than the caller saw
/// refuses, which is what makes two overlapping allocations impossible: any
/// two quorums share a node, and that node accepts at most one of them.
/// Returns {1, p, n} on accept (the record before), {0, p, n} on refusal.
pub(crate) static COUNTER_CAS: Lua = Lua::new(
    r#"local cur = redis.call("HMGET", KEYS[1], "p", "n", "r")
if not cur[1] and KEYS[2] and redis.call("TYPE", KEYS[2]).ok == "hash" then
  cur = redis.call("HMGET", KEYS[2], "p", "n")
end
local p, n, r = cur[1] or "", cur[2] or "0", cur[3] or ""
local ep, en = ARGV[1], ARGV[2]
local n_le = (#n < #en) or (#n == #en and n <= en)
if (p < ep) or (p == ep and n_le) then
  redis.call("HSET", KEYS[1], "p", ARGV[3], "n", ARGV[4])
  return {1, p, n, r}
end
return {0, p, n, r}"#,
);

/// Marks a counter record repaired on a node that lost data: KEYS[1] the
/// record, ARGV the record a winning round left there (period, n) and the
/// node's `run_id`. Only if the record is still exactly that (a later
/// record may be a stale round's); the stamp names the process, so a later
/// restart voids it.
pub(crate) static COUNTER_STAMP: Lua = Lua::new(
    r#"local cur = redis.call("HMGET", KEYS[1], "p", "n")
if cur[1] == ARGV[1] and cur[2] == ARGV[2] then
  redis.call("HSET", KEYS[1], "r", ARGV[3])
  return 1
end
return 0"#,
);

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
pub(crate) static SEMAPHORE_TAKE: Lua = Lua::new(concat!(
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

/// Releases a semaphore's permit on a node and names the waiters it lets
/// in: KEYS as [`SEMAPHORE_TAKE`]'s; ARGV = our value, our slot number
/// (from 1), the semaphore's channel. Deletes the slot only while it holds
/// our value; then, if the slot is free here (deleted, or already gone:
/// expired, or lost by the node), publishes the ids of the first live
/// waiters, one per free slot (`wake_waiters`), so that only their clients
/// try, not every waiter of every client, and every node tells them,
/// whichever one they hear. Returns 0 if the slot was not ours, 1 if
/// deleted, 2 if deleted while a live waiter waits (as
/// [`RELEASE_TELLING_WAITERS`]). Always delivered, like a release.
pub(crate) static SEMAPHORE_RELEASE: Lua = Lua::cleanup(concat!(
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

/// Moves a semaphore attempt on a node to slot number ARGV[2] (from 1, of
/// the slot keys KEYS[1..]), after a round in which the nodes took
/// different slots: sets it to our value (ARGV[1]) for ARGV[3] ms where it
/// is free or already ours, and deletes our other slots here. Returns 1;
/// 0 (and changes nothing) where another holds it.
pub(crate) static SEMAPHORE_MOVE: Lua = Lua::new(
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
pub(crate) static SEMAPHORE_UNDO: Lua = Lua::cleanup(concat!(
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

/// Publishes an election's leader (see `election/`): KEYS[1] the
/// election's lock, KEYS[2] its leadership record (a hash, no TTL). Only
/// while the lock holds our value (ARGV[1]) does the record become {owner =
/// that value, term = ARGV[2], value = ARGV[3]}. Returns 1 if written.
pub(crate) static LEADER_PUBLISH: Lua = Lua::new(
    r#"if redis.call("GET", KEYS[1]) == ARGV[1] then
  redis.call("HSET", KEYS[2], "owner", ARGV[1], "term", ARGV[2], "value", ARGV[3])
  return 1
end
return 0"#,
);

/// Reads an election on a node: KEYS as [`LEADER_PUBLISH`]. Returns {term,
/// value, PTTL of the lock} while the record names the lock's holder, {"",
/// "", PTTL} while the lock is held but not published yet, and {"", "",
/// -2} when nobody holds it.
pub(crate) static LEADER_READ: Lua = Lua::new(
    r#"local holder = redis.call("GET", KEYS[1])
if not holder then
  return {"", "", -2}
end
local pttl = redis.call("PTTL", KEYS[1])
local rec = redis.call("HMGET", KEYS[2], "owner", "term", "value")
if rec[1] == holder then
  return {rec[2], rec[3], pttl}
end
return {"", "", pttl}"#,
);

/// Reads locks without taking them (`lock/inspect.rs`): KEYS[1] the
/// waiters' leases, KEYS[2..] lock keys. Returns {live waiters (lease not
/// ended), then each key's value ("" when not set) and PTTL}. Writes
/// nothing.
pub(crate) static INSPECT: Lua = Lua::new(concat!(
    node_now!(),
    r#"local out = {redis.call("ZCOUNT", KEYS[1], now, "+inf")}
for i = 2, #KEYS do
  local v = redis.call("GET", KEYS[i])
  if v then
    out[#out + 1] = v
    out[#out + 1] = redis.call("PTTL", KEYS[i])
  else
    out[#out + 1] = ""
    out[#out + 1] = -2
  end
end
return out"#
));

#[cfg(test)]
mod tests {
    /// The minimal ACL user in docs/configuration.md allows every command of every script
    /// (`tests/messages.rs` runs the features as that user).
    #[test]
    fn the_readmes_acl_allows_every_script_command() {
        let readme = include_str!("../docs/configuration.md");
        let start = readme.find("`ACL SETUSER app").expect("the ACL line");
        let acl = readme[start + 1..].split('`').next().unwrap_or("");
        let allowed: Vec<String> = acl
            .split_whitespace()
            .filter_map(|w| w.strip_prefix('+'))
            .map(str::to_ascii_uppercase)
            .collect();
        let scripts = [
            &super::RELEASE,
            &super::RELEASE_TELLING_WAITERS,
            &super::QUEUED_SET,
            &super::UNQUEUE,
            &super::JOIN_WAITING_LIST,
            &super::EXTEND,
            &super::SERIAL_PIN,
            &super::COUNTER_CAS,
            &super::COUNTER_STAMP,
            &super::SEMAPHORE_TAKE,
            &super::SEMAPHORE_MOVE,
            &super::SEMAPHORE_UNDO,
            &super::SEMAPHORE_RELEASE,
            &super::LEADER_PUBLISH,
            &super::LEADER_READ,
            &super::INSPECT,
            &crate::trust::INIT_NEW,
            &crate::node::marker::MARKER_CAS,
            &crate::multi_scripts::TAKE_ALL,
            &crate::multi_scripts::QUEUED_TAKE_ALL,
            &crate::multi_scripts::RELEASE_ALL,
            &crate::multi_scripts::EXTEND_ALL,
            &crate::multi_scripts::HELD_ALL,
            &crate::rw_scripts::READ_TAKE,
            &crate::rw_scripts::WRITE_TAKE,
            &crate::rw_scripts::READ_RELEASE,
            &crate::rw_scripts::READ_EXTEND,
            &crate::rw_scripts::READ_HELD,
            &crate::rw_scripts::RW_INSPECT,
        ];
        for script in scripts {
            for cmd in script.commands().split(' ') {
                assert!(allowed.iter().any(|a| a == cmd), "{cmd} missing from {acl}");
            }
        }
    }

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

    #[test]
    fn commands_are_read_from_the_source() {
        assert_eq!(super::RELEASE.commands(), "EVAL GET DEL");
        assert_eq!(
            super::QUEUED_SET.commands(),
            "EVAL TIME ZRANGEBYSCORE ZREM ZADD PTTL PEXPIRE ZRANGE ZSCORE SET"
        );
    }

    /// What one request left on a Valkey node: its reply (an error by its
    /// code), the key's type, value and whether its TTL is what was asked.
    #[derive(Debug, PartialEq)]
    struct Outcome {
        reply: Result<redis::Value, String>,
        kind: String,
        value: Option<String>,
        ttl: &'static str,
    }

    /// Every state one key can be in for a lock: missing, ours with and
    /// without a TTL, another holder's, and a key of another type.
    fn set_state(c: &mut redis::Connection, state: usize) {
        run(c, &["FLUSHALL"]);
        match state {
            0 => {}
            1 => run(c, &["SET", "k", "ours", "PX", "60000"]),
            2 => run(c, &["SET", "k", "ours"]),
            3 => run(c, &["SET", "k", "theirs", "PX", "60000"]),
            4 => run(c, &["HSET", "k", "ours", "1"]),
            _ => run(c, &["SET", "k", "", "PX", "60000"]),
        }
    }

    /// The key's state after a request that answered `reply`; `asked` the
    /// TTL an extension asked for.
    fn outcome(
        c: &mut redis::Connection,
        reply: redis::RedisResult<redis::Value>,
        asked: i64,
    ) -> Outcome {
        let kind: String = redis::cmd("TYPE").arg("k").query(c).expect("TYPE");
        let value: Option<String> =
            (kind == "string").then(|| redis::cmd("GET").arg("k").query(c).expect("GET"));
        let pttl: i64 = redis::cmd("PTTL").arg("k").query(c).expect("PTTL");
        let ttl = match pttl {
            -2 => "none (gone)",
            -1 => "none (kept)",
            p if p > asked - 1000 && p <= asked => "as asked",
            p if p > 59_000 && p <= 60_000 => "as before",
            _ => "other",
        };
        Outcome {
            reply: reply.map_err(|e| e.code().unwrap_or("?").to_owned()),
            kind,
            value,
            ttl,
        }
    }

    /// Valkey's own commands decide as our compare-and-delete and
    /// compare-and-pexpire scripts do, on every state of one key, with the
    /// same reply once read as the script's (`Native::reply`): so a node
    /// that runs them (`node/open.rs` asks) may get them instead.
    #[test]
    fn native_forms_decide_as_their_scripts_on_every_state() {
        let (_node, mut c) = crate::scratch::valkey();
        let c = &mut c;
        let mut compared = 0;
        for script in [&super::RELEASE, &super::EXTEND] {
            let native = script.native.expect("a native form");
            for value in ["ours", ""] {
                for ttl in [2_000_i64, 86_400_000] {
                    let mut list = vec!["1".to_owned(), "k".into(), value.into()];
                    if native == crate::lua::Native::SetIfEqPx {
                        list.push(ttl.to_string());
                    }
                    let mut args = redis::Cmd::new();
                    args.arg(&list);
                    let cmd = native.command(&args).expect("our arguments fit");
                    for state in 0..6 {
                        set_state(c, state);
                        let by_script = redis::cmd("EVAL")
                            .arg(script.src)
                            .arg(&list)
                            .query::<redis::Value>(c);
                        let by_script = outcome(c, by_script, ttl);
                        set_state(c, state);
                        let by_native = cmd.query::<redis::Value>(c).map(|v| native.reply(v));
                        let by_native = outcome(c, by_native, ttl);
                        assert_eq!(
                            by_script, by_native,
                            "{native:?}, value {value:?}, ttl {ttl}, state {state}"
                        );
                        compared += 1;
                    }
                }
            }
        }
        assert_eq!(compared, 2 * 2 * 2 * 6);
    }
}
