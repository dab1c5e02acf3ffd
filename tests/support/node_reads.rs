//! What a test reads of a node, and sets on it directly: keys, TTLs,
//! command statistics, tracking clients.

use super::*;

impl RedisNode {
    /// A synchronous connection for assertions and setup.
    pub fn conn(&self) -> redis::Connection {
        redis::Client::open(self.plain_url())
            .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(5)))
            .unwrap_or_else(|e| panic!("connect to {}: {e}; log:\n{}", self.port, self.log()))
    }

    /// GET `key` on this node.
    pub fn get(&self, key: &str) -> Option<String> {
        redis::cmd("GET")
            .arg(key)
            .query(&mut self.conn())
            .expect("GET")
    }

    /// PTTL of `key` on this node in ms (-2 missing, -1 no expiry).
    pub fn pttl(&self, key: &str) -> i64 {
        redis::cmd("PTTL")
            .arg(key)
            .query(&mut self.conn())
            .expect("PTTL")
    }

    /// How many times `cmd` (lower case) ran on this node, from INFO
    /// commandstats.
    pub fn command_calls(&self, cmd: &str) -> u64 {
        self.command_stat(cmd, "calls")
    }

    /// Field `field` (`calls`, `rejected_calls`, ...) of `cmd` (lower case)
    /// in INFO commandstats; 0 where the command never ran.
    pub fn command_stat(&self, cmd: &str, field: &str) -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut self.conn())
            .expect("INFO commandstats");
        let prefix = format!("cmdstat_{cmd}:");
        info.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|rest| {
                rest.split(',')
                    .find_map(|kv| kv.strip_prefix(field)?.strip_prefix('='))?
                    .parse()
                    .ok()
            })
            .unwrap_or(0)
    }

    /// Whether the server has command `name` (`COMMAND INFO`): Valkey's
    /// `DELIFEQ`, say.
    pub fn has_command(&self, name: &str) -> bool {
        let info: Vec<redis::Value> = redis::cmd("COMMAND")
            .arg("INFO")
            .arg(name)
            .query(&mut self.conn())
            .expect("COMMAND INFO");
        matches!(info.first(), Some(redis::Value::Array(_)))
    }

    /// How many releases of a plain lock ran on this node: scripts, and
    /// Valkey's `DELIFEQ` where the node runs it for us.
    pub fn release_calls(&self) -> u64 {
        self.script_calls() + self.command_calls("delifeq")
    }

    /// How many of [`Self::release_calls`] a connection's opening makes:
    /// three scripts of its own (whether the node allows `EVALSHA`, and
    /// whether it runs Valkey's own commands for us), and on a node that has
    /// `DELIFEQ`, one `DELIFEQ` inside the last.
    pub fn opening_calls(&self) -> u64 {
        3 + u64::from(self.has_command("delifeq"))
    }

    /// How many `SET`s a connection's opening runs: on a node that has
    /// Valkey's `DELIFEQ`, one `SET … IFEQ` on a key that never exists
    /// (whether it takes `IFEQ`); none elsewhere.
    pub fn opening_sets(&self) -> u64 {
        u64::from(self.has_command("delifeq"))
    }

    /// How many scripts ran on this node (by hash, or by body the first
    /// time).
    pub fn script_calls(&self) -> u64 {
        self.command_calls("evalsha") + self.command_calls("eval")
    }

    /// The INFO errorstats section: every error reply the node gave, by kind.
    pub fn error_stats(&self) -> String {
        redis::cmd("INFO")
            .arg("errorstats")
            .query(&mut self.conn())
            .expect("INFO errorstats")
    }

    /// SET `key` to `value` with a TTL.
    pub fn set(&self, key: &str, value: &str, ttl: Duration) {
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg(value)
            .arg("PX")
            .arg(ttl.as_millis() as u64)
            .query(&mut self.conn())
            .expect("SET");
    }

    /// How many keys this node tracks for clients' notifications (`INFO
    /// stats`).
    pub fn tracked_keys(&self) -> usize {
        let info: String = redis::cmd("INFO")
            .arg("stats")
            .query(&mut self.conn())
            .expect("INFO");
        info.lines()
            .find_map(|l| l.strip_prefix("tracking_total_keys:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("tracking_total_keys")
    }

    /// How many clients wait in `key`'s waiting list on this node (for a
    /// key with no prefix and no hash tag).
    pub fn waiters(&self, key: &str) -> usize {
        redis::cmd("ZCARD")
            .arg(internal_key("waiters", key))
            .query(&mut self.conn())
            .expect("ZCARD")
    }

    /// How many members the sorted set at `key` has (a read-write lock's
    /// leases: `internal_key("rw-readers", name)`).
    pub fn zcard(&self, key: &str) -> usize {
        redis::cmd("ZCARD")
            .arg(key)
            .query(&mut self.conn())
            .expect("ZCARD")
    }

    /// A foreign client's release: the compare-and-delete every Redlock
    /// client sends, on a plain connection.
    pub fn compare_and_delete(&self, key: &str, value: &str) -> i64 {
        redis::Script::new(
            r#"if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) else return 0 end"#,
        )
        .key(key)
        .arg(value)
        .invoke(&mut self.conn())
        .expect("compare-and-delete")
    }

    /// The ids of the connections with client tracking on (the
    /// notification connections).
    pub fn tracking_client_ids(&self) -> Vec<String> {
        let list: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query(&mut self.conn())
            .expect("CLIENT LIST");
        list.lines()
            .filter_map(|line| {
                let field = |name: &str| {
                    line.split(' ')
                        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
                };
                let tracking = field("flags").is_some_and(|f| f.contains('t'));
                tracking.then(|| field("id").map(str::to_owned)).flatten()
            })
            .collect()
    }

    /// How many connections have client tracking on.
    pub fn tracking_clients(&self) -> usize {
        self.tracking_client_ids().len()
    }

    /// `CLIENT KILL`s every connection with client tracking on; returns how
    /// many.
    pub fn kill_tracking_clients(&self) -> usize {
        let ids = self.tracking_client_ids();
        let mut conn = self.conn();
        for id in &ids {
            let _: redis::RedisResult<()> = redis::cmd("CLIENT")
                .arg("KILL")
                .arg("ID")
                .arg(id)
                .query(&mut conn);
        }
        ids.len()
    }
}
