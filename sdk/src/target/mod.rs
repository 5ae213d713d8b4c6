//! Targets: the services effects land on. A target says what it can do after a crash (its tier),
//! sends under the effect's key, and — if it can — looks an effect up by that key. Its answers are
//! the core's [`SendAnswer`] and [`LookupAnswer`], so every target is judged by the same table.
//! The Stripe refunds target is the `interlock-stripe` crate.

use std::time::Duration;

use serde_json::Value;

pub use crate::core::{LookupAnswer, SendAnswer, Tier};
use crate::effect::EffectKey;

/// One send.
#[derive(Clone, Copy, Debug)]
pub struct SendRequest<'a> {
    /// The key; also the idempotency key.
    pub key: &'a EffectKey,
    /// The arguments.
    pub payload: &'a Value,
    /// Cut the send off after this long; the gate's claim deadline depends on it.
    pub timeout: Duration,
}

/// A service effects land on.
pub trait Target: Send + Sync {
    /// Name for the journal and messages.
    fn name(&self) -> &str;

    /// What the target offers after a crash.
    fn tier(&self) -> Tier;

    /// How long the target remembers an idempotency key (tier 1).
    fn dedupe_window(&self) -> Option<Duration> {
        None
    }

    /// Whether [`Target::lookup`] can answer.
    fn has_lookup(&self) -> bool {
        false
    }

    /// Send once, under the request's key. Must not retry by itself.
    fn send(&self, req: &SendRequest<'_>) -> SendAnswer;

    /// Ask whether an effect with this key landed.
    fn lookup(&self, _key: &EffectKey, _payload: &Value) -> LookupAnswer {
        LookupAnswer::Unknown(format!("target {} offers no lookup", self.name()))
    }
}

/// A target's own records, for `verify`: every effect that could be this one (e.g. all refunds on
/// the payment), as the target reports them, with their metadata.
pub trait TargetRecords: Send + Sync {
    /// The candidates for `payload`'s effect.
    fn records_for(&self, payload: &Value) -> Result<Vec<Value>, String>;

    /// Every effect at the target that carries an interlock key in its metadata, whatever the
    /// journal knows: an audit's way to find effects whose journal rows are gone.
    fn tagged(&self) -> Result<Vec<Value>, String>;

    /// The effect key a record carries, where the target keeps it (Stripe: in its metadata).
    fn key_of<'a>(&self, record: &'a Value) -> Option<&'a str>;
}

/// A lookup's answer from every record at the target that carries the key: one of each `id`. A
/// record without an `id` cannot be counted, so the lookup cannot answer.
pub fn by_key(records: impl IntoIterator<Item = Value>) -> LookupAnswer {
    let mut found: Vec<Value> = Vec::new();
    for r in records {
        if r.get("id").is_none() {
            return LookupAnswer::Unknown("the target listed an effect without an id".into());
        }
        if !found.iter().any(|f| f.get("id") == r.get("id")) {
            found.push(r);
        }
    }
    match found.len() {
        0 => LookupAnswer::NotFound,
        1 => LookupAnswer::Found(found.remove(0)),
        _ => LookupAnswer::Several(found),
    }
}
