//! A request as it goes on the wire: a command encoded once per round and
//! shared by every node's call.

use std::borrow::Cow;
use std::sync::{Arc, OnceLock};

use redis::{Cmd, Pipeline};

use crate::error::NodeErrorKind;
use crate::explain::is_denied;
use crate::lua::{Lua, Native, Script, ANY_KEYS};

/// How one request goes out on a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Form {
    /// As it is: a plain command, or a script in full (`EVAL`).
    Full,
    /// A script by its digest (`EVALSHA`).
    Short,
    /// A script's native form.
    Native(Native),
}

/// A request ready to go to every node: built once per round and shared, so a
/// five-node round encodes its arguments once, not five times.
#[derive(Debug)]
pub(crate) struct Request {
    /// The command; a script by its digest (`EVALSHA`), as a connection
    /// whose node has it cached sends it (`scriptcache.rs`).
    pub(crate) cmd: Cmd,
    /// The command with a `TIME` behind it, as a request sent on its own
    /// goes out (see `wire.rs`): built once, shared by every node's call.
    /// `None` for a cleanup (a release): its reply decides nothing that a
    /// node's clock could make unsafe, and it is half of every lock's
    /// requests.
    pub(crate) timed: Option<Timed>,
    /// Sent even if the round stopped waiting for it (a release).
    pub(crate) cleanup: bool,
    /// The script, for a script: what a permission error names.
    pub(crate) script: Option<&'static Lua>,
    /// A script's keys and args, from which its full form is made.
    args: Cmd,
    /// A script's full form (`EVAL` with its source, and timed), made the
    /// first time a connection needs it: most requests never do.
    full: OnceLock<(Cmd, Option<Timed>)>,
    /// A script's native form (and timed) where it has one, made the
    /// first time a connection to a node that runs it needs it.
    native: OnceLock<Option<(Cmd, Option<Timed>)>>,
}

/// A command with a `TIME` behind it, and, made the first time a round
/// asks for it, the same with the read of our marker behind that: built
/// once per request, shared by every node's call (each would otherwise
/// copy the pipeline and build the read anew).
#[derive(Debug)]
pub(crate) struct Timed {
    /// The command, then `TIME`.
    pub(crate) pipe: Pipeline,
    /// `pipe` and the reads of the node whose marker lives at the key
    /// kept beside it: the first such key asked for (every node's, where
    /// members are single nodes).
    marked: OnceLock<(String, Pipeline)>,
}

impl Timed {
    /// `cmd`, then `TIME`.
    fn new(cmd: &Cmd) -> Self {
        let mut pipe = Pipeline::with_capacity(3);
        pipe.add_command(cmd.clone())
            .add_command(redis::cmd("TIME"));
        Self {
            pipe,
            marked: OnceLock::new(),
        }
    }

    /// [`Timed::pipe`] with what `add` puts behind it (the reads of a node
    /// whose marker lives at `marker`): made once for the first marker
    /// key asked for, anew for any other.
    pub(crate) fn marked(&self, marker: &str, add: impl Fn(&mut Pipeline)) -> Cow<'_, Pipeline> {
        let extend = || {
            let mut both = self.pipe.clone();
            add(&mut both);
            both
        };
        let (key, both) = self.marked.get_or_init(|| (marker.to_owned(), extend()));
        if key == marker {
            Cow::Borrowed(both)
        } else {
            Cow::Owned(extend())
        }
    }
}

impl Request {
    /// A plain command.
    pub(crate) fn plain(cmd: Cmd) -> Arc<Self> {
        Arc::new(Self {
            timed: Some(Timed::new(&cmd)),
            cmd,
            cleanup: false,
            script: None,
            args: Cmd::new(),
            full: OnceLock::new(),
            native: OnceLock::new(),
        })
    }

    /// `script` by its digest (`EVALSHA`) with `keys`, as many as it
    /// declares, and the args `fill` adds (and in full where a connection
    /// needs it: [`Request::form`]).
    pub(crate) fn script<const KEYS: usize>(
        script: &'static Script<KEYS>,
        keys: [&str; KEYS],
        fill: impl FnOnce(&mut Cmd),
    ) -> Arc<Self> {
        Self::keyed(script, &keys, fill)
    }

    /// As [`Request::script`], for a script that takes any number of keys.
    pub(crate) fn script_any(
        script: &'static Script<ANY_KEYS>,
        keys: &[&str],
        fill: impl FnOnce(&mut Cmd),
    ) -> Arc<Self> {
        Self::keyed(script, keys, fill)
    }

    /// `script` with `keys`, counted, and what `fill` adds.
    fn keyed(script: &'static Lua, keys: &[&str], fill: impl FnOnce(&mut Cmd)) -> Arc<Self> {
        let mut args = Cmd::with_capacity(8, 128);
        args.arg(keys.len());
        for key in keys {
            args.arg(*key);
        }
        fill(&mut args);
        let (cmd, timed) = form(script, ("EVALSHA", script.sha()), &args);
        Arc::new(Self {
            cmd,
            timed,
            cleanup: script.cleanup,
            script: Some(script),
            args,
            full: OnceLock::new(),
            native: OnceLock::new(),
        })
    }

    /// The hash slot of the request's first key (`None` where it names
    /// none, as `PING`): which shard of a member that is a Redis Cluster it
    /// goes to.
    #[cfg(feature = "cluster")]
    pub(crate) fn slot(&self) -> Option<u16> {
        let mut args = self.cmd.args_iter().filter_map(|a| match a {
            redis::Arg::Simple(bytes) => Some(bytes),
            _ => None,
        });
        let name = args.next()?;
        let key = if name.eq_ignore_ascii_case(b"EVALSHA") || name.eq_ignore_ascii_case(b"EVAL") {
            let _digest = args.next()?;
            if args.next()? == b"0" {
                return None;
            }
            args.next()?
        } else if name.eq_ignore_ascii_case(b"PING") || name.eq_ignore_ascii_case(b"TIME") {
            return None;
        } else {
            args.next()?
        };
        Some(crate::keys::key_slot(key))
    }

    /// The native form the request's script has, if any.
    pub(crate) fn native(&self) -> Option<Native> {
        self.script?.native
    }

    /// The command and its timed form to send in `how`.
    pub(crate) fn form(&self, how: Form) -> (&Cmd, Option<&Timed>) {
        let script = match (self.script, how) {
            (Some(script), Form::Full) => script,
            (Some(script), Form::Native(native)) => {
                let made = self.native.get_or_init(|| {
                    let cmd = native.command(&self.args)?;
                    let timed = (!script.cleanup).then(|| Timed::new(&cmd));
                    Some((cmd, timed))
                });
                match made {
                    Some((cmd, timed)) => return (cmd, timed.as_ref()),
                    // Arguments of another shape: the script in full
                    // (a test pins that ours fit).
                    None => script,
                }
            }
            _ => return (&self.cmd, self.timed.as_ref()),
        };
        let (cmd, timed) = self
            .full
            .get_or_init(|| form(script, ("EVAL", script.src), &self.args));
        (cmd, timed.as_ref())
    }
}

/// `script` as `name first` (`EVAL` and its source, or `EVALSHA` and its
/// digest) followed by `args`, and timed unless it is a cleanup.
fn form(script: &Lua, (name, first): (&str, &str), args: &Cmd) -> (Cmd, Option<Timed>) {
    // Sized for what it holds, so building it does not grow the buffers
    // step by step.
    let mut cmd = Cmd::with_capacity(8, first.len() + 128);
    cmd.arg(name).arg(first);
    for arg in args.args_iter() {
        if let redis::Arg::Simple(bytes) = arg {
            cmd.arg(bytes);
        }
    }
    let timed = (!script.cleanup).then(|| Timed::new(&cmd));
    (cmd, timed)
}

/// A node's error as a failure: a script the node's ACL refused names the
/// commands it needs; a native form refused, its command, and that the
/// script goes out instead from then on.
pub(crate) fn failure_of(e: redis::RedisError, script: Option<&'static Lua>) -> NodeErrorKind {
    match script {
        Some(script) if is_denied(&e) => {
            let native = script.native.map(Native::name).filter(|name| {
                let quoted = format!("'{}'", name.to_ascii_lowercase());
                e.to_string().to_ascii_lowercase().contains(&quoted)
            });
            let needs = match native {
                Some(name) => format!(
                    "{name}; this connection sends its script from now on, which needs {}",
                    script.commands()
                ),
                None => script.commands(),
            };
            NodeErrorKind::Denied { needs, error: e }
        }
        _ => NodeErrorKind::Redis(e),
    }
}
