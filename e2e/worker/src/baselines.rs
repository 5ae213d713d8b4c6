//! The refund step as the baselines do it, over the same HTTP API: a naive retry (no key),
//! Temporal's recommended idempotency key (run id + activity id), and a careful hand-written
//! re-check (lookup by key, lease, premises, then a keyed send). Written to be fair: each is what
//! a competent engineer following that approach would ship.

use std::time::Duration;

use interlock::EffectKey;
use interlock::core::{LeaseVerdict, Premises, RefusalCode};
use interlock::lease::LeaseStore;
use interlock::premise::PremiseReader;
use interlock_stripe::StripeRefunds;
use serde_json::Value;

use crate::model::{Decision, RefundReport, Reported};
use crate::pause::Pause;
use interlock_stripe::RefundPremises;

/// An HTTP answer from `POST /v1/refunds`.
#[derive(Debug)]
pub enum Posted {
    /// 2xx with a refund.
    Refunded(String),
    /// A 4xx (other than 409): Stripe says nothing happened.
    Rejected(String),
    /// 409, 5xx, a timeout: retry.
    Retry(String),
}

/// Create a refund, optionally keyed and tagged.
pub fn post_refund(
    base: &str,
    secret: &str,
    d: &Decision,
    idempotency_key: Option<&str>,
    tag: Option<&str>,
) -> Posted {
    let amount = d.request.amount.to_string();
    let refunded = d.request.refunded();
    let mut form = vec![
        (refunded.field(), refunded.id()),
        ("amount", amount.as_str()),
    ];
    if let Some(t) = tag {
        form.push(("metadata[interlock_key]", t));
    }
    post_refund_form(base, secret, idempotency_key, form)
}

/// `POST /v1/refunds` with `form`, optionally keyed, as Stripe documents it.
pub fn post_refund_form(
    base: &str,
    secret: &str,
    idempotency_key: Option<&str>,
    form: Vec<(&str, &str)>,
) -> Posted {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(30)))
        .http_status_as_error(false)
        .build()
        .into();
    let mut req = agent
        .post(format!("{base}/v1/refunds"))
        .header("Authorization", format!("Bearer {secret}"));
    if let Some(k) = idempotency_key {
        req = req.header("Idempotency-Key", k);
    }
    match req.send_form(form) {
        Ok(resp) => {
            let status = resp.status().as_u16();
            let body: Value = resp
                .into_body()
                .read_to_string()
                .ok()
                .and_then(|t| serde_json::from_str(&t).ok())
                .unwrap_or(Value::Null);
            let msg = body
                .pointer("/error/message")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            match status {
                200..=299 => match body.get("id").and_then(Value::as_str) {
                    Some(id) => Posted::Refunded(id.to_owned()),
                    None => Posted::Retry(format!("HTTP {status} without a refund id")),
                },
                409 | 429 => Posted::Retry(format!("HTTP {status}: {msg}")),
                400..=499 => Posted::Rejected(format!("HTTP {status}: {msg}")),
                _ => Posted::Retry(format!("HTTP {status}: {msg}")),
            }
        }
        Err(e) => Posted::Retry(format!("no answer: {e}")),
    }
}

/// A baseline's attempt ended: a report, or an error to retry or to give up on.
pub enum Attempt {
    /// Done: this is the workflow's answer.
    Report(RefundReport),
    /// Retry the activity.
    Retry(String),
    /// Stop retrying.
    GiveUp(String),
}

fn posted(p: Posted, pause: Option<&Pause>) -> Attempt {
    if let Some(pause) = pause {
        pause.at("after_response");
        pause.at("after_journal");
    }
    match p {
        Posted::Refunded(id) => Attempt::Report(RefundReport {
            outcome: Reported::Refunded,
            refund_id: Some(id),
            ..RefundReport::default()
        }),
        Posted::Rejected(m) => Attempt::GiveUp(m),
        Posted::Retry(m) => Attempt::Retry(m),
    }
}

/// No key: every attempt is a new refund.
pub fn naive(base: &str, secret: &str, d: &Decision, pause: Option<&Pause>) -> Attempt {
    if let Some(p) = pause {
        p.at("before_journal");
        p.at("after_premise_read");
        p.at("after_dispatch");
    }
    posted(post_refund(base, secret, d, None, None), pause)
}

/// Temporal's recommendation: the workflow run id + the activity id as the idempotency key.
pub fn keyed(base: &str, secret: &str, d: &Decision, key: &str, pause: Option<&Pause>) -> Attempt {
    if let Some(p) = pause {
        p.at("before_journal");
        p.at("after_premise_read");
        p.at("after_dispatch");
    }
    posted(post_refund(base, secret, d, Some(key), None), pause)
}

/// What the careful re-check reads and where it sends.
pub struct CheckedCtx<'a> {
    /// For the lookup by key.
    pub target: &'a StripeRefunds,
    /// For the premises.
    pub premises: &'a RefundPremises,
    /// For the lease.
    pub leases: &'a dyn LeaseStore,
    /// Now, for the lease check.
    pub now_ms: i64,
    /// The payments API.
    pub base: &'a str,
    /// Its secret key.
    pub secret: &'a str,
}

/// The careful engineer: look the refund up by its key; check the approval and the facts the
/// decision stood on; only then send, keyed and tagged.
pub fn checked(c: &CheckedCtx<'_>, d: &Decision, pause: Option<&Pause>) -> Attempt {
    let CheckedCtx {
        target,
        premises,
        leases,
        now_ms,
        base,
        secret,
    } = *c;
    if let Some(p) = pause {
        p.at("before_journal");
    }
    let key = match EffectKey::fixed(d.request.request_id.clone()) {
        Ok(k) => k,
        Err(e) => return Attempt::GiveUp(e.to_string()),
    };
    let payload = d.request.payload();
    match interlock::target::Target::lookup(target, &key, &payload) {
        interlock::core::LookupAnswer::Found(r) => {
            return Attempt::Report(RefundReport {
                outcome: Reported::Refunded,
                refund_id: r.get("id").and_then(Value::as_str).map(str::to_owned),
                detail: "found by lookup".into(),
                ..RefundReport::default()
            });
        }
        interlock::core::LookupAnswer::Several(all) => {
            return Attempt::Report(RefundReport {
                outcome: Reported::Refunded,
                refund_id: all
                    .first()
                    .and_then(|r| r.get("id"))
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                detail: format!("found {} refunds under the key by lookup", all.len()),
                ..RefundReport::default()
            });
        }
        interlock::core::LookupAnswer::Unknown(e) => return Attempt::Retry(e),
        interlock::core::LookupAnswer::NotFound => {}
    }
    // The approval's own terms (scope, cap, expiry, revocation), as a careful hand-written check
    // reads them: it has no count of what other requests spent under the same approval.
    let terms = leases.describe(&d.request.lease).map(|g| match g {
        Some(g) => g.verdict(&payload, now_ms),
        None => LeaseVerdict::Dead {
            reason: format!("no lease named {} was ever granted", d.request.lease),
        },
    });
    match terms {
        Ok(LeaseVerdict::Live) => {}
        Ok(
            LeaseVerdict::Dead { reason }
            | LeaseVerdict::Spent { reason }
            | LeaseVerdict::NotSpender { reason }
            | LeaseVerdict::OverBudget { reason },
        ) => {
            return Attempt::Report(RefundReport {
                outcome: Reported::Refused,
                refusal: Some(RefusalCode::Lease),
                detail: reason,
                ..RefundReport::default()
            });
        }
        Ok(LeaseVerdict::Error { message })
        | Err(
            interlock::lease::LeaseError::Store(message)
            | interlock::lease::LeaseError::Invalid(message),
        ) => {
            return Attempt::Retry(message);
        }
        Err(e) => return Attempt::Retry(e.to_string()),
    }
    let now: Premises = match premises.read(&key, &payload) {
        Ok(p) => p,
        Err(e) => return Attempt::Retry(e.to_string()),
    };
    if let Some(p) = pause {
        p.at("after_premise_read");
    }
    if now != d.premises {
        return Attempt::Report(RefundReport {
            outcome: Reported::Refused,
            refusal: Some(RefusalCode::StalePremise),
            detail: format!("decided on {:?}, now {:?}", d.premises, now),
            ..RefundReport::default()
        });
    }
    if let Some(p) = pause {
        p.at("after_dispatch");
    }
    posted(
        post_refund(base, secret, d, Some(key.as_str()), Some(key.as_str())),
        pause,
    )
}
