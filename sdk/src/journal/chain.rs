//! Record hashing. The hash covers everything that gives a record its meaning — the key, its
//! position, its time, the previous hash and the event — so no field can change unseen.

use serde_json::json;

use super::Record;
use crate::core::Event;
use crate::effect::{canonical_json, sha256_hex};

/// The hash a record with these fields must carry.
pub fn record_hash(key: &str, n: u32, at_ms: i64, prev: Option<&str>, event: &Event) -> String {
    let event = serde_json::to_value(event).unwrap_or(serde_json::Value::Null);
    let body = json!({ "key": key, "n": n, "at_ms": at_ms, "prev": prev, "event": event });
    sha256_hex(&canonical_json(&body))
}

/// Check a key's records form an unbroken chain; on failure say which record and what broke.
pub fn verify_chain(records: &[Record]) -> Result<(), (usize, String)> {
    let mut prev: Option<&str> = None;
    for (i, r) in records.iter().enumerate() {
        if usize::try_from(r.n).ok() != Some(i) {
            return Err((
                i,
                format!(
                    "position {} where {i} was expected (a record is missing or moved)",
                    r.n
                ),
            ));
        }
        if r.prev.as_deref() != prev {
            return Err((
                i,
                "its previous-hash does not match the record before it".into(),
            ));
        }
        if record_hash(&r.key, r.n, r.at_ms, r.prev.as_deref(), &r.event) != r.hash {
            return Err((
                i,
                "its contents do not match its hash (a field was changed)".into(),
            ));
        }
        prev = Some(&r.hash);
    }
    Ok(())
}
