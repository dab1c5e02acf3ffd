//! The Lua sources of the read-write lock (`rwlock/`), each run
//! atomically on one node.
//!
//! A read-write lock named N keeps, on each node: the key `W`, which is
//! the plain lock's key of N (`Redlock::lock` and every other Redlock
//! client take the same key), holding a writer's value, or the readers'
//! mark while readers hold; the readers' leases `R` (a sorted set of
//! reader values scored by the node-clock instant, in ms, each lease ends)
//! and a waiting list `Q` with its leases `L`, the plain lock's (waiter ids
//! scored by ticket; a writer's id, and a plain lock waiter's, ends in
//! `:w`). Every script first drops the readers whose lease ended, so a
//! crashed reader holds writers off until its own lease ends, whatever
//! other readers do. On one node:
//!
//! * a reader takes a lease only while `W` is free or holds the readers'
//!   mark, and no live writer waits ahead of it (a plain attempt: no live
//!   writer waits at all); the mark on `W` then expires exactly when the
//!   last live lease ends, set so by every take, extension and release;
//! * a writer takes `W` only while `W` is free or holds the mark, no
//!   reader's lease is live and it is the first live waiter (a plain
//!   attempt: nobody live waits); it writes its value over a mark that
//!   outlived the leases;
//! * a plain lock (`SET NX`) takes `W` only where it is free: the mark
//!   keeps it out while readers hold.
//!
//! So a name is one lock whichever way it is taken: `lock N` is the
//! writer's side of `N`, as `flock` is `flock -x`. Writers and readers
//! alternate in phases: a writer waits for the reads in progress when it
//! arrived (and the writers ahead), however many readers keep coming;
//! readers that arrive behind a writer wait for it, and all of them enter
//! together when it leaves. A reader's quorum and a writer's quorum share
//! a node, whose script admits one of them only.
//!
//! The release that leaves no live lease deletes the mark (one that ends
//! the last lease early moves the mark's end to the next). A writer kept
//! out by readers also sets a mark `P`, where there is none, that lives
//! until the first of their leases ends; the same release deletes it. (Set
//! again at every attempt, it would wake its own writer: a node tells of
//! every write to a key a notification connection read, ours included.) A
//! waiting writer hears `P` and `W`, not `R`: it wakes when the reads end
//! or a lease ends without a release (a crashed reader), and when a
//! reader's take or extension moves the mark's expiry on, not at each
//! reader's release.
//!
//! KEYS = W, R, Q, L (and P for a writer's) for the attempts; ARGV =
//! value, ttl ms, waiter id (empty: a plain attempt), ticket, lease ms. Replies are a waiter's
//! `{won, pttl, ahead}` (see `QUEUED_SET`): for a writer kept out by
//! readers, `pttl` is how long the last of their leases has left.

use crate::lua::{Script, ANY_KEYS};

/// Drops the ended reader leases from `R` (with `now` the node's clock,
/// from `join_waiting_list`).
macro_rules! drop_ended_readers {
    () => {
        "redis.call(\"ZREMRANGEBYSCORE\", R, \"-inf\", now)\n"
    };
}

/// The last lease's end in `R` before a change, as `top` (see
/// [`keep_readers`]).
macro_rules! last_lease {
    () => {
        "local top = redis.call(\"ZRANGE\", R, -1, -1, \"WITHSCORES\")\n"
    };
}

/// After a lease was given or renewed (with `top` the last lease's end
/// before, from [`last_lease`]), keeps the readers' mark on `W` (which is
/// free or holds the mark) until exactly the end of the last live lease:
/// not longer, so the name is free to a plain lock when the reads end,
/// however long an earlier lease was. The end is set as an instant
/// (`PXAT`, the instant the lease's score holds), not as a TTL from the
/// script's `TIME`, so it cannot end before the lease whatever time the
/// node counts a TTL from. Written only where that end moved or the mark is missing:
/// each write wakes whoever waits on `W`. `R` only ever lives longer
/// (each lease's TTL, from when the node counts it), as it is the leases:
/// it must never end before one of them.
macro_rules! keep_readers {
    () => {
        concat!(
            r#"if redis.call("PTTL", R) < tonumber(ARGV[2]) then
  redis.call("PEXPIRE", R, ARGV[2])
end
local last = redis.call("ZRANGE", R, -1, -1, "WITHSCORES")
if last[2] ~= top[2] or redis.call("EXISTS", W) == 0 then
  redis.call("SET", W, ""#,
            crate::keys::readers_mark!(),
            r#"", "PXAT", last[2])
end
"#
        )
    };
}

/// `writer`: what `W` holds, a writer's value (or another Redlock
/// client's), or `false` where it is free or holds the readers' mark.
macro_rules! writer_of {
    () => {
        concat!(
            "local writer = redis.call(\"GET\", W)\nif writer == \"",
            crate::keys::readers_mark!(),
            "\" then\n  writer = false\nend\n"
        )
    };
}

/// Gives the reader `ARGV[1]` its lease (`ARGV[2]` ms from `now`) and
/// says so.
macro_rules! admit_reader {
    () => {
        concat!(
            last_lease!(),
            "redis.call(\"ZADD\", R, now + ARGV[2], ARGV[1])\n",
            keep_readers!(),
            "return {1, 0, 0}\n"
        )
    };
}

/// A reader's attempt. A plain attempt where no writer holds and nobody
/// waits at all (`W` free or the readers' mark, no waiting list), the usual case,
/// is admitted at once, skipping the list's upkeep: the decision the full
/// path would make, in four calls fewer (about a third of the script's
/// cost on the node).
pub(crate) static READ_TAKE: Script<4> = Script::new(concat!(
    "local W, R, Q, L = KEYS[1], KEYS[2], KEYS[3], KEYS[4]\n",
    writer_of!(),
    "if ARGV[3] == \"\" and not writer and redis.call(\"EXISTS\", Q) == 0 then\n",
    "redis.replicate_commands()\n",
    crate::wait::scripts::node_now!(),
    drop_ended_readers!(),
    admit_reader!(),
    "end\n",
    crate::wait::scripts::join_waiting_list!(),
    drop_ended_readers!(),
    r#"local ahead = 0
for _, w in ipairs(redis.call("ZRANGE", Q, 0, -1)) do
  if w == id then
    break
  end
  if string.sub(w, -2) == ":w" and redis.call("ZSCORE", L, w) then
    ahead = 1
    break
  end
end
local held = writer and redis.call("PTTL", W) or -2
if ahead == 1 or held ~= -2 then
  return {0, held, ahead}
end
"#,
    admit_reader!()
));

/// A writer's attempt.
pub(crate) static WRITE_TAKE: Script<5> = Script::new(concat!(
    "local W, R, Q, L = KEYS[1], KEYS[2], KEYS[3], KEYS[4]\n",
    crate::wait::scripts::join_waiting_list!(),
    drop_ended_readers!(),
    writer_of!(),
    r#"local held = writer and redis.call("PTTL", W) or -2
if head and head ~= id then
  return {0, held, 1}
end
if held ~= -2 then
  return {0, held, 0}
end
local last = redis.call("ZRANGE", R, -1, -1, "WITHSCORES")
if last[2] then
  local first = redis.call("ZRANGE", R, 0, 0, "WITHSCORES")
  redis.call("SET", KEYS[5], "1", "NX", "PX", math.max(tonumber(first[2]) - now, 1))
  return {0, math.max(tonumber(last[2]) - now, 0), 0}
end
redis.call("SET", W, ARGV[1], "PX", ARGV[2])
return {1, 0, 0}"#
));

/// A reader's release: KEYS = R, P, W, then lease sets to ask about;
/// ARGV = value. Drops the lease, and the mark `P` of a waiting writer and
/// the readers' mark on `W` where no live lease is left; where the lease
/// was the last to end, the readers' mark then ends with the last left. Returns 0 if it had ended (or was not there), else 2 if a live
/// waiter is listed in one of the lease sets, else 1.
pub(crate) static READ_RELEASE: Script<ANY_KEYS> = Script::cleanup(concat!(
    crate::wait::scripts::node_now!(),
    r#"local ends = redis.call("ZSCORE", KEYS[1], ARGV[1])
redis.call("ZREM", KEYS[1], ARGV[1])
local marked = redis.call("GET", KEYS[3]) == ""#,
    crate::keys::readers_mark!(),
    r#""
if redis.call("ZCOUNT", KEYS[1], "(" .. now, "+inf") == 0 then
  redis.call("DEL", KEYS[2])
  if marked then
    redis.call("DEL", KEYS[3])
  end
elseif ends then
  local last = redis.call("ZRANGE", KEYS[1], -1, -1, "WITHSCORES")
  if marked and tonumber(ends) > tonumber(last[2]) then
    redis.call("SET", KEYS[3], ""#,
    crate::keys::readers_mark!(),
    r#"", "PXAT", last[2])
  end
end
if not ends or tonumber(ends) <= now then
  return 0
end
local first = 4
"#,
    crate::wait::scripts::tell_live_waiters!()
));

/// A reader's extension: KEYS = R, W; ARGV = value, ttl ms. Renews the
/// lease to ttl from now only while it has not ended and `W` holds no
/// writer (a mark lost with the node's data may have let one in), and the
/// readers' mark with it; returns 1, else 0.
pub(crate) static READ_EXTEND: Script<2> = Script::new(concat!(
    "local R, W = KEYS[1], KEYS[2]\n",
    crate::wait::scripts::node_now!(),
    writer_of!(),
    r#"local ends = redis.call("ZSCORE", R, ARGV[1])
if writer or not ends or tonumber(ends) <= now then
  return 0
end
"#,
    last_lease!(),
    r#"redis.call("ZADD", R, now + ARGV[2], ARGV[1])
"#,
    keep_readers!(),
    "return 1"
));

/// Whether a reader's lease is live: KEYS = R; ARGV = value. Returns 1 or
/// 0.
pub(crate) static READ_HELD: Script<1> = Script::new(
    r#"local t = redis.call("TIME")
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local ends = redis.call("ZSCORE", KEYS[1], ARGV[1])
if ends and tonumber(ends) > now then
  return 1
end
return 0"#,
);

/// Reads a read-write lock on one node without changing it: KEYS = W, R,
/// L (the waiters' leases). Returns {live waiters, the writer's value ("":
/// none), its PTTL, then each live reader's value and ms its lease has
/// left}.
pub(crate) static RW_INSPECT: Script<3> = Script::new(concat!(
    r#"local t = redis.call("TIME")
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local out = {redis.call("ZCOUNT", KEYS[3], now, "+inf")}
local W = KEYS[1]
"#,
    writer_of!(),
    r#"out[2] = writer or ""
out[3] = writer and redis.call("PTTL", W) or -2
local live = redis.call("ZRANGEBYSCORE", KEYS[2], "(" .. now, "+inf", "WITHSCORES")
for i = 1, #live, 2 do
  out[#out + 1] = live[i]
  out[#out + 1] = math.floor(tonumber(live[i + 1]) - now)
end
return out"#
));

#[cfg(test)]
mod tests {
    use super::*;
    use redis::Value;

    fn arr(v: &[i64]) -> Value {
        Value::Array(v.iter().map(|i| Value::Int(*i)).collect())
    }

    /// An attempt by `id` (empty: plain) with `ticket`.
    fn take(
        c: &mut redis::Connection,
        script: &crate::lua::Lua,
        value: &str,
        id: &str,
        ticket: u64,
    ) -> Value {
        redis::cmd("EVAL")
            .arg(script.src)
            .arg(5)
            .arg(&["w", "r", "q", "l", "p"])
            .arg(&[value, "10000", id, &ticket.to_string(), "5000"])
            .query(c)
            .expect("EVAL")
    }

    /// `script` with `keys` and `args`, for an integer reply.
    fn run(
        c: &mut redis::Connection,
        script: &crate::lua::Lua,
        keys: &[&str],
        args: &[&str],
    ) -> i64 {
        redis::cmd("EVAL")
            .arg(script.src)
            .arg(keys.len())
            .arg(keys)
            .arg(args)
            .query(c)
            .expect("EVAL")
    }

    /// Readers share; a writer waits for them and, once waiting, keeps
    /// new readers out; readers behind it enter when it leaves.
    #[test]
    fn writers_wait_for_readers_and_readers_behind_a_writer_wait_for_it() {
        let (_node, mut conn) = crate::scratch::node();
        let c = &mut conn;
        assert_eq!(take(c, &READ_TAKE, "r1", "", 0), arr(&[1, 0, 0]));
        assert_eq!(take(c, &READ_TAKE, "r2", "", 0), arr(&[1, 0, 0]));
        let Value::Array(w) = take(c, &WRITE_TAKE, "w1", "x:w", 1) else {
            panic!()
        };
        assert_eq!(w[0], Value::Int(0), "readers hold");
        assert!(matches!(w[1], Value::Int(p) if p > 9_000), "{w:?}");
        // A plain reader now finds a writer waiting; a queued one behind it
        // is told someone is ahead.
        assert_eq!(take(c, &READ_TAKE, "r3", "", 0), arr(&[0, -2, 1]));
        assert_eq!(take(c, &READ_TAKE, "r4", "y", 2), arr(&[0, -2, 1]));
        for r in ["r1", "r2"] {
            let got: i64 = redis::cmd("EVAL")
                .arg(READ_RELEASE.src)
                .arg(4)
                .arg("r")
                .arg("p")
                .arg("w")
                .arg("l")
                .arg(r)
                .query(c)
                .expect("release");
            assert_eq!(got, 2, "waiters listed");
        }
        assert_eq!(take(c, &WRITE_TAKE, "w1", "x:w", 1), arr(&[1, 0, 0]));
        redis::cmd("ZREM")
            .arg("q")
            .arg("x:w")
            .query::<()>(c)
            .expect("leave");
        let Value::Array(r4) = take(c, &READ_TAKE, "r4", "y", 2) else {
            panic!()
        };
        assert_eq!(
            (&r4[0], &r4[2]),
            (&Value::Int(0), &Value::Int(0)),
            "the writer holds"
        );
        redis::cmd("DEL")
            .arg("w")
            .query::<()>(c)
            .expect("writer leaves");
        assert_eq!(take(c, &READ_TAKE, "r4", "y", 2), arr(&[1, 0, 0]));
        // A reader's lease is its own: extend, check, release.
        assert_eq!(run(c, &READ_EXTEND, &["r", "w"], &["r4", "20000"]), 1);
        assert_eq!(
            run(c, &READ_EXTEND, &["r", "w"], &["r1", "20000"]),
            0,
            "r1 left"
        );
        assert_eq!(run(c, &READ_HELD, &["r"], &["r4"]), 1);
        assert_eq!(run(c, &READ_RELEASE, &["r", "p", "w"], &["r4"]), 1);
        assert_eq!(run(c, &READ_HELD, &["r"], &["r4"]), 0);
    }

    /// A writer kept out by readers marks it, until the first of their
    /// leases ends; a release that leaves a live lease keeps the mark, the one
    /// that leaves none deletes it (the waiting writer's wake-up); a
    /// writer kept out by another writer marks nothing.
    #[test]
    fn the_last_reader_to_leave_deletes_the_waiting_writers_mark() {
        let (_node, mut conn) = crate::scratch::node();
        let c = &mut conn;
        let exists = |c: &mut redis::Connection| -> i64 {
            redis::cmd("EXISTS").arg("p").query(c).expect("EXISTS")
        };
        let release = |c: &mut redis::Connection, value: &str| -> i64 {
            run(c, &READ_RELEASE, &["r", "p", "w"], &[value])
        };
        assert_eq!(take(c, &READ_TAKE, "r1", "", 0), arr(&[1, 0, 0]));
        assert_eq!(take(c, &READ_TAKE, "r2", "", 0), arr(&[1, 0, 0]));
        assert_eq!(exists(c), 0, "nobody waits: no mark");
        let Value::Array(w) = take(c, &WRITE_TAKE, "w1", "x:w", 1) else {
            panic!()
        };
        assert_eq!(w[0], Value::Int(0), "readers hold");
        let pttl: i64 = redis::cmd("PTTL").arg("p").query(c).expect("PTTL");
        assert!(
            pttl > 9_000,
            "the mark lives as long as the first lease: {pttl}"
        );
        assert_eq!(release(c, "r1"), 1);
        assert_eq!(exists(c), 1, "r2 still reads");
        assert_eq!(release(c, "r2"), 1);
        assert_eq!(exists(c), 0, "the reads ended");
        assert_eq!(take(c, &WRITE_TAKE, "w1", "x:w", 1), arr(&[1, 0, 0]));
        let Value::Array(w2) = take(c, &WRITE_TAKE, "w2", "y:w", 2) else {
            panic!()
        };
        assert_eq!(w2[0], Value::Int(0), "a writer holds");
        assert_eq!(exists(c), 0, "kept out by a writer: no mark");
    }

    /// Readers keep their mark on the name's lock key as long as their
    /// longest lease, through extensions: a plain lock's `SET NX` (any
    /// Redlock client's) finds it taken; the release that leaves no live
    /// lease deletes it; a writer writes over a mark that outlived the
    /// leases; a reader's extension refuses where a writer holds the key.
    #[test]
    fn readers_keep_the_name_from_a_plain_lock_while_they_hold() {
        let (_node, mut conn) = crate::scratch::node();
        let c = &mut conn;
        let plain = |c: &mut redis::Connection| -> Option<String> {
            redis::cmd("SET")
                .arg(&["w", "plain", "NX", "PX", "60000"])
                .query(c)
                .expect("SET")
        };
        let pttl = |c: &mut redis::Connection| -> i64 {
            redis::cmd("PTTL").arg("w").query(c).expect("PTTL")
        };
        assert_eq!(take(c, &READ_TAKE, "r1", "", 0), arr(&[1, 0, 0]));
        let mark: String = redis::cmd("GET").arg("w").query(c).expect("GET");
        assert_eq!(mark, crate::keys::readers_mark!());
        assert!(pttl(c) > 9_000, "as long as the lease: {}", pttl(c));
        assert_eq!(plain(c), None, "a plain lock is kept out");
        // An extension longer than the mark has left moves it on.
        assert_eq!(run(c, &READ_EXTEND, &["r", "w"], &["r1", "40000"]), 1);
        assert!(pttl(c) > 39_000, "the mark follows the lease: {}", pttl(c));
        assert_eq!(take(c, &READ_TAKE, "r2", "", 0), arr(&[1, 0, 0]));
        assert!(pttl(c) > 39_000, "a shorter lease leaves it to the last");
        // The last lease released: the mark ends with the one left.
        assert_eq!(run(c, &READ_RELEASE, &["r", "p", "w"], &["r1"]), 1);
        assert!((9_000..=10_000).contains(&pttl(c)), "r2's: {}", pttl(c));
        assert_eq!(plain(c), None, "r2 still reads");
        // A shorter extension of the last lease shortens it too.
        assert_eq!(run(c, &READ_EXTEND, &["r", "w"], &["r2", "2000"]), 1);
        assert!((1_000..=2_000).contains(&pttl(c)), "{}", pttl(c));
        assert_eq!(plain(c), None, "r2 still reads");
        assert_eq!(run(c, &READ_RELEASE, &["r", "p", "w"], &["r2"]), 1);
        assert_eq!(plain(c), Some("OK".into()), "the reads ended: free");
        // A reader finds the plain holder; the holder leaves.
        let Value::Array(r3) = take(c, &READ_TAKE, "r3", "", 0) else {
            panic!()
        };
        assert_eq!(r3[0], Value::Int(0), "the plain lock holds");
        redis::cmd("DEL").arg("w").query::<()>(c).expect("DEL");
        // A mark that outlived its leases (a reader that crashed, its lease
        // dropped): a writer writes over it.
        assert_eq!(take(c, &READ_TAKE, "r4", "", 0), arr(&[1, 0, 0]));
        redis::cmd("ZADD")
            .arg(&["r", "1", "r4"])
            .query::<()>(c)
            .expect("end r4's lease");
        assert_eq!(take(c, &WRITE_TAKE, "w1", "", 0), arr(&[1, 0, 0]));
        let held: String = redis::cmd("GET").arg("w").query(c).expect("GET");
        assert_eq!(held, "w1");
        // A lease left where the key holds a writer is not extended.
        redis::cmd("ZADD")
            .arg(&["r", "99999999999999", "r5"])
            .query::<()>(c)
            .expect("a lease");
        assert_eq!(run(c, &READ_EXTEND, &["r", "w"], &["r5", "20000"]), 0);
    }

    /// Calls of `cmd` the node has run.
    fn calls(c: &mut redis::Connection, cmd: &str) -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(c)
            .expect("INFO");
        let field = format!("cmdstat_{cmd}:calls=");
        info.lines()
            .find_map(|l| l.strip_prefix(&field))
            .and_then(|rest| rest.split(',').next()?.parse().ok())
            .unwrap_or(0)
    }

    /// A plain reader where no writer holds and nobody waits takes the
    /// short path (no list read), sharing with readers; a writer that
    /// holds keeps it out (the full path); a waiter lists itself.
    #[test]
    fn a_plain_read_with_nobody_waiting_reads_no_list() {
        let (_node, mut conn) = crate::scratch::node();
        let c = &mut conn;
        assert_eq!(take(c, &READ_TAKE, "r1", "", 0), arr(&[1, 0, 0]));
        assert_eq!(take(c, &READ_TAKE, "r2", "", 0), arr(&[1, 0, 0]));
        let pttl: i64 = redis::cmd("PTTL").arg("r").query(c).expect("PTTL");
        assert!(pttl > 9_000, "the leases' set lives as long: {pttl}");
        // Only the last lease's end, before and after each take: no list.
        assert_eq!(calls(c, "zrange"), 4);
        assert_eq!(calls(c, "zrangebyscore"), 0);
        redis::cmd("SET")
            .arg("w")
            .arg("writer")
            .arg("PX")
            .arg(5_000)
            .query::<()>(c)
            .expect("SET");
        let Value::Array(r3) = take(c, &READ_TAKE, "r3", "", 0) else {
            panic!()
        };
        assert_eq!((&r3[0], &r3[2]), (&Value::Int(0), &Value::Int(0)));
        assert!(matches!(r3[1], Value::Int(p) if p > 4_000), "{r3:?}");
        // A waiter's attempt lists itself.
        let Value::Array(r4) = take(c, &READ_TAKE, "r4", "y", 2) else {
            panic!()
        };
        assert_eq!(r4[0], Value::Int(0), "the writer holds");
        assert!(calls(c, "zrangebyscore") > 0);
        let listed: i64 = redis::cmd("ZCARD").arg("q").query(c).expect("ZCARD");
        assert_eq!(listed, 1);
    }

    /// A reader whose lease ended no longer keeps a writer out, whatever
    /// other readers do.
    #[test]
    fn an_ended_lease_is_dropped() {
        let (_node, mut conn) = crate::scratch::node();
        let c = &mut conn;
        redis::cmd("ZADD")
            .arg("r")
            .arg(1)
            .arg("dead")
            .query::<()>(c)
            .expect("zadd");
        assert_eq!(take(c, &WRITE_TAKE, "w1", "", 0), arr(&[1, 0, 0]));
        let left: i64 = redis::cmd("ZCARD").arg("r").query(c).expect("zcard");
        assert_eq!(left, 0);
    }
}
