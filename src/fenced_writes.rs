//! The storage side of fencing, for data kept in Redis: writes that carry
//! a lock's fencing token and land only if no higher token of the lock's
//! resource was seen there first.
//!
//! A lock cannot stop a holder that pauses (a collector, swapping,
//! `SIGSTOP`, a migrated VM) after its last check of validity and then
//! writes: its lock may have expired and been taken by another meanwhile.
//! The storage can: each key written this way has a fence beside it (the
//! internal key `redquorum:write-fence:{tag}:<key>`, in the key's hash slot,
//! so a Redis Cluster runs both in one script) holding the resource that
//! guards the key and the highest token that wrote it. One script per
//! write, atomically: refused if the fence names another resource, or
//! holds a higher token; else the write is done and the fence raised to
//! the write's token. Equal tokens pass (a holder writing twice).
//!
//! A fence outlives the data it guards (a delete keeps it: else a stale
//! holder could write the key again); delete it only with the data, once
//! no holder of the resource can still write. The Redis holding the data
//! may be any Redis or Redis Cluster, the quorum's nodes or not.

use redis::aio::ConnectionLike;
use redis::{FromRedisValue, RedisError, Script, ToSingleRedisArg, Value};

use crate::keys::{self, Kind};

/// What a fenced write carries: the resource whose lock guards the data,
/// and that lock's fencing token ([`crate::Lock::fence`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fence<'a> {
    resource: &'a str,
    token: u64,
}

impl<'a> Fence<'a> {
    /// A fence of `resource`'s lock with fencing token `token` (say, from
    /// `REDQUORUM_FENCING_TOKEN` in a command that `redquorum lock
    /// --fenced` runs).
    pub fn new(resource: &'a str, token: u64) -> Self {
        Fence { resource, token }
    }

    /// The resource whose lock guards the data.
    pub fn resource(&self) -> &'a str {
        self.resource
    }

    /// The lock's fencing token.
    pub fn token(&self) -> u64 {
        self.token
    }
}

/// Why a fenced write did not land.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FenceError {
    /// A holder with a higher token of the same resource wrote the key
    /// first: this write's lock was lost before it was made.
    #[error(
        "write to {key:?} refused: token {token} of {resource:?} is below {seen}, which \
         already wrote it (a later holder of the lock did: this holder's lock was lost, \
         so nothing it does under that lock may land)"
    )]
    Stale {
        /// The data key.
        key: String,
        /// The resource named by the write.
        resource: String,
        /// The write's token.
        token: u64,
        /// The highest token that wrote the key.
        seen: u64,
    },
    /// The key is guarded by another resource's tokens, which say nothing
    /// of this resource's.
    #[error(
        "write to {key:?} refused: it is fenced with tokens of {guarded_by:?}, not of \
         {resource:?}; write each key under one resource's lock"
    )]
    OtherResource {
        /// The data key.
        key: String,
        /// The resource named by the write.
        resource: String,
        /// The resource whose tokens wrote the key.
        guarded_by: String,
    },
    /// The key is in the namespace of redquorum's own keys: nothing was
    /// sent.
    #[error(
        "key {key:?} starts with {reserved:?}, which is reserved for redquorum's own keys; \
         keep the data under another name"
    )]
    Reserved {
        /// The data key.
        key: String,
        /// The reserved prefix.
        reserved: &'static str,
    },
    /// The fence check was asked outside a transaction (feature
    /// `postgres`): the fence would commit alone, before the write it
    /// guards. Nothing was sent.
    #[cfg(feature = "postgres")]
    #[error(
        "fence check for {scope:?} refused: the connection is not in a transaction; begin \
         one (sqlx's begin()) and check the fence and write in it, so that they commit \
         together"
    )]
    NotInTransaction {
        /// The scope named.
        scope: String,
    },
    /// PostgreSQL failed the check (feature `postgres`): the transaction
    /// is to be rolled back.
    #[cfg(feature = "postgres")]
    #[error("fence check for {key:?} failed: {source}")]
    Database {
        /// The scope named.
        key: String,
        /// What sqlx said.
        source: sqlx::Error,
    },
    /// The Redis holding the data failed the write (a wrong type, an
    /// unreachable server): nothing of it landed, nor the fence.
    #[error("write to {key:?} failed: {source}")]
    Redis {
        /// The data key.
        key: String,
        /// What Redis said.
        source: RedisError,
    },
}

/// The write itself, run only past the fence: KEYS = fence, data; ARGV =
/// resource, token (decimal, no leading zeros, so compared as numbers by
/// length then text: exact for every u64, where Lua's numbers are not),
/// operation, its argument. The write goes first, so that one Redis
/// refuses (`INCRBY` on a non-number) leaves the fence as it was. Returns
/// {"ok", result}, {"stale", highest token}, or {"other", resource}.
static WRITE: &str = r#"local f = redis.call("HMGET", KEYS[1], "resource", "token")
if f[1] and f[1] ~= ARGV[1] then
  return {"other", f[1]}
end
local seen, t = f[2] or "0", ARGV[2]
if #t < #seen or (#t == #seen and t < seen) then
  return {"stale", seen}
end
local r = 1
if ARGV[3] == "set" then
  redis.call("SET", KEYS[2], ARGV[4])
elseif ARGV[3] == "del" then
  r = redis.call("DEL", KEYS[2])
else
  r = redis.call("INCRBY", KEYS[2], ARGV[4])
end
redis.call("HSET", KEYS[1], "resource", ARGV[1], "token", t)
return {"ok", r}"#;

/// Fenced writes to data kept in one Redis reached by `C`: a multiplexed
/// connection, a connection manager; for a Redis Cluster, a cluster
/// connection (the `redis` crate's `cluster-async` feature) or one to the
/// shard that serves the key (the fence is in the key's slot).
///
/// ```no_run
/// # async fn f(redlock: redquorum::Redlock) -> Result<(), Box<dyn std::error::Error>> {
/// use redquorum::{FenceError, FencedRedis};
///
/// let data = redis::Client::open("redis://127.0.0.1:6379")?;
/// let store = FencedRedis::new(data.get_multiplexed_async_connection().await?);
/// let lock = redlock.lock("account:7", std::time::Duration::from_secs(10)).fenced().await?;
/// let fence = lock.fence().expect("a fenced lock has a token");
/// match store.incr_by(fence, "account:7:balance", -30).await {
///     Ok(balance) => println!("balance {balance}"),
///     // A later holder wrote first: this lock was lost; nothing landed.
///     Err(FenceError::Stale { token, seen, .. }) => eprintln!("token {token} < {seen}"),
///     Err(e) => return Err(e.into()),
/// }
/// lock.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct FencedRedis<C> {
    conn: C,
}

impl<C: ConnectionLike + Clone + Send> FencedRedis<C> {
    /// Fenced writes through `conn`.
    pub fn new(conn: C) -> Self {
        FencedRedis { conn }
    }

    /// `SET key value`, if `fence` passes.
    pub async fn set(
        &self,
        fence: Fence<'_>,
        key: &str,
        value: impl ToSingleRedisArg,
    ) -> Result<(), FenceError> {
        self.write::<i64>(fence, key, "set", value).await.map(drop)
    }

    /// `DEL key`, if `fence` passes: whether a key was deleted. The fence
    /// stays.
    pub async fn del(&self, fence: Fence<'_>, key: &str) -> Result<bool, FenceError> {
        self.write::<i64>(fence, key, "del", "")
            .await
            .map(|n| n > 0)
    }

    /// `INCRBY key by`, if `fence` passes: the value after.
    pub async fn incr_by(&self, fence: Fence<'_>, key: &str, by: i64) -> Result<i64, FenceError> {
        self.write(fence, key, "incrby", by).await
    }

    /// The fence of `key`: the resource that guards it and the highest
    /// token that wrote it; `None` before its first fenced write.
    pub async fn fence_of(&self, key: &str) -> Result<Option<(String, u64)>, FenceError> {
        let (resource, token): (Option<String>, Option<u64>) = redis::cmd("HMGET")
            .arg(fence_key(key))
            .arg("resource")
            .arg("token")
            .query_async(&mut self.conn.clone())
            .await
            .map_err(|source| redis_error(key, source))?;
        Ok(resource.zip(token))
    }

    async fn write<T: FromRedisValue>(
        &self,
        fence: Fence<'_>,
        key: &str,
        op: &str,
        arg: impl ToSingleRedisArg,
    ) -> Result<T, FenceError> {
        if key.starts_with(keys::RESERVED) {
            return Err(FenceError::Reserved {
                key: key.to_owned(),
                reserved: keys::RESERVED,
            });
        }
        static SCRIPT: std::sync::OnceLock<Script> = std::sync::OnceLock::new();
        let script = SCRIPT.get_or_init(|| Script::new(WRITE));
        let (outcome, value): (String, Value) = script
            .key(fence_key(key))
            .key(key)
            .arg(fence.resource)
            .arg(fence.token.to_string())
            .arg(op)
            .arg(arg)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|source| redis_error(key, source))?;
        match Verdict::of_reply(&outcome, &value) {
            Verdict::Lands => T::from_redis_value(value).map_err(|e| redis_error(key, e.into())),
            Verdict::Stale(seen) => Err(FenceError::Stale {
                key: key.to_owned(),
                resource: fence.resource.to_owned(),
                token: fence.token,
                seen,
            }),
            Verdict::Other(guarded_by) => Err(FenceError::OtherResource {
                key: key.to_owned(),
                resource: fence.resource.to_owned(),
                guarded_by,
            }),
        }
    }
}

/// What a fence decides about a write, as [`WRITE`] does (a test runs
/// both on every case; the lock model uses this).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The write lands; the fence then holds its resource and token.
    Lands,
    /// Refused: a higher token (this) of the resource wrote the key.
    Stale(u64),
    /// Refused: the key is fenced with another resource's tokens (this).
    Other(String),
}

impl Verdict {
    /// The verdict [`WRITE`] replied: `outcome` and its value.
    fn of_reply(outcome: &str, value: &Value) -> Self {
        let text = || String::from_redis_value(value.clone()).unwrap_or_default();
        match outcome {
            "ok" => Verdict::Lands,
            "stale" => Verdict::Stale(text().parse().unwrap_or(u64::MAX)),
            _ => Verdict::Other(text()),
        }
    }
}

/// The verdict on a write of `resource` with `token` to a key whose
/// fence holds `fence` (resource, highest token; `None`: none yet).
#[cfg(test)]
pub(crate) fn verdict(fence: Option<(&str, u64)>, resource: &str, token: u64) -> Verdict {
    match fence {
        Some((guard, _)) if guard != resource => Verdict::Other(guard.to_owned()),
        Some((_, seen)) if token < seen => Verdict::Stale(seen),
        _ => Verdict::Lands,
    }
}

/// The fence of data key `key`, in its hash slot.
fn fence_key(key: &str) -> String {
    keys::internal("", Kind::WriteFence, key)
}

fn redis_error(key: &str, source: RedisError) -> FenceError {
    FenceError::Redis {
        key: key.to_owned(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The script and [`verdict`] agree on every case, run on a real node:
    /// no fence, another resource's, and tokens below, equal to and above
    /// the fence's, small and past 2^53.
    #[test]
    fn the_script_decides_as_the_rule_on_a_real_node() {
        let (_node, mut conn) = crate::scratch::node();
        let big = u64::MAX - 1;
        let fences = [None, Some(("r", 5)), Some(("s", 5)), Some(("r", big))];
        for fence in fences {
            for token in [0, 4, 5, 6, 1 << 53, big - 1, big, u64::MAX] {
                let _: () = redis::cmd("DEL")
                    .arg("f")
                    .arg("d")
                    .query(&mut conn)
                    .expect("DEL");
                if let Some((guard, seen)) = fence {
                    let _: () = redis::cmd("HSET")
                        .arg("f")
                        .arg("resource")
                        .arg(guard)
                        .arg("token")
                        .arg(seen.to_string())
                        .query(&mut conn)
                        .expect("HSET");
                }
                let (outcome, value): (String, Value) = redis::cmd("EVAL")
                    .arg(WRITE)
                    .arg(2)
                    .arg("f")
                    .arg("d")
                    .arg("r")
                    .arg(token.to_string())
                    .arg("set")
                    .arg("v")
                    .query(&mut conn)
                    .expect("EVAL");
                let script = Verdict::of_reply(&outcome, &value);
                let case = format!("fence {fence:?}, token {token}");
                assert_eq!(script, verdict(fence, "r", token), "{case}");
                let (guard, seen): (Option<String>, Option<String>) = redis::cmd("HMGET")
                    .arg("f")
                    .arg("resource")
                    .arg("token")
                    .query(&mut conn)
                    .expect("HMGET");
                let data: Option<String> =
                    redis::cmd("GET").arg("d").query(&mut conn).expect("GET");
                if script == Verdict::Lands {
                    assert_eq!(guard.as_deref(), Some("r"), "{case}");
                    assert_eq!(seen, Some(token.to_string()), "{case}");
                    assert_eq!(data.as_deref(), Some("v"), "{case}");
                } else {
                    assert_eq!(guard.as_deref(), fence.map(|f| f.0), "{case}");
                    assert_eq!(seen, fence.map(|f| f.1.to_string()), "{case}");
                    assert_eq!(data, None, "{case}");
                }
            }
        }
    }
}
