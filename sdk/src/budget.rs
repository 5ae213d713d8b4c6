//! Budgets as the journal keeps them: every change is a new row naming who made it (a budget is
//! never edited in place), and the budgets in force are each id's latest change unless that
//! change removed it. The rules themselves — what matches, which window, whether an effect fits —
//! are the pure core's ([`crate::core::budget`]); the places effects hold in them are taken and
//! given back by the append that changes the effect's history, as a lease's uses are.

use serde::{Deserialize, Serialize};

pub use crate::core::budget::{
    Budget, CalendarUnit, Hold, Limit, MAX_LIMIT, OverBudget, Subject, Tally, Window,
};
use crate::lease::LeaseError;

/// One change to a budget.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct BudgetChange {
    /// The budget's id.
    pub id: String,
    /// Its position in the budget's changes, from 0.
    pub n: u32,
    /// The budget as set, or `None` where the change removed it.
    pub budget: Option<Budget>,
    /// When (ms since the epoch, the journal's clock).
    pub at_ms: i64,
    /// Who made it.
    pub by: String,
}

/// A budget's `spec` column: the budget as JSON.
pub fn spec_of(budget: &Budget) -> Result<String, LeaseError> {
    budget.validate().map_err(LeaseError::Invalid)?;
    serde_json::to_string(budget)
        .map_err(|e| LeaseError::Invalid(format!("budget {}: {e}", budget.id)))
}

/// A `spec` column read back; an unreadable one names the budget, and is an error (no budget is
/// ever read as "no limit").
pub fn budget_of(id: &str, spec: &str) -> Result<Budget, LeaseError> {
    let b: Budget = serde_json::from_str(spec)
        .map_err(|e| LeaseError::Store(format!("budget {id} has an unreadable spec: {e}")))?;
    b.validate()
        .map_err(|e| LeaseError::Store(format!("budget {id} as stored cannot be kept: {e}")))?;
    Ok(b)
}

/// Whether `new` may replace `old` under the same id: its places were counted by `old`'s scope,
/// counters and measure, so only the limit and the window may change. Anything else is a new
/// budget under a new id.
pub fn check_change(old: &Budget, new: &Budget) -> Result<(), LeaseError> {
    let same_measure = match (&old.limit, &new.limit) {
        (Limit::Count { .. }, Limit::Count { .. }) => true,
        (Limit::Sum { field: a, .. }, Limit::Sum { field: b, .. }) => a == b,
        _ => false,
    };
    if old.scope != new.scope || old.per != new.per || !same_measure {
        return Err(LeaseError::Invalid(format!(
            "budget {} counts its places by its scope, its per and what it measures; only its \
             limit and window may change: remove it and set a new id",
            new.id
        )));
    }
    Ok(())
}

/// Who made a change: someone must be named.
pub fn check_by(by: &str) -> Result<(), LeaseError> {
    if by.trim().is_empty() {
        return Err(LeaseError::Invalid(
            "a budget change names who made it (--by)".into(),
        ));
    }
    Ok(())
}

/// Where an effect holding a place in a budget stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlaceState {
    /// It committed: the place is used.
    Committed,
    /// It ended ambiguous: it may have applied, so its place is kept.
    Ambiguous,
    /// A send may be in flight.
    InFlight,
    /// Anything else that still holds a place (a landed-late effect, a key being recovered).
    Held,
}

impl PlaceState {
    /// The word the command line, the gRPC server and the inbox show.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Committed => "committed",
            Self::Ambiguous => "ambiguous",
            Self::InFlight => "in flight",
            Self::Held => "held",
        }
    }
}

/// What one counter of a budget holds in the window that contains a given instant.
#[derive(Clone, Debug)]
pub struct Counter {
    /// The counter's bucket: the `per` values as JSON (`[]` when the budget has no `per`).
    pub bucket: String,
    /// What effects that committed add up to.
    pub used: i64,
    /// What effects in flight, ambiguous or otherwise not known not to have applied add up to.
    pub reserved: i64,
    /// What is left under the budget's limit (never below 0).
    pub left: i64,
    /// Each place, with its effect's state.
    pub places: Vec<(Hold, PlaceState)>,
}

/// Budget `b`'s counters in the window holding `now_ms`, each place classed by its effect's state
/// as the journal has it now. A counter with no place is not listed: it has all of the limit left.
pub fn counters<J: crate::JournalStore + ?Sized>(
    j: &J,
    b: &Budget,
    now_ms: i64,
) -> Result<Vec<Counter>, LeaseError> {
    use crate::core::{EffectState, state::Resolution};
    let mut by_bucket: std::collections::BTreeMap<String, Counter> = Default::default();
    for (bucket, hold) in j.budget_places(&b.id, b.window.since(now_ms))? {
        let key = crate::EffectKey::fixed(hold.key.clone()).map_err(|e| {
            LeaseError::Store(format!("budget {} holds a place for a bad key: {e}", b.id))
        })?;
        let state = match j.state(&key)? {
            EffectState::Resolved {
                resolution: Resolution::Committed(_),
                ..
            } => PlaceState::Committed,
            EffectState::Resolved {
                resolution: Resolution::Ambiguous(_),
                ..
            } => PlaceState::Ambiguous,
            EffectState::InFlight { .. } => PlaceState::InFlight,
            _ => PlaceState::Held,
        };
        let c = by_bucket.entry(bucket.clone()).or_insert(Counter {
            bucket,
            used: 0,
            reserved: 0,
            left: 0,
            places: Vec::new(),
        });
        if state == PlaceState::Committed {
            c.used = c.used.saturating_add(hold.amount);
        } else {
            c.reserved = c.reserved.saturating_add(hold.amount);
        }
        c.places.push((hold, state));
    }
    let mut out: Vec<Counter> = by_bucket.into_values().collect();
    for c in &mut out {
        c.left = b
            .max()
            .saturating_sub(c.used.saturating_add(c.reserved))
            .max(0);
    }
    Ok(out)
}

/// How one budget in force stands for an effect not yet sent (what a person deciding on it sees).
#[derive(Clone, Debug)]
pub struct Standing {
    /// The budget.
    pub budget: Budget,
    /// The effect's counter in the window holding now (no place yet: nothing used, all left).
    pub counter: Counter,
    /// What the effect would count (`None`: its payload lacks the summed field, so it would be
    /// refused).
    pub asked: Option<i64>,
    /// Whether it fits now: `Err` says by how much it does not and when room frees.
    pub fits: Result<(), OverBudget>,
    /// Label names the budget's scope reads that are not known yet (they are journaled with the
    /// send): the budget applies only if they match.
    pub unknown_labels: Vec<String>,
}

/// Every budget in force that may apply to an effect of `key` with `payload` for `target`, and
/// how it stands now. `labels` are the effect's labels where they are known (from its journaled
/// proposal); a budget scoped on a label not among them is listed with that label named, since
/// the activity that sends the effect journals its labels only then.
pub fn standing<J: crate::JournalStore + ?Sized>(
    j: &J,
    key: &str,
    payload: &serde_json::Value,
    target: &str,
    labels: &std::collections::BTreeMap<String, String>,
    now_ms: i64,
) -> Result<Vec<Standing>, LeaseError> {
    let mut out = Vec::new();
    for b in crate::lease::in_force(&j.budget_changes()?) {
        let unknown_labels: Vec<String> = b
            .scope
            .keys()
            .filter_map(|n| n.strip_prefix("label."))
            .filter(|n| !labels.contains_key(*n))
            .map(str::to_owned)
            .collect();
        // Judged as if each unknown label had the value the budget asks for.
        let mut assumed = labels.clone();
        for n in &unknown_labels {
            if let Some(serde_json::Value::String(v)) = b.scope.get(&format!("label.{n}")) {
                assumed.insert(n.clone(), v.clone());
            }
        }
        let subject = Subject {
            payload,
            target,
            labels: &assumed,
        };
        if !b.matches(&subject) {
            continue;
        }
        let bucket = b.bucket(&subject);
        let counter = counters(j, &b, now_ms)?
            .into_iter()
            .find(|c| c.bucket == bucket)
            .unwrap_or(Counter {
                bucket,
                used: 0,
                reserved: 0,
                left: b.max(),
                places: Vec::new(),
            });
        let asked = b.amount(payload);
        // The counter's places are those of its window: what the gate would count.
        let holds: Vec<Hold> = counter.places.iter().map(|(h, _)| h.clone()).collect();
        let fits = crate::core::budget::room(&b, key, asked, &holds, now_ms);
        out.push(Standing {
            budget: b,
            counter,
            asked,
            fits,
            unknown_labels,
        });
    }
    Ok(out)
}
