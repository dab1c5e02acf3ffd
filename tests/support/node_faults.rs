//! Faults on a node: stop, kill -9, SIGSTOP and SIGCONT, restarts with its
//! data, without it, from a backup, or loading slowly.

use super::*;

impl RedisNode {
    /// Graceful stop (SIGTERM), waiting for exit.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            Claimed::mark(self.port);
            if self.paused {
                signal(c.id(), "-CONT");
            }
            signal(c.id(), "-TERM");
            let _ = c.wait();
        }
        self.paused = false;
    }

    /// kill -9, waiting for exit.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            Claimed::mark(self.port);
            let _ = c.kill();
            let _ = c.wait();
        }
        self.paused = false;
    }

    /// SIGSTOP: the process hangs, its sockets stay open.
    pub fn pause(&mut self) {
        signal(self.pid(), "-STOP");
        self.paused = true;
    }

    /// SIGCONT.
    pub fn resume(&mut self) {
        if self.paused {
            signal(self.pid(), "-CONT");
            self.paused = false;
        }
    }

    /// Kills the node and starts it again on the same port. With
    /// `Persistence::Aof` it keeps the data written under AOF; with
    /// `Persistence::None` it comes back empty.
    pub fn restart(&mut self, persistence: Persistence) {
        self.kill();
        if persistence == Persistence::None {
            self.wipe();
        }
        self.respawn(persistence);
    }

    /// Writes `keys` filler keys, rewrites the AOF so that they load from
    /// its RDB base, kills the node and starts it again with its data,
    /// each key loading `per_key` late: returns once the new process
    /// answers, still loading (reads get `LOADING`).
    pub fn restart_loading_slowly(&mut self, keys: usize, per_key: Duration) {
        let mut conn = self.conn();
        let mut pipe = redis::pipe();
        for i in 0..keys {
            pipe.cmd("SET").arg(format!("filler:{i}")).arg(i).ignore();
        }
        let _: () = pipe.query(&mut conn).expect("filler keys");
        let _: () = redis::cmd("BGREWRITEAOF")
            .query(&mut conn)
            .expect("BGREWRITEAOF");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let info: String = redis::cmd("INFO")
                .arg("persistence")
                .query(&mut conn)
                .expect("INFO");
            if info.contains("aof_rewrite_in_progress:0")
                && info.contains("aof_rewrite_scheduled:0")
            {
                break;
            }
            assert!(Instant::now() < deadline, "AOF rewrite never ended");
            std::thread::sleep(Duration::from_millis(10));
        }
        self.kill();
        self.load_delay_us = u64::try_from(per_key.as_micros()).expect("delay");
        self.respawn(Persistence::Aof);
        self.load_delay_us = 0;
    }

    /// Whether the node still loads its data.
    pub fn is_loading(&self) -> bool {
        is_loading(self.port)
    }

    /// Kills the node, empties its data directory and starts it again with
    /// the same settings: a new disk, a container recreated without its
    /// volume, AOF on tmpfs across a reboot.
    pub fn restart_wiped(&mut self) {
        self.kill();
        self.wipe();
        self.respawn(self.persistence);
    }

    /// Kills the node, empties its data directory but for its cluster
    /// configuration (`nodes.conf`), and starts it again: a cluster's shard
    /// back in place, serving the slots it served, without its keys (its
    /// AOF lost, its node identity kept).
    pub fn restart_empty_in_place(&mut self) {
        self.kill();
        self.wipe_but("nodes.conf");
        self.respawn(self.persistence);
    }

    /// A copy of the node's data directory as it is now (a backup).
    pub fn backup(&self) -> tempfile::TempDir {
        let to = tempfile::tempdir().expect("backup dir");
        copy_data(self.dir.path(), to.path());
        to
    }

    /// Kills the node, puts `backup` in place of its data and starts it
    /// again with the same settings (a restore from an old backup).
    pub fn restart_from_backup(&mut self, backup: &tempfile::TempDir) {
        self.kill();
        self.wipe();
        copy_data(backup.path(), self.dir.path());
        self.respawn(self.persistence);
    }

    /// Removes everything in the data directory but the log.
    pub(crate) fn wipe(&self) {
        self.wipe_but("redis.log");
    }

    /// Empties the data directory but for the log and `keep`.
    pub(crate) fn wipe_but(&self, keep: &str) {
        for entry in std::fs::read_dir(self.dir.path())
            .expect("read data dir")
            .flatten()
        {
            if entry.file_name() != "redis.log" && entry.file_name() != keep {
                let p = entry.path();
                let _ = std::fs::remove_dir_all(&p).or_else(|_| std::fs::remove_file(&p));
            }
        }
    }

    /// Starts the killed node again on its port with `persistence`.
    pub(crate) fn respawn(&mut self, persistence: Persistence) {
        self.persistence = persistence;
        let mut last = String::new();
        // The old socket may linger for a moment after kill -9.
        for _ in 0..50 {
            match self.spawn() {
                Ok(()) => return,
                Err(e) => last = e,
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("restart on port {} failed: {last}", self.port);
    }
}
