//! What a waiter's notification read of a key found: how long the key has
//! left, or that it is free for that waiter, where the key holds a value
//! the waiter names as leaving it free.

/// The key's PTTL from the replies to an optional `GET` and a `PTTL` (in
/// that order), or -2 (no key) where the `GET` found `free`.
pub(crate) fn pttl(replies: &[Option<String>], free: Option<&str>) -> i64 {
    match replies {
        [Some(value), _] if Some(value.as_str()) == free => -2,
        _ => replies
            .last()
            .and_then(|p| p.as_deref()?.parse().ok())
            .unwrap_or(-2),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_holding_the_free_value_reads_as_none() {
        let some = |s: &str| Some(s.to_owned());
        assert_eq!(pttl(&[some("1500")], None), 1500);
        assert_eq!(pttl(&[some("mark"), some("1500")], Some("mark")), -2);
        assert_eq!(pttl(&[some("holder"), some("1500")], Some("mark")), 1500);
        assert_eq!(pttl(&[None, some("-2")], Some("mark")), -2);
    }
}
