//! An effect's identity and arguments. The key is fixed when the request is decided and doubles
//! as the target's idempotency key, so it is never truncated; the payload is hashed in canonical
//! form so the same arguments always bind to the same key, whatever order a caller built them in.

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::core::Premises;

/// Longest key a caller may fix: Stripe's limit for an `Idempotency-Key`.
pub const MAX_KEY_LEN: usize = 255;

/// The identity of one effect.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EffectKey(String);

/// A key or payload that cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum EffectError {
    /// A caller-fixed key that is empty, too long or not printable ASCII.
    #[error(
        "effect key {key:?} is not usable: {why}; use 1–{MAX_KEY_LEN} printable ASCII characters, \
         or derive one with EffectKey::derive"
    )]
    BadKey {
        /// The key as given (cut to 80 characters).
        key: String,
        /// What is wrong.
        why: &'static str,
    },
    /// The payload could not be turned into JSON.
    #[error("effect payload is not JSON-serializable: {0}")]
    Payload(String),
}

impl EffectKey {
    /// Derive a full-width key (64 hex digits of SHA-256) from the parts that identify the
    /// decision, e.g. a workflow id and an activity id. Parts are length-prefixed, so
    /// `["ab", "c"]` and `["a", "bc"]` differ.
    pub fn derive<S: AsRef<str>>(parts: &[S]) -> Self {
        let mut h = Sha256::new();
        h.update(b"interlock-key-v1");
        for p in parts {
            let p = p.as_ref().as_bytes();
            h.update((p.len() as u64).to_be_bytes());
            h.update(p);
        }
        Self(hex::encode(h.finalize()))
    }

    /// Use a key the caller fixed, e.g. an approved request id.
    pub fn fixed(key: impl Into<String>) -> Result<Self, EffectError> {
        let key = key.into();
        let why = if key.is_empty() {
            Some("it is empty")
        } else if key.len() > MAX_KEY_LEN {
            Some("it is longer than 255 bytes")
        } else if !key.bytes().all(|b| b.is_ascii_graphic()) {
            Some("it holds a character that is not printable ASCII")
        } else {
            None
        };
        match why {
            None => Ok(Self(key)),
            Some(why) => Err(EffectError::BadKey {
                key: key.chars().take(80).collect(),
                why,
            }),
        }
    }

    /// The key as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for EffectKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Canonical JSON bytes: object keys sorted, no whitespace.
pub fn canonical_json(value: &Value) -> Vec<u8> {
    // serde_json's Value keeps objects in a BTreeMap (no `preserve_order`), so its compact form
    // is already sorted; sorting is still done here so the guarantee does not rest on a feature
    // flag some other crate in the graph might turn on.
    let mut out = Vec::new();
    write_canonical(value, &mut out);
    out
}

/// Append `value`'s canonical form to `out`.
pub fn write_canonical(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push(b'{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_compact(k, out);
                out.push(b':');
                write_canonical(v, out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(v, out);
            }
            out.push(b']');
        }
        other => write_compact(other, out),
    }
}

/// A string or scalar in serde_json's compact form, written in place.
pub(crate) fn write_compact(v: &(impl serde::Serialize + ?Sized), out: &mut Vec<u8>) {
    // Writing a string or a JSON scalar into memory cannot fail: a `Value` holds no non-finite
    // number, and a `Vec` takes every byte.
    let _ = serde_json::to_writer(out, v);
}

/// `s` with every byte outside `[A-Za-z0-9_~-]` written as `%XX`: injective, and safe as one
/// URL path segment or one file name.
pub fn percent_encoded(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Hex SHA-256 of bytes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// One side effect, as decided: its key, its arguments, the facts it stood on, its authority.
#[derive(Clone, Debug, PartialEq)]
pub struct Effect {
    /// Identity; doubles as the idempotency key.
    pub key: EffectKey,
    /// Arguments, as JSON.
    pub payload: Value,
    /// Premises as decided (read by code, never self-reported by a model).
    pub decided: Premises,
    /// The lease it runs under.
    pub lease: String,
    /// What the effect is part of (the workflow type, the acting agent): journaled with its
    /// proposal, for budgets to match (`label.NAME` in a budget's scope).
    pub labels: std::collections::BTreeMap<String, String>,
}

impl Effect {
    /// An effect with a serializable payload and no premises yet.
    pub fn new(
        key: EffectKey,
        payload: &impl Serialize,
        lease: impl Into<String>,
    ) -> Result<Self, EffectError> {
        let payload =
            serde_json::to_value(payload).map_err(|e| EffectError::Payload(e.to_string()))?;
        Ok(Self {
            key,
            payload,
            decided: Premises::new(),
            lease: lease.into(),
            labels: std::collections::BTreeMap::new(),
        })
    }

    /// Add a premise with the value seen at decision time.
    pub fn premise(mut self, name: impl Into<String>, value: impl Into<Value>) -> Self {
        self.decided.insert(name.into(), value.into());
        self
    }

    /// Replace all premises with those a reader returned at decision time.
    pub fn premises(mut self, decided: Premises) -> Self {
        self.decided = decided;
        self
    }

    /// Label the effect: `name` = `value`, for budgets that count by it.
    pub fn label(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.labels.insert(name.into(), value.into());
        self
    }

    /// SHA-256 of the payload's canonical JSON.
    pub fn payload_hash(&self) -> String {
        sha256_hex(&canonical_json(&self.payload))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn derived_keys_are_full_width_and_unambiguous() {
        let a = EffectKey::derive(&["ab", "c"]);
        assert_eq!(a.as_str().len(), 64);
        assert_ne!(a, EffectKey::derive(&["a", "bc"]));
        assert_eq!(a, EffectKey::derive(&["ab".to_owned(), "c".to_owned()]));
    }

    #[test]
    fn fixed_keys_are_validated_with_a_reason() {
        assert!(EffectKey::fixed("case-4471/refund").is_ok());
        for bad in ["", "has space", "é", &"x".repeat(256)] {
            let err = EffectKey::fixed(bad)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(err.contains("not usable"), "{bad:?}: {err}");
        }
    }

    #[test]
    fn payload_hash_ignores_field_order() -> Result<(), EffectError> {
        let k = EffectKey::derive(&["k"]);
        let a = Effect::new(k.clone(), &json!({"a": 1, "b": {"y": 2, "x": [3, 4]}}), "l")?;
        let b = Effect::new(k, &json!({"b": {"x": [3, 4], "y": 2}, "a": 1}), "l")?;
        assert_eq!(a.payload_hash(), b.payload_hash());
        assert_eq!(
            canonical_json(&a.payload),
            br#"{"a":1,"b":{"x":[3,4],"y":2}}"#.to_vec()
        );
        Ok(())
    }
}
