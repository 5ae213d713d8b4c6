//! Targets: the services effects land on. A target says what it can do after a crash (its tier),
//! sends under the effect's key, and — if it can — looks an effect up by that key. Its answers are
//! the core's [`SendAnswer`] and [`LookupAnswer`], so every target is judged by the same table.
//! The Stripe refunds target is the `interlock-stripe` crate.

use std::time::Duration;

use serde_json::Value;

use crate::clock::Clock;
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
    /// The same limit as a time on the clock recoverers judge claims by. A process frozen
    /// between the gate's reckoning and the send would restart `timeout` when it wakes; a target
    /// that can refuse to begin or to finish (a database transaction) checks this instead, and
    /// then cannot land after a recoverer was allowed to look. `None`: no such limit.
    pub deadline: Option<Deadline<'a>>,
    /// The gate's last look at the lease and the premises, for a target whose send has a point
    /// of no return it reaches well after the gate's own checks (a database transaction's
    /// `COMMIT`): called just before it, so the effect lands only if it is still authorized and
    /// its facts still hold. `None`: nothing to look with.
    pub last_look: Option<LastLook<'a>>,
}

/// What the gate's last look before a point of no return found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Looked {
    /// The lease is live and no premise moved: go on.
    Holds,
    /// The effect must not land: its lease died (`lease_dead`), a premise moved
    /// (`premise_moved`) or a rule over the premises stopped holding (`premise_rule`) since the
    /// gate's checks.
    Lapsed {
        /// `lease_dead`, `premise_moved` or `premise_rule`.
        code: &'static str,
        /// Why, naming the lease or the premises.
        why: String,
    },
    /// The lease or the premises could not be read: do not land now (nothing is known either
    /// way), and let the gate try again.
    Unreadable(String),
}

/// The gate's last look ([`SendRequest::last_look`]).
#[derive(Clone, Copy)]
pub struct LastLook<'a> {
    look: &'a dyn Fn() -> Looked,
}

impl<'a> LastLook<'a> {
    /// A last look made by `look`.
    pub fn new(look: &'a dyn Fn() -> Looked) -> Self {
        Self { look }
    }

    /// Look now.
    pub fn look(&self) -> Looked {
        (self.look)()
    }
}

impl std::fmt::Debug for LastLook<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LastLook")
    }
}

/// The time after which a send must not land, on the gate's own clock.
#[derive(Clone, Copy)]
pub struct Deadline<'a> {
    /// Milliseconds since the Unix epoch, by `clock`.
    pub at_ms: i64,
    /// The gate's clock.
    pub clock: &'a dyn Clock,
}

impl Deadline<'_> {
    /// Whether the deadline has passed.
    pub fn passed(&self) -> bool {
        self.clock.now_ms() >= self.at_ms
    }
}

impl std::fmt::Debug for Deadline<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deadline")
            .field("at_ms", &self.at_ms)
            .finish()
    }
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

    /// The payload in the one form every limit reads: each thing it acts on named by the same
    /// identity however the caller spelled it (a charge by its payment intent), each value in
    /// one spelling (a currency in lower case, an amount as an integer), fields the target does
    /// not take refused. The gate calls it before the payload is hashed, journaled, scoped,
    /// counted or sent, so a lease's scope, a budget's counter and `verify` all see one payment
    /// as one, whatever name it came under. It may read the target (to resolve a name); it must
    /// give the same answer for a payload already in canonical form without reading anything,
    /// since every retry of a decided effect passes through it again.
    ///
    /// The default takes the payload as it is: right for a target whose payload names each
    /// thing one way only.
    fn canonical(&self, payload: &Value) -> Result<Value, CanonicalError> {
        Ok(payload.clone())
    }
}

/// Why a payload has no canonical form ([`Target::canonical`]).
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CanonicalError {
    /// The payload is not one the target takes (a field it does not know, an amount that is not
    /// an integer, a name that resolves to something else): refused before it is journaled,
    /// and sending it again cannot help.
    #[error("the payload is refused before anything is journaled: {0}")]
    Invalid(String),
    /// A name could not be resolved just now (the target did not answer): nothing was
    /// journaled; try again later.
    #[error("the payload's names could not be resolved just now: {0}")]
    Unavailable(String),
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
