//! Our marker, written: the scripts that bring it up to date after a
//! check (see [`evidence`](super::evidence) for what it holds and how it
//! is read, and `amnesia.rs` for what it means), each a compare on what
//! the check found, so that a newer marker is never overwritten.

use crate::lua::Script;
use crate::node::trust::evidence::{Marker, Probe};

/// A Lua function, `with_tag(tags, tag)`: marker tags `tags` (`false`:
/// none) with `tag` added (`""`: none to add).
macro_rules! with_tag {
    () => {
        r#"local function with_tag(t, tag)
  t = t or ""
  if t == "-" or #t > 4096 then t = "" end
  if tag == "" or string.find("," .. t .. ",", "," .. tag .. ",", 1, true) then return t end
  if t == "" then return tag end
  return t .. "," .. tag
end
"#
    };
}
pub(crate) use with_tag;

/// Writes our marker only if it is still as the probe found it (`run` and
/// `loss`, empty for none), so that a marker another client or an
/// operator's `init` wrote meanwhile is never overwritten with an older
/// verdict; the tags it carries are kept, and ours added. KEYS: marker.
/// ARGV: found run, found loss, then the new `run`, `loss`, `seen`,
/// `repl`, `why`, `slots`, and our tag. Returns 1 if written.
pub(crate) static MARKER_CAS: Script<1> = Script::new(concat!(
    with_tag!(),
    r#"local m = redis.call("HMGET", KEYS[1], "run", "loss", "tags")
if (m[1] or "") ~= ARGV[1] or (m[2] or "") ~= ARGV[2] then return 0 end
redis.call("HSET", KEYS[1], "run", ARGV[3], "loss", ARGV[4], "seen", ARGV[5], "repl", ARGV[6],
  "why", ARGV[7], "slots", ARGV[8], "served", "-", "tags", with_tag(m[3], ARGV[9]))
return 1"#
));

/// Records that the loss our marker names was served (see `amnesia.rs`)
/// by a client of deployment ARGV[4], whose tag ARGV[5] it then carries,
/// only if the marker still names that process and loss and the damage
/// count then. KEYS: marker. ARGV: run, loss, seen, deployment, tag.
/// Returns 1 if written.
pub(crate) static MARKER_SERVED: Script<1> = Script::new(concat!(
    with_tag!(),
    r#"local m = redis.call("HMGET", KEYS[1], "run", "loss", "seen", "tags")
if m[1] ~= ARGV[1] or m[2] ~= ARGV[2] or m[3] ~= ARGV[3] then return 0 end
redis.call("HSET", KEYS[1], "served", ARGV[4], "tags", with_tag(m[4], ARGV[5]))
return 1"#
));

/// Adds our tag ARGV[2] to the marker of a foreign process (see
/// `tags.rs`) whose quarantine this client watched pass, only if the
/// marker still names that process (ARGV[1]). KEYS: marker. Returns 1 if
/// written.
pub(crate) static MARKER_ADOPT: Script<1> = Script::new(concat!(
    with_tag!(),
    r#"local m = redis.call("HMGET", KEYS[1], "run", "tags")
if m[1] ~= ARGV[1] then return 0 end
redis.call("HSET", KEYS[1], "tags", with_tag(m[2], ARGV[2]))
return 1"#
));

/// The command that adds tag `tag` to the marker at key `marker` if it
/// names `probe`'s process.
pub(crate) fn marker_adopt(probe: &Probe, marker: &str, tag: &str) -> redis::Cmd {
    let mut cmd = eval(&MARKER_ADOPT, marker);
    cmd.arg(&probe.run_id).arg(tag);
    cmd
}

/// The command that records the loss `probe`'s marker names as served by
/// a client of deployment `ours` and tag `tag`, at key `marker`; `None`
/// where the marker names no loss.
pub(crate) fn marker_served(
    probe: &Probe,
    marker: &str,
    (ours, tag): (&str, &str),
) -> Option<redis::Cmd> {
    let Some(Marker::Found {
        run,
        loss: Some(loss),
        seen,
        ..
    }) = &probe.marker
    else {
        return None;
    };
    let mut cmd = eval(&MARKER_SERVED, marker);
    cmd.arg(run)
        .arg(loss)
        .arg(seen.unwrap_or(0))
        .arg(ours)
        .arg(tag);
    Some(cmd)
}

/// The command that replaces the marker `probe` found with the one it
/// calls for: loss moment `loss`, found for reason `why`, at key `marker`,
/// carrying our tag `tag` too.
pub(crate) fn marker_update(
    probe: &Probe,
    (loss, why): (Option<u64>, &str),
    marker: &str,
    tag: &str,
) -> redis::Cmd {
    let (run, found_loss) = match &probe.marker {
        Some(Marker::Found { run, loss, .. }) => {
            (run.clone(), loss.map_or("-".to_owned(), |l| l.to_string()))
        }
        _ => (String::new(), String::new()),
    };
    let mut cmd = eval(&MARKER_CAS, marker);
    cmd.arg(run)
        .arg(found_loss)
        .arg(&probe.run_id)
        .arg(loss.map_or("-".to_owned(), |l| l.to_string()))
        .arg(probe.seen().unwrap_or(0))
        .arg(&probe.replid)
        .arg(why)
        .arg(probe.slots.as_deref().unwrap_or("-"))
        .arg(tag);
    cmd
}

/// Whether `found` is already the marker `probe` calls for, where the
/// process is trusted (`loss` `None`) carrying our tag `tag` too (`None`:
/// no tag asked for).
pub(crate) fn marker_is(
    found: Option<&Marker>,
    probe: &Probe,
    loss: Option<u64>,
    tag: Option<&str>,
) -> bool {
    matches!(found, Some(Marker::Found { run, loss: l, seen, repl, slots, tags, .. })
        if *run == probe.run_id && *l == loss && *seen == probe.seen()
            && repl.as_deref() == Some(probe.replid.as_str()) && *slots == probe.slots
            && (loss.is_some()
                || tag.is_none_or(|t| tags.as_ref().is_some_and(|ts| ts.iter().any(|x| x == t)))))
}

/// `EVAL` of `script` on our marker at key `marker`, its arguments to
/// follow.
fn eval(script: &Script<1>, marker: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(script.src).arg(script.keys()).arg(marker);
    cmd
}
