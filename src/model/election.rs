//! Leader election, model-checked. A leadership is the election's lock with
//! a term minted from the counter as a fencing token is (`model/lock.rs`
//! models both): after the lock was won, and kept only if the lock was
//! still valid when the term came back. So "at most one leader with
//! validity left at any instant" is the lock's exclusion property, and
//! "terms increase along the real-time order of leadership" its fencing
//! property (tokens in acquisition order). The published record that names
//! the leader is written only where the lock holds the leader's value, and
//! a reader reports a leader only when a quorum agree: it adds no way to
//! lead. The checks here: both properties with a node crash (AOF; horizon
//! 4, before any key expires on a node: a release hands over), and one weakened
//! rule the checker must break: minting the term before taking the lock.
//! The fenced lock's own checks in `model/lock.rs` cover the rest: a slow
//! node with expiry, and keeping a token whose lock expired while it was
//! minted. Node clocks: the lease under a node clock that steps ahead (the
//! node seen running ahead sits out; counting it at once makes two
//! leaders) and under one that runs 1.6 times as fast (counted at its
//! measured rate).

#[cfg(test)]
mod tests {
    use crate::model::lock::{LockModel, FENCING};
    use crate::model::lock_rules::{safe, unsafe_};

    /// The lock model's exclusion property: one leader with validity left.
    const EXCLUSION: &str = "no two clients hold a valid lock at once";

    #[test]
    fn model_election_one_leader_and_terms_in_order_with_a_crash() {
        let m = LockModel {
            fenced: true,
            crashes: 1,
            timeouts: 0,
            horizon: 4,
            ..LockModel::shipped()
        };
        safe("election: a crash (AOF), clocks 10 % fast", m);
    }

    /// The lease, fenced, under a node clock that steps ahead once (6 ms,
    /// no timeouts: the lock's own model has the full bounds).
    fn stepped() -> LockModel {
        LockModel {
            fenced: true,
            steps: 1,
            timeouts: 0,
            horizon: 6,
            ..LockModel::shipped()
        }
    }

    #[test]
    fn model_election_one_leader_when_a_node_clock_steps_ahead() {
        safe("election: a node's clock steps ahead", stepped());
    }

    #[test]
    fn model_election_finds_two_leaders_when_a_stepped_node_counts() {
        let m = LockModel {
            clock_check: false,
            ..stepped()
        };
        unsafe_(
            "election, weakened: a node whose clock jumped ahead counts at once",
            m,
            EXCLUSION,
        );
    }

    #[test]
    fn model_election_one_leader_with_a_node_clock_beyond_the_allowance() {
        let m = LockModel {
            fenced: true,
            ttl: 9,
            horizon: 6,
            fast: Some((1, 1.6)),
            ..LockModel::shipped()
        };
        safe("election: a node's clock runs 1.6 times as fast", m);
    }

    #[test]
    fn model_election_finds_terms_out_of_order_when_minted_before_the_lock() {
        let m = LockModel {
            fenced: true,
            mint_before_acquire: true,
            ..LockModel::shipped()
        };
        unsafe_(
            "election, weakened: the term minted before the lock",
            m,
            FENCING,
        );
    }
}
