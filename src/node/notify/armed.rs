//! What a waiter's notification read of a key found: how long the key has
//! left, or that it is free for that waiter, where the key holds a value
//! the waiter names as leaving it free.

use redis::{ErrorKind, RedisError, RedisResult};

/// The key's PTTL from the replies to an optional `GET` and a `PTTL` (in
/// that order), or -2 (no key) where the `GET` found `free`. A reply that
/// is no PTTL is an error, as a failed read is: no notification is armed.
pub(crate) fn pttl(replies: &[Option<String>], free: Option<&str>) -> RedisResult<i64> {
    if let [Some(value), _] = replies {
        if Some(value.as_str()) == free {
            return Ok(-2);
        }
    }
    replies
        .last()
        .and_then(|p| p.as_deref()?.parse().ok())
        .ok_or_else(|| {
            RedisError::from((
                ErrorKind::UnexpectedReturnType,
                "a PTTL reply that is no number",
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_holding_the_free_value_reads_as_none() {
        let some = |s: &str| Some(s.to_owned());
        assert_eq!(pttl(&[some("1500")], None).unwrap(), 1500);
        assert_eq!(
            pttl(&[some("mark"), some("1500")], Some("mark")).unwrap(),
            -2
        );
        assert_eq!(
            pttl(&[some("holder"), some("1500")], Some("mark")).unwrap(),
            1500
        );
        assert_eq!(pttl(&[None, some("-2")], Some("mark")).unwrap(), -2);
        // Not a number: an error (no notification armed), not "free".
        assert!(pttl(&[some("holder"), None], Some("mark")).is_err());
        assert!(pttl(&[some("x")], None).is_err());
        assert!(pttl(&[], None).is_err());
    }
}
