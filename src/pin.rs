//! A configuration pinned on the nodes, once, for everyone: a serial
//! prefix's reset period and width, and a semaphore's number of permits.
//!
//! Why, for serials: one prefix issued with two configurations can print the same string
//! twice. `COL` by day with width 4 issues `COL20261123` + `0201`; by hour
//! with width 2 it issues `COL2026112302` + `01`: both `COL202611230201`,
//! from two counters that know nothing of each other. So before a generator
//! issues its first number for a prefix, it pins its configuration, and a
//! generator with another one is refused.
//!
//! The rule: every node keeps one pin per prefix, written once and never
//! replaced (`SERIAL_PIN`: store ours if none, answer what is
//! stored). A generator may issue only if a quorum of nodes holds its
//! configuration and no node that answered holds another; it waits for
//! every node not known to be unresponsive, as the counter does. Two
//! configurations can never both be allowed: any two quorums share a node,
//! and that node holds one pin forever. Refusing on any other pin, not
//! just on a lost quorum, is what keeps this true when a node forgets its
//! data (restarts empty): a generator allowed earlier left its pin on the
//! nodes that answered it, and they refuse the newcomer. The price: if two
//! generators with different configurations start on a fresh prefix at the
//! same moment, each may pin some nodes and both are then refused until an
//! operator deletes the wrong pins (the error names the key).
//!
//! For semaphores: two clients that give one semaphore different numbers of
//! permits would each admit up to their own K (a client with K = 3 takes
//! slot 3, which a client with K = 2 never looks at). The same rule pins K.

use std::sync::Arc;

use redis::Value;

use crate::counter::cas_finished;
use crate::error::{Error, Result};
use crate::lua::Script;
use crate::node::connection::request::Request;
use crate::quorum::fanout::Fanout;
use crate::quorum::tally::Tally;
use crate::quorum::{Counts, Quorum};

/// The rule every node applies (the `SERIAL_PIN` script): what the node
/// holds after a pin request for `proposed`. A test runs the script on a
/// real node against this function, and the model checker's nodes apply it.
/// Pins a serial prefix's configuration (see `serial/pin.rs`): stores
/// ARGV[1] at KEYS[1] if nothing is there, never replaces what is. Returns
/// what the key holds afterwards.
pub(crate) static SERIAL_PIN: Script<1> = Script::new(
    r#"local cur = redis.call("GET", KEYS[1])
if cur then
  return cur
end
redis.call("SET", KEYS[1], ARGV[1])
return ARGV[1]"#,
);

#[cfg(test)]
pub(crate) fn node_pins(stored: Option<&str>, proposed: &str) -> String {
    stored.unwrap_or(proposed).to_owned()
}

/// A finished pin round's outcome, given the other configurations nodes
/// answered with: allowed (`Some(true)`) with a quorum holding ours and no
/// other; refused (`Some(false)`) if any node holds another; `None` if too
/// few nodes answered to tell.
pub(crate) fn pin_outcome(tally: &Tally, others: usize) -> Option<bool> {
    if others > 0 {
        Some(false)
    } else if tally.yes_count() >= tally.quorum {
        Some(true)
    } else {
        None
    }
}

/// Pins `config` for `name` at `key`, or says which configuration the
/// nodes hold instead.
///
/// # Errors
///
/// `conflict(pinned)` when a node holds another configuration `pinned`,
/// [`Error::NoQuorum`] when too few nodes answer, [`Error::WrongType`] for
/// foreign data at the key.
pub(crate) async fn pin(
    quorum: &Quorum,
    (name, key): (&str, &str),
    config: &str,
    conflict: impl FnOnce(String) -> Error,
) -> Result<()> {
    let req: Arc<Request> = Request::script(&SERIAL_PIN, [key], |cmd| {
        cmd.arg(config);
    });
    let mut others: Vec<String> = Vec::new();
    let classify = |_: usize, v: &Value| {
        let held = match v {
            Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
            Value::SimpleString(s) => s.clone(),
            _ => return None,
        };
        let ours = held == config;
        if !ours {
            others.push(held);
        }
        Some(ours)
    };
    let done = |tally: &Tally, fan: &Fanout<'_>| cas_finished(tally, fan.owed_by_healthy());
    let (tally, fan) = quorum
        .vote_until(&req, "pin", Counts::All, classify, done)
        .await;
    match pin_outcome(&tally, others.len()) {
        Some(true) => {
            // Let the pin reach slow nodes too.
            fan.finish_in_background();
            Ok(())
        }
        Some(false) => Err(conflict(others.swap_remove(0))),
        None => Err(tally.into_error(name, key)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The script and [`node_pins`] agree, run on a real node.
    #[test]
    fn pin_script_and_rule_agree_on_a_real_node() {
        let (_node, mut conn) = crate::scratch::node();
        for stored in [None, Some("day/4"), Some("hour/2")] {
            for proposed in ["day/4", "hour/2"] {
                let _: () = redis::cmd("DEL").arg("pin").query(&mut conn).expect("DEL");
                if let Some(s) = stored {
                    let _: () = redis::cmd("SET")
                        .arg("pin")
                        .arg(s)
                        .query(&mut conn)
                        .expect("SET");
                }
                let reply: String = redis::cmd("EVAL")
                    .arg(SERIAL_PIN.src)
                    .arg(1)
                    .arg("pin")
                    .arg(proposed)
                    .query(&mut conn)
                    .expect("EVAL");
                let after: String = redis::cmd("GET").arg("pin").query(&mut conn).expect("GET");
                let rule = node_pins(stored, proposed);
                assert_eq!(reply, rule, "stored {stored:?}, proposed {proposed}");
                assert_eq!(after, rule, "stored {stored:?}, proposed {proposed}");
            }
        }
    }
}
