//! What the journal holds, counted for the gauges: every effect by where it stands, and the ones
//! that landed after the gate closed them as not applied. Each key's history is read and folded
//! as `interlock journal list` folds it, so the two agree by construction; the cost is a read of
//! every record, which is why the endpoint reads it at most once per refresh interval.

use std::collections::BTreeMap;

use crate::core::Status;
use crate::core::state::landed_late;
use crate::effect::EffectKey;
use crate::journal::{Journal, JournalError};

/// Keys read per page.
const PAGE: usize = 1_000;

/// The journal's effects, counted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JournalCounts {
    /// Effects by where they stand (every status, zeros included).
    pub by_status: BTreeMap<Status, u64>,
    /// Effects closed as refused or failed that the target holds after all.
    pub landed_late: u64,
}

/// Count the journal's effects.
pub fn journal_counts(journal: &dyn Journal) -> Result<JournalCounts, JournalError> {
    let mut out = JournalCounts {
        by_status: Status::ALL.iter().map(|s| (*s, 0)).collect(),
        landed_late: 0,
    };
    let mut after: Option<String> = None;
    loop {
        let page = journal.keys_page(after.as_deref(), PAGE)?;
        for k in &page {
            let key = EffectKey::fixed(k.clone()).map_err(|e| JournalError::Corrupt {
                path: journal.location().to_owned(),
                place: format!("key {k}"),
                what: e.to_string(),
            })?;
            let seen = journal.read(&key)?;
            if let Some(s) = seen.state().status() {
                *out.by_status.entry(s).or_default() += 1;
            }
            let late = landed_late(seen.state(), seen.records().iter().map(|r| &r.event));
            out.landed_late += u64::from(!late.is_empty());
        }
        match page.last() {
            Some(last) if page.len() == PAGE => after = Some(last.clone()),
            _ => return Ok(out),
        }
    }
}
