//! Which of our scripts one connection's node has cached, so that a script
//! goes out in full (`EVAL` with its source) only the first time on a
//! connection, and as `EVALSHA` with its 40-byte digest after that.
//!
//! A node hashes an `EVAL`'s whole source on every call, and every byte of
//! it crosses the wire: for our scripts (a few hundred bytes to 2 kB) that
//! was about 2 µs of the node's time a call more than `EVALSHA`, on every
//! node, for every script-based request (releases, waits, reads, counters).
//!
//! Order is kept: the `EVAL` that caches a script on a connection is sent
//! before any `EVALSHA` of it on that connection, so there is never a
//! fallback sent a round trip late behind newer requests. A node whose
//! cache was emptied under a live connection (`SCRIPT FLUSH`, or eviction
//! on Redis 7.4+) answers `NOSCRIPT` and does nothing: that request fails
//! as a node error, and the connection forgets what it knew, so the next
//! request of each script goes out in full again. A new connection (the
//! node restarted, or the link reconnected) starts knowing nothing. A user
//! whose ACL allows `EVAL` but not `EVALSHA` keeps sending sources: the
//! connection asks once when it opens.
//!
//! Where the node runs a script's native form for us (`DELIFEQ`, `SET …
//! IFEQ`: see [`Native`]), asked the same way when the connection opens,
//! that goes out instead of the script.

use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::lua::{Lua, Native};
use crate::node::request::{Form, Request};

/// What a connection's node runs for us, asked when it opens
/// (`node/open.rs`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Abilities {
    /// `EVALSHA` (an ACL may allow `EVAL` only).
    pub(crate) evalsha: bool,
    /// `DELIFEQ` ([`Native::DelIfEq`]).
    pub(crate) del_if_eq: bool,
    /// `SET … IFEQ` ([`Native::SetIfEqPx`]).
    pub(crate) set_if_eq: bool,
}

impl Abilities {
    /// Whether the node runs `native` for us.
    fn runs(self, native: Native) -> bool {
        match native {
            Native::DelIfEq => self.del_if_eq,
            Native::SetIfEqPx => self.set_if_eq,
        }
    }
}

/// What one connection knows of its node's script cache.
#[derive(Debug)]
pub(crate) struct ScriptCache {
    /// What the node runs for us (asked when the connection opened).
    abilities: Abilities,
    /// Scripts sent in full on this connection since it opened (or since
    /// the node last answered `NOSCRIPT`).
    sent: Vec<&'static Lua>,
    /// Set by a reply that found the node's cache emptied.
    lost: Arc<AtomicBool>,
}

impl ScriptCache {
    /// A new connection's: nothing sent yet; `abilities` what the node
    /// runs for us.
    pub(crate) fn new(abilities: Abilities) -> Self {
        Self {
            abilities,
            sent: Vec::new(),
            lost: Arc::default(),
        }
    }

    /// Whether `script` may go out as `EVALSHA` now; if not, it goes out in
    /// full and counts as cached from then on (`None` script: not a
    /// script, `false`).
    pub(crate) fn short(&mut self, script: Option<&'static Lua>) -> bool {
        let Some(script) = script else {
            return false;
        };
        if !self.abilities.evalsha {
            return false;
        }
        if self.lost.swap(false, Ordering::Relaxed) {
            self.sent.clear();
        }
        if self.sent.iter().any(|s| ptr::eq(*s, script)) {
            return true;
        }
        self.sent.push(script);
        false
    }

    /// How `req` goes out now: its native form where the node runs it,
    /// else as [`ScriptCache::short`] says.
    pub(crate) fn form(&mut self, req: &Request) -> Form {
        match req.native() {
            Some(native) if self.abilities.runs(native) => Form::Native(native),
            _ if self.short(req.script) => Form::Short,
            _ => Form::Full,
        }
    }

    /// Where replies tell that the node's cache was emptied
    /// ([`ScriptCache::check`]).
    pub(crate) fn lost(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.lost)
    }
}

/// Notes in `lost` a reply whose error code (`code`) says the node no
/// longer has a script.
pub(crate) fn check(lost: &AtomicBool, code: Option<&str>) {
    if code == Some("NOSCRIPT") {
        lost.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static A: Lua = Lua::new("return 1");
    static B: Lua = Lua::new("return 2");

    #[test]
    fn a_script_goes_out_in_full_once_per_connection_and_after_noscript() {
        let mut cache = ScriptCache::new(Abilities {
            evalsha: true,
            ..Abilities::default()
        });
        assert!(!cache.short(Some(&A)), "first use: in full");
        assert!(cache.short(Some(&A)), "then its digest");
        assert!(!cache.short(Some(&B)), "each script on its own");
        assert!(!cache.short(None), "not a script");
        let noscript = redis::RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::NoScript),
            "No matching script",
        ));
        check(&cache.lost(), noscript.code());
        assert!(!cache.short(Some(&A)), "after NOSCRIPT: in full again");
        assert!(cache.short(Some(&A)));
        assert!(!cache.short(Some(&B)), "every script forgotten");
        let mut denied = ScriptCache::new(Abilities::default());
        assert!(!denied.short(Some(&A)));
        assert!(
            !denied.short(Some(&A)),
            "EVALSHA not allowed: always in full"
        );
    }
}
