//! How a Lua script is held and sent, the keys it declares, and the
//! commands an ACL must allow it (the scripts themselves live beside
//! their owners; `scripts.rs` checks them all together).

use std::ops::Deref;
use std::sync::OnceLock;

/// The key count of a script that takes as many keys as its caller names
/// (it reads `#KEYS`): see [`Script`].
pub(crate) const ANY_KEYS: usize = usize::MAX;

/// A script with the number of keys it takes: `Script<2>` is sent with
/// exactly two keys, which a request names as an array of two
/// (`node/connection/request.rs`: another count does not compile), and the count in
/// front of them is written from that. `Script<ANY_KEYS>` takes a list of
/// any length and counts it. A test holds each declaration to the
/// `KEYS[n]` its source reads.
#[derive(Debug)]
pub(crate) struct Script<const KEYS: usize>(Lua);

impl<const KEYS: usize> Script<KEYS> {
    /// Wraps a script.
    pub(crate) const fn new(src: &'static str) -> Self {
        Self(Lua::new(src))
    }

    /// Wraps a cleanup script (see [`Lua::cleanup`]).
    pub(crate) const fn cleanup(src: &'static str) -> Self {
        Self(Lua::cleanup(src))
    }

    /// The script, sent as `native` where the node runs it.
    pub(crate) const fn or_native(mut self, native: Native) -> Self {
        self.0.native = Some(native);
        self
    }

    /// The keys it takes (`None`: any number).
    pub(crate) const fn keys(&self) -> Option<usize> {
        if KEYS == ANY_KEYS {
            None
        } else {
            Some(KEYS)
        }
    }
}

impl<const KEYS: usize> Deref for Script<KEYS> {
    type Target = Lua;

    fn deref(&self) -> &Lua {
        &self.0
    }
}

/// A Lua script. A connection sends it in full (`EVAL` with its source)
/// the first time, and as `EVALSHA` with its digest after that (see
/// `node/connection/scriptcache.rs`, which also says why order is kept).
#[derive(Debug)]
pub(crate) struct Lua {
    /// The source.
    pub(crate) src: &'static str,
    /// A cleanup (a release): sent even after the round stopped waiting
    /// for it.
    pub(crate) cleanup: bool,
    /// The source's SHA-1 in hex, as `EVALSHA` names it (computed once).
    sha: OnceLock<String>,
    /// A command some servers have that decides exactly as the script
    /// does, sent instead where the node has it (see [`Native`]).
    pub(crate) native: Option<Native>,
}

/// A server's own command that does what one of our scripts does, on
/// every state of the node, with the same reply (after [`Native::reply`]).
/// Valkey has both (`DELIFEQ` from 9.0, `SET … IFEQ` from 8.1); a
/// connection finds out when it opens whether its node runs them for us
/// (`node/connection/open.rs`), and sends the script elsewhere, so the keys are
/// the same either way and other Redlock clients still interoperate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Native {
    /// `DELIFEQ key value`, for a compare-and-delete of one key whose
    /// arguments are `1 key value`: 1 if deleted, else 0.
    DelIfEq,
    /// `SET key value IFEQ value PX ms`, for a compare-and-pexpire of one
    /// key whose arguments are `1 key value ms`: `OK` (read as 1) if the
    /// key held the value, else nil (read as 0); a missing key is not
    /// created.
    SetIfEqPx,
}

impl Native {
    /// The command, from the script's arguments (`numkeys key value …`);
    /// `None` where they are not the shape it is for.
    pub(crate) fn command(self, args: &redis::Cmd) -> Option<redis::Cmd> {
        let args: Vec<&[u8]> = args
            .args_iter()
            .filter_map(|a| match a {
                redis::Arg::Simple(bytes) => Some(bytes),
                _ => None,
            })
            .collect();
        match (self, args.as_slice()) {
            (Native::DelIfEq, [b"1", key, value]) => {
                let mut cmd = redis::cmd("DELIFEQ");
                cmd.arg(*key).arg(*value);
                Some(cmd)
            }
            (Native::SetIfEqPx, [b"1", key, value, ms]) => {
                let mut cmd = redis::cmd("SET");
                cmd.arg(*key)
                    .arg(*value)
                    .arg("IFEQ")
                    .arg(*value)
                    .arg("PX")
                    .arg(*ms);
                Some(cmd)
            }
            _ => None,
        }
    }

    /// The command's name, as an ACL names it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Native::DelIfEq => "DELIFEQ",
            Native::SetIfEqPx => "SET",
        }
    }

    /// The command's reply as the script's would be.
    pub(crate) fn reply(self, reply: redis::Value) -> redis::Value {
        match (self, reply) {
            (Native::SetIfEqPx, redis::Value::Okay) => redis::Value::Int(1),
            (Native::SetIfEqPx, redis::Value::Nil) => redis::Value::Int(0),
            (_, other) => other,
        }
    }
}

impl Lua {
    /// Wraps a script.
    pub(crate) const fn new(src: &'static str) -> Self {
        Self {
            src,
            cleanup: false,
            sha: OnceLock::new(),
            native: None,
        }
    }

    /// Wraps a cleanup script (see [`Lua::cleanup`]).
    pub(crate) const fn cleanup(src: &'static str) -> Self {
        Self {
            src,
            cleanup: true,
            sha: OnceLock::new(),
            native: None,
        }
    }

    /// The digest `EVALSHA` names the script by.
    pub(crate) fn sha(&self) -> &str {
        self.sha
            .get_or_init(|| redis::Script::new(self.src).get_hash().to_string())
    }

    /// The commands the script runs (`redis.call` and `redis.pcall`),
    /// `EVAL` first, each once, as an ACL must allow them: `EVAL GET DEL`.
    pub(crate) fn commands(&self) -> String {
        let mut out = vec!["EVAL"];
        for part in self.src.split("call(\"").skip(1) {
            let name = part.split('"').next().unwrap_or("");
            if !name.is_empty() && !out.contains(&name) {
                out.push(name);
            }
        }
        out.join(" ")
    }
}
