//! Our keys: where everything we store lives, in one place.
//!
//! A lock's key is exactly `key_prefix + resource`, as every Redlock client
//! writes it, so clients in other languages exclude ours. Everything else we
//! store (waiting lists and their leases, fencing and serial counters, the
//! serial counters' locks) lives under the reserved namespace
//! `key_prefix + "redquorum:"`, which resource names may not use, so no
//! resource can collide with our keys, and ours never touch a user's key.
//!
//! An internal key is `<key_prefix>redquorum:<kind>:{<tag>}:<name>`, where
//! `name` is what it belongs to (the anchor key without the prefix) and
//! `tag` makes it share the anchor key's hash slot: the
//! anchor's own hash tag if it has one (`{user42}:cart` -> `user42`), else
//! the whole anchor key. Keys a script uses together therefore share one
//! slot, and a member may be a one-shard Redis Cluster. The tag is followed
//! by the name, so two anchors never share an internal key.

use crate::error::{Error, Result};

/// The readers' mark: the value a name's lock key holds while readers of
/// its read-write lock hold (`rwlock/scripts.rs`), in our reserved
/// namespace, so no lock value is ever equal to it.
macro_rules! readers_mark {
    () => {
        "redquorum:readers"
    };
}
pub(crate) use readers_mark;

/// The permits' mark: the value a name's lock key holds while permits of
/// its semaphore are held (`semaphore/scripts.rs`), in our reserved
/// namespace, so no lock value is ever equal to it.
macro_rules! permits_mark {
    () => {
        "redquorum:permits"
    };
}
pub(crate) use permits_mark;

/// The reserved namespace, after the key prefix.
pub(crate) const RESERVED: &str = "redquorum:";

/// What an internal key belongs to, by kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A lock's waiting list (sorted set of waiter ids by ticket).
    Waiters,
    /// The waiters' leases (sorted set of waiter ids by lease end).
    Leases,
    /// A fencing counter.
    Fence,
    /// The lock that minters of one fencing counter take turns with.
    FenceLock,
    /// A serial-number counter.
    Serial,
    /// The lock that serial allocators take turns with.
    SerialLock,
    /// A serial prefix's configuration (reset period and width), pinned.
    SerialPin,
    /// A semaphore: the key its waiters line up on (never written itself;
    /// its waiting list and token counter are named after it).
    Semaphore,
    /// A semaphore's slot, a lock key: `permit:{tag}:<name>:<slot>`.
    Permit,
    /// A semaphore's number of permits, pinned.
    SemaphorePin,
    /// A semaphore's channel (not a key): its releases name there the
    /// waiters they let in.
    Wake,
    /// What an election's term counter is named after (the key its
    /// leaders held before they held the name's lock key).
    Election,
    /// A read-write lock's reader leases (sorted set of values by the
    /// instant each lease ends).
    RwReaders,
    /// A read-write lock's mark that a writer waits for reads to end: set
    /// by the writer, deleted by the release that leaves no live lease.
    RwReading,
    /// An election's leadership record: who leads, with which term.
    Leader,
    /// The fence beside a key of the user's data: the resource whose
    /// tokens write it, and the highest that did (`fenced_writes.rs`).
    WriteFence,
}

impl Kind {
    /// The kind's word in the key.
    fn word(self) -> &'static str {
        match self {
            Kind::Waiters => "waiters",
            Kind::Leases => "leases",
            Kind::Fence => "fence",
            Kind::FenceLock => "fence-lock",
            Kind::Serial => "serial",
            Kind::SerialLock => "serial-lock",
            Kind::SerialPin => "serial-pin",
            Kind::Semaphore => "semaphore",
            Kind::Permit => "permit",
            Kind::SemaphorePin => "semaphore-pin",
            Kind::Wake => "wake",
            Kind::RwReaders => "rw-readers",
            Kind::RwReading => "rw-reading",
            Kind::Election => "election",
            Kind::Leader => "leader",
            Kind::WriteFence => "write-fence",
        }
    }
}

/// Refuses resource names in the reserved namespace.
pub(crate) fn check_resource(resource: &str) -> Result<()> {
    if resource.starts_with(RESERVED) {
        return Err(Error::InvalidConfig(format!(
            "resource {resource:?} starts with {RESERVED:?}, which is reserved for \
             redquorum's own keys (waiting lists, counters); choose another name"
        )));
    }
    Ok(())
}

/// Refuses a key prefix that would break hash slots: a `{` in it must open
/// a whole hash tag within the prefix (`{app}:`), so every key with the
/// prefix, ours and the locks', hashes by that tag.
pub(crate) fn check_prefix(prefix: &str) -> Result<()> {
    match prefix.find('{') {
        None => Ok(()),
        Some(_) if hash_tag(prefix).is_some() => Ok(()),
        Some(_) => Err(Error::InvalidConfig(format!(
            "key prefix {prefix:?} has a '{{' that does not open a whole hash tag \
             (like \"{{app}}:\"); keys with it would hash unpredictably in a cluster"
        ))),
    }
}

/// The internal key of `kind` for the key `anchor` (which starts with
/// `prefix`): in the reserved namespace, in `anchor`'s hash slot.
pub(crate) fn internal(prefix: &str, kind: Kind, anchor: &str) -> String {
    let name = anchor.strip_prefix(prefix).unwrap_or(anchor);
    let tag = slot_tag(anchor);
    let mut key =
        String::with_capacity(prefix.len() + RESERVED.len() + 16 + tag.len() + name.len());
    key.push_str(prefix);
    key.push_str(RESERVED);
    key.push_str(kind.word());
    key.push_str(":{");
    key.push_str(&tag);
    key.push_str("}:");
    key.push_str(name);
    key
}

/// The key of slot `slot` of the semaphore named by `anchor` (prefix +
/// name): its [`Kind::Permit`] key, then `:` and the slot number, so the
/// slots of one semaphore share a hash slot and no two semaphores share a
/// slot key (the number after the last `:` is the slot).
pub(crate) fn permit(prefix: &str, anchor: &str, slot: usize) -> String {
    let mut key = internal(prefix, Kind::Permit, anchor);
    key.push(':');
    key.push_str(&slot.to_string());
    key
}

/// The hash tag of `key` as Redis reads it: what is between the first `{`
/// and the first `}` after it, if that is not empty.
fn hash_tag(key: &str) -> Option<&str> {
    let open = key.find('{')?;
    let len = key[open + 1..].find('}')?;
    (len > 0).then(|| &key[open + 1..open + 1 + len])
}

/// A tag (no `}` in it) that hashes to `key`'s slot: its own hash tag, or
/// the whole key, or, for a key with a `}` but no tag (rare), a short tag
/// found to hash to the same slot.
fn slot_tag(key: &str) -> std::borrow::Cow<'_, str> {
    if let Some(tag) = hash_tag(key) {
        return tag.into();
    }
    if !key.contains('}') {
        return key.into();
    }
    let wanted = slot(key.as_bytes());
    // 16384 slots: a match comes within a few tens of thousands of tries.
    (0u32..)
        .map(|i| format!("{i:x}"))
        .find(|t| slot(t.as_bytes()) == wanted)
        .unwrap_or_default()
        .into()
}

/// Hash slots in a Redis Cluster.
pub(crate) const SLOTS: usize = 16384;

/// The cluster hash slot of `bytes` (already reduced to its tag).
fn slot(bytes: &[u8]) -> u16 {
    crc16::State::<crc16::XMODEM>::calculate(bytes) % SLOTS as u16
}

/// The cluster hash slot Redis gives the whole key `key` (hash tag rule
/// included): where a member that is a Redis Cluster keeps it.
#[cfg(any(test, feature = "cluster"))]
pub(crate) fn key_slot(key: &[u8]) -> u16 {
    let tag = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        let len = rest.iter().position(|&b| b == b'}')?;
        (len > 0).then(|| &rest[..len])
    });
    slot(tag.unwrap_or(key))
}

/// A short tag that hashes to slot `wanted` (a key with `{tag}` in it
/// lives there).
#[cfg(feature = "cluster")]
pub(crate) fn tag_for_slot(wanted: u16) -> String {
    // 16384 slots: a match comes within a few tens of thousands of tries.
    (0u32..)
        .map(|i| format!("{i:x}"))
        .find(|t| slot(t.as_bytes()) == wanted % SLOTS as u16)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The slot Redis gives a whole key (hash tag rule included).
    fn key_slot(key: &str) -> u16 {
        let slot = slot(hash_tag(key).unwrap_or(key).as_bytes());
        assert_eq!(slot, super::key_slot(key.as_bytes()), "{key}");
        slot
    }

    #[test]
    fn slot_matches_redis() {
        // Values from CLUSTER KEYSLOT on Redis 7.0.
        assert_eq!(key_slot("foo"), 12182);
        assert_eq!(key_slot("{user1000}.following"), key_slot("user1000"));
        assert_eq!(key_slot("foo{}{bar}"), slot(b"foo{}{bar}"));
    }

    #[test]
    fn internal_keys_share_the_anchor_slot_and_never_collide() {
        let names = [
            "orders",
            "{user42}:cart",
            "a{b",
            "a}b",
            "x{}y",
            "{}",
            "}{",
            "coll:waiters",
            "{orders}",
            "serial:day:ORDER",
            "订单",
        ];
        let mut seen = std::collections::HashSet::new();
        for prefix in ["", "app:", "{app}:"] {
            for name in names {
                let anchor = format!("{prefix}{name}");
                for kind in [Kind::Waiters, Kind::Leases, Kind::Fence] {
                    let key = internal(prefix, kind, &anchor);
                    assert_eq!(key_slot(&key), key_slot(&anchor), "{key} for {anchor}");
                    assert!(key.starts_with(&format!("{prefix}{RESERVED}")), "{key}");
                    assert!(seen.insert(key.clone()), "{key} twice");
                }
            }
        }
    }

    #[test]
    fn reserved_names_and_bad_prefixes_are_refused() {
        assert!(check_resource("orders").is_ok());
        assert!(check_resource("redquorum:waiters:x").is_err());
        assert!(check_prefix("app:").is_ok());
        assert!(check_prefix("{app}:").is_ok());
        assert!(check_prefix("a}b").is_ok());
        assert!(check_prefix("{app:").is_err());
        assert!(check_prefix("{}:").is_err());
    }

    #[test]
    fn permit_keys_share_the_semaphores_slot_and_never_collide() {
        let p = "app:";
        let a = permit(p, "app:{u1}:jobs", 0);
        assert_eq!(a, "app:redquorum:permit:{u1}:{u1}:jobs:0");
        assert_eq!(key_slot(&a), key_slot("app:{u1}:jobs"));
        let plain = permit(p, "app:jobs", 10);
        assert_eq!(key_slot(&plain), key_slot("app:jobs"));
        // The semaphore "jobs:1" never shares a key with slot 1 of "jobs".
        assert_ne!(permit(p, "app:jobs:1", 0), permit(p, "app:jobs", 10));
        assert_ne!(permit(p, "app:jobs:1", 0)[..], permit(p, "app:jobs", 1)[..]);
    }
}
