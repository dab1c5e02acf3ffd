//! The Lua sources of the multi-resource lock (`lock/multi.rs`), each run
//! atomically on one node: take every key or none, as a plain attempt or
//! as a waiter listed in every resource's waiting list; release, extend and
//! check every key at once.
//!
//! Every key a request names is one resource's lock key, with one random
//! value for all of them, so the keys interoperate with the single lock's:
//! a multi-lock on `a` and `b` excludes `lock("a")` and every other Redlock
//! client's lock on `a`, and the other way round.

use crate::lua::{Script, ANY_KEYS};

/// Two functions over the lock keys KEYS[1..n]: `held(n)` says what frees
/// them all (-2: every key free, -1: one has no expiry, else the longest
/// PTTL left); `take(n)` sets every key to ARGV[1] for ARGV[2] ms if every
/// key is free and returns `{1, 0, 0}`, else leaves none set and returns
/// `{0, held, 0}` (the reply shape of a waiter's attempt on a single lock).
/// It sets the keys in turn with `SET NX` and deletes what it set at the
/// first one held: one call per key on the free path.
macro_rules! take_every_key {
    () => {
        r#"local function held(n)
  local worst = -2
  for i = 1, n do
    local p = redis.call("PTTL", KEYS[i])
    if p == -1 or worst == -1 then
      if p ~= -2 then
        worst = -1
      end
    elseif p > worst then
      worst = p
    end
  end
  return worst
end
local function take(n)
  for i = 1, n do
    if not redis.call("SET", KEYS[i], ARGV[1], "NX", "PX", ARGV[2]) then
      for j = 1, i - 1 do
        redis.call("DEL", KEYS[j])
      end
      return {0, held(n), 0}
    end
  end
  return {1, 0, 0}
end
"#
    };
}

/// A plain attempt: KEYS = the lock keys; ARGV = value, ttl ms. Takes
/// every key or none (see `take_every_key`).
pub(crate) static TAKE_ALL: Script<ANY_KEYS> =
    Script::new(concat!(take_every_key!(), "return take(#KEYS)"));

/// A waiter's attempt: KEYS = the n lock keys, then their n waiting lists,
/// then their n lease sets (each list as the single lock's `QUEUED_SET`
/// keeps it); ARGV = value, ttl ms, waiter id, ticket, lease ms. The waiter
/// joins (or stays in) every resource's list under the same ticket and id,
/// and takes every key only if it is the first live waiter in every list
/// and every key is free. Every list orders its waiters by the same
/// (ticket, id), so the waiter first in that order among those alive is
/// first in each of its lists: no cycle of waiters, each waiting for the
/// next, can form, whatever order callers named the resources in. Returns
/// `{1, 0, 0}` when taken, else `{0, what frees the keys, 1 if someone live
/// is ahead in some list}`.
pub(crate) static QUEUED_TAKE_ALL: Script<ANY_KEYS> = Script::new(concat!(
    take_every_key!(),
    "local n = #KEYS / 3\nlocal ahead = 0\nfor i = 1, n do\n",
    "local Q, L = KEYS[n + i], KEYS[2 * n + i]\n",
    crate::wait::scripts::join_waiting_list!(),
    r#"if head ~= ARGV[3] then
  ahead = 1
end
end
if ahead == 1 then
  return {0, held(n), 1}
end
return take(n)"#
));

/// Compare-and-delete on every key: KEYS = the n lock keys, then lease sets
/// to ask about; ARGV = value, n. Deletes each key that holds our value.
/// Returns 0 unless all n did, else 2 if a live waiter is listed in one of
/// the lease sets, else 1.
pub(crate) static RELEASE_ALL: Script<ANY_KEYS> = Script::cleanup(concat!(
    r#"local n = tonumber(ARGV[2])
local ours = 0
for i = 1, n do
  if redis.call("GET", KEYS[i]) == ARGV[1] then
    redis.call("DEL", KEYS[i])
    ours = ours + 1
  end
end
if ours < n then
  return 0
end
"#,
    crate::wait::scripts::node_now!(),
    "local first = n + 1\n",
    crate::wait::scripts::tell_live_waiters!()
));

/// Compare-and-pexpire on every key: KEYS = the lock keys; ARGV = value,
/// ttl ms. Resets every TTL only if every key still holds our value, else
/// changes nothing. Returns 1 if extended, 0 otherwise.
pub(crate) static EXTEND_ALL: Script<ANY_KEYS> = Script::new(
    r#"for i = 1, #KEYS do
  if redis.call("GET", KEYS[i]) ~= ARGV[1] then
    return 0
  end
end
for i = 1, #KEYS do
  redis.call("PEXPIRE", KEYS[i], ARGV[2])
end
return 1"#,
);

/// Whether every key holds our value: KEYS = the lock keys; ARGV = value.
/// Returns 1 or 0.
pub(crate) static HELD_ALL: Script<ANY_KEYS> = Script::new(
    r#"for i = 1, #KEYS do
  if redis.call("GET", KEYS[i]) ~= ARGV[1] then
    return 0
  end
end
return 1"#,
);

#[cfg(test)]
mod tests {
    use super::*;
    use redis::Value;

    fn arr(v: &[i64]) -> Value {
        Value::Array(v.iter().map(|i| Value::Int(*i)).collect())
    }

    /// Runs `args` on `c`.
    fn run<T: redis::FromRedisValue>(c: &mut redis::Connection, args: &[&str]) -> T {
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        cmd.query(c).expect("command")
    }

    /// Runs `script` with `keys` and `argv`.
    fn eval<T: redis::FromRedisValue>(
        c: &mut redis::Connection,
        script: &crate::lua::Lua,
        keys: &[&str],
        argv: &[&str],
    ) -> T {
        redis::cmd("EVAL")
            .arg(script.src)
            .arg(keys.len())
            .arg(keys)
            .arg(argv)
            .query(c)
            .expect("EVAL")
    }

    /// Every key or none; a held key says what frees them; extend and
    /// release act only while every key is ours.
    #[test]
    fn takes_every_key_or_none() {
        let (_node, mut conn) = crate::scratch::node();
        let c = &mut conn;
        let keys = ["a", "b", "c"];
        run::<()>(c, &["SET", "b", "other", "PX", "5000"]);
        let v: Value = eval(c, &TAKE_ALL, &keys, &["v1", "10000"]);
        let Value::Array(items) = &v else {
            panic!("{v:?}")
        };
        assert_eq!(items[0], Value::Int(0), "b is held: nothing taken");
        assert!(
            matches!(items[1], Value::Int(p) if p > 4_000 && p <= 5_000),
            "{v:?}"
        );
        assert_eq!(
            run::<Option<String>>(c, &["GET", "a"]),
            None,
            "a not taken alone"
        );
        run::<()>(c, &["DEL", "b"]);
        let v: Value = eval(c, &TAKE_ALL, &keys, &["v1", "10000"]);
        assert_eq!(v, arr(&[1, 0, 0]));
        for k in keys {
            assert_eq!(run::<String>(c, &["GET", k]), "v1");
        }
        assert_eq!(eval::<i64>(c, &HELD_ALL, &keys, &["v1"]), 1);
        run::<()>(c, &["SET", "c", "other"]);
        assert_eq!(eval::<i64>(c, &HELD_ALL, &keys, &["v1"]), 0);
        let got: i64 = eval(c, &EXTEND_ALL, &keys, &["v1", "20000"]);
        assert_eq!(got, 0, "c is not ours: nothing extended");
        let pttl: i64 = run(c, &["PTTL", "a"]);
        assert!(pttl <= 10_000, "a kept its TTL: {pttl}");
        let got: i64 = eval(c, &RELEASE_ALL, &keys, &["v1", "3"]);
        assert_eq!(got, 0, "not all were ours");
        assert_eq!(
            run::<String>(c, &["GET", "c"]),
            "other",
            "another's key stays"
        );
        assert_eq!(run::<Option<String>>(c, &["GET", "a"]), None, "ours went");
    }

    /// Two waiters listing the resources in opposite orders: the one first
    /// by ticket is first in both lists and takes both keys; the other is
    /// told someone is ahead.
    #[test]
    fn the_first_waiter_by_ticket_is_first_in_every_list() {
        let (_node, mut conn) = crate::scratch::node();
        let c = &mut conn;
        let queued = |c: &mut redis::Connection, keys: [&str; 2], id: &str, ticket: &str| {
            let (q0, q1) = (format!("q:{}", keys[0]), format!("q:{}", keys[1]));
            let (l0, l1) = (format!("l:{}", keys[0]), format!("l:{}", keys[1]));
            let all = [keys[0], keys[1], &q0, &q1, &l0, &l1];
            let value = format!("v-{id}");
            eval::<Value>(
                c,
                &QUEUED_TAKE_ALL,
                &all,
                &[&value, "10000", id, ticket, "5000"],
            )
        };
        run::<()>(c, &["SET", "a", "holder"]);
        let y = queued(c, ["b", "a"], "y", "2");
        assert_eq!(y, arr(&[0, -1, 0]), "y is first in both; a is held");
        let x = queued(c, ["a", "b"], "x", "1");
        assert_eq!(x, arr(&[0, -1, 0]), "x is first in both by ticket");
        let y = queued(c, ["b", "a"], "y", "2");
        assert_eq!(y, arr(&[0, -1, 1]), "x is ahead of y");
        run::<()>(c, &["DEL", "a"]);
        let y = queued(c, ["b", "a"], "y", "2");
        assert_eq!(y, arr(&[0, -2, 1]), "free, but x is first");
        let x = queued(c, ["a", "b"], "x", "1");
        assert_eq!(x, arr(&[1, 0, 0]), "x takes both");
        assert_eq!(run::<String>(c, &["GET", "b"]), "v-x");
    }
}
