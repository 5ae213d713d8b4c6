//! Record hashing. The hash covers everything that gives a record its meaning — the key, its
//! position, its time, the previous hash and the event — so no field can change unseen.

use super::Record;
use crate::core::Event;
use crate::effect::{sha256_hex, write_canonical, write_compact};

/// The hash a record with these fields must carry: SHA-256 of the canonical JSON of
/// `{"at_ms", "event", "key", "n", "prev"}`. The outer object is written field by field, already
/// in canonical (sorted) order, instead of being built as a value first.
pub fn record_hash(key: &str, n: u32, at_ms: i64, prev: Option<&str>, event: &Event) -> String {
    let event = serde_json::to_value(event).unwrap_or(serde_json::Value::Null);
    let mut out = Vec::with_capacity(512);
    out.extend_from_slice(format!("{{\"at_ms\":{at_ms},\"event\":").as_bytes());
    write_canonical(&event, &mut out);
    out.extend_from_slice(b",\"key\":");
    write_compact(key, &mut out);
    out.extend_from_slice(format!(",\"n\":{n},\"prev\":").as_bytes());
    write_compact(&prev, &mut out);
    out.push(b'}');
    sha256_hex(&out)
}

/// Check a key's records form an unbroken chain; on failure say which record and what broke.
pub fn verify_chain(records: &[Record]) -> Result<(), (usize, String)> {
    verify_links(records, 0, None)
}

/// Check `records` continue a chain: the first sits at position `first` after a record hashed
/// `prev`, and each links to the one before. A failure names its index into `records`.
pub(super) fn verify_links<'a>(
    records: &'a [Record],
    first: usize,
    mut prev: Option<&'a str>,
) -> Result<(), (usize, String)> {
    for (i, r) in records.iter().enumerate() {
        let at = first + i;
        if usize::try_from(r.n).ok() != Some(at) {
            return Err((
                i,
                format!(
                    "position {} where {at} was expected (a record is missing or moved)",
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::core::transition::conflict_note;
    use crate::effect::canonical_json;

    /// The hash as the journal's format defines it: the canonical JSON of the whole record
    /// object, built as a value.
    fn by_definition(key: &str, n: u32, at_ms: i64, prev: Option<&str>, event: &Event) -> String {
        let event = serde_json::to_value(event).unwrap();
        let body = json!({ "key": key, "n": n, "at_ms": at_ms, "prev": prev, "event": event });
        sha256_hex(&canonical_json(&body))
    }

    #[test]
    fn record_hash_is_the_canonical_json_of_the_whole_record() {
        let event = Event::Refused(conflict_note("h\u{e9}\"1", "h\n2"));
        for (key, prev) in [
            ("plain", None),
            ("quote\" back\\slash é \u{1}", Some("abc")),
            ("", Some("")),
        ] {
            for (n, at_ms) in [(0, 0), (7, -1), (u32::MAX, i64::MAX)] {
                assert_eq!(
                    record_hash(key, n, at_ms, prev, &event),
                    by_definition(key, n, at_ms, prev, &event)
                );
            }
        }
    }
}
