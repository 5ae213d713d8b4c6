//! Refunds on Stripe's HTTP API, spoken as Stripe documents it: form-encoded `POST /v1/refunds`
//! with an `Idempotency-Key` and the effect key in `metadata[interlock_key]`; lookup by listing a
//! payment's refunds (following `has_more`/`starting_after`) and matching that metadata.
//!
//! Answers map onto the core's table: 2xx is done (replayed when marked `Idempotent-Replayed`,
//! which the gate expects of a resend; more than one refund under the key is reported as such,
//! never as one); 4xx is a definite failure, except a 409 (a
//! request with this key is still being processed: unknown, try later), a 429 (rate limited:
//! unknown, nothing to conclude) and an `idempotency_error` (the key was used with other
//! parameters: a conflict); 5xx, timeouts, lost connections and unreadable bodies are unknown.
//! The secret key is never logged or shown by `Debug`.

use std::time::Duration;

use serde_json::{Value, json};

use crate::refund::{RefundPayload, Refunded, key_of, refund_repairs};
use interlock::core::{LookupAnswer, Premises, Repair, SendAnswer, Tier};
use interlock::effect::EffectKey;
use interlock::premise::{PremiseError, PremiseReader};
use interlock::target::{CanonicalError, SendRequest, Target, TargetRecords};

/// The API version every request names (`Stripe-Version`), so a refund's behaviour follows this
/// crate rather than whatever default the account was last upgraded to.
pub const STRIPE_VERSION: &str = "2025-03-31.basil";
/// The variable that lets [`StripeConfig::from_env`] take a live-mode key.
pub const ALLOW_LIVE_ENV: &str = "INTERLOCK_STRIPE_ALLOW_LIVE";
/// Stripe remembers idempotency keys for 24 hours.
pub const STRIPE_KEY_WINDOW: Duration = Duration::from_secs(24 * 3600);
/// The target's name unless [`StripeRefunds::named`] gives another.
pub const DEFAULT_NAME: &str = "stripe-refunds";
/// Refunds per page when listing.
const PAGE: &str = "100";
/// At most this many pages are read in one lookup (10,000 refunds on one payment).
const MAX_PAGES: usize = 100;

/// Connection settings.
#[derive(Clone)]
pub struct StripeConfig {
    /// API base, e.g. `https://api.stripe.com` (env `STRIPE_API_BASE`).
    pub base_url: String,
    /// Secret key (env `STRIPE_SECRET_KEY`). Never logged.
    pub secret_key: String,
    /// Timeout for lookups and premise reads.
    pub read_timeout: Duration,
    /// The `Stripe-Version` sent on every request ([`STRIPE_VERSION`] unless changed).
    pub api_version: String,
}

impl std::fmt::Debug for StripeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StripeConfig")
            .field("base_url", &self.base_url)
            .field("secret_key", &"<redacted>")
            .field("api_version", &self.api_version)
            .finish()
    }
}

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum StripeConfigError {
    /// A required variable is missing.
    #[error(
        "{0} is not set: export it (the secret key of the Stripe account, or of the test payments API)"
    )]
    Missing(&'static str),
    /// The base URL is not http(s).
    #[error("STRIPE_API_BASE must start with http:// or https://, got {0:?}")]
    BadBase(String),
    /// A live-mode key where none was allowed: real money would move.
    #[error(
        "STRIPE_SECRET_KEY is a live-mode key ({0}_live_…): refunds would move real money. Use a \
         test-mode key (sk_test_…), or allow live mode explicitly ({ALLOW_LIVE_ENV}=yes, or \
         StripeConfig::live in code)"
    )]
    LiveKey(&'static str),
}

impl StripeConfig {
    /// From `STRIPE_API_BASE` (default `https://api.stripe.com`) and `STRIPE_SECRET_KEY`; a
    /// live-mode key only with `INTERLOCK_STRIPE_ALLOW_LIVE=yes`.
    pub fn from_env() -> Result<Self, StripeConfigError> {
        let base =
            std::env::var("STRIPE_API_BASE").unwrap_or_else(|_| "https://api.stripe.com".into());
        let secret = std::env::var("STRIPE_SECRET_KEY")
            .map_err(|_| StripeConfigError::Missing("STRIPE_SECRET_KEY"))?;
        Self::as_allowed(base, secret)
    }

    /// From explicit values, a live-mode key only if `INTERLOCK_STRIPE_ALLOW_LIVE=yes`: for
    /// programs that take the key from elsewhere (the gate server's configuration).
    pub fn as_allowed(
        base_url: impl Into<String>,
        secret_key: impl Into<String>,
    ) -> Result<Self, StripeConfigError> {
        if std::env::var(ALLOW_LIVE_ENV).is_ok_and(|v| v == "yes") {
            Self::live(base_url, secret_key)
        } else {
            Self::new(base_url, secret_key)
        }
    }

    /// From explicit values, test mode only: a live-mode key (`sk_live_…`, `rk_live_…`) is
    /// refused.
    pub fn new(
        base_url: impl Into<String>,
        secret_key: impl Into<String>,
    ) -> Result<Self, StripeConfigError> {
        let cfg = Self::live(base_url, secret_key)?;
        for kind in ["sk", "rk"] {
            if cfg.secret_key.starts_with(&format!("{kind}_live_")) {
                return Err(StripeConfigError::LiveKey(kind));
            }
        }
        Ok(cfg)
    }

    /// From explicit values, a live-mode key allowed.
    pub fn live(
        base_url: impl Into<String>,
        secret_key: impl Into<String>,
    ) -> Result<Self, StripeConfigError> {
        let base_url = base_url.into().trim_end_matches('/').to_owned();
        if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
            return Err(StripeConfigError::BadBase(base_url));
        }
        let secret_key = secret_key.into();
        if secret_key.is_empty() {
            return Err(StripeConfigError::Missing("STRIPE_SECRET_KEY"));
        }
        Ok(Self {
            base_url,
            secret_key,
            read_timeout: Duration::from_secs(10),
            api_version: STRIPE_VERSION.to_owned(),
        })
    }
}

/// The Stripe refunds target: tier 1 with a lookup, or, for a service that speaks the same API
/// without deduplicating keys, tier 2 (lookup only) or tier 3 (neither).
#[derive(Debug, Clone)]
pub struct StripeRefunds {
    cfg: StripeConfig,
    agent: ureq::Agent,
    tier: Tier,
    name: String,
}

enum Http {
    Answer {
        status: u16,
        body: Value,
        /// `Idempotent-Replayed: true`: the answer was saved under the key, not computed now.
        replayed: bool,
    },
    Lost(String),
}

impl StripeRefunds {
    /// A target talking to `cfg.base_url`.
    pub fn new(cfg: StripeConfig) -> Self {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        Self {
            cfg,
            agent,
            tier: Tier::One,
            name: DEFAULT_NAME.to_owned(),
        }
    }

    /// The same target under another name. The journal records the name an effect was proposed
    /// through and recovers it only through a target of that name, so two Stripe accounts (or
    /// test and live mode) served side by side must have different names.
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Treat the service as offering only `tier`: tier 2 sends no `Idempotency-Key` and trusts
    /// no dedupe window; tier 3 also offers no lookup. For services that speak this API without
    /// Stripe's guarantees (and for tests of the lower tiers).
    pub fn assume_tier(mut self, tier: Tier) -> Self {
        self.tier = tier;
        self
    }

    fn auth(&self) -> String {
        format!("Bearer {}", self.cfg.secret_key)
    }

    fn get(&self, path: &str, query: &[(&str, &str)]) -> Http {
        let mut req = self
            .agent
            .get(format!("{}{path}", self.cfg.base_url))
            .header("Authorization", self.auth())
            .header("Stripe-Version", &self.cfg.api_version);
        for (k, v) in query {
            req = req.query(k, v);
        }
        let req = req
            .config()
            .timeout_global(Some(self.cfg.read_timeout))
            .build();
        read(req.call())
    }

    /// Every refund of a payment intent or a charge, following pagination.
    pub fn list_refunds(&self, of: &Refunded) -> Result<Vec<Value>, String> {
        self.list(Some(of))
    }

    /// Every refund in the account, following pagination (an audit's view).
    pub fn list_all_refunds(&self) -> Result<Vec<Value>, String> {
        self.list(None)
    }

    fn list(&self, of: Option<&Refunded>) -> Result<Vec<Value>, String> {
        let mut all = Vec::new();
        let mut after: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let mut q = vec![("limit", PAGE)];
            if let Some(of) = of {
                q.push((of.field(), of.id()));
            }
            if let Some(a) = after.as_deref() {
                q.push(("starting_after", a));
            }
            let body = match self.get("/v1/refunds", &q) {
                Http::Answer {
                    status: 200, body, ..
                } => body,
                Http::Answer { status, body, .. } => {
                    return Err(format!(
                        "listing refunds answered {status}: {}",
                        error_message(&body)
                    ));
                }
                Http::Lost(why) => return Err(why),
            };
            let Some(data) = body.get("data").and_then(Value::as_array) else {
                return Err("listing refunds answered without a data array".into());
            };
            all.extend(data.iter().cloned());
            let more = body.get("has_more").and_then(Value::as_bool);
            match (
                more,
                data.last()
                    .and_then(|r| r.get("id"))
                    .and_then(Value::as_str),
            ) {
                (Some(false), _) => return Ok(all),
                (Some(true), Some(last)) => after = Some(last.to_owned()),
                _ => return Err("listing refunds answered a page without has_more or ids".into()),
            }
        }
        Err(format!(
            "{} has more than {} refunds",
            of.map_or_else(|| "the account".to_owned(), ToString::to_string),
            MAX_PAGES * 100
        ))
    }

    /// The payment intent a charge paid, as Stripe records it on the charge (`None` for a
    /// charge made without one), when the charge is the intent's latest (the one a refund of
    /// the intent takes); a charge that is not is refused. A 4xx that says the charge or intent
    /// is not there is a definite answer; an authentication or permission failure and anything
    /// else may pass.
    pub fn intent_of(&self, charge: &str) -> Result<Option<String>, CanonicalError> {
        let body = self.read_object(&format!("/v1/charges/{}", path_segment(charge)), charge)?;
        let pi = match body.get("payment_intent") {
            Some(Value::String(pi)) if !pi.is_empty() => pi.clone(),
            None | Some(Value::Null) => return Ok(None),
            Some(other) => {
                return Err(CanonicalError::Invalid(format!(
                    "charge {charge} answered a payment_intent that is not an id: {other}"
                )));
            }
        };
        // A refund by payment intent takes its latest charge: only that charge may be named by
        // the intent, or the refund would come from another charge than the one asked for.
        let intent =
            self.read_object(&format!("/v1/payment_intents/{}", path_segment(&pi)), &pi)?;
        match intent.get("latest_charge").and_then(Value::as_str) {
            Some(latest) if latest == charge => Ok(Some(pi)),
            latest => Err(CanonicalError::Invalid(format!(
                "charge {charge} is not the latest charge of payment intent {pi} ({}): a refund \
                 of the intent would come from another charge; refund that charge by hand",
                latest.unwrap_or("none")
            ))),
        }
    }

    /// An object read by `path`, for a canonical form. A 4xx that says the object is not there
    /// or not valid is definite; an authentication or permission failure (a rotated key, a
    /// restricted key) and anything else may pass, and is unavailable.
    fn read_object(&self, path: &str, what: &str) -> Result<Value, CanonicalError> {
        self.read_as(
            path,
            what,
            |status| ![401, 403, 429].contains(&status),
            CanonicalError::Invalid,
            CanonicalError::Unavailable,
        )
    }

    /// The object at `path`, or the error its answer is: `definite` says which 4xx statuses
    /// say the object is not there or not valid (made by `invalid`); any other answer, or none,
    /// may pass (made by `unavailable`).
    fn read_as<E>(
        &self,
        path: &str,
        what: &str,
        definite: impl Fn(u16) -> bool,
        invalid: impl Fn(String) -> E,
        unavailable: impl Fn(String) -> E,
    ) -> Result<Value, E> {
        match self.get(path, &[]) {
            Http::Answer {
                status: 200, body, ..
            } => Ok(body),
            Http::Answer { status, body, .. } => {
                let why = format!("{what}: {status} {}", error_message(&body));
                if (400..500).contains(&status) && definite(status) {
                    Err(invalid(why))
                } else {
                    Err(unavailable(why))
                }
            }
            Http::Lost(why) => Err(unavailable(why)),
        }
    }

    /// The amount paid on a payment intent (received) or a charge (captured), and its currency
    /// (lower case, as Stripe writes it). A 4xx (no such payment) is a definite answer; a key
    /// refused (401, 403) or rate-limited (429), and anything else, may pass: a rotated key
    /// must not refuse a refund for good.
    pub fn payment_amount(&self, of: &Refunded) -> Result<(i64, String), PremiseError> {
        let (path, paid) = match of {
            Refunded::PaymentIntent(id) => (
                format!("/v1/payment_intents/{}", path_segment(id)),
                "amount_received",
            ),
            Refunded::Charge(id) => (
                format!("/v1/charges/{}", path_segment(id)),
                "amount_captured",
            ),
        };
        let body = self.read_as(
            &path,
            &of.to_string(),
            |status| !matches!(status, 401 | 403 | 429),
            PremiseError::Invalid,
            PremiseError::Unavailable,
        )?;
        let amount = body
            .get(paid)
            .or_else(|| body.get("amount"))
            .and_then(Value::as_i64)
            .ok_or_else(|| PremiseError::Invalid(format!("{of} answered without an amount")))?;
        let currency = body
            .get("currency")
            .and_then(Value::as_str)
            .ok_or_else(|| PremiseError::Invalid(format!("{of} answered without a currency")))?;
        Ok((amount, currency.to_ascii_lowercase()))
    }
}

fn read(res: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> Http {
    match res {
        Ok(resp) => {
            let status = resp.status().as_u16();
            let replayed = resp
                .headers()
                .get("Idempotent-Replayed")
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.eq_ignore_ascii_case("true"));
            match resp.into_body().read_to_string() {
                Ok(text) => match serde_json::from_str(&text) {
                    Ok(body) => Http::Answer {
                        status,
                        body,
                        replayed,
                    },
                    Err(_) if status >= 500 => Http::Answer {
                        status,
                        body: Value::Null,
                        replayed,
                    },
                    Err(e) => {
                        Http::Lost(format!("HTTP {status} with a body that is not JSON ({e})"))
                    }
                },
                Err(e) => Http::Lost(format!("HTTP {status}, body lost: {e}")),
            }
        }
        Err(e) => Http::Lost(format!("no answer: {e}")),
    }
}

/// An id as one URL path segment: every byte outside Stripe's id alphabet is `%XX`, so an id
/// can never reach another path (`pi_1/../../v1/refunds`) or carry a query.
pub fn path_segment(id: &str) -> String {
    interlock::effect::percent_encoded(id)
}

fn error_message(body: &Value) -> String {
    body.pointer("/error/message")
        .and_then(Value::as_str)
        .unwrap_or("no message")
        .to_owned()
}

fn counts(refund: &Value) -> bool {
    !matches!(
        refund.get("status").and_then(Value::as_str),
        Some("failed" | "canceled")
    )
}

impl Target for StripeRefunds {
    fn name(&self) -> &str {
        &self.name
    }

    fn tier(&self) -> Tier {
        self.tier
    }

    fn dedupe_window(&self) -> Option<Duration> {
        (self.tier == Tier::One).then_some(STRIPE_KEY_WINDOW)
    }

    fn has_lookup(&self) -> bool {
        self.tier != Tier::Three
    }

    fn send(&self, req: &SendRequest<'_>) -> SendAnswer {
        let p = match RefundPayload::to_send(req.payload) {
            Ok(p) => p,
            Err(refused) => return refused,
        };
        let form = p.form(req.key.as_str());
        // Every send carries the key, whatever tier this binding assumes: the tier only decides
        // how far recovery trusts the service, and a binding that assumes less must not send
        // what a binding that assumes more would resend under the same key as new.
        let request = self
            .agent
            .post(format!("{}/v1/refunds", self.cfg.base_url))
            .header("Authorization", self.auth())
            .header("Stripe-Version", &self.cfg.api_version)
            .header("Idempotency-Key", req.key.as_str())
            .config()
            .timeout_global(Some(req.timeout))
            .build();
        classify(read(request.send_form(form)))
    }

    fn canonical(&self, payload: &Value) -> Result<Value, CanonicalError> {
        crate::refund::canonical(payload, |charge| self.intent_of(charge))?
            .map_err(CanonicalError::Invalid)
    }

    fn lookup(&self, key: &EffectKey, payload: &Value) -> LookupAnswer {
        if self.tier == Tier::Three {
            return LookupAnswer::Unknown("tier-3 target: no lookup".into());
        }
        let p = match RefundPayload::from_value(payload) {
            Ok(p) => p,
            Err(e) => return LookupAnswer::Unknown(e),
        };
        match self.list_refunds(&p.refunded) {
            Ok(refunds) => interlock::target::by_key(
                refunds
                    .into_iter()
                    .filter(|r| key_of(r) == Some(key.as_str()) && counts(r)),
            ),
            Err(why) => LookupAnswer::Unknown(why),
        }
    }
}

/// Map an HTTP answer to a send answer.
fn classify(http: Http) -> SendAnswer {
    match http {
        Http::Lost(why) => SendAnswer::Unknown(why),
        Http::Answer {
            status,
            body,
            replayed,
        } if (200..300).contains(&status) => {
            let is_refund = body
                .get("id")
                .and_then(Value::as_str)
                .is_some_and(|id| id.starts_with("re_"));
            if is_refund && !counts(&body) {
                // A refund object that already failed or was canceled moved no money.
                let status = body.get("status").and_then(Value::as_str).unwrap_or("?");
                SendAnswer::Definite {
                    code: format!("refund_{status}"),
                    message: format!("the service created the refund with status {status}"),
                }
            } else if is_refund && replayed {
                SendAnswer::Replayed(body)
            } else if is_refund {
                SendAnswer::Done(body)
            } else {
                SendAnswer::Unknown(format!("HTTP {status} without a refund in the body"))
            }
        }
        Http::Answer {
            status: 409, body, ..
        } => SendAnswer::Unknown(format!(
            "409: a request with this key is still in progress ({})",
            error_message(&body)
        )),
        Http::Answer { status: 429, .. } => SendAnswer::Unknown("429: rate limited".into()),
        Http::Answer { status, body, .. } if (400..500).contains(&status) => {
            let kind = body.pointer("/error/type").and_then(Value::as_str);
            if kind == Some("idempotency_error") {
                SendAnswer::Conflict(error_message(&body))
            } else {
                let code = body
                    .pointer("/error/code")
                    .and_then(Value::as_str)
                    .map_or_else(|| format!("http_{status}"), str::to_owned);
                SendAnswer::Definite {
                    code,
                    message: error_message(&body),
                }
            }
        }
        Http::Answer {
            status,
            replayed: true,
            ..
        } if status >= 500 => {
            SendAnswer::SavedError(format!("HTTP {status}, Idempotent-Replayed: true"))
        }
        Http::Answer { status, .. } => SendAnswer::Unknown(format!("HTTP {status}")),
    }
}

/// Refund premises read from Stripe: the amount paid and the refunds by others (every refund on
/// the payment that does not carry this effect's key). Order eligibility is the shop's fact and
/// is added by the caller's own reader.
#[derive(Debug, Clone)]
pub struct StripeRefundPremises(pub StripeRefunds);

impl PremiseReader for StripeRefundPremises {
    fn read(&self, key: &EffectKey, payload: &Value) -> Result<Premises, PremiseError> {
        let p = RefundPayload::from_value(payload).map_err(PremiseError::Invalid)?;
        let (paid, currency) = self.0.payment_amount(&p.refunded)?;
        if !currency.eq_ignore_ascii_case(&p.currency) {
            return Err(PremiseError::Invalid(format!(
                "the refund is in {} but {} was paid in {currency}: an amount in one currency \
                 is not an amount in another",
                p.currency, p.refunded
            )));
        }
        let refunds = self
            .0
            .list_refunds(&p.refunded)
            .map_err(PremiseError::Unavailable)?;
        let mut others = 0i64;
        for r in refunds.iter().filter(|r| counts(r)) {
            let mine = key_of(r) == Some(key.as_str());
            if !mine {
                others += r.get("amount").and_then(Value::as_i64).ok_or_else(|| {
                    PremiseError::Invalid(format!(
                        "refund {} has no integer amount",
                        r.get("id").unwrap_or(&Value::Null)
                    ))
                })?;
            }
        }
        Ok([
            ("refunded_by_others".to_owned(), json!(others)),
            ("amount_paid".to_owned(), json!(paid)),
            ("currency".to_owned(), json!(currency)),
        ]
        .into_iter()
        .collect())
    }

    fn repairs(&self, payload: &Value, now: &Premises) -> Vec<Repair> {
        refund_repairs(payload, now)
    }
}

impl TargetRecords for StripeRefunds {
    fn records_for(&self, payload: &Value) -> Result<Vec<Value>, String> {
        self.list_refunds(&crate::refund::refunded(payload)?)
    }

    fn tagged(&self) -> Result<Vec<Value>, String> {
        let mut all = self.list_all_refunds()?;
        all.retain(|r| key_of(r).is_some());
        Ok(all)
    }

    fn key_of<'a>(&self, record: &'a Value) -> Option<&'a str> {
        key_of(record)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_map_onto_the_core_table() {
        let ans = |status, body| {
            classify(Http::Answer {
                status,
                body,
                replayed: false,
            })
        };
        assert!(matches!(
            ans(200, json!({"id": "re_1", "status": "failed"})),
            SendAnswer::Definite { .. }
        ));
        let replayed_500 = classify(Http::Answer {
            status: 500,
            body: Value::Null,
            replayed: true,
        });
        assert!(
            matches!(replayed_500, SendAnswer::SavedError(_)),
            "{replayed_500:?}"
        );
        assert!(matches!(
            ans(200, json!({"id": "re_1"})),
            SendAnswer::Done(_)
        ));
        let replayed_200 = classify(Http::Answer {
            status: 200,
            body: json!({"id": "re_1"}),
            replayed: true,
        });
        assert!(
            matches!(replayed_200, SendAnswer::Replayed(_)),
            "{replayed_200:?}"
        );
        assert!(matches!(
            ans(200, json!({"nope": 1})),
            SendAnswer::Unknown(_)
        ));
        assert!(matches!(ans(409, json!({})), SendAnswer::Unknown(_)));
        assert!(matches!(ans(429, json!({})), SendAnswer::Unknown(_)));
        assert!(matches!(ans(500, Value::Null), SendAnswer::Unknown(_)));
        assert!(matches!(
            ans(
                400,
                json!({"error": {"type": "idempotency_error", "message": "m"}})
            ),
            SendAnswer::Conflict(_)
        ));
        assert_eq!(
            ans(
                400,
                json!({"error": {"type": "invalid_request_error", "code": "charge_disputed", "message": "m"}})
            ),
            SendAnswer::Definite {
                code: "charge_disputed".into(),
                message: "m".into()
            }
        );
        assert!(matches!(ans(404, json!({})), SendAnswer::Definite { .. }));
        assert!(matches!(
            classify(Http::Lost("reset".into())),
            SendAnswer::Unknown(_)
        ));
    }

    #[test]
    fn an_id_stays_one_path_segment() {
        assert_eq!(path_segment("pi_3Mtw-Bz"), "pi_3Mtw-Bz");
        assert_eq!(path_segment("pi_1/../x?y=1"), "pi_1%2F%2E%2E%2Fx%3Fy%3D1");
    }

    #[test]
    fn the_secret_key_never_shows_in_debug_output() -> Result<(), StripeConfigError> {
        let cfg = StripeConfig::new("http://127.0.0.1:1", "sk_test_very_secret")?;
        assert!(!format!("{cfg:?}").contains("very_secret"));
        assert!(!format!("{:?}", StripeRefunds::new(cfg)).contains("very_secret"));
        assert!(StripeConfig::new("ftp://x", "k").is_err());
        Ok(())
    }

    #[test]
    fn a_live_key_is_refused_unless_live_mode_is_asked_for() {
        for key in ["sk_live_abc", "rk_live_abc"] {
            let err = StripeConfig::new("https://api.stripe.com", key).unwrap_err();
            assert!(matches!(err, StripeConfigError::LiveKey(_)), "{err}");
            assert!(err.to_string().contains(ALLOW_LIVE_ENV), "{err}");
            assert!(
                !err.to_string().contains("abc"),
                "the key is never shown: {err}"
            );
            assert!(StripeConfig::live("https://api.stripe.com", key).is_ok());
        }
        let test = StripeConfig::new("https://api.stripe.com", "sk_test_abc").unwrap();
        assert_eq!(test.api_version, STRIPE_VERSION);
    }
}
