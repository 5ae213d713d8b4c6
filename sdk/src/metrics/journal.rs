//! What the journal holds, counted for the gauges: every effect by where it stands, and the ones
//! that landed after the gate closed them as not applied. Each key's history is read and folded
//! as `interlock journal list` folds it, so the two agree by construction; the cost is a read of
//! every record, which is why the endpoint reads it at most once per refresh interval.

use std::collections::BTreeMap;

use crate::core::Status;
use crate::core::state::landed_late;
use crate::journal::{Journal, JournalError, JournalStore};
use crate::lease::LeaseError;

/// The journal's effects, counted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JournalCounts {
    /// Effects by where they stand (every status, zeros included).
    pub by_status: BTreeMap<Status, u64>,
    /// Effects closed as refused or failed that the target holds after all.
    pub landed_late: u64,
    /// The budgets in force, by id.
    pub budgets: Vec<BudgetGauge>,
}

/// One budget in force, as the gauges show it: its limit and its fullest counter in the window
/// that holds now. A budget kept per currency or per customer has a counter for each; the fullest
/// (most used and reserved) is the one nearest to refusing, and the only one shown, so that no
/// customer becomes a label.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BudgetGauge {
    /// The budget's id (set by an administrator: a closed set).
    pub id: String,
    /// Its limit.
    pub limit: i64,
    /// What committed effects add up to in its fullest counter.
    pub used: i64,
    /// What effects in flight or ambiguous add up to there.
    pub reserved: i64,
    /// Its counters with a place in the current window.
    pub counters: u64,
}

/// The budgets in force and their fullest counters in the window holding `now_ms`.
pub fn budget_gauges(
    store: &dyn JournalStore,
    now_ms: i64,
) -> Result<Vec<BudgetGauge>, LeaseError> {
    let mut out = Vec::new();
    for b in crate::lease::in_force(&store.budget_changes()?) {
        let counters = crate::budget::counters(store, &b, now_ms)?;
        let fullest = counters
            .iter()
            .max_by_key(|c| c.used.saturating_add(c.reserved));
        out.push(BudgetGauge {
            id: b.id.clone(),
            limit: b.max(),
            used: fullest.map_or(0, |c| c.used),
            reserved: fullest.map_or(0, |c| c.reserved),
            counters: counters.len() as u64,
        });
    }
    Ok(out)
}

/// Count the journal's effects.
pub fn journal_counts(journal: &dyn Journal) -> Result<JournalCounts, JournalError> {
    let mut out = JournalCounts {
        by_status: Status::ALL.iter().map(|s| (*s, 0)).collect(),
        landed_late: 0,
        budgets: Vec::new(),
    };
    crate::journal::for_each_key(journal, &mut |key| {
        let seen = journal.read(&key)?;
        if let Some(s) = seen.state().status() {
            *out.by_status.entry(s).or_default() += 1;
        }
        let late = landed_late(seen.state(), seen.records().iter().map(|r| &r.event));
        out.landed_late += u64::from(!late.is_empty());
        Ok(())
    })?;
    Ok(out)
}
