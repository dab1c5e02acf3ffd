//! A request as it goes on the wire: a command encoded once per round and
//! shared by every node's call.

use std::sync::Arc;

use redis::{Cmd, Pipeline};

use crate::error::NodeErrorKind;
use crate::explain::is_denied;
use crate::lua::Lua;

/// A request ready to go to every node: built once per round and shared, so a
/// five-node round encodes its arguments once, not five times.
#[derive(Debug)]
pub(crate) struct Request {
    /// The command.
    pub(crate) cmd: Cmd,
    /// The command with a `TIME` behind it, as a request sent on its own
    /// goes out (see `wire.rs`): built once, shared by every node's call.
    /// `None` for a cleanup (a release): its reply decides nothing that a
    /// node's clock could make unsafe, and it is half of every lock's
    /// requests.
    pub(crate) timed: Option<Pipeline>,
    /// Sent even if the round stopped waiting for it (a release).
    pub(crate) cleanup: bool,
    /// The script, for a script: what a permission error names.
    pub(crate) script: Option<&'static Lua>,
    /// For a script: `cmd` and `timed` with `EVALSHA` and the script's
    /// digest in place of `EVAL` and its source, for a connection whose
    /// node has it cached (`scriptcache.rs`).
    pub(crate) short: Option<(Cmd, Option<Pipeline>)>,
}

impl Request {
    /// A plain command.
    pub(crate) fn plain(cmd: Cmd) -> Arc<Self> {
        Arc::new(Self {
            timed: Some(timed(&cmd)),
            cmd,
            cleanup: false,
            script: None,
            short: None,
        })
    }

    /// `EVAL` of `script` with its keys and args added by `fill` (and the
    /// same as `EVALSHA`).
    pub(crate) fn script(script: &'static Lua, fill: impl FnOnce(&mut Cmd)) -> Arc<Self> {
        let mut args = Cmd::with_capacity(8, 128);
        fill(&mut args);
        let form = |name: &str, first: &str| {
            // Sized for what it holds, so building it does not grow the
            // buffers step by step.
            let mut cmd = Cmd::with_capacity(8, first.len() + 128);
            cmd.arg(name).arg(first);
            for arg in args.args_iter() {
                if let redis::Arg::Simple(bytes) = arg {
                    cmd.arg(bytes);
                }
            }
            let timed = (!script.cleanup).then(|| timed(&cmd));
            (cmd, timed)
        };
        let (cmd, timed) = form("EVAL", script.src);
        Arc::new(Self {
            cmd,
            timed,
            cleanup: script.cleanup,
            script: Some(script),
            short: Some(form("EVALSHA", script.sha())),
        })
    }

    /// The command and its timed form to send: the short one if `short`
    /// and there is one.
    pub(crate) fn form(&self, short: bool) -> (&Cmd, Option<&Pipeline>) {
        match &self.short {
            Some((cmd, timed)) if short => (cmd, timed.as_ref()),
            _ => (&self.cmd, self.timed.as_ref()),
        }
    }
}

/// `cmd`, then `TIME`.
fn timed(cmd: &Cmd) -> Pipeline {
    let mut pipe = Pipeline::with_capacity(2);
    pipe.add_command(cmd.clone())
        .add_command(redis::cmd("TIME"));
    pipe
}

/// A node's error as a failure: a script the node's ACL refused names the
/// commands it needs.
pub(crate) fn failure_of(e: redis::RedisError, script: Option<&'static Lua>) -> NodeErrorKind {
    match script {
        Some(script) if is_denied(&e) => NodeErrorKind::Denied {
            needs: script.commands(),
            error: e,
        },
        _ => NodeErrorKind::Redis(e),
    }
}
