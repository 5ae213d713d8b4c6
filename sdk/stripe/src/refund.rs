//! What a refund is, whichever service makes it: its payload, the metadata field that carries the
//! effect's key on the service's side, and the repair a refund refused on moved facts can be
//! offered. The Stripe target, the premise readers and the simulated service all speak this.

use std::collections::BTreeMap;

use serde_json::Value;

use interlock::core::{Premises, Repair};

/// Metadata field that carries the effect key on every refund the gate creates.
pub const KEY_FIELD: &str = "interlock_key";
/// The reasons Stripe takes for a refund.
pub const REASONS: [&str; 3] = ["duplicate", "fraudulent", "requested_by_customer"];
/// Stripe's limits on metadata: keys, key length, value length.
const METADATA_LIMITS: (usize, usize, usize) = (50, 40, 500);

/// What a refund takes money back from: Stripe refunds a payment intent or a charge.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Refunded {
    /// A payment intent (`pi_…`).
    PaymentIntent(String),
    /// A charge (`ch_…`).
    Charge(String),
}

impl Refunded {
    /// The field a refund request, a listing and a refund object name it by.
    pub fn field(&self) -> &'static str {
        match self {
            Self::PaymentIntent(_) => "payment_intent",
            Self::Charge(_) => "charge",
        }
    }

    /// Its id.
    pub fn id(&self) -> &str {
        match self {
            Self::PaymentIntent(id) | Self::Charge(id) => id,
        }
    }
}

impl std::fmt::Display for Refunded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.field(), self.id())
    }
}

/// The refund effect's payload: `{"payment_intent": "pi_…", …}` or `{"charge": "ch_…", …}`.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RefundPayload {
    /// What is refunded.
    #[serde(flatten)]
    pub refunded: Refunded,
    /// Cents.
    pub amount: i64,
    /// ISO currency.
    pub currency: String,
    /// Why, in Stripe's words (one of [`REASONS`]), if the caller says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The caller's own metadata, sent beside the effect key (`metadata[…]`). Left out of the
    /// payload when empty, so a payload without it hashes as it always did.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
}

impl RefundPayload {
    /// A refund of `amount` cents of a payment intent.
    pub fn of_payment_intent(
        id: impl Into<String>,
        amount: i64,
        currency: impl Into<String>,
    ) -> Self {
        Self {
            refunded: Refunded::PaymentIntent(id.into()),
            amount,
            currency: currency.into(),
            reason: None,
            metadata: BTreeMap::new(),
        }
    }

    /// A refund of `amount` cents of a charge.
    pub fn of_charge(id: impl Into<String>, amount: i64, currency: impl Into<String>) -> Self {
        Self {
            refunded: Refunded::Charge(id.into()),
            amount,
            currency: currency.into(),
            reason: None,
            metadata: BTreeMap::new(),
        }
    }

    /// With Stripe's `reason` (one of [`REASONS`]).
    pub fn reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }

    /// With one more metadata entry of the caller's, sent beside the effect key.
    pub fn metadata(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.metadata.insert(key.into(), value.into());
        self
    }

    /// The form fields Stripe's create-refund call takes for this payload, the effect key
    /// included.
    pub fn form(&self, key: &str) -> Vec<(String, String)> {
        let mut form = vec![
            (
                self.refunded.field().to_owned(),
                self.refunded.id().to_owned(),
            ),
            ("amount".to_owned(), self.amount.to_string()),
        ];
        if let Some(r) = &self.reason {
            form.push(("reason".to_owned(), r.clone()));
        }
        for (k, v) in &self.metadata {
            form.push((format!("metadata[{k}]"), v.clone()));
        }
        form.push((format!("metadata[{KEY_FIELD}]"), key.to_owned()));
        form
    }

    /// The payload a refund target was asked to send, or the answer it gives when there is none
    /// to send: a definite `invalid_payload` (nothing was sent, and retrying cannot help).
    pub fn to_send(payload: &Value) -> Result<Self, interlock::core::SendAnswer> {
        Self::from_value(payload).map_err(|message| interlock::core::SendAnswer::Definite {
            code: "invalid_payload".into(),
            message,
        })
    }

    /// Read a refund payload, or say what is wrong with it: it names a payment intent or a
    /// charge (not both), a positive amount and a currency.
    pub fn from_value(payload: &Value) -> Result<Self, String> {
        if payload.get("payment_intent").is_some() && payload.get("charge").is_some() {
            return Err(
                "not a refund payload: it names both a payment_intent and a charge; name one"
                    .into(),
            );
        }
        let p: Self = serde_json::from_value(payload.clone()).map_err(|e| {
            format!("not a refund payload ({e}): it needs a payment_intent or a charge, an amount and a currency")
        })?;
        if p.refunded.id().is_empty() {
            return Err(format!(
                "not a refund payload: the {} is empty",
                p.refunded.field()
            ));
        }
        if p.amount <= 0 {
            return Err(format!(
                "not a refund payload: the amount must be positive, not {}",
                p.amount
            ));
        }
        if let Some(r) = p.reason.as_deref().filter(|r| !REASONS.contains(r)) {
            return Err(format!(
                "not a refund payload: the reason {r:?} is not one Stripe takes ({})",
                REASONS.join(", ")
            ));
        }
        let (most, key_len, value_len) = METADATA_LIMITS;
        if p.metadata.len() + 1 > most {
            return Err(format!(
                "not a refund payload: {} metadata entries, and Stripe takes {most} with the \
                 effect key's",
                p.metadata.len()
            ));
        }
        for (k, v) in &p.metadata {
            if k == KEY_FIELD {
                return Err(format!(
                    "not a refund payload: the metadata key {KEY_FIELD} is the gate's own"
                ));
            }
            if k.is_empty() || k.chars().count() > key_len || k.contains(['[', ']']) {
                return Err(format!(
                    "not a refund payload: the metadata key {k:?} must be 1 to {key_len} \
                     characters without square brackets"
                ));
            }
            if v.chars().count() > value_len {
                return Err(format!(
                    "not a refund payload: the metadata value of {k:?} is longer than \
                     {value_len} characters"
                ));
            }
        }
        Ok(p)
    }
}

/// The fields a refund payload may hold.
const FIELDS: [&str; 6] = [
    "payment_intent",
    "charge",
    "amount",
    "currency",
    "reason",
    "metadata",
];

/// A refund payload in the one form every limit reads, once the charge it names (if any) is
/// resolved by `intent_of` to the payment intent it paid (`None`: a charge made without one):
///
/// * the payment is named by its payment intent, whether the caller named the intent, its
///   charge, or both (then they must agree); a charge without a payment intent stays a charge;
/// * the currency in lower case, as Stripe writes it;
/// * the amount an integer in the currency's minor unit (`500`, never `"500"` or `500.0`);
/// * optional fields given as `null` left out, and any field a refund does not take refused
///   (Stripe's API refuses unknown parameters, and a limit scoped on one would read a name the
///   refund never carries).
///
/// `intent_of` is asked only when a charge is named, so a payload already in canonical form is
/// checked without reading anything.
pub fn canonical<E>(
    payload: &Value,
    intent_of: impl FnOnce(&str) -> Result<Option<String>, E>,
) -> Result<Result<Value, String>, E> {
    let Some(given) = payload.as_object() else {
        return Ok(Err(
            "not a refund payload: it must be a JSON object naming a payment_intent or a \
             charge, an amount and a currency"
                .into(),
        ));
    };
    let mut fields = serde_json::Map::new();
    for (name, value) in given {
        if !FIELDS.contains(&name.as_str()) {
            return Ok(Err(format!(
                "not a refund payload: it has a field {name:?} a refund does not take (it takes {})",
                FIELDS.join(", ")
            )));
        }
        if !value.is_null() {
            fields.insert(name.clone(), value.clone());
        }
    }
    match fields.get("currency").and_then(Value::as_str) {
        Some(c) if c.len() == 3 && c.bytes().all(|b| b.is_ascii_alphabetic()) => {
            let lower = c.to_ascii_lowercase();
            fields.insert("currency".into(), Value::String(lower));
        }
        Some(c) => {
            return Ok(Err(format!(
                "not a refund payload: the currency {c:?} is not a three-letter ISO code"
            )));
        }
        None => {}
    }
    let named_intent = fields
        .get("payment_intent")
        .and_then(Value::as_str)
        .map(str::to_owned);
    if let Some(charge) = fields
        .get("charge")
        .and_then(Value::as_str)
        .map(str::to_owned)
    {
        if charge.is_empty() {
            return Ok(Err("not a refund payload: the charge is empty".into()));
        }
        match (intent_of(&charge)?, named_intent) {
            (Some(paid), None) => {
                fields.remove("charge");
                fields.insert("payment_intent".into(), Value::String(paid));
            }
            (Some(paid), Some(named)) if paid == named => {
                fields.remove("charge");
            }
            (Some(paid), Some(named)) => {
                return Ok(Err(format!(
                    "not a refund payload: charge {charge} paid payment intent {paid}, not \
                     {named}; name one payment"
                )));
            }
            (None, Some(named)) => {
                return Ok(Err(format!(
                    "not a refund payload: charge {charge} was made without a payment intent, \
                     so it did not pay {named}; name one payment"
                )));
            }
            (None, None) => {}
        }
    }
    let value = Value::Object(fields);
    Ok(RefundPayload::from_value(&value)
        .and_then(|p| serde_json::to_value(p).map_err(|e| format!("not a refund payload: {e}"))))
}

/// The effect key a refund record carries in its metadata, if any.
pub fn key_of(refund: &Value) -> Option<&str> {
    refund
        .get("metadata")
        .and_then(|m| m.get(KEY_FIELD))
        .and_then(Value::as_str)
}

/// What a refund payload refunds.
pub fn refunded(payload: &Value) -> Result<Refunded, String> {
    RefundPayload::from_value(payload).map(|p| p.refunded)
}

/// A refund refused because others refunded part of the payment meanwhile may still fit in what
/// is left: offered as a new decision, never applied automatically.
pub fn still_fits(amount: i64, paid: i64, refunded_now: i64, payload: &Value) -> Option<Repair> {
    let left = paid.checked_sub(refunded_now)?;
    (amount > 0 && left >= amount).then(|| Repair {
        kind: "still_fits".into(),
        summary: format!(
            "{amount} still fits: {left} of {paid} is left to refund, if the other refund was \
             not this one"
        ),
        payload: payload.clone(),
    })
}

/// The repairs for a refund payload, from premises named `amount_paid`, `refunded_by_others` and
/// (when the shop is asked) `order_eligible`.
pub fn refund_repairs(payload: &Value, now: &Premises) -> Vec<Repair> {
    let get = |k: &str| now.get(k).and_then(Value::as_i64);
    let eligible = now
        .get("order_eligible")
        .and_then(Value::as_bool)
        .unwrap_or(true);
    match (
        RefundPayload::from_value(payload),
        get("amount_paid"),
        get("refunded_by_others"),
    ) {
        (Ok(p), Some(paid), Some(others)) if eligible => {
            still_fits(p.amount, paid, others, payload)
                .into_iter()
                .collect()
        }
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_canonical_payload_is_its_own_form_and_asks_nothing() {
        let canonical = json!({"payment_intent": "pi_1", "amount": 500, "currency": "usd"});
        let again = super::canonical(&canonical, |_| -> Result<Option<String>, ()> {
            panic!("a payload naming its intent asks nothing")
        });
        assert_eq!(again, Ok(Ok(canonical)));
    }

    #[test]
    fn a_charge_is_named_by_the_intent_it_paid_and_a_mismatch_is_refused() {
        let by_charge = json!({"charge": "ch_1", "amount": 500, "currency": "EUR", "reason": null});
        let named = super::canonical(&by_charge, |c| {
            assert_eq!(c, "ch_1");
            Ok::<_, ()>(Some("pi_1".to_owned()))
        });
        assert_eq!(
            named,
            Ok(Ok(
                json!({"payment_intent": "pi_1", "amount": 500, "currency": "eur"})
            ))
        );
        let both =
            json!({"charge": "ch_1", "payment_intent": "pi_2", "amount": 5, "currency": "usd"});
        let refused = super::canonical(&both, |_| Ok::<_, ()>(Some("pi_1".to_owned())));
        assert!(
            matches!(&refused, Ok(Err(why)) if why.contains("paid payment intent pi_1, not pi_2")),
            "{refused:?}"
        );
        let legacy = json!({"charge": "ch_9", "amount": 5, "currency": "usd"});
        assert_eq!(
            super::canonical(&legacy, |_| Ok::<_, ()>(None)),
            Ok(Ok(legacy.clone()))
        );
    }

    #[test]
    fn still_fits_only_when_what_is_left_covers_the_amount() {
        let r = still_fits(2000, 10_000, 500, &json!({"amount": 2000}));
        assert_eq!(r.as_ref().map(|r| r.kind.as_str()), Some("still_fits"));
        assert!(
            r.map(|r| r.summary)
                .unwrap_or_default()
                .contains("9500 of 10000")
        );
        assert!(still_fits(2000, 10_000, 9_000, &json!({})).is_none());
        assert!(still_fits(0, 10_000, 0, &json!({})).is_none());
    }

    #[test]
    fn a_payload_names_a_payment_intent_or_a_charge_and_serializes_as_stripe_names_them() {
        let pi = RefundPayload::of_payment_intent("pi_1", 2000, "usd");
        let v = serde_json::to_value(&pi).unwrap();
        assert_eq!(
            v,
            json!({"payment_intent": "pi_1", "amount": 2000, "currency": "usd"})
        );
        assert_eq!(RefundPayload::from_value(&v).unwrap(), pi);
        let ch = json!({"charge": "ch_1", "amount": 500, "currency": "usd"});
        assert_eq!(
            RefundPayload::from_value(&ch).unwrap().refunded,
            Refunded::Charge("ch_1".into())
        );
        for bad in [
            json!({"payment_intent": "pi_1", "charge": "ch_1", "amount": 1, "currency": "usd"}),
            json!({"amount": 1, "currency": "usd"}),
            json!({"charge": "", "amount": 1, "currency": "usd"}),
            json!({"charge": "ch_1", "amount": 0, "currency": "usd"}),
            json!({"charge": 7, "amount": 1, "currency": "usd"}),
        ] {
            let e = RefundPayload::from_value(&bad).unwrap_err();
            assert!(e.starts_with("not a refund payload"), "{bad}: {e}");
        }
    }

    #[test]
    fn reason_and_metadata_ride_beside_the_key_and_leave_old_payloads_as_they_were() {
        let plain = RefundPayload::of_payment_intent("pi_1", 2000, "usd");
        assert_eq!(
            serde_json::to_value(&plain).unwrap(),
            json!({"payment_intent": "pi_1", "amount": 2000, "currency": "usd"}),
            "a payload without them serializes (and so hashes) as before"
        );
        let full = plain
            .clone()
            .reason("requested_by_customer")
            .metadata("order", "o-17");
        let v = serde_json::to_value(&full).unwrap();
        assert_eq!(RefundPayload::from_value(&v).unwrap(), full);
        let form = full.form("k1");
        assert!(form.contains(&("reason".into(), "requested_by_customer".into())));
        assert!(form.contains(&("metadata[order]".into(), "o-17".into())));
        assert_eq!(
            form.last(),
            Some(&("metadata[interlock_key]".into(), "k1".into()))
        );
        for bad in [
            json!({"payment_intent": "pi_1", "amount": 1, "currency": "usd", "reason": "because"}),
            json!({"payment_intent": "pi_1", "amount": 1, "currency": "usd",
                   "metadata": {"interlock_key": "forged"}}),
            json!({"payment_intent": "pi_1", "amount": 1, "currency": "usd",
                   "metadata": {"a[b]": "x"}}),
        ] {
            let e = RefundPayload::from_value(&bad).unwrap_err();
            assert!(e.starts_with("not a refund payload"), "{bad}: {e}");
        }
    }

    #[test]
    fn the_key_is_read_from_the_refund_s_metadata() {
        let r = json!({"id": "re_1", "metadata": {"interlock_key": "k1"}});
        assert_eq!(key_of(&r), Some("k1"));
        assert_eq!(key_of(&json!({"id": "re_2", "metadata": {}})), None);
    }
}
