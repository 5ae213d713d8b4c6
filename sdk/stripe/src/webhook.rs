//! Confirmation by the target: Stripe's signed webhooks. A delivery is accepted only if its
//! `Stripe-Signature` header carries a `v1` HMAC-SHA256 of `"{t}.{raw body}"` under the endpoint
//! secret (any of several `v1` values, compared in constant time) and its timestamp is within the
//! tolerance. An accepted refund event whose metadata carries a key the journal knows becomes a
//! `CONFIRMED` record, once per event id however often it is redelivered. A forged, stale or
//! malformed delivery is answered 400 and records nothing; an unknown refund is acknowledged and
//! ignored.

use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::Sha256;

use interlock::core::transition;
use interlock::core::{Confirmed, EffectState, Event};
use interlock::effect::EffectKey;
use interlock::journal::{Journal, JournalError};

/// Stripe's default tolerance for a signature's timestamp.
pub const DEFAULT_TOLERANCE_S: i64 = 300;

/// Why a delivery was rejected.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum SignatureError {
    /// No `Stripe-Signature` header.
    #[error("no Stripe-Signature header")]
    Missing,
    /// The header has no `t=` or no `v1=`.
    #[error("malformed Stripe-Signature header: {0}")]
    Malformed(String),
    /// The timestamp is outside the tolerance.
    #[error(
        "signature timestamp {t} is {age} s from now, beyond the {tolerance} s tolerance (a replay?)"
    )]
    Stale {
        /// The header's timestamp.
        t: i64,
        /// Its distance from now.
        age: i64,
        /// The tolerance.
        tolerance: i64,
    },
    /// No `v1` signature matches.
    #[error("no v1 signature matches the body under the endpoint secret")]
    Mismatch,
    /// The endpoint secret is empty or too short to keep anyone from signing a body with it.
    #[error(
        "the webhook endpoint secret is empty or shorter than {MIN_SECRET_BYTES} bytes: anyone \
         could sign a delivery with it, and a confirmation decides how an effect ends; set \
         STRIPE_WEBHOOK_SECRET to the endpoint's signing secret (whsec_…)"
    )]
    WeakSecret,
}

/// The shortest endpoint secret accepted (Stripe's are `whsec_` and 32 more characters).
pub const MIN_SECRET_BYTES: usize = 8;

/// Refuse an endpoint secret nobody should sign with: empty, blank or too short. A confirmation
/// commits an effect still in flight, so a forgeable one would commit a refund that never
/// happened.
pub fn check_secret(secret: &str) -> Result<(), SignatureError> {
    if secret.trim().len() < MIN_SECRET_BYTES {
        return Err(SignatureError::WeakSecret);
    }
    Ok(())
}

/// Check a delivery's signature; returns its timestamp.
pub fn verify_signature(
    header: Option<&str>,
    body: &[u8],
    secret: &str,
    now_s: i64,
    tolerance_s: i64,
) -> Result<i64, SignatureError> {
    check_secret(secret)?;
    let header = header.ok_or(SignatureError::Missing)?;
    let mut t = None;
    let mut v1 = Vec::new();
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", v)) => {
                t = Some(
                    v.parse::<i64>()
                        .map_err(|_| SignatureError::Malformed(format!("t={v}")))?,
                )
            }
            Some(("v1", v)) => v1.push(
                hex::decode(v).map_err(|_| SignatureError::Malformed("v1 is not hex".into()))?,
            ),
            Some(_) => {}
            None => return Err(SignatureError::Malformed(part.to_owned())),
        }
    }
    let t = t.ok_or_else(|| SignatureError::Malformed("no t=".into()))?;
    if v1.is_empty() {
        return Err(SignatureError::Malformed("no v1=".into()));
    }
    // Any i64 can arrive here: the difference is taken without overflow.
    let age = now_s.abs_diff(t);
    if age > tolerance_s.unsigned_abs() {
        return Err(SignatureError::Stale {
            t,
            age: i64::try_from(age).unwrap_or(i64::MAX),
            tolerance: tolerance_s,
        });
    }
    let matches = v1.iter().any(|sig| {
        let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret.as_bytes()) else {
            return false;
        };
        mac.update(t.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        mac.verify_slice(sig).is_ok()
    });
    if matches {
        Ok(t)
    } else {
        Err(SignatureError::Mismatch)
    }
}

/// Sign a body as Stripe does (for the payments API and tests): the `Stripe-Signature` value.
pub fn sign(body: &[u8], secret: &str, t: i64) -> String {
    let mut mac = match Hmac::<Sha256>::new_from_slice(secret.as_bytes()) {
        Ok(m) => m,
        Err(_) => return format!("t={t}"),
    };
    mac.update(t.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("t={t},v1={}", hex::encode(mac.finalize().into_bytes()))
}

/// What became of a delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// Recorded as `CONFIRMED` (200).
    Recorded {
        /// The effect's key.
        key: String,
    },
    /// Already recorded for this event id (200).
    AlreadyRecorded {
        /// The effect's key.
        key: String,
    },
    /// Valid, but not about an effect this journal knows (200).
    Ignored(String),
    /// Forged, stale or malformed (400).
    Rejected(String),
}

/// What a person or a log reads: what happened to the event, and why.
impl std::fmt::Display for Delivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Delivery::Recorded { key } => write!(f, "recorded CONFIRMED for {key}"),
            Delivery::AlreadyRecorded { key } => write!(f, "already recorded for {key}"),
            Delivery::Ignored(why) => write!(f, "ignored: {why}"),
            Delivery::Rejected(why) => write!(f, "rejected: {why}"),
        }
    }
}

impl Delivery {
    /// The HTTP status to answer with.
    pub fn status(&self) -> u16 {
        match self {
            Self::Rejected(_) => 400,
            _ => 200,
        }
    }
}

/// Deliveries larger than this are refused unread (Stripe's events are a few kilobytes).
pub const MAX_BODY_BYTES: usize = 256 * 1024;

/// Handle one delivery against the journal.
pub fn handle(
    journal: &dyn Journal,
    secret: &str,
    signature: Option<&str>,
    body: &[u8],
    now_s: i64,
    tolerance_s: i64,
) -> Result<Delivery, JournalError> {
    if body.len() > MAX_BODY_BYTES {
        return Ok(Delivery::Rejected(format!(
            "the body is {} bytes; at most {MAX_BODY_BYTES} are accepted",
            body.len()
        )));
    }
    if let Err(e) = verify_signature(signature, body, secret, now_s, tolerance_s) {
        return Ok(Delivery::Rejected(e.to_string()));
    }
    let event: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => return Ok(Delivery::Rejected(format!("the body is not JSON: {e}"))),
    };
    let (Some(id), Some(kind), Some(object)) = (
        event.get("id").and_then(Value::as_str),
        event.get("type").and_then(Value::as_str),
        event.pointer("/data/object"),
    ) else {
        return Ok(Delivery::Rejected(
            "not a Stripe event (id, type, data.object)".into(),
        ));
    };
    if !kind.starts_with("refund.") && kind != "charge.refund.updated" {
        return Ok(Delivery::Ignored(format!("{kind} is not a refund event")));
    }
    let Some(key) = crate::refund::key_of(object) else {
        return Ok(Delivery::Ignored(
            "the refund carries no effect key (a hand refund?)".into(),
        ));
    };
    let Ok(key) = EffectKey::fixed(key) else {
        return Ok(Delivery::Ignored(
            "the refund's key is not a usable effect key".into(),
        ));
    };
    let confirmed = confirmed_from("webhook", Some(id), object);
    if let Some(why) = confirms_nothing(&confirmed) {
        tracing::warn!(key = %key, event = id, kind, status = ?confirmed.status, "refund event that confirms nothing");
        return Ok(Delivery::Ignored(format!("{kind} reports {why}")));
    }
    let mut outcome = Delivery::Recorded {
        key: key.to_string(),
    };
    journal.append_with(&key, &mut |tx| {
        let (state, records) = (tx.state, tx.records);
        let Some(first) = state.first() else {
            outcome = Delivery::Ignored(format!("no effect {key} in this journal"));
            return Vec::new();
        };
        if let Err(why) = same_refund(&first.payload, &confirmed) {
            // The words quote amounts and payments: logged only where allow-listed.
            tracing::warn!(
                key = %key,
                event = id,
                why = interlock::shown::allowed().payload("amount", &why),
                "refund event does not match its effect"
            );
            outcome = Delivery::Ignored(why);
            return Vec::new();
        }
        let seen = records
            .iter()
            .any(|r| matches!(&r.event, Event::Confirmed(c) if c.event.as_deref() == Some(id)));
        if seen {
            outcome = Delivery::AlreadyRecorded {
                key: key.to_string(),
            };
            return Vec::new();
        }
        transition::confirm(state, &confirmed)
    })?;
    Ok(outcome)
}

/// Confirmation by lookup, for targets without webhooks: ask the target for the effect by its
/// key and, if it is there, record `CONFIRMED` (once per target reference).
pub fn confirm_by_lookup(
    journal: &dyn Journal,
    target: &dyn interlock::target::Target,
    key: &EffectKey,
) -> Result<Delivery, JournalError> {
    let first = match journal.state(key)? {
        EffectState::Absent => {
            return Ok(Delivery::Ignored(format!(
                "no effect {key} in this journal"
            )));
        }
        s => s.first().cloned(),
    };
    let Some(first) = first else {
        return Ok(Delivery::Ignored("no proposal".into()));
    };
    let found = match target.lookup(key, &first.payload) {
        interlock::core::LookupAnswer::Found(v) => v,
        interlock::core::LookupAnswer::NotFound => {
            return Ok(Delivery::Ignored(
                "the target holds no effect with this key".into(),
            ));
        }
        interlock::core::LookupAnswer::Unknown(e) => {
            return Ok(Delivery::Ignored(format!(
                "the target could not be asked: {e}"
            )));
        }
        interlock::core::LookupAnswer::Several(all) => {
            return Ok(Delivery::Ignored(format!(
                "the target holds {} effects with this key; none is confirmed as the one",
                all.len()
            )));
        }
    };
    let confirmed = confirmed_from("lookup", None, &found);
    if let Some(why) = confirms_nothing(&confirmed) {
        return Ok(Delivery::Ignored(format!(
            "the target holds the refund with {why}"
        )));
    }
    if let Err(why) = same_refund(&first.payload, &confirmed) {
        return Ok(Delivery::Ignored(why));
    }
    let mut outcome = Delivery::Recorded {
        key: key.to_string(),
    };
    journal.append_with(key, &mut |tx| {
        let records = tx.records;
        let seen = records.iter().any(|r| {
            matches!(&r.event, Event::Confirmed(c) if c.via == "lookup" && c.refund == confirmed.refund)
        });
        if seen {
            outcome = Delivery::AlreadyRecorded { key: key.to_string() };
            Vec::new()
        } else {
            transition::confirm(tx.state, &confirmed)
        }
    })?;
    Ok(outcome)
}

/// A confirmation from the target's own description of the effect (a webhook's `data.object`, or
/// what a lookup found).
/// Why a refund the target describes is not its word that the effect landed (by webhook or by
/// lookup alike): only a succeeded refund is.
fn confirms_nothing(c: &Confirmed) -> Option<String> {
    (c.status.as_deref() != Some("succeeded")).then(|| {
        format!(
            "status {}: only a succeeded refund confirms an effect",
            c.status.as_deref().unwrap_or("(none)")
        )
    })
}

/// A confirmation must be about the refund the effect asked for: its payment and its amount.
fn same_refund(payload: &Value, c: &Confirmed) -> Result<(), String> {
    // The effect names a payment intent or a charge; the refund must be on that one.
    let (field, want) = if let Some(ch) = payload.get("charge").and_then(Value::as_str) {
        ("charge", Some(ch))
    } else {
        (
            "payment_intent",
            payload.get("payment_intent").and_then(Value::as_str),
        )
    };
    let got = match field {
        "charge" => c.charge.as_deref(),
        _ => c.payment_intent.as_deref(),
    };
    let want_amount = payload.get("amount").and_then(Value::as_i64);
    if got != want || c.amount != want_amount {
        return Err(format!(
            "the refund is {} on {}, but the effect asked for {} on {}: not a confirmation of it",
            c.amount.map_or("no amount".into(), |a| a.to_string()),
            got.unwrap_or("no payment"),
            want_amount.map_or("no amount".into(), |a| a.to_string()),
            want.unwrap_or("no payment"),
        ));
    }
    Ok(())
}

fn confirmed_from(via: &str, event: Option<&str>, object: &Value) -> Confirmed {
    let text = |k: &str| object.get(k).and_then(Value::as_str).map(str::to_owned);
    Confirmed {
        via: via.to_owned(),
        event: event.map(str::to_owned),
        refund: text("id"),
        status: text("status"),
        amount: object.get("amount").and_then(Value::as_i64),
        payment_intent: text("payment_intent"),
        charge: text("charge"),
        created: object.get("created").and_then(Value::as_i64),
    }
}
