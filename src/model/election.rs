//! Leader election, model-checked. A leadership is the election's lock with
//! a term minted from the counter as a fencing token is (`model/lock.rs`
//! models both): after the lock was won, and kept only if the lock was
//! still valid when the term came back. So "at most one leader with
//! validity left at any instant" is the lock's exclusion property, and
//! "terms increase along the real-time order of leadership" its fencing
//! property (tokens in acquisition order). The published record that names
//! the leader is written only where the lock holds the leader's value, and
//! a reader reports a leader only when a quorum agree: it adds no way to
//! lead. The checks: both properties with a node crash (AOF) and a slow
//! node, and two weakened rules the checker must break: minting the term
//! before taking the lock, and keeping a leadership whose lock expired
//! while the term was minted.

#[cfg(test)]
mod tests {
    use crate::model::lock::tests::{safe, unsafe_};
    use crate::model::lock::{LockModel, FENCING};

    #[test]
    fn model_election_one_leader_and_terms_in_order_with_a_crash() {
        let m = LockModel {
            fenced: true,
            crashes: 1,
            ..LockModel::shipped()
        };
        safe("election: a crash (AOF), a slow node, clocks 10 % fast", m);
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

    #[test]
    fn model_election_finds_terms_out_of_order_without_the_validity_check() {
        let m = LockModel {
            fenced: true,
            check_mint: false,
            timeouts: 0,
            ..LockModel::shipped()
        };
        unsafe_(
            "election, weakened: leadership kept though the lock expired while minting",
            m,
            FENCING,
        );
    }
}
