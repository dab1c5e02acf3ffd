//! How a Lua script is held and sent, and the commands an ACL must allow
//! it (the scripts themselves are in `scripts.rs`).

use std::sync::OnceLock;

/// A Lua script. A connection sends it in full (`EVAL` with its source)
/// the first time, and as `EVALSHA` with its digest after that (see
/// `node/scriptcache.rs`, which also says why order is kept).
#[derive(Debug)]
pub(crate) struct Lua {
    /// The source.
    pub(crate) src: &'static str,
    /// A cleanup (a release): sent even after the round stopped waiting
    /// for it.
    pub(crate) cleanup: bool,
    /// The source's SHA-1 in hex, as `EVALSHA` names it (computed once).
    sha: OnceLock<String>,
}

impl Lua {
    /// Wraps a script.
    pub(crate) const fn new(src: &'static str) -> Self {
        Self {
            src,
            cleanup: false,
            sha: OnceLock::new(),
        }
    }

    /// Wraps a cleanup script (see [`Lua::cleanup`]).
    pub(crate) const fn cleanup(src: &'static str) -> Self {
        Self {
            src,
            cleanup: true,
            sha: OnceLock::new(),
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
