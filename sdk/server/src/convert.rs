//! Messages to library types and back. Everything a caller sends is checked here, before the gate
//! sees it, and a malformed field is named with what was wrong: an effect the gate journals must be
//! the effect the caller meant, or nothing at all.

use std::time::Duration;

use interlock::core::limits::Use;
use interlock::core::{Change, Premises, RefusalCode, Repair, Status, Via};
use interlock::journal::Record;
use interlock::lease::Grant;
use interlock::{Effect, EffectKey, Outcome};
use serde_json::Value;

use crate::pb;

pub mod budget;

/// Largest payload, premise value or result a caller may send, as JSON text.
pub const MAX_JSON_BYTES: usize = 64 * 1024;
/// Most premises one effect may carry.
pub const MAX_PREMISES: usize = 64;
/// Longest premise name, lease id or approver.
pub const MAX_NAME_LEN: usize = 255;

/// A field of a request that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct Invalid {
    /// The field, as the message names it (`effect.payload_json`).
    pub field: String,
    /// What is wrong and what would be right.
    pub message: String,
}

fn invalid(field: &str, message: impl Into<String>) -> Invalid {
    Invalid {
        field: field.to_owned(),
        message: message.into(),
    }
}

/// Parse JSON text a caller sent: bounded in size, and (for payloads) an object.
pub fn json_field(field: &str, text: &str, object: bool) -> Result<Value, Invalid> {
    if text.len() > MAX_JSON_BYTES {
        return Err(invalid(
            field,
            format!(
                "{} bytes of JSON; at most {MAX_JSON_BYTES} are accepted",
                text.len()
            ),
        ));
    }
    let value: Value =
        serde_json::from_str(text).map_err(|e| invalid(field, format!("not JSON text ({e})")))?;
    if object && !value.is_object() {
        return Err(invalid(
            field,
            "must be a JSON object, e.g. {\"amount\": 2000}",
        ));
    }
    Ok(value)
}

/// A key a caller fixed.
pub fn key(field: &str, text: &str) -> Result<EffectKey, Invalid> {
    EffectKey::fixed(text).map_err(|e| invalid(field, e.to_string()))
}

/// A name-like field: non-empty, bounded, printable.
pub fn name(field: &str, text: &str) -> Result<String, Invalid> {
    if text.is_empty() {
        return Err(invalid(field, "is empty"));
    }
    if text.len() > MAX_NAME_LEN {
        return Err(invalid(
            field,
            format!("{} bytes; at most {MAX_NAME_LEN}", text.len()),
        ));
    }
    if text.chars().any(char::is_control) {
        return Err(invalid(field, "holds a control character"));
    }
    Ok(text.to_owned())
}

/// The effect a caller submits, checked field by field.
pub fn effect_from(e: Option<&pb::Effect>) -> Result<Effect, Invalid> {
    let e = e.ok_or_else(|| invalid("effect", "is missing: pass the effect Decide returned"))?;
    let key = key("effect.key", &e.key)?;
    let payload = json_field("effect.payload_json", &e.payload_json, true)?;
    let lease = name("effect.lease", &e.lease)?;
    if e.premises.len() > MAX_PREMISES {
        return Err(invalid(
            "effect.premises",
            format!("{} premises; at most {MAX_PREMISES}", e.premises.len()),
        ));
    }
    let mut decided = Premises::new();
    for (i, p) in e.premises.iter().enumerate() {
        let field = format!("effect.premises[{i}]");
        let n = name(&format!("{field}.name"), &p.name)?;
        let v = json_field(&format!("{field}.value_json"), &p.value_json, false)?;
        if decided.insert(n.clone(), v).is_some() {
            return Err(invalid(&field, format!("premise {n:?} is given twice")));
        }
    }
    if e.labels.len() > MAX_PREMISES {
        return Err(invalid(
            "effect.labels",
            format!("at most {MAX_PREMISES} labels"),
        ));
    }
    let mut labels = std::collections::BTreeMap::new();
    for (k, v) in &e.labels {
        labels.insert(
            name("effect.labels key", k)?,
            name(&format!("effect.labels[{k}]"), v)?,
        );
    }
    Ok(Effect {
        key,
        payload,
        decided,
        lease,
        labels,
    })
}

/// An effect as the caller will pass it back.
pub fn effect_to(e: &Effect) -> pb::Effect {
    pb::Effect {
        labels: e.labels.clone().into_iter().collect(),
        key: e.key.to_string(),
        payload_json: e.payload.to_string(),
        lease: e.lease.clone(),
        premises: e
            .decided
            .iter()
            .map(|(name, v)| pb::Premise {
                name: name.clone(),
                value_json: v.to_string(),
            })
            .collect(),
    }
}

fn duration(d: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

/// How a commit landed, as the wire names it.
pub fn via(v: Via) -> pb::Via {
    match v {
        Via::FirstSend => pb::Via::FirstSend,
        Via::IdempotentResend => pb::Via::IdempotentResend,
        Via::FoundByLookup => pb::Via::FoundByLookup,
        Via::ReappliedAfterLookup => pb::Via::ReappliedAfterLookup,
        Via::FailedButLanded => pb::Via::FailedButLanded,
        Via::LateAnswer => pb::Via::LateAnswer,
        Via::ConfirmedByTarget => pb::Via::ConfirmedByTarget,
        Via::SettledByPerson => pb::Via::SettledByPerson,
        _ => pb::Via::Unspecified,
    }
}

/// A refusal code, as the wire names it.
pub fn refusal(c: RefusalCode) -> pb::RefusalCode {
    match c {
        RefusalCode::StalePremise => pb::RefusalCode::StalePremise,
        RefusalCode::Lease => pb::RefusalCode::Lease,
        RefusalCode::ConflictingPayload => pb::RefusalCode::ConflictingPayload,
        RefusalCode::PremiseError => pb::RefusalCode::PremiseError,
        RefusalCode::LeaseError => pb::RefusalCode::LeaseError,
        RefusalCode::StalePremiseAtRecovery => pb::RefusalCode::StalePremiseAtRecovery,
        RefusalCode::LeaseAtRecovery => pb::RefusalCode::LeaseAtRecovery,
        RefusalCode::PremiseErrorAtRecovery => pb::RefusalCode::PremiseErrorAtRecovery,
        RefusalCode::LeaseErrorAtRecovery => pb::RefusalCode::LeaseErrorAtRecovery,
        RefusalCode::TargetConflict => pb::RefusalCode::TargetConflict,
        RefusalCode::LeaseSpent => pb::RefusalCode::LeaseSpent,
        RefusalCode::Budget => pb::RefusalCode::Budget,
        RefusalCode::LeaseCaller => pb::RefusalCode::LeaseCaller,
        RefusalCode::InvalidPayload => pb::RefusalCode::InvalidPayload,
        RefusalCode::PremiseRule => pb::RefusalCode::PremiseRule,
        _ => pb::RefusalCode::Unspecified,
    }
}

/// An effect's status, as the wire names it.
pub fn status(s: Option<Status>) -> pb::EffectStatus {
    match s {
        Some(Status::Proposed) => pb::EffectStatus::Proposed,
        Some(Status::InFlight) => pb::EffectStatus::InFlight,
        Some(Status::Committed) => pb::EffectStatus::Committed,
        Some(Status::Refused) => pb::EffectStatus::Refused,
        Some(Status::Failed) => pb::EffectStatus::Failed,
        Some(Status::Ambiguous) => pb::EffectStatus::Ambiguous,
        Some(Status::AppliedTwice) => pb::EffectStatus::AppliedTwice,
        _ => pb::EffectStatus::Unspecified,
    }
}

fn changes(cs: Vec<Change>) -> Vec<pb::Change> {
    cs.into_iter()
        .map(|c| pb::Change {
            field: c.field,
            was_json: c.was.to_string(),
            now_json: c.now.to_string(),
        })
        .collect()
}

fn repairs(rs: Vec<Repair>) -> Vec<pb::Repair> {
    rs.into_iter()
        .map(|r| pb::Repair {
            kind: r.kind,
            summary: r.summary,
            payload_json: r.payload.to_string(),
        })
        .collect()
}

/// How an attempt ended, as the wire carries it. An outcome this version does not know becomes an
/// ambiguity for a person, never a success.
pub fn outcome(o: Outcome) -> pb::Outcome {
    use pb::outcome::Kind;
    let kind = match o {
        Outcome::Committed {
            via: v,
            result,
            replayed,
        } => Kind::Committed(pb::Committed {
            via: via(v).into(),
            result_json: result.to_string(),
            replayed,
        }),
        Outcome::Refused(r) => Kind::Refused(pb::Refused {
            code: refusal(r.code).into(),
            reason: r.reason,
            changes: changes(r.changes),
            repairs: repairs(r.repairs),
        }),
        Outcome::Failed(f) => Kind::Failed(pb::Failed {
            code: f.code,
            message: f.message,
        }),
        Outcome::Ambiguous(a) => Kind::Ambiguous(pb::Ambiguous {
            reason: a.reason,
            changes: changes(a.changes),
        }),
        Outcome::AppliedTwice(a) => Kind::AppliedTwice(pb::AppliedTwice {
            found_json: a.found.iter().map(Value::to_string).collect(),
            reason: a.reason,
        }),
        Outcome::InFlight {
            retry_after,
            reason,
        } => Kind::InFlight(pb::InFlight {
            retry_after: Some(duration(retry_after)),
            reason,
        }),
        Outcome::Retry {
            retry_after,
            reason,
        } => Kind::Retry(pb::Retry {
            retry_after: Some(duration(retry_after)),
            reason,
        }),
        Outcome::Superseded { reason } => Kind::Superseded(pb::Superseded { reason }),
        other => Kind::Ambiguous(pb::Ambiguous {
            reason: format!(
                "the gate answered {}, which this server cannot carry; a person must look",
                other.label()
            ),
            changes: Vec::new(),
        }),
    };
    pb::Outcome { kind: Some(kind) }
}

/// A journal record as the wire carries it.
pub fn record(r: &Record) -> pb::Record {
    pb::Record {
        n: r.n,
        at_ms: r.at_ms,
        kind: r.event.kind().to_owned(),
        event_json: serde_json::to_string(&r.event).unwrap_or_default(),
        prev: r.prev.clone().unwrap_or_default(),
        hash: r.hash.clone(),
        withheld: false,
    }
}

/// A lease as the wire carries it, with the uses its keys hold.
pub fn lease_to(g: &Grant, used: &[Use]) -> pb::Lease {
    let (cap_field, cap_max) = g.cap.clone().unwrap_or_default();
    let (total_field, total_max) = g.total.clone().unwrap_or_default();
    pb::Lease {
        uses: g.uses.unwrap_or(0),
        unlimited: g.uses.is_none(),
        total_field,
        total_max,
        used: used
            .iter()
            .map(|u| pb::LeaseUse {
                key: u.key.clone(),
                amount: u.amount,
            })
            .collect(),
        id: g.id.clone(),
        approver: g.approver.clone(),
        scope_json: g
            .scope
            .iter()
            .map(|(k, v)| (k.clone(), v.to_string()))
            .collect(),
        cap_field,
        cap_max,
        granted_ms: g.granted_ms,
        expires_ms: g.expires_ms.unwrap_or(0),
        revoked_ms: g.revoked_ms.unwrap_or(0),
        spenders: g.spenders.clone(),
        targets: g.targets.clone(),
    }
}

/// A grant a caller asks for, checked field by field; `now_ms` stands in for a missing grant time.
pub fn lease_from(l: Option<&pb::Lease>, now_ms: i64) -> Result<Grant, Invalid> {
    let l = l.ok_or_else(|| invalid("lease", "is missing"))?;
    let id = name("lease.id", &l.id)?;
    let approver = name("lease.approver", &l.approver)?;
    let mut grant = Grant::new(
        id,
        approver,
        if l.granted_ms == 0 {
            now_ms
        } else {
            l.granted_ms
        },
    );
    if l.scope_json.len() > MAX_PREMISES {
        return Err(invalid(
            "lease.scope_json",
            format!("at most {MAX_PREMISES} fields"),
        ));
    }
    for (field, text) in &l.scope_json {
        let f = name("lease.scope_json key", field)?;
        let v = json_field(&format!("lease.scope_json[{f}]"), text, false)?;
        grant = grant.scope(f, v);
    }
    match (l.cap_field.is_empty(), l.cap_max) {
        (true, 0) => {}
        (true, _) => return Err(invalid("lease.cap_field", "is empty but cap_max is set")),
        (false, max) if max < 0 => {
            return Err(invalid("lease.cap_max", format!("{max} is negative")));
        }
        (false, max) => grant = grant.cap(name("lease.cap_field", &l.cap_field)?, max),
    }
    if l.expires_ms != 0 {
        if l.expires_ms <= grant.granted_ms {
            return Err(invalid(
                "lease.expires_ms",
                "is not after granted_ms: the lease would never be live",
            ));
        }
        grant = grant.expires(l.expires_ms);
    }
    if l.spenders.len() > MAX_PREMISES {
        return Err(invalid(
            "lease.spenders",
            format!("at most {MAX_PREMISES} callers"),
        ));
    }
    for s in &l.spenders {
        grant = grant.spender(name("lease.spenders", s)?);
    }
    if l.targets.len() > MAX_PREMISES {
        return Err(invalid(
            "lease.targets",
            format!("at most {MAX_PREMISES} targets"),
        ));
    }
    for t in &l.targets {
        grant = grant.on_target(name("lease.targets", t)?);
    }
    if l.revoked_ms != 0 {
        return Err(invalid(
            "lease.revoked_ms",
            "is set on a grant; grant the lease, then call RevokeLease",
        ));
    }
    match (l.unlimited, l.uses) {
        (true, 0) => grant = grant.unlimited(),
        (true, _) => return Err(invalid("lease.uses", "is set but so is unlimited")),
        (false, 0) => {}
        (false, n) => grant = grant.uses(n),
    }
    match (l.total_field.is_empty(), l.total_max) {
        (true, 0) => {}
        (true, _) => {
            return Err(invalid(
                "lease.total_field",
                "is empty but total_max is set",
            ));
        }
        (false, max) if max < 0 => {
            return Err(invalid("lease.total_max", format!("{max} is negative")));
        }
        (false, max) => grant = grant.total(name("lease.total_field", &l.total_field)?, max),
    }
    if !l.used.is_empty() {
        return Err(invalid(
            "lease.used",
            "is set on a grant; uses are the gate's to count",
        ));
    }
    Ok(grant)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn effect() -> pb::Effect {
        pb::Effect {
            key: "req-1".into(),
            payload_json: r#"{"payment_intent":"pi_1","amount":2000,"currency":"usd"}"#.into(),
            lease: "lease-1".into(),
            premises: vec![pb::Premise {
                name: "refundable".into(),
                value_json: "10000".into(),
            }],
            labels: [("agent".to_owned(), "refund-bot".to_owned())].into(),
        }
    }

    #[test]
    fn an_effect_survives_the_wire_with_exact_integers() -> Result<(), Invalid> {
        let e = effect_from(Some(&effect()))?;
        assert_eq!(e.payload["amount"], Value::from(2000));
        assert_eq!(effect_from(Some(&effect_to(&e)))?, e);
        assert!(effect_to(&e).payload_json.contains("\"amount\":2000"));
        Ok(())
    }

    #[test]
    fn every_malformed_effect_field_is_named() {
        let mut cases: Vec<(pb::Effect, &str)> = Vec::new();
        let mut e = effect();
        e.key = "has space".into();
        cases.push((e, "effect.key"));
        let mut e = effect();
        e.key = "k".repeat(256);
        cases.push((e, "effect.key"));
        let mut e = effect();
        e.payload_json = "{\"amount\": 20".into();
        cases.push((e, "effect.payload_json"));
        let mut e = effect();
        e.payload_json = "[1,2]".into();
        cases.push((e, "effect.payload_json"));
        let mut e = effect();
        e.payload_json = format!("{{\"pad\":\"{}\"}}", "x".repeat(MAX_JSON_BYTES));
        cases.push((e, "effect.payload_json"));
        let mut e = effect();
        e.payload_json = format!("{}1{}", "[".repeat(200), "]".repeat(200));
        cases.push((e, "effect.payload_json"));
        let mut e = effect();
        e.lease = String::new();
        cases.push((e, "effect.lease"));
        let mut e = effect();
        e.premises.push(e.premises[0].clone());
        cases.push((e, "effect.premises[1]"));
        let mut e = effect();
        e.premises[0].value_json = "nope".into();
        cases.push((e, "effect.premises[0].value_json"));
        for (e, field) in cases {
            let err = effect_from(Some(&e)).err();
            assert_eq!(
                err.as_ref().map(|e| e.field.as_str()),
                Some(field),
                "{err:?}"
            );
        }
        assert_eq!(
            effect_from(None).err().map(|e| e.field),
            Some("effect".into())
        );
    }

    #[test]
    fn a_lease_round_trips_and_a_nonsense_grant_is_refused() -> Result<(), Invalid> {
        let l = pb::Lease {
            id: "case-1".into(),
            approver: "ana@support".into(),
            scope_json: [("payment_intent".to_owned(), "\"pi_1\"".to_owned())].into(),
            cap_field: "amount".into(),
            cap_max: 2000,
            granted_ms: 0,
            expires_ms: 0,
            revoked_ms: 0,
            ..pb::Lease::default()
        };
        let g = lease_from(Some(&l), 77)?;
        assert_eq!(g.granted_ms, 77);
        assert_eq!(g.cap, Some(("amount".into(), 2000)));
        // A grant that says nothing of uses allows one.
        assert_eq!(g.uses, Some(1));
        let back = lease_to(&g, &[]);
        assert_eq!(back.scope_json, l.scope_json);
        assert_eq!((back.uses, back.unlimited), (1, false));
        let many = lease_from(
            Some(&pb::Lease {
                uses: 3,
                total_field: "amount".into(),
                total_max: 6000,
                ..l.clone()
            }),
            77,
        )?;
        assert_eq!(
            (many.uses, many.total),
            (Some(3), Some(("amount".into(), 6000)))
        );
        let standing = lease_from(
            Some(&pb::Lease {
                unlimited: true,
                ..l.clone()
            }),
            77,
        )?;
        assert_eq!(standing.uses, None);
        for (bad, field) in [
            (
                pb::Lease {
                    cap_max: -1,
                    ..l.clone()
                },
                "lease.cap_max",
            ),
            (
                pb::Lease {
                    revoked_ms: 5,
                    ..l.clone()
                },
                "lease.revoked_ms",
            ),
            (
                pb::Lease {
                    uses: 2,
                    unlimited: true,
                    ..l.clone()
                },
                "lease.uses",
            ),
            (
                pb::Lease {
                    total_max: 5,
                    ..l.clone()
                },
                "lease.total_field",
            ),
            (
                pb::Lease {
                    used: vec![pb::LeaseUse {
                        key: "k".into(),
                        amount: 1,
                    }],
                    ..l.clone()
                },
                "lease.used",
            ),
            (
                pb::Lease {
                    expires_ms: 10,
                    granted_ms: 20,
                    ..l.clone()
                },
                "lease.expires_ms",
            ),
            (
                pb::Lease {
                    id: String::new(),
                    ..l.clone()
                },
                "lease.id",
            ),
        ] {
            assert_eq!(
                lease_from(Some(&bad), 0).err().map(|e| e.field),
                Some(field.into())
            );
        }
        Ok(())
    }
}
