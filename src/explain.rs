//! What a node's error means, in one line for someone running redquorum:
//! the causes an operator must fix (not Redis, a password, an ACL, a node
//! that holds only part of the key space) in plain words with the fix.

/// What a redis-rs error says, lowercase unless it starts with a server
/// error code (`WRONGTYPE ...`); always one line.
pub(crate) fn describe(e: &redis::RedisError) -> String {
    let text = e.to_string();
    let text = text.lines().next().unwrap_or("").trim_end().to_owned();
    let first = text.split_whitespace().next().unwrap_or("");
    if first.len() > 1 && first.chars().all(|c| c.is_ascii_uppercase()) {
        return text;
    }
    let mut chars = text.chars();
    match chars.next() {
        Some(c) => c.to_lowercase().chain(chars).collect(),
        None => text,
    }
}

/// Why a URL was refused, without redis-rs's error-kind suffix.
pub(crate) fn url_reason(e: &redis::RedisError) -> String {
    let text = describe(e);
    match text.strip_suffix(" - InvalidClientConfig") {
        Some("redis URL did not parse") => {
            "not a URL redis can use (redis://[user:password@]host:port[/db])".into()
        }
        Some(reason) => reason.to_owned(),
        None => text,
    }
}

/// Whether the node refused a command for want of an ACL permission: a
/// command (`NOPERM`), or one run by a script (Redis says the user "can't
/// run this command", Valkey "ACL failure in script").
pub(crate) fn is_denied(e: &redis::RedisError) -> bool {
    let text = e.to_string();
    e.code() == Some("NOPERM")
        || text.contains("can't run this command")
        || text.contains("ACL failure in script")
}

/// One line saying what a node's error means for someone running
/// redquorum: the few causes an operator must fix (not Redis, a password,
/// an ACL) in plain words with the fix, anything else as the server or the
/// connection said it, on one line. Never contains a password (redis-rs
/// errors do not carry the URL).
pub fn explain(e: &redis::RedisError) -> String {
    let text = e.to_string();
    let code = e.code().unwrap_or("");
    if matches!(e.kind(), redis::ErrorKind::Parse) {
        return "not a Redis server (its reply is not in the Redis protocol)".into();
    }
    if matches!(e.kind(), redis::ErrorKind::AuthenticationFailed) || code == "WRONGPASS" {
        return "authentication failed: wrong user name or password in the node's URL".into();
    }
    if code == "NOAUTH"
        || text.contains("unauthenticated")
        || text.contains("Authentication required")
    {
        return "the node requires a password: give it in the URL (redis://:PASSWORD@host:port, \
                or redis://USER:PASSWORD@host:port for an ACL user)"
            .into();
    }
    if is_denied(e) {
        return format!(
            "the node's ACL user lacks a permission redquorum needs ({})",
            describe(e)
        );
    }
    if is_moved(e) {
        let detail = e.detail().unwrap_or("");
        let what = match detail.split_whitespace().collect::<Vec<_>>()[..] {
            [slot, to] => format!(
                "one shard of a Redis Cluster with several (it sent us to {to} for slot {slot})"
            ),
            _ if !detail.is_empty() => detail.to_owned(),
            _ => "one shard of a Redis Cluster with several".to_owned(),
        };
        return format!(
            "the node is {what}: it holds only part of the key space, and a member must hold \
             all of it: name standalone nodes (or clusters with every slot on one node), or \
             give the whole cluster as one member, redis+cluster://host:port (feature `cluster`)"
        );
    }
    describe(e)
}

/// Whether a node answered as one shard of several of a Redis Cluster
/// would: `MOVED` or `ASK` (a key of another shard's), or our own refusal
/// of such a node when the connection was made (same code).
pub(crate) fn is_moved(e: &redis::RedisError) -> bool {
    matches!(e.code(), Some("MOVED" | "ASK"))
}
