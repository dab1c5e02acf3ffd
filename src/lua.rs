//! How a Lua script is held and sent, and the commands an ACL must allow
//! it (the scripts themselves are in `scripts.rs`).

/// A Lua script, always sent in full (`EVAL` with its source), never as
/// `EVALSHA`: a node with an empty script cache (first use, a restart,
/// `SCRIPT FLUSH`) would answer `NOSCRIPT`, and the fallback `EVAL` would go
/// out a round trip late, after whatever was sent behind it. A release then
/// landed before the `SET` it undoes, and two extensions of one lock could
/// land in the wrong order. The sources are a few hundred bytes; a node
/// compiles each once and caches it.
#[derive(Debug)]
pub(crate) struct Lua {
    /// The source.
    pub(crate) src: &'static str,
    /// A cleanup (a release): sent even after the round stopped waiting
    /// for it.
    pub(crate) cleanup: bool,
}

impl Lua {
    /// Wraps a script.
    pub(crate) const fn new(src: &'static str) -> Self {
        Self {
            src,
            cleanup: false,
        }
    }

    /// Wraps a cleanup script (see [`Lua::cleanup`]).
    pub(crate) const fn cleanup(src: &'static str) -> Self {
        Self { src, cleanup: true }
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
