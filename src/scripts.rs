//! Every script the crate sends, checked together: the keys each declares
//! against those its source reads, and the ACL the docs give against the
//! commands they run. The scripts themselves live beside their owners.

#[cfg(test)]
mod tests {
    use crate::lua::Lua;

    /// Names a script, with the keys it declares.
    macro_rules! declared {
        ($($script:expr),* $(,)?) => {
            vec![$((stringify!($script), $script.keys(), &*$script)),*]
        };
    }

    /// Every script the crate sends: its name, the keys it declares (`None`:
    /// any number), the script.
    fn every_script() -> Vec<(&'static str, Option<usize>, &'static Lua)> {
        declared![
            &crate::lock::scripts::RELEASE,
            &crate::lock::scripts::RELEASE_TELLING_WAITERS,
            &crate::lock::scripts::QUEUED_SET,
            &crate::wait::scripts::UNQUEUE,
            &crate::wait::scripts::JOIN_WAITING_LIST,
            &crate::lock::scripts::EXTEND,
            &crate::pin::SERIAL_PIN,
            &crate::counter::scripts::COUNTER_CAS,
            &crate::counter::scripts::COUNTER_STAMP,
            &crate::semaphore::scripts::SEMAPHORE_TAKE,
            &crate::semaphore::scripts::SEMAPHORE_MOVE,
            &crate::semaphore::scripts::SEMAPHORE_UNDO,
            &crate::semaphore::scripts::SEMAPHORE_RELEASE,
            &crate::election::scripts::LEADER_PUBLISH,
            &crate::election::scripts::LEADER_READ,
            &crate::lock::scripts::INSPECT,
            &crate::client::trust::INIT_NEW,
            &crate::node::trust::marker::MARKER_CAS,
            &crate::node::trust::marker::MARKER_SERVED,
            &crate::node::trust::marker::MARKER_ADOPT,
            &crate::lock::multi_scripts::TAKE_ALL,
            &crate::lock::multi_scripts::QUEUED_TAKE_ALL,
            &crate::lock::multi_scripts::RELEASE_ALL,
            &crate::lock::multi_scripts::EXTEND_ALL,
            &crate::lock::multi_scripts::HELD_ALL,
            &crate::rwlock::scripts::READ_TAKE,
            &crate::rwlock::scripts::WRITE_TAKE,
            &crate::rwlock::scripts::READ_RELEASE,
            &crate::rwlock::scripts::READ_EXTEND,
            &crate::rwlock::scripts::READ_HELD,
            &crate::rwlock::scripts::RW_INSPECT,
        ]
    }

    /// The highest `n` of the `KEYS[n]` a source names.
    fn highest_key(src: &str) -> usize {
        src.split("KEYS[")
            .skip(1)
            .filter_map(|rest| rest.split(']').next()?.parse::<usize>().ok())
            .max()
            .unwrap_or(0)
    }

    /// A script's declared keys (what a request sends: `Request::script`
    /// takes exactly that many) cover every `KEYS[n]` its source reads,
    /// and no more unless it reads the rest by count (`#KEYS`); a script
    /// declared to take any number reads them by count.
    #[test]
    fn each_script_declares_the_keys_its_source_reads() {
        for (name, keys, script) in every_script() {
            let (read, counted) = (highest_key(script.src), script.src.contains("#KEYS"));
            match keys {
                Some(n) => {
                    assert!(n >= read, "{name} declares {n} keys and reads KEYS[{read}]");
                    assert!(
                        counted || n == read,
                        "{name} declares {n} keys and reads {read}"
                    );
                }
                None => assert!(counted, "{name} takes any number of keys, counts none"),
            }
        }
        // The check itself sees a wrong declaration.
        assert_eq!(highest_key("KEYS[1], KEYS[12], KEYS[i]"), 12);
        assert_eq!(highest_key(crate::rwlock::scripts::WRITE_TAKE.src), 5);
    }

    /// The minimal ACL user in docs/configuration.md allows every command of every script
    /// (`tests/messages.rs` runs the features as that user).
    #[test]
    fn the_readmes_acl_allows_every_script_command() {
        let readme = include_str!("../docs/configuration.md");
        let start = readme.find("`ACL SETUSER app").expect("the ACL line");
        let acl = readme[start + 1..].split('`').next().unwrap_or("");
        let allowed: Vec<String> = acl
            .split_whitespace()
            .filter_map(|w| w.strip_prefix('+'))
            .map(str::to_ascii_uppercase)
            .collect();
        for (_, _, script) in every_script() {
            for cmd in script.commands().split(' ') {
                assert!(allowed.iter().any(|a| a == cmd), "{cmd} missing from {acl}");
            }
        }
    }
}
