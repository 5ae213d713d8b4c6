//! What a caller without the admin token is not shown of an effect. A lease's id is what a caller
//! needs to spend it, and a grant's scope and cap, or a budget's room, tell it how far: a worker
//! that may read effects must not learn from another effect's history a lease it was never
//! handed. So `GetEffect` and `Verify` answer such a caller with every lease id replaced, the
//! grant and the budgets checked left out, and the words of lease and budget refusals (which
//! name leases, keys and room) replaced by their code. The payload, the premises, the outcome
//! and the target's answer stay: a worker needs them to tell whether a call is the effect it
//! reads.
//!
//! A withheld record's hash still covers the whole event, so it cannot be checked from what is
//! shown; `Record.withheld` says so. The admin token reads everything.

use interlock::core::{Event, RefusalCode};
use interlock::journal::Record;
use serde_json::Value;

use crate::pb;

/// What stands in for what is withheld.
pub const WITHHELD: &str = "(withheld: read with the admin token)";

/// The lease ids `records` name (their `PROPOSED` and `AUTHORIZED` records').
pub fn lease_ids(records: &[Record]) -> Vec<String> {
    let mut ids: Vec<String> = records
        .iter()
        .filter_map(|r| match &r.event {
            Event::Proposed(p) => Some(p.lease.clone()),
            Event::Authorized(a) => Some(a.lease.clone()),
            _ => None,
        })
        .filter(|id| !id.is_empty())
        .collect();
    ids.sort();
    ids.dedup();
    // The longest first, so that an id inside another is not replaced in part.
    ids.sort_by_key(|id| std::cmp::Reverse(id.len()));
    ids
}

/// `text` with every id in `leases` replaced.
pub fn text(text: &str, leases: &[String]) -> String {
    leases
        .iter()
        .fold(text.to_owned(), |t, id| t.replace(id.as_str(), "(lease)"))
}

/// `r` as a caller without the admin token sees it; `leases` are the effect's lease ids.
pub fn record(r: &Record, leases: &[String]) -> pb::Record {
    let mut shown = crate::convert::record(r);
    let Ok(mut event) = serde_json::to_value(&r.event) else {
        shown.event_json = String::new();
        shown.withheld = true;
        return shown;
    };
    let withheld = withhold(&r.event, &mut event, leases);
    if withheld {
        shown.event_json = event.to_string();
        shown.withheld = true;
    }
    shown
}

/// Withhold in `json` (the serialized `event`) what a worker is not shown; whether anything was.
fn withhold(event: &Event, json: &mut Value, leases: &[String]) -> bool {
    let Some(fields) = json.as_object_mut() else {
        return false;
    };
    let mut put = |field: &str, value: Value| fields.insert(field.to_owned(), value).is_some();
    match event {
        Event::Proposed(_) => put("lease", WITHHELD.into()),
        Event::Authorized(_) => {
            put("lease", WITHHELD.into());
            put("grant", WITHHELD.into());
            true
        }
        Event::Dispatched(_) => {
            if let Some(recheck) = fields.get_mut("recheck").and_then(Value::as_object_mut) {
                recheck.insert("lease".into(), WITHHELD.into());
                recheck.insert("budgets".into(), Value::Array(Vec::new()));
            }
            true
        }
        Event::Refused(r) if names_authority(r.code) => {
            put("reason", format!("{}: {WITHHELD}", r.code).into());
            true
        }
        // A last look that found the lease dead or a budget full says why in its message.
        Event::Failed(f) if f.code.contains("lease") || f.code.contains("budget") => {
            put("message", format!("{}: {WITHHELD}", f.code).into());
            true
        }
        Event::Refused(_) | Event::Ambiguous(_) | Event::Failed(_) | Event::AppliedTwice(_) => {
            let mut changed = false;
            for field in ["reason", "message"] {
                if let Some(Value::String(s)) = fields.get_mut(field) {
                    let t = text(s, leases);
                    changed |= t != *s;
                    *s = t;
                }
            }
            changed
        }
        _ => false,
    }
}

/// Whether a refusal's words name a lease, the keys that spent it, or a budget's room.
fn names_authority(code: RefusalCode) -> bool {
    matches!(
        code,
        RefusalCode::Lease
            | RefusalCode::LeaseError
            | RefusalCode::LeaseAtRecovery
            | RefusalCode::LeaseErrorAtRecovery
            | RefusalCode::LeaseSpent
            | RefusalCode::LeaseCaller
            | RefusalCode::Budget
    )
}

/// A `Verify` column's detail for a caller without the admin token: the authority's and the
/// budgets' columns say whether they hold, not the lease or room behind it.
pub fn column_detail(name: &str, detail: &str, leases: &[String]) -> String {
    if ["authorized", "budget", "lease", "approved"]
        .iter()
        .any(|w| name.contains(w))
    {
        WITHHELD.to_owned()
    } else {
        text(detail, leases)
    }
}
