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
//! that goes out instead of the script; once the node refuses a native
//! form (`NOPERM`: its ACL changed since), the script goes out instead on
//! that connection.

use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;

use crate::lua::{Lua, Native};
use crate::node::connection::request::{Form, Request};

/// What a connection's node runs for us, asked when it opens
/// (`node/connection/open.rs`).
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

/// What replies on a connection told of its node since they were last
/// looked at: shared with the futures that read them.
#[derive(Debug, Default)]
pub(crate) struct Heard {
    /// A `NOSCRIPT`: the node's script cache was emptied.
    lost: AtomicBool,
    /// The native forms the node refused (`NOPERM`), one bit each.
    refused: AtomicU8,
}

/// [`Heard::refused`]'s bit for `native`.
fn bit(native: Native) -> u8 {
    match native {
        Native::DelIfEq => 1,
        Native::SetIfEqPx => 2,
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
    /// What the replies told ([`check`]).
    heard: Arc<Heard>,
}

impl ScriptCache {
    /// A new connection's: nothing sent yet; `abilities` what the node
    /// runs for us.
    pub(crate) fn new(abilities: Abilities) -> Self {
        Self {
            abilities,
            sent: Vec::new(),
            heard: Arc::default(),
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
        if self.heard.lost.swap(false, Ordering::Relaxed) {
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
        let refused = self.heard.refused.swap(0, Ordering::Relaxed);
        if refused & bit(Native::DelIfEq) != 0 {
            self.abilities.del_if_eq = false;
        }
        if refused & bit(Native::SetIfEqPx) != 0 {
            self.abilities.set_if_eq = false;
        }
        match req.native() {
            Some(native) if self.abilities.runs(native) => Form::Native(native),
            _ if self.short(req.script) => Form::Short,
            _ => Form::Full,
        }
    }

    /// Where replies tell what they found ([`check`]).
    pub(crate) fn heard(&self) -> Arc<Heard> {
        Arc::clone(&self.heard)
    }
}

/// Notes in `heard` what an error reply (code `code`) to a request sent
/// in `form` says: that the node no longer has a script (`NOSCRIPT`), or
/// that it refuses the native form (`NOPERM`).
pub(crate) fn check(heard: &Heard, code: Option<&str>, form: Form) {
    match (code, form) {
        (Some("NOSCRIPT"), _) => heard.lost.store(true, Ordering::Relaxed),
        (Some("NOPERM"), Form::Native(native)) => {
            heard.refused.fetch_or(bit(native), Ordering::Relaxed);
        }
        _ => {}
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
        check(&cache.heard(), noscript.code(), Form::Short);
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

    use crate::lua::Script;

    static RELEASE: Script<1> = Script::new("return 1").or_native(Native::DelIfEq);
    static EXTEND: Script<1> = Script::new("return 2").or_native(Native::SetIfEqPx);

    #[test]
    fn a_refused_native_form_gives_way_to_its_script_on_that_connection() {
        let mut cache = ScriptCache::new(Abilities {
            evalsha: true,
            del_if_eq: true,
            set_if_eq: true,
        });
        let release = Request::script(&RELEASE, ["k"], |cmd| {
            cmd.arg("v");
        });
        let extend = Request::script(&EXTEND, ["k"], |cmd| {
            cmd.arg("v").arg(100);
        });
        let native = Form::Native(Native::DelIfEq);
        assert_eq!(cache.form(&release), native);
        // Refusals of other kinds, or of a script, change nothing.
        check(&cache.heard(), Some("ERR"), native);
        check(&cache.heard(), Some("NOPERM"), Form::Short);
        assert_eq!(cache.form(&release), native);
        check(&cache.heard(), Some("NOPERM"), native);
        assert_eq!(cache.form(&release), Form::Full, "the script, in full");
        assert_eq!(cache.form(&release), Form::Short, "then by digest");
        assert_eq!(
            cache.form(&extend),
            Form::Native(Native::SetIfEqPx),
            "only the refused form gives way"
        );
    }
}
