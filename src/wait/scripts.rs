//! The Lua the waiting code shares with every primitive that keeps a
//! waiting list (the lock, the read-write lock, the multi-resource lock,
//! the semaphore): joining the list and leaving it, the node's time, and
//! telling a releaser whether live waiters are listed. Each primitive's own
//! scripts live beside it and take these fragments in.

use crate::lua::Script;

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
            $crate::wait::scripts::node_now!(),
            r#"local dead = redis.call("ZRANGEBYSCORE", L, "-inf", now)
for _, gone in ipairs(dead) do
  redis.call("ZREM", Q, gone)
  redis.call("ZREM", L, gone)
end
local id = ARGV[3]
if id ~= "" then
"#,
            $crate::wait::scripts::register_waiter!(),
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

/// Joins a resource's waiting list without an attempt (or renews the
/// entry): KEYS as for [`UNQUEUE`]; ARGV[3] the waiter id, ARGV[4] its
/// ticket, ARGV[5] its lease in ms (ARGV[1] and ARGV[2] are not used, so
/// the arguments line up with [`QUEUED_SET`]'s). A caller behind others of
/// its own client sends it when it starts waiting, so that its place among
/// other clients' waiters is its arrival, not the moment its own client's
/// line lets it try (see `acquire/waiting.rs`). Returns 1.
pub(crate) static JOIN_WAITING_LIST: Script<2> = Script::new(concat!(
    "local Q, L = KEYS[1], KEYS[2]\n",
    join_waiting_list!(),
    "return 1"
));

/// Leaves a resource's waiting list (after taking the lock, or giving up).
/// KEYS = the waiting list and the leases of [`QUEUED_SET`]; ARGV[1] = the
/// waiter id. Always delivered, like a release.
pub(crate) static UNQUEUE: Script<2> = Script::cleanup(
    r#"redis.call("ZREM", KEYS[2], ARGV[1])
return redis.call("ZREM", KEYS[1], ARGV[1])"#,
);

pub(crate) use {join_waiting_list, node_now, register_waiter, tell_live_waiters};
