//! The election's Lua: the leader's published value, read and written
//! beside its lock.

use crate::lua::Script;

/// Publishes an election's leader (see `election/`): KEYS[1] the
/// election's lock, KEYS[2] its leadership record (a hash, no TTL). Only
/// while the lock holds our value (ARGV[1]) does the record become {owner =
/// that value, term = ARGV[2], value = ARGV[3]}. Returns 1 if written.
pub(crate) static LEADER_PUBLISH: Script<2> = Script::new(
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
pub(crate) static LEADER_READ: Script<2> = Script::new(
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
