//! Which effect a gated call is. The same key arguments are the same approved request, sent at
//! most once: a repeated call (a retry, a reconnect after a crash) lands on the same effect and
//! is answered from the journal. One exception keeps repairs possible: a request whose effect
//! was refused or definitely failed was never carried out, so a new decision for it (other
//! arguments, or facts read again) becomes the request's next effect, `KEY.2`, `KEY.3`, … —
//! never while any earlier one is in flight or landed, so the request is still carried out at
//! most once.

use interlock::core::{EffectState, Premises, Resolution};
use interlock::effect::{MAX_KEY_LEN, percent_encoded};
use interlock::{EffectKey, JournalError};
use serde_json::Value;

/// How many decisions one request may take before the proxy stops opening new effects for it
/// (the last is then answered as it stands).
pub const MAX_DECISIONS: usize = 16;

/// Room kept at the end of a key for `.N`.
const SUFFIX_ROOM: usize = 4;

/// The request's first effect: `mcp:TOOL:V1:V2…`, each part percent-encoded (so the parts
/// cannot run into each other, and `.` is free for the decision's number), or a derived key when
/// that would be too long.
pub fn base(tool: &str, values: &[Value]) -> EffectKey {
    let mut k = format!("mcp:{}", percent_encoded(tool));
    let parts: Vec<String> = values.iter().map(part).collect();
    for p in &parts {
        k.push(':');
        k.push_str(&percent_encoded(p));
    }
    if k.len() + SUFFIX_ROOM <= MAX_KEY_LEN
        && let Ok(key) = EffectKey::fixed(k.clone())
    {
        return key;
    }
    let mut all = vec![tool.to_owned()];
    all.extend(parts.iter().map(|p| format!("{p:?}")));
    EffectKey::derive(&all)
}

/// A key argument's value as one part of the key: a string as it is, a number as the number it
/// is (`1`, `1.0` and `1e0` are one request), a boolean as `true`/`false`.
fn part(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => i.to_string(),
            (None, Some(u), _) => u.to_string(),
            (None, None, Some(f)) if f.fract() == 0.0 && f.abs() < 9.0e15 => {
                format!("{f:.0}")
            }
            _ => n.to_string(),
        },
        other => other.to_string(),
    }
}

/// The request's `n`th effect (`n` from 1).
pub fn nth(base: &EffectKey, n: usize) -> EffectKey {
    if n <= 1 {
        return base.clone();
    }
    // A base key leaves room for the suffix, so this is always a usable key.
    EffectKey::fixed(format!("{base}.{n}")).unwrap_or_else(|_| base.clone())
}

/// A call as the choice of its effect sees it: its payload's hash, the facts it was decided on
/// and the approval it names.
#[derive(Clone, Copy, Debug)]
pub struct Decision<'a> {
    /// The hash of the payload as the call gave it.
    pub payload_hash: &'a str,
    /// The facts it was decided on.
    pub decided: &'a Premises,
    /// The lease id it runs under.
    pub lease: &'a str,
}

/// Whether a call belongs to an effect in `state`, or is a new decision after one that was
/// never carried out: other arguments, facts read again, or another approval (a call refused for
/// a dead lease may be made again under a live one, also where the lease is not part of the
/// payload). An effect that ended refused or failed but `landed_late` (a late success, or the
/// target's confirmation, came after it) was carried out after all: every call for the request
/// stays with it.
pub fn belongs(state: &EffectState, landed_late: bool, call: &Decision<'_>) -> bool {
    if landed_late {
        return true;
    }
    let same = |first: &interlock::core::Proposed| {
        let hash = first.payload_hash == call.payload_hash
            || first.given_hash.as_deref() == Some(call.payload_hash);
        hash && &first.premises == call.decided && first.lease == call.lease
    };
    match state {
        EffectState::Resolved {
            first,
            resolution: Resolution::Refused(r),
        } if r.is_final => same(first),
        EffectState::Resolved {
            first,
            resolution: Resolution::Failed(_),
        } => same(first),
        _ => true,
    }
}

/// The effect a call is: the first of the request's effects it belongs to. `read` gives an
/// effect's state and whether it landed late (see [`belongs`]).
pub fn choose(
    base: &EffectKey,
    call: &Decision<'_>,
    mut read: impl FnMut(&EffectKey) -> Result<(EffectState, bool), JournalError>,
) -> Result<EffectKey, JournalError> {
    for n in 1..=MAX_DECISIONS {
        let key = nth(base, n);
        let (state, landed_late) = read(&key)?;
        if belongs(&state, landed_late, call) {
            return Ok(key);
        }
    }
    Ok(nth(base, MAX_DECISIONS))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use std::collections::HashMap;

    use interlock::core::{Committed, Failed, Proposed, RefusalCode, Refused, Via};
    use serde_json::json;

    use super::*;

    fn proposed(hash: &str, premises: &Premises) -> Proposed {
        Proposed {
            given_hash: None,
            rules: Vec::new(),
            by: None,
            payload: json!({}),
            payload_hash: hash.into(),
            premises: premises.clone(),
            lease: "l".into(),
            target: "t".into(),
            tier: 1,
            window_ms: None,
            labels: Default::default(),
        }
    }

    fn refused(hash: &str, premises: &Premises) -> EffectState {
        EffectState::Resolved {
            first: proposed(hash, premises),
            resolution: Resolution::Refused(Refused {
                code: RefusalCode::StalePremise,
                reason: String::new(),
                changes: vec![],
                repairs: vec![],
                is_final: true,
                payload_hash: hash.into(),
            }),
        }
    }

    fn pick(states: &HashMap<String, EffectState>, hash: &str, decided: &Premises) -> String {
        pick_under(states, hash, decided, "l")
    }

    fn pick_under(
        states: &HashMap<String, EffectState>,
        payload_hash: &str,
        decided: &Premises,
        lease: &str,
    ) -> String {
        let base = base("create_refund", &[json!("r-1")]);
        let call = Decision {
            payload_hash,
            decided,
            lease,
        };
        choose(&base, &call, |k| {
            Ok((states.get(k.as_str()).cloned().unwrap_or_default(), false))
        })
        .unwrap()
        .to_string()
    }

    #[test]
    fn the_same_request_is_the_same_effect_and_parts_cannot_run_together() {
        assert_eq!(base("t", &[json!("r-1")]).as_str(), "mcp:t:r-1");
        assert_ne!(
            base("t", &[json!("a:b")]),
            base("t", &[json!("a"), json!("b")])
        );
        assert_ne!(base("t", &[json!(1)]), base("t", &[json!("1.2")]));
        assert_eq!(
            base("t", &[json!(1)]),
            base("t", &[json!(1.0)]),
            "one number, one request"
        );
        assert_eq!(base("t", &[json!(1)]), base("t", &[json!("1")]));
        let long = base("t", &[json!("x".repeat(300))]);
        assert_eq!(long.as_str().len(), 64, "derived when too long");
        assert_eq!(nth(&long, 2).as_str().len(), 66);
    }

    #[test]
    fn a_new_decision_opens_a_new_effect_only_after_one_that_was_never_carried_out() {
        let was = Premises::from([("refundable".to_owned(), json!(5000))]);
        let now = Premises::from([("refundable".to_owned(), json!(3000))]);
        let mut states = HashMap::new();
        assert_eq!(pick(&states, "h1", &was), "mcp:create_refund:r-1");
        states.insert("mcp:create_refund:r-1".to_owned(), refused("h1", &was));
        // The same call on the same facts is the refused effect: the refusal is its answer.
        assert_eq!(pick(&states, "h1", &was), "mcp:create_refund:r-1");
        // A repaired call, or the same one decided on facts read again, is the next effect.
        assert_eq!(pick(&states, "h2", &now), "mcp:create_refund:r-1.2");
        assert_eq!(pick(&states, "h1", &now), "mcp:create_refund:r-1.2");
        // Once the next one landed, every call for the request is that one (a conflict, or a
        // replay), never a third.
        let landed = EffectState::Resolved {
            first: proposed("h2", &now),
            resolution: Resolution::Committed(Committed {
                token: 1,
                via: Via::FirstSend,
                result: json!({}),
            }),
        };
        states.insert("mcp:create_refund:r-1.2".to_owned(), landed);
        assert_eq!(pick(&states, "h3", &now), "mcp:create_refund:r-1.2");
        assert_eq!(pick(&states, "h1", &was), "mcp:create_refund:r-1");
        // A definite failure is never carried out either.
        let failed = EffectState::Resolved {
            first: proposed("h1", &was),
            resolution: Resolution::Failed(Failed {
                token: 1,
                code: "tool_error".into(),
                message: String::new(),
            }),
        };
        let states = HashMap::from([("mcp:create_refund:r-1".to_owned(), failed.clone())]);
        assert_eq!(pick(&states, "h2", &was), "mcp:create_refund:r-1.2");
        // Unless it landed after all (a late success, the target's confirmation): then it was
        // carried out, and the request has no next effect.
        let call = Decision {
            payload_hash: "h2",
            decided: &now,
            lease: "l",
        };
        assert!(belongs(&failed, true, &call));
        assert!(!belongs(&failed, false, &call));
    }

    #[test]
    fn a_call_under_another_approval_or_spelt_as_first_given_is_told_apart() {
        let facts = Premises::from([("refundable".to_owned(), json!(5000))]);
        let mut first = refused("canonical", &facts);
        if let EffectState::Resolved { first, .. } = &mut first {
            first.given_hash = Some("as_given".into());
        }
        let states = HashMap::from([("mcp:create_refund:r-1".to_owned(), first)]);
        // Refused under lease "l" (dead, say): the same call under a live lease is a new decision.
        assert_eq!(
            pick_under(&states, "canonical", &facts, "l2"),
            "mcp:create_refund:r-1.2"
        );
        // The same call spelt as first given (before its canonical form) is the refused effect.
        assert_eq!(
            pick_under(&states, "as_given", &facts, "l"),
            "mcp:create_refund:r-1"
        );
    }
}
