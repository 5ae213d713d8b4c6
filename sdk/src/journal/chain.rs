//! Record hashing. The hash covers everything that gives a record its meaning — the key, its
//! position, its time, the previous hash and the event — so no field can change unseen.

use super::Record;
use crate::core::Event;
use crate::effect::{sha256_hex, write_canonical, write_compact};

/// The hash a record with these fields must carry: SHA-256 of the canonical JSON of
/// `{"at_ms", "event", "key", "n", "prev"}`. The outer object is written field by field, already
/// in canonical (sorted) order, instead of being built as a value first.
pub fn record_hash(key: &str, n: u32, at_ms: i64, prev: Option<&str>, event: &Event) -> String {
    let event = canonical_event(event).unwrap_or_else(|_| b"null".to_vec());
    record_hash_of(key, n, at_ms, prev, &event)
}

/// The event's canonical JSON: what its record's hash covers, and what the journal stores as the
/// record's body, so a new record's event is encoded once for both.
pub(super) fn canonical_event(event: &Event) -> Result<Vec<u8>, serde_json::Error> {
    let event = serde_json::to_value(event)?;
    let mut out = Vec::with_capacity(256);
    write_canonical(&event, &mut out);
    Ok(out)
}

/// [`record_hash`] with the event already in its canonical form ([`canonical_event`]).
pub(super) fn record_hash_of(
    key: &str,
    n: u32,
    at_ms: i64,
    prev: Option<&str>,
    event: &[u8],
) -> String {
    let mut out = Vec::with_capacity(event.len() + key.len() + 160);
    out.extend_from_slice(format!("{{\"at_ms\":{at_ms},\"event\":").as_bytes());
    out.extend_from_slice(event);
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

    /// xorshift64 over `f64` bit patterns: every finite one.
    fn finite_floats(n: usize) -> Vec<f64> {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let f = f64::from_bits(x);
            if f.is_finite() {
                out.push(f);
            }
        }
        out
    }

    /// A payload's floats are written in their shortest form and must parse back to the same
    /// bits, or the record read back hashes differently and its key is stuck as damaged
    /// (serde_json's default float parser is off by one step for about a third of them: the
    /// workspace turns on its `float_roundtrip`).
    #[test]
    fn a_stored_body_with_any_float_reads_back_to_the_hash_it_was_written_with() {
        let event = Event::Proposed(crate::core::Proposed {
            given_hash: None,
            rules: Vec::new(),
            by: None,
            payload: json!({ "amounts": finite_floats(5000), "amount": 0.1 + 0.2 }),
            payload_hash: "h".into(),
            premises: crate::core::Premises::new(),
            lease: "l".into(),
            target: "t".into(),
            tier: 1,
            window_ms: None,
            labels: Default::default(),
        });
        let body = canonical_event(&event).unwrap();
        let written = record_hash_of("k", 0, 1, None, &body);
        let read: Event = serde_json::from_slice(&body).unwrap();
        assert_eq!(record_hash("k", 0, 1, None, &read), written);
        assert_eq!(read, event);
    }
}
