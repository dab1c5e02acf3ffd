//! The counter's Lua: a compare-and-set of a node's record, and the
//! repair stamp.

use crate::lua::Script;

/// The counter's compare-and-set (see `counter/mod.rs`). KEYS[1] is a hash with
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
pub(crate) static COUNTER_CAS: Script<2> = Script::new(
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
pub(crate) static COUNTER_STAMP: Script<1> = Script::new(
    r#"local cur = redis.call("HMGET", KEYS[1], "p", "n")
if cur[1] == ARGV[1] and cur[2] == ARGV[2] then
  redis.call("HSET", KEYS[1], "r", ARGV[3])
  return 1
end
return 0"#,
);
