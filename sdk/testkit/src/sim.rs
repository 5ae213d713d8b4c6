//! An in-process payments service for tests and the simulated fault matrix. It behaves the way
//! Stripe's refunds are documented to: idempotency keys replay the first answer (a saved 500
//! included), a key reused with other parameters is an error, a key still being processed is a
//! 409, keys are forgotten after a window, refunds are listed by payment with their metadata, and
//! over-refunds are refused. It adds what only a simulator can: tiers, hand refunds without a key,
//! order eligibility, held requests and a 5xx after applying.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::{Value, json};

use interlock::clock::Clock;
use interlock::core::{LookupAnswer, Premises, Repair, SendAnswer, Tier};
use interlock::effect::{EffectKey, canonical_json, sha256_hex};
use interlock::premise::{PremiseError, PremiseReader};
use interlock::target::{SendRequest, Target, TargetRecords};
use interlock_stripe::refund::{Refunded, refunded};

use crate::faults::Stall;

pub use interlock_stripe::refund::{KEY_FIELD, RefundPayload, refund_repairs};

/// A refund as the service keeps it.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct SimRefund {
    /// `re_…`.
    pub id: String,
    /// The payment refunded.
    pub payment_intent: String,
    /// The payment's charge.
    pub charge: String,
    /// Cents.
    pub amount: i64,
    /// The idempotency key it was created under, if any.
    pub idempotency_key: Option<String>,
    /// Metadata as sent.
    pub metadata: BTreeMap<String, String>,
    /// When (ms).
    pub created_ms: i64,
}

impl SimRefund {
    /// The refund as Stripe lists it.
    pub fn as_json(&self) -> Value {
        json!({
            "id": self.id, "object": "refund", "amount": self.amount,
            "payment_intent": self.payment_intent, "charge": self.charge, "status": "succeeded",
            "metadata": self.metadata, "created": self.created_ms / 1000,
        })
    }
}

/// A fact about a payment that moves while a refund of it is being decided (scripted by a
/// harness): support refunds by hand, the shop marks the order ineligible, the customer is
/// flagged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FactChange {
    /// Support refunds this many cents by hand.
    HandRefund(i64),
    /// The shop marks the order (in)eligible.
    Eligible(bool),
    /// The shop flags (or clears) the customer.
    Flagged(bool),
}

/// How the service answers a create-refund call, in HTTP terms.
#[derive(Clone, Debug, PartialEq)]
pub enum SimResponse {
    /// 200 with the refund.
    Created(Value),
    /// 200 replayed from the key (`Idempotent-Replayed: true`).
    Replayed(Value),
    /// 4xx: nothing happened.
    Refused {
        /// HTTP status.
        status: u16,
        /// Stripe error code.
        code: String,
        /// Message.
        message: String,
    },
    /// 400 `idempotency_error`: the key was used with other parameters.
    KeyReused,
    /// 409: a request with this key is still being processed.
    KeyInUse,
    /// 5xx (possibly after applying).
    ServerError(u16),
    /// A saved 5xx replayed from the key (`Idempotent-Replayed: true`).
    ReplayedServerError(u16),
}

#[derive(Clone, Debug)]
struct Intent {
    charge: String,
    amount: i64,
    eligible: bool,
    disputed: bool,
    flagged: bool,
}

#[derive(Clone, Debug)]
struct KeyEntry {
    params: String,
    response: SimResponse,
    at_ms: i64,
}

#[derive(Debug, Default)]
struct World {
    intents: BTreeMap<String, Intent>,
    refunds: Vec<SimRefund>,
    keys: HashMap<String, KeyEntry>,
    in_progress: HashSet<String>,
    next_id: u64,
    error_after_apply: u32,
    error_before_apply: u32,
    hold_next: Option<Arc<Stall>>,
    hold_after_apply: Option<Arc<Stall>>,
    holds_on: HashMap<String, Arc<Stall>>,
    after_order_read: HashMap<String, Vec<FactChange>>,
    held_reached: bool,
    requests: u64,
    delay: Duration,
}

type RefundHook = Box<dyn Fn(&SimRefund) + Send + Sync>;

/// The simulated payments service.
pub struct SimPayments {
    world: Mutex<World>,
    hook: Mutex<Option<RefundHook>>,
    clock: Arc<dyn Clock>,
    tier: Mutex<Tier>,
    window: Duration,
}

impl std::fmt::Debug for SimPayments {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimPayments")
            .field("tier", &self.tier())
            .finish()
    }
}

impl SimPayments {
    /// A service acting as a target of `tier`, forgetting keys after `window` (Stripe: 24 h).
    pub fn new(tier: Tier, window: Duration, clock: Arc<dyn Clock>) -> Arc<Self> {
        Arc::new(Self {
            world: Mutex::new(World::default()),
            hook: Mutex::new(None),
            clock,
            tier: Mutex::new(tier),
            window,
        })
    }

    /// The tier the service acts as.
    pub fn tier(&self) -> Tier {
        *self
            .tier
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Act as another tier from now on (tier 1 dedupes keys; 2 and 3 ignore them).
    pub fn set_tier(&self, tier: Tier) {
        *self
            .tier
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = tier;
    }

    fn world(&self) -> MutexGuard<'_, World> {
        self.world
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Create a payment of `amount` cents, with its one charge ([`charge_of`]).
    ///
    /// [`charge_of`]: Self::charge_of
    pub fn add_payment(&self, id: &str, amount: i64) {
        self.world().intents.insert(
            id.to_owned(),
            Intent {
                charge: charge_id(id),
                amount,
                eligible: true,
                disputed: false,
                flagged: false,
            },
        );
    }

    /// A new paid payment intent of `amount` under a fresh id (`pi_sim000001`, …), as a
    /// confirmed `POST /v1/payment_intents` makes one.
    pub fn create_payment(&self, amount: i64) -> String {
        let n = self.world().intents.len() + 1;
        let id = (n..)
            .map(|i| format!("pi_sim{i:06}"))
            .find(|id| !self.world().intents.contains_key(id))
            .unwrap_or_default();
        self.add_payment(&id, amount);
        id
    }

    /// The charge of a payment intent (`pi_X` is charged as `ch_X`).
    pub fn charge_of(&self, payment_intent: &str) -> Option<String> {
        self.world()
            .intents
            .get(payment_intent)
            .map(|i| i.charge.clone())
    }

    /// The payment intent a refund of `of` takes money back from, if the service knows it.
    pub fn intent_of(&self, of: &Refunded) -> Option<String> {
        let w = self.world();
        match of {
            Refunded::PaymentIntent(pi) => w.intents.contains_key(pi).then(|| pi.clone()),
            Refunded::Charge(ch) => w
                .intents
                .iter()
                .find(|(_, i)| &i.charge == ch)
                .map(|(pi, _)| pi.clone()),
        }
    }

    /// Support refunds by hand from a dashboard: no key, no metadata.
    pub fn hand_refund(&self, payment_intent: &str, amount: i64) {
        let now = self.clock.now_ms();
        let refund = {
            let mut w = self.world();
            let id = next_id(&mut w);
            let refund = SimRefund {
                id,
                payment_intent: payment_intent.to_owned(),
                charge: charge_id(payment_intent),
                amount,
                idempotency_key: None,
                metadata: BTreeMap::new(),
                created_ms: now,
            };
            w.refunds.push(refund.clone());
            refund
        };
        self.announce(&refund);
    }

    /// Call `hook` with every refund created from now on (the API sends webhooks from it).
    pub fn on_refund(&self, hook: impl Fn(&SimRefund) + Send + Sync + 'static) {
        *self
            .hook
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Box::new(hook));
    }

    fn announce(&self, refund: &SimRefund) {
        if let Some(h) = self
            .hook
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_ref()
        {
            h(refund);
        }
    }

    /// The shop marks an order (in)eligible for refunds.
    pub fn set_eligible(&self, payment_intent: &str, eligible: bool) {
        if let Some(i) = self.world().intents.get_mut(payment_intent) {
            i.eligible = eligible;
        }
    }

    /// The shop flags (or clears) the customer who paid `payment_intent`.
    pub fn set_flagged(&self, payment_intent: &str, flagged: bool) {
        if let Some(i) = self.world().intents.get_mut(payment_intent) {
            i.flagged = flagged;
        }
    }

    /// Whether the shop flags the customer who paid `payment_intent`.
    pub fn flagged(&self, payment_intent: &str) -> Option<bool> {
        self.world().intents.get(payment_intent).map(|i| i.flagged)
    }

    /// A dispute: every refund on this payment is refused with a 400 until cleared.
    pub fn set_disputed(&self, payment_intent: &str, disputed: bool) {
        if let Some(i) = self.world().intents.get_mut(payment_intent) {
            i.disputed = disputed;
        }
    }

    /// Forget every idempotency key now, as the provider does after its window.
    pub fn expire_keys(&self) {
        self.world().keys.clear();
    }

    /// The next `n` successful creates answer 500 after applying (and save the 500 under the key).
    pub fn error_after_apply(&self, n: u32) {
        self.world().error_after_apply = n;
    }

    /// The next `n` creates answer 500 without applying (and save the 500 under the key): every
    /// resend under that key replays it.
    pub fn error_before_apply(&self, n: u32) {
        self.world().error_before_apply = n;
    }

    /// Make every create take `delay` (real time) inside the service before it applies.
    pub fn set_delay(&self, delay: Duration) {
        self.world().delay = delay;
    }

    /// Hold the next create inside the service, before it applies, until `stall` is released.
    pub fn hold_next(&self, stall: Arc<Stall>) {
        self.world().hold_next = Some(stall);
    }

    /// Make `change` to a payment's facts now.
    pub fn change(&self, payment_intent: &str, change: &FactChange) {
        match *change {
            FactChange::HandRefund(amount) => self.hand_refund(payment_intent, amount),
            FactChange::Eligible(e) => self.set_eligible(payment_intent, e),
            FactChange::Flagged(f) => self.set_flagged(payment_intent, f),
        }
    }

    /// Make `change` right after the shop next answers for the order behind `payment_intent`:
    /// whoever read the facts decides on them as they were, and everyone after sees them moved.
    pub fn after_order_read(&self, payment_intent: &str, change: FactChange) {
        self.world()
            .after_order_read
            .entry(payment_intent.to_owned())
            .or_default()
            .push(change);
    }

    /// The shop's answer for the order behind `payment_intent` — eligible, customer flagged —
    /// after which the changes scheduled for this read are made.
    pub fn read_order(&self, payment_intent: &str) -> Option<(bool, bool)> {
        let (facts, due) = {
            let mut w = self.world();
            let facts = w
                .intents
                .get(payment_intent)
                .map(|i| (i.eligible, i.flagged));
            (facts, w.after_order_read.remove(payment_intent))
        };
        for c in due.iter().flatten() {
            self.change(payment_intent, c);
        }
        facts
    }

    /// Apply the first create that refunds `payment_intent` from now on, then hold its response
    /// until `stall` is released (the refund made, its answer not yet delivered).
    pub fn hold_response_on(&self, payment_intent: &str, stall: Arc<Stall>) {
        self.world()
            .holds_on
            .insert(payment_intent.to_owned(), stall);
    }

    /// Whether the order behind a payment is eligible for refunds (the shop's fact).
    pub fn eligible(&self, payment_intent: &str) -> Option<bool> {
        self.world().intents.get(payment_intent).map(|i| i.eligible)
    }

    /// Whether a held request (or response) has reached its hold.
    pub fn held_reached(&self) -> bool {
        let w = self.world();
        w.hold_next.is_none() && w.hold_after_apply.is_none() && w.held_reached
    }

    /// The amount of a payment, if it exists.
    pub fn payment(&self, id: &str) -> Option<i64> {
        self.world().intents.get(id).map(|i| i.amount)
    }

    /// Apply the next create, then hold its response until `stall` is released: the request is
    /// at the service, applied, and its answer not yet delivered.
    pub fn hold_next_response(&self, stall: Arc<Stall>) {
        self.world().hold_after_apply = Some(stall);
    }

    /// Every refund on every payment, oldest first.
    pub fn all_refunds(&self) -> Vec<SimRefund> {
        self.world().refunds.clone()
    }

    /// Every refund on a payment, oldest first.
    pub fn refunds(&self, payment_intent: &str) -> Vec<SimRefund> {
        self.world()
            .refunds
            .iter()
            .filter(|r| r.payment_intent == payment_intent)
            .cloned()
            .collect()
    }

    /// Every refund of a payment intent or a charge, oldest first (`GET /v1/refunds?charge=…`).
    pub fn refunds_of(&self, of: &Refunded) -> Vec<SimRefund> {
        self.world()
            .refunds
            .iter()
            .filter(|r| match of {
                Refunded::PaymentIntent(pi) => &r.payment_intent == pi,
                Refunded::Charge(ch) => &r.charge == ch,
            })
            .cloned()
            .collect()
    }

    /// Sum refunded on a payment.
    pub fn refunded(&self, payment_intent: &str) -> i64 {
        self.refunds(payment_intent).iter().map(|r| r.amount).sum()
    }

    /// How many create calls reached the service.
    pub fn requests(&self) -> u64 {
        self.world().requests
    }

    /// `POST /v1/refunds` with `payment_intent`, as Stripe documents it.
    pub fn create_refund(
        &self,
        payment_intent: &str,
        amount: i64,
        idempotency_key: Option<&str>,
        metadata: BTreeMap<String, String>,
    ) -> SimResponse {
        self.create_refund_of(
            &Refunded::PaymentIntent(payment_intent.to_owned()),
            amount,
            idempotency_key,
            metadata,
        )
    }

    /// `POST /v1/refunds` with `payment_intent` or `charge`, as Stripe documents it. The key's
    /// parameters include which of the two was named: the same refund asked for by charge under a
    /// key first used with the payment intent is a conflict, as at Stripe.
    pub fn create_refund_of(
        &self,
        of: &Refunded,
        amount: i64,
        idempotency_key: Option<&str>,
        metadata: BTreeMap<String, String>,
    ) -> SimResponse {
        let params = sha256_hex(&canonical_json(&json!({
            of.field(): of.id(), "amount": amount, "metadata": metadata,
        })));
        let stall = {
            let mut w = self.world();
            w.requests += 1;
            let now = self.clock.now_ms();
            let window = i64::try_from(self.window.as_millis()).unwrap_or(i64::MAX);
            w.keys.retain(|_, e| now < e.at_ms.saturating_add(window));
            if let (Tier::One, Some(k)) = (self.tier(), idempotency_key) {
                if w.in_progress.contains(k) {
                    return SimResponse::KeyInUse;
                }
                if let Some(e) = w.keys.get(k) {
                    return if e.params != params {
                        SimResponse::KeyReused
                    } else {
                        match &e.response {
                            SimResponse::Created(v) => SimResponse::Replayed(v.clone()),
                            SimResponse::ServerError(s) => SimResponse::ReplayedServerError(*s),
                            other => other.clone(),
                        }
                    };
                }
                w.in_progress.insert(k.to_owned());
            }
            let stall = w.hold_next.take();
            w.held_reached |= stall.is_some();
            (stall, w.delay)
        };
        if let Some(stall) = stall.0 {
            stall.hold();
        }
        if !stall.1.is_zero() {
            std::thread::sleep(stall.1);
        }
        let now = self.clock.now_ms();
        let (response, held, created) = {
            let mut w = self.world();
            if let Some(k) = idempotency_key {
                w.in_progress.remove(k);
            }
            let response = apply(&mut w, of, amount, idempotency_key, metadata, now);
            let save = matches!(
                response,
                SimResponse::Created(_) | SimResponse::ServerError(_)
            );
            if let (Tier::One, Some(k), true) = (self.tier(), idempotency_key, save) {
                let entry = KeyEntry {
                    params,
                    response: response.clone(),
                    at_ms: now,
                };
                w.keys.insert(k.to_owned(), entry);
            }
            let created = match &response {
                SimResponse::Created(_) | SimResponse::ServerError(_) => w.refunds.last().cloned(),
                _ => None,
            };
            let held = w.hold_after_apply.take().or_else(|| {
                let pi = &created.as_ref()?.payment_intent;
                w.holds_on.remove(pi)
            });
            w.held_reached |= held.is_some();
            (response, held, created)
        };
        if let Some(r) = &created {
            self.announce(r);
        }
        if let Some(stall) = held {
            stall.hold();
        }
        response
    }

    /// `GET /v1/refunds?payment_intent=…`, filtered on the key in metadata.
    pub fn find_by_key(&self, payment_intent: &str, key: &str) -> Option<SimRefund> {
        self.refunds(payment_intent)
            .into_iter()
            .find(|r| r.metadata.get(KEY_FIELD).map(String::as_str) == Some(key))
    }

    /// The refund premises of a payment: refunds by others (excluding `key`'s), eligibility, amount.
    pub fn refund_premises(&self, payment_intent: &str, key: Option<&str>) -> Option<Premises> {
        let w = self.world();
        let intent = w.intents.get(payment_intent)?;
        let others: i64 = w
            .refunds
            .iter()
            .filter(|r| r.payment_intent == payment_intent)
            .filter(|r| key.is_none() || r.metadata.get(KEY_FIELD).map(String::as_str) != key)
            .map(|r| r.amount)
            .sum();
        Some(
            [
                ("refunded_by_others".to_owned(), json!(others)),
                ("order_eligible".to_owned(), json!(intent.eligible)),
                ("amount_paid".to_owned(), json!(intent.amount)),
            ]
            .into_iter()
            .collect(),
        )
    }
}

/// The one charge of payment intent `pi_X`: `ch_X`.
fn charge_id(payment_intent: &str) -> String {
    format!(
        "ch_{}",
        payment_intent.strip_prefix("pi_").unwrap_or(payment_intent)
    )
}

fn next_id(w: &mut World) -> String {
    w.next_id += 1;
    format!("re_sim{:06}", w.next_id)
}

fn apply(
    w: &mut World,
    of: &Refunded,
    amount: i64,
    key: Option<&str>,
    metadata: BTreeMap<String, String>,
    now: i64,
) -> SimResponse {
    let refused = |status, code: &str, message: String| SimResponse::Refused {
        status,
        code: code.into(),
        message,
    };
    let found = match of {
        Refunded::PaymentIntent(pi) => w.intents.get(pi).map(|i| (pi.clone(), i.clone())),
        Refunded::Charge(ch) => w
            .intents
            .iter()
            .find(|(_, i)| &i.charge == ch)
            .map(|(pi, i)| (pi.clone(), i.clone())),
    };
    let Some((payment_intent, intent)) = found else {
        return refused(
            404,
            "resource_missing",
            format!("No such {}: '{}'", of.field(), of.id()),
        );
    };
    let payment_intent = payment_intent.as_str();
    if w.error_before_apply > 0 {
        w.error_before_apply -= 1;
        return SimResponse::ServerError(500);
    }
    if intent.disputed {
        return refused(400, "charge_disputed", "the charge is disputed".into());
    }
    let refunded: i64 = w
        .refunds
        .iter()
        .filter(|r| r.payment_intent == payment_intent)
        .map(|r| r.amount)
        .sum();
    if amount <= 0 || refunded + amount > intent.amount {
        return refused(
            400,
            "amount_too_large",
            format!(
                "refund of {amount} exceeds the {} left",
                intent.amount - refunded
            ),
        );
    }
    let id = next_id(w);
    let refund = SimRefund {
        id,
        payment_intent: payment_intent.to_owned(),
        charge: intent.charge.clone(),
        amount,
        idempotency_key: key.map(str::to_owned),
        metadata,
        created_ms: now,
    };
    let body = json!({
        "id": refund.id, "object": "refund", "amount": amount, "payment_intent": payment_intent,
        "charge": refund.charge, "status": "succeeded", "metadata": refund.metadata,
    });
    w.refunds.push(refund);
    if w.error_after_apply > 0 {
        w.error_after_apply -= 1;
        return SimResponse::ServerError(500);
    }
    SimResponse::Created(body)
}

/// [`SimPayments`] as a gate target.
#[derive(Clone, Debug)]
pub struct SimTarget(pub Arc<SimPayments>);

impl Target for SimTarget {
    fn name(&self) -> &str {
        "sim-payments"
    }

    fn tier(&self) -> Tier {
        self.0.tier()
    }

    fn dedupe_window(&self) -> Option<Duration> {
        (self.0.tier() == Tier::One).then_some(self.0.window)
    }

    fn has_lookup(&self) -> bool {
        self.0.tier() != Tier::Three
    }

    fn send(&self, req: &SendRequest<'_>) -> SendAnswer {
        let p = match RefundPayload::to_send(req.payload) {
            Ok(p) => p,
            Err(refused) => return refused,
        };
        let metadata = [(KEY_FIELD.to_owned(), req.key.to_string())]
            .into_iter()
            .collect();
        let key = (self.0.tier() == Tier::One).then_some(req.key.as_str());
        match self
            .0
            .create_refund_of(&p.refunded, p.amount, key, metadata)
        {
            SimResponse::Created(v) => SendAnswer::Done(v),
            SimResponse::Replayed(v) => SendAnswer::Replayed(v),
            SimResponse::Refused { code, message, .. } => SendAnswer::Definite { code, message },
            SimResponse::KeyReused => SendAnswer::Conflict(
                "Keys for idempotent requests can only be used with the same parameters".into(),
            ),
            SimResponse::KeyInUse => {
                SendAnswer::Unknown("409: a request with this key is still in progress".into())
            }
            SimResponse::ServerError(s) => SendAnswer::Unknown(format!("HTTP {s}")),
            SimResponse::ReplayedServerError(s) => {
                SendAnswer::SavedError(format!("HTTP {s}, Idempotent-Replayed: true"))
            }
        }
    }

    fn lookup(&self, key: &EffectKey, payload: &Value) -> LookupAnswer {
        if self.0.tier() == Tier::Three {
            return LookupAnswer::Unknown("tier-3 target: no lookup".into());
        }
        match RefundPayload::from_value(payload) {
            Ok(p) => interlock::target::by_key(
                self.0
                    .refunds_of(&p.refunded)
                    .iter()
                    .filter(|r| r.metadata.get(KEY_FIELD).map(String::as_str) == Some(key.as_str()))
                    .map(SimRefund::as_json),
            ),
            Err(e) => LookupAnswer::Unknown(e),
        }
    }
}

/// Refund premises read from [`SimPayments`], with the `still_fits` repair.
#[derive(Clone, Debug)]
pub struct SimRefundPremises(pub Arc<SimPayments>);

impl PremiseReader for SimRefundPremises {
    fn read(&self, key: &EffectKey, payload: &Value) -> Result<Premises, PremiseError> {
        let p = RefundPayload::from_value(payload).map_err(PremiseError::Invalid)?;
        self.0
            .intent_of(&p.refunded)
            .and_then(|pi| self.0.refund_premises(&pi, Some(key.as_str())))
            .ok_or_else(|| PremiseError::Invalid(format!("no such {}", p.refunded)))
    }

    fn repairs(&self, payload: &Value, now: &Premises) -> Vec<Repair> {
        refund_repairs(payload, now)
    }
}

impl TargetRecords for SimTarget {
    fn records_for(&self, payload: &Value) -> Result<Vec<Value>, String> {
        Ok(self
            .0
            .refunds_of(&refunded(payload)?)
            .iter()
            .map(SimRefund::as_json)
            .collect())
    }

    fn tagged(&self) -> Result<Vec<Value>, String> {
        Ok(self
            .0
            .all_refunds()
            .iter()
            .map(SimRefund::as_json)
            .filter(|r| interlock_stripe::refund::key_of(r).is_some())
            .collect())
    }

    fn key_of<'a>(&self, record: &'a Value) -> Option<&'a str> {
        interlock_stripe::refund::key_of(record)
    }
}
