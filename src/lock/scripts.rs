//! The lock's Lua, each script run atomically on one node. The plain
//! lock's scripts are the ones every Redlock client uses (redsync,
//! node-redlock, redlock-py), so their keys interoperate with ours.

use crate::lua::{Native, Script, ANY_KEYS};
use crate::wait::scripts::{join_waiting_list, node_now, tell_live_waiters};

/// Compare-and-delete (`DELIFEQ` where the node has it): never releases a
/// lock that expired and was taken by someone else. 1 if deleted, else 0.
pub(crate) static RELEASE: Script<1> = Script::cleanup(
    r#"if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("DEL", KEYS[1])
else
  return 0
end"#,
)
.or_native(Native::DelIfEq);

/// [`RELEASE`] that also says whether others wait: KEYS[2] and KEYS[3] are
/// the lock's waiting list and its leases ([`QUEUED_SET`]). Returns 0 if
/// the key was not ours, 1 if deleted, 2 if deleted while a live waiter (one
/// whose lease has not ended) waits for it: the releasing client then queues
/// its own next `lock()` for the resource behind them instead of racing
/// them. Used only where this client has seen contention on the key, or in
/// strict-FIFO mode: the extra read costs the free path 13 % of its
/// throughput.
pub(crate) static RELEASE_TELLING_WAITERS: Script<3> = Script::cleanup(concat!(
    "if redis.call(\"GET\", KEYS[1]) == ARGV[1] then\nredis.call(\"DEL\", KEYS[1])\n",
    node_now!(),
    "local first = 3\n",
    tell_live_waiters!(),
    "end\nreturn 0"
));

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
pub(crate) static QUEUED_SET: Script<3> = Script::new(concat!(
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

/// Compare-and-pexpire (`SET … IFEQ … PX` where the node has it): a new TTL
/// only while the key holds our value; it never deletes, never creates.
/// Returns 1 if extended, 0 otherwise.
pub(crate) static EXTEND: Script<1> = Script::new(
    r#"if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("PEXPIRE", KEYS[1], ARGV[2])
else
  return 0
end"#,
)
.or_native(Native::SetIfEqPx);

/// Reads locks without taking them (`lock/inspect.rs`): KEYS[1] the
/// waiters' leases, KEYS[2..] lock keys. Returns {live waiters (lease not
/// ended), then each key's value ("" when not set) and PTTL}. Writes
/// nothing.
pub(crate) static INSPECT: Script<ANY_KEYS> = Script::new(concat!(
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
    #[test]
    fn commands_are_read_from_the_source() {
        assert_eq!(super::RELEASE.commands(), "EVAL GET DEL");
        assert_eq!(
            super::QUEUED_SET.commands(),
            "EVAL TIME ZRANGEBYSCORE ZREM ZADD PTTL PEXPIRE ZRANGE ZSCORE SET"
        );
    }

    /// Runs one command.
    fn run(conn: &mut redis::Connection, args: &[&str]) {
        let _: redis::Value = redis::cmd(args[0])
            .arg(&args[1..])
            .query(conn)
            .expect(args[0]);
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
    /// that runs them (`node/connection/open.rs` asks) may get them instead.
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
