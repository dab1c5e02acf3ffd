//! What a node's pushes say: the keys an invalidation names.

use redis::Value;

/// The keys of an `invalidate` push, or `None` for "everything" (the node
/// sends a null list after a flush).
pub(crate) fn invalidated_keys(data: &[Value]) -> Option<Vec<Vec<u8>>> {
    let mut keys = Vec::new();
    for v in data {
        match v {
            Value::Array(items) | Value::Set(items) => {
                for item in items {
                    if let Value::BulkString(k) = item {
                        keys.push(k.clone());
                    }
                }
            }
            Value::BulkString(k) => keys.push(k.clone()),
            Value::Nil => return None,
            _ => {}
        }
    }
    Some(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_invalidation_pushes() {
        let data = vec![Value::Array(vec![
            Value::BulkString(b"a".to_vec()),
            Value::BulkString(b"b".to_vec()),
        ])];
        assert_eq!(
            invalidated_keys(&data),
            Some(vec![b"a".to_vec(), b"b".to_vec()])
        );
        assert_eq!(invalidated_keys(&[Value::Nil]), None);
    }
}
