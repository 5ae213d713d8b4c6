//! Limits that span effects: a lease that allows a number of uses, or a total over a payload
//! field, across every key dispatched under it. A use is taken by the transaction that writes a
//! key's first `DISPATCHED` and is held for as long as the effect may have landed; only a history
//! that proves the effect never applied gives it back. Whether a key holds its use is read off
//! its own history, never kept as a separate fact that could disagree with it, so a crash, a
//! retry or a recovery can neither take a use twice nor lose one.

use serde_json::Value;

use super::mutants::{self, Mutant};
use super::state::{EffectState, Resolution, landed_late};

/// What a lease allows across keys, besides its scope and cap.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct UseLimit {
    /// How many keys may be dispatched under it (`None`: any number).
    pub uses: Option<u32>,
    /// A payload field and the most its values may add up to over every key (`None`: no total).
    pub total: Option<(String, i64)>,
}

impl UseLimit {
    /// Whether it limits anything.
    pub fn limits(&self) -> bool {
        self.uses.is_some() || self.total.is_some()
    }

    /// What one key's payload counts against the total: the field's integer value. `None` when
    /// the limit has a total and the payload carries no integer in its field (such a payload
    /// is refused).
    pub fn amount(&self, payload: &Value) -> Option<i64> {
        match &self.total {
            None => Some(0),
            Some((field, _)) => payload.get(field).and_then(Value::as_i64),
        }
    }
}

/// A use of a lease, as the store keeps it: the key that holds it and what it counts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Use {
    /// The effect's key.
    pub key: String,
    /// What it counts against the lease's total (0 when the lease has none).
    pub amount: i64,
}

/// Whether a key whose history folds to `state` (with `events` its records) holds a use of its
/// lease: from its first `DISPATCHED` on, unless it ended `REFUSED` or `FAILED` with nothing to
/// show it landed (the only ends the contract allows only when it did not apply). `AMBIGUOUS`,
/// `APPLIED_TWICE`, a commit and anything in flight keep it; a late success or the target's
/// confirmation under a refused or failed effect takes it back.
pub fn holds_use<'a>(
    state: &EffectState,
    events: impl IntoIterator<Item = &'a super::Event>,
) -> bool {
    match state {
        EffectState::Absent | EffectState::Proposed { .. } => false,
        EffectState::InFlight { .. } => true,
        EffectState::Resolved {
            resolution: Resolution::Refused(_) | Resolution::Failed(_),
            ..
        } => !landed_late(state, events).is_empty(),
        EffectState::Resolved {
            resolution: Resolution::Ambiguous(_),
            ..
        } => !mutants::on(Mutant::AmbiguousGivesUseBack),
        EffectState::Resolved { .. } => true,
    }
}

/// Whether `key` may be dispatched under lease `lease` whose limit is `limit`, asking `amount`
/// (what its payload counts; `None` when it carries no integer in the total's field), when
/// `used` are the uses the lease's keys hold as of the dispatch's transaction. The key's own use,
/// if it holds one already (a resend), is not counted against it. `Err` says why not, naming
/// the keys that hold the lease's uses.
pub fn room(
    lease: &str,
    limit: &UseLimit,
    key: &str,
    amount: Option<i64>,
    used: &[Use],
) -> Result<(), String> {
    // A key that holds a use may always send under it again (a resend, a recovery), whatever
    // else holds uses now: a late success may have taken back a use given up earlier.
    if used.iter().any(|u| u.key == key) {
        return Ok(());
    }
    let others: Vec<&Use> = used.iter().collect();
    let names = || {
        let mut keys: Vec<&str> = others.iter().map(|u| u.key.as_str()).collect();
        keys.sort_unstable();
        let shown = keys.iter().take(5).copied().collect::<Vec<_>>().join(", ");
        if keys.len() > 5 {
            format!("{shown} and {} more", keys.len() - 5)
        } else {
            shown
        }
    };
    if let Some(uses) = limit
        .uses
        .filter(|u| others.len() >= usize::try_from(*u).unwrap_or(usize::MAX))
    {
        let what = if uses == 1 {
            "allows one use".to_owned()
        } else {
            format!("allows {uses} uses")
        };
        return Err(format!(
            "lease {lease} {what}, and key {} spent it: grant a new lease for this effect",
            names()
        ));
    }
    if let Some((field, total)) = &limit.total {
        let Some(asked) = amount else {
            return Err(format!(
                "lease {lease} allows {field} up to {total} in total, but the payload has no \
                 integer {field}"
            ));
        };
        let spent = others
            .iter()
            .fold(0_i64, |sum, u| sum.saturating_add(u.amount));
        if asked < 0 || spent.saturating_add(asked) > *total {
            let by = if others.is_empty() {
                String::new()
            } else {
                format!(" (spent by key {})", names())
            };
            return Err(format!(
                "lease {lease} allows {field} up to {total} in total; {spent} is spent{by} and \
                 this effect asks {asked}, {} left",
                total.saturating_sub(spent).max(0)
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn used(keys: &[(&str, i64)]) -> Vec<Use> {
        keys.iter()
            .map(|(k, a)| Use {
                key: (*k).into(),
                amount: *a,
            })
            .collect()
    }

    #[test]
    fn a_one_use_lease_is_spent_by_the_first_key_and_names_it_to_the_second() {
        let once = UseLimit {
            uses: Some(1),
            total: None,
        };
        assert_eq!(room("l", &once, "k-a", Some(0), &[]), Ok(()));
        let spent = used(&[("k-a", 0)]);
        // The key that holds the use may resend under it, even beside another that took a use
        // back after it (a late success under an effect that had failed).
        assert_eq!(room("l", &once, "k-a", Some(0), &spent), Ok(()));
        let both = used(&[("k-a", 0), ("k-z", 0)]);
        assert_eq!(room("l", &once, "k-a", Some(0), &both), Ok(()));
        let no = room("l", &once, "k-b", Some(0), &spent).unwrap_err();
        assert!(no.contains("key k-a spent it"), "{no}");
    }

    #[test]
    fn a_total_counts_every_other_key_and_refuses_what_would_go_over() {
        let total = UseLimit {
            uses: None,
            total: Some(("amount".into(), 6000)),
        };
        let spent = used(&[("a", 2000), ("b", 3000)]);
        assert_eq!(room("l", &total, "c", Some(1000), &spent), Ok(()));
        let no = room("l", &total, "c", Some(1001), &spent).unwrap_err();
        assert!(
            no.contains("5000 is spent") && no.contains("1000 left"),
            "{no}"
        );
        assert!(room("l", &total, "c", None, &spent).is_err());
        assert!(room("l", &total, "c", Some(-5), &[]).is_err());
        assert_eq!(total.amount(&json!({"amount": 7})), Some(7));
        assert_eq!(total.amount(&json!({"amount": "7"})), None);
    }

    #[test]
    fn an_unlimited_lease_has_room_for_every_key() {
        let none = UseLimit::default();
        assert!(!none.limits());
        assert_eq!(room("l", &none, "z", Some(0), &used(&[("a", 0)])), Ok(()));
    }
}
