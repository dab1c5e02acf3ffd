//! Member URLs: one node (`redis://`, `rediss://`, `unix://`), or a Redis
//! Cluster given by its seeds (`redis+cluster://[user:password@]host:port
//! [,host:port...]`, `rediss+cluster://` with TLS); what makes two of them
//! the same server; messages that never echo a password.

use crate::error::{Error, Result};

/// Splits a comma-separated list of member URLs, as `REDQUORUM_NODES` and
/// the CLI's `--nodes` take it, into one URL per member: a part with no
/// scheme (`host:port`) after a `redis+cluster://` URL is one more of that
/// cluster's seeds. A blank part stays, as an empty entry that building
/// refuses in words (a doubled or trailing comma is a slip to point out);
/// a list with nothing in it (an unset variable) is no member at all.
///
/// ```
/// assert_eq!(
///     redquorum::split_node_list("redis+cluster://a:7000,b:7000, redis://c:6379"),
///     ["redis+cluster://a:7000,b:7000", "redis://c:6379"],
/// );
/// assert!(redquorum::split_node_list(" ").is_empty());
/// ```
pub fn split_node_list(list: &str) -> Vec<String> {
    if list.trim().is_empty() {
        return Vec::new();
    }
    let mut urls: Vec<String> = Vec::new();
    for part in list.split(',').map(str::trim) {
        match urls.last_mut() {
            Some(last) if is_cluster(last) && !part.is_empty() && !part.contains("://") => {
                last.push(',');
                last.push_str(part);
            }
            _ => urls.push(part.to_owned()),
        }
    }
    urls
}

/// Parses one member's URL: its client, and its seed addresses where it is
/// a Redis Cluster (`redis+cluster://`); errors never echo a password.
pub(crate) fn open_member(
    url: &str,
) -> Result<(redis::Client, Option<Vec<redis::ConnectionAddr>>)> {
    if !is_cluster(url) {
        return Ok((open_client(url)?, None));
    }
    let (base, seeds) = split(url).map_err(|why| bad_url(url, None, why))?;
    let client = open_client(&base)?;
    let like = client.get_connection_info().addr().clone();
    let seeds = seeds
        .into_iter()
        .map(|seed| crate::node::connection::open::addr_like(&like, seed))
        .collect();
    Ok((client, Some(seeds)))
}

/// Parses one node URL, with errors that never echo a password.
fn open_client(url: &str) -> Result<redis::Client> {
    #[cfg(feature = "tls")]
    if url.starts_with("rediss://") {
        // rustls refuses to guess a crypto provider; install ring once so a
        // `rediss://` URL works instead of panicking on first connect.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    #[cfg(not(feature = "tls"))]
    if url.starts_with("rediss://") {
        return Err(Error::InvalidUrl {
            url: redact(url),
            hint: None,
            source: redis::RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "rediss:// needs redquorum's `tls` feature",
            )),
        });
    }
    if let Some(problem) = url_problem(url) {
        return Err(problem);
    }
    #[cfg(feature = "tls")]
    if url.starts_with("rediss://") && url.ends_with("#insecure") {
        return Err(bad_url(
            url,
            None,
            "#insecure (no certificate check) is not supported: give the node a certificate \
             this machine trusts",
        ));
    }
    redis::Client::open(url).map_err(|source| Error::InvalidUrl {
        url: redact(url),
        hint: hint_for(url),
        source,
    })
}

/// What a URL that does not parse was likely meant to be: a `host:port`
/// without a scheme gets `redis://` (`redis:6379` is a host named redis);
/// a scheme whose `://` lost a character (`redis//h:p`, `redis:/h:p`) gets
/// it back.
fn hint_for(url: &str) -> Option<String> {
    if url.contains("://") {
        return None;
    }
    for scheme in ["rediss", "redis", "unix"] {
        for slip in [":/", "//"] {
            if let Some(rest) = url.strip_prefix(&format!("{scheme}{slip}")) {
                let rest = rest.trim_start_matches('/');
                return Some(redact(&format!("{scheme}://{rest}")));
            }
        }
    }
    Some(format!("redis://{}", redact(url)))
}

/// The mistakes redis-rs reports only as "did not parse": URLs separated by
/// spaces, a scheme that is not Redis's, a port out of range.
fn url_problem(url: &str) -> Option<Error> {
    if url.contains(char::is_whitespace) {
        return Some(bad_url(
            url,
            None,
            "it holds a space: separate node URLs with commas (redis://a:6379,redis://b:6379)",
        ));
    }
    let (scheme, rest) = url.split_once("://")?;
    if !matches!(scheme, "redis" | "rediss" | "unix" | "redis+unix") {
        return Some(bad_url(
            url,
            Some(format!("redis://{}", redact(rest))),
            "the scheme is not Redis's: use redis:// (rediss:// for TLS, unix:// for a socket)",
        ));
    }
    if scheme.contains("unix") {
        return None;
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
    let port = match host_port.rsplit_once(':') {
        Some((host, port)) if !host.ends_with(':') && !port.contains(']') => port,
        _ => return None,
    };
    match port.parse::<u16>() {
        Ok(p) if p > 0 => None,
        _ => Some(bad_url(
            url,
            None,
            "the port is not a port number (1 to 65535)",
        )),
    }
}

/// An [`Error::InvalidUrl`] that says `why`.
fn bad_url(url: &str, hint: Option<String>, why: &'static str) -> Error {
    Error::InvalidUrl {
        url: redact(url),
        hint,
        source: redis::RedisError::from((redis::ErrorKind::InvalidClientConfig, why)),
    }
}

/// What makes two URLs the same server: the host with the obvious
/// loopback spellings made one (`localhost`, `127.0.0.1`, `::1`), the port (redis-rs fills in 6379), and the
/// database (`/0`, `/` and none are the same).
pub(crate) fn identity(info: &redis::ConnectionInfo) -> String {
    let addr = info.addr().to_string();
    let (host, port) = addr.rsplit_once(':').unwrap_or((&addr, ""));
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase();
    let host = match host.as_str() {
        "localhost" | "::1" | "0:0:0:0:0:0:0:1" => "127.0.0.1".to_owned(),
        _ => host,
    };
    // Not the database index: one server under two indices is one node.
    format!("{host}:{port}")
}

/// Removes the userinfo part (`user:password@`) of a URL for messages,
/// also when the scheme is missing (`:password@host:port`).
pub(crate) fn redact(url: &str) -> String {
    let Some(at) = url.rfind('@') else {
        return url.to_owned();
    };
    match url.find("://") {
        Some(scheme) if scheme < at => format!("{}://***@{}", &url[..scheme], &url[at + 1..]),
        _ => format!("***@{}", &url[at + 1..]),
    }
}

/// Whether `url` names a member that is a Redis Cluster.
fn is_cluster(url: &str) -> bool {
    url.starts_with("redis+cluster://") || url.starts_with("rediss+cluster://")
}

/// A seed: host and port.
type Seed = (String, u16);

/// The member's settings as the URL of its first seed, and every seed's
/// `(host, port)`; or what is wrong with it.
fn split(url: &str) -> Result<(String, Vec<Seed>), &'static str> {
    let bad = |why: &'static str| why;
    if !cfg!(feature = "cluster") {
        return Err(bad(
            "a member that is a Redis Cluster (redis+cluster://) needs redquorum's `cluster` \
             feature",
        ));
    }
    let (scheme, rest) = url.split_once("+cluster://").unwrap_or(("redis", url));
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    if !matches!(tail.trim_start_matches('/'), "" | "0") {
        return Err(bad(
            "a Redis Cluster has only database 0: leave the database out of a redis+cluster:// URL",
        ));
    }
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((user, hosts)) => (Some(user), hosts),
        None => (None, authority),
    };
    let mut seeds = Vec::new();
    for seed in hosts.split(',') {
        let Some((host, port)) = seed.trim().rsplit_once(':') else {
            return Err(bad(
                "each seed of a redis+cluster:// URL is host:port, separated by commas \
                 (redis+cluster://10.0.0.1:7000,10.0.0.2:7000)",
            ));
        };
        let port = match port.parse::<u16>() {
            Ok(p) if p > 0 && !host.is_empty() => p,
            _ => {
                return Err(bad(
                    "each seed of a redis+cluster:// URL is host:port with a port from 1 to \
                     65535",
                ))
            }
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        seeds.push((host.to_owned(), port));
    }
    let first = hosts.split(',').next().unwrap_or_default().trim();
    let base = match userinfo {
        Some(user) => format!("{scheme}://{user}@{first}"),
        None => format!("{scheme}://{first}"),
    };
    Ok((base, seeds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_list_keeps_each_clusters_seeds_in_its_url() {
        let list = "redis://a:1, rediss+cluster://:pw@b:1,c:1,redis://d:1,e:1";
        assert_eq!(
            split_node_list(list),
            [
                "redis://a:1",
                "rediss+cluster://:pw@b:1,c:1",
                "redis://d:1",
                "e:1"
            ]
        );
        // Blank parts stay, for the builder to name as empty entries.
        assert_eq!(
            split_node_list("redis+cluster://b:1,,c:1,"),
            ["redis+cluster://b:1", "", "c:1", ""]
        );
        // Nothing at all (an unset variable): no member, for the caller
        // to say "no nodes".
        assert!(split_node_list("").is_empty());
        assert_eq!(split_node_list(","), ["", ""]);
    }

    #[test]
    fn a_slipped_scheme_gets_its_colon_and_slashes_back() {
        assert_eq!(
            hint_for("redis//127.0.0.1:7602").unwrap(),
            "redis://127.0.0.1:7602"
        );
        assert_eq!(hint_for("rediss:/h:1").unwrap(), "rediss://h:1");
        assert_eq!(hint_for("redis:6379").unwrap(), "redis://redis:6379");
        assert_eq!(hint_for("u:pw@h:1").unwrap(), "redis://***@h:1");
        assert_eq!(hint_for("redis//u:pw@h:1").unwrap(), "redis://***@h:1");
        assert_eq!(hint_for("redis://h:1"), None);
    }

    #[test]
    fn redacts_passwords() {
        assert_eq!(redact("redis://:s3cret@h:1/0"), "redis://***@h:1/0");
        assert_eq!(redact("redis://h:1"), "redis://h:1");
        assert_eq!(redact(":s3cretpw@127.0.0.1:7605"), "***@127.0.0.1:7605");
        assert_eq!(redact("user:pw@h:1"), "***@h:1");
    }

    #[cfg(not(feature = "cluster"))]
    #[test]
    fn a_cluster_member_without_the_feature_is_refused_in_words() {
        let e = split("redis+cluster://:secret@10.0.0.1:7000").unwrap_err();
        assert!(e.contains("needs redquorum's `cluster` feature"), "{e}");
    }

    #[cfg(feature = "cluster")]
    #[test]
    fn seeds_and_settings_come_apart() {
        let (base, seeds) = split("redis+cluster://:pw@10.0.0.1:7000,10.0.0.2:7001").unwrap();
        assert_eq!(base, "redis://:pw@10.0.0.1:7000");
        assert_eq!(
            seeds,
            [("10.0.0.1".to_owned(), 7000), ("10.0.0.2".to_owned(), 7001)]
        );
        let e = split("redis+cluster://:secret@10.0.0.1:7000/3").unwrap_err();
        assert!(e.contains("only database 0"), "{e}");
        let e = split("redis+cluster://:secret@10.0.0.1,10.0.0.2:7000").unwrap_err();
        assert!(e.contains("host:port"), "{e}");
    }
}
