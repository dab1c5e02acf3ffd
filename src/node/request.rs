//! A request as it goes on the wire: a command encoded once per round and
//! shared by every node's call, with what a node needs to fall back from
//! `EVALSHA` to `EVAL`.

use std::sync::Arc;

use redis::{Cmd, RedisError};

use crate::scripts::Lua;

/// A request ready to go to every node: built once per round and shared, so a
/// five-node round encodes its arguments once, not five times.
#[derive(Debug)]
pub(crate) struct Request {
    /// The command as sent first (for scripts: `EVALSHA`).
    pub(crate) cmd: Cmd,
    /// For scripts, the source to fall back to when a node answers NOSCRIPT
    /// (a restarted node has an empty script cache).
    pub(crate) script_src: Option<&'static str>,
    /// Sent even if the round stopped waiting for it (a release).
    pub(crate) cleanup: bool,
}

impl Request {
    /// A plain command.
    pub(crate) fn plain(cmd: Cmd) -> Arc<Self> {
        Arc::new(Self {
            cmd,
            script_src: None,
            cleanup: false,
        })
    }

    /// `EVALSHA` of `script` with its keys and args already added by `fill`,
    /// or `EVAL` with the full source for a script always sent in
    /// [full](Lua::full).
    pub(crate) fn script(script: &'static Lua, fill: impl FnOnce(&mut Cmd)) -> Arc<Self> {
        // Sized for the script and a few short keys and args, so building
        // it does not grow the buffers step by step.
        let (mut cmd, script_src) = if script.full {
            let mut cmd = Cmd::with_capacity(8, script.src.len() + 128);
            cmd.arg("EVAL").arg(script.src);
            (cmd, None)
        } else {
            let mut cmd = Cmd::with_capacity(8, 40 + 128);
            cmd.arg("EVALSHA").arg(script.sha());
            (cmd, Some(script.src))
        };
        fill(&mut cmd);
        Arc::new(Self {
            cmd,
            script_src,
            cleanup: script.cleanup,
        })
    }

    /// The `EVAL` form of a script request: same keys and args, full source.
    pub(crate) fn eval_form(&self, src: &str) -> Cmd {
        let mut eval = redis::cmd("EVAL");
        eval.arg(src);
        for arg in self.cmd.args_iter().skip(2) {
            if let redis::Arg::Simple(bytes) = arg {
                eval.arg(bytes);
            }
        }
        eval
    }
}

/// True for the NOSCRIPT reply to an unknown EVALSHA.
pub(crate) fn is_noscript(e: &RedisError) -> bool {
    e.code() == Some("NOSCRIPT")
}
