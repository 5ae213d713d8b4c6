//! Budgets as the journal keeps them: every change is a new row naming who made it (a budget is
//! never edited in place), and the budgets in force are each id's latest change unless that
//! change removed it. The rules themselves — what matches, which window, whether an effect fits —
//! are the pure core's ([`crate::core::budget`]); the places effects hold in them are taken and
//! given back by the append that changes the effect's history, as a lease's uses are.

use serde::{Deserialize, Serialize};

pub use crate::core::budget::{Budget, CalendarUnit, Hold, Limit, OverBudget, Subject, Window};
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
