//! Tiers, and the dedupe window that decides when a tier-1 target must be treated as less.

use serde::{Deserialize, Serialize};

/// What a target offers for telling, after a crash, whether a send landed.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[serde(into = "u8", try_from = "u8")]
pub enum Tier {
    /// Dedupes on the idempotency key for a window.
    One,
    /// Can be asked whether an effect with this key landed.
    Two,
    /// Neither: after a crash mid-send the answer is unknowable.
    Three,
}

impl From<Tier> for u8 {
    fn from(t: Tier) -> u8 {
        match t {
            Tier::One => 1,
            Tier::Two => 2,
            Tier::Three => 3,
        }
    }
}

impl TryFrom<u8> for Tier {
    type Error = String;
    fn try_from(v: u8) -> Result<Self, String> {
        match v {
            1 => Ok(Tier::One),
            2 => Ok(Tier::Two),
            3 => Ok(Tier::Three),
            other => Err(format!("tier must be 1, 2 or 3, not {other}")),
        }
    }
}

/// The tier that recovery acts on, after demotion past the window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Effective {
    /// Tier 1 and still inside `window − margin` of the first dispatch.
    DedupeInWindow,
    /// Tier 2, or tier 1 past its window with a lookup.
    LookupOnly,
    /// Tier 3, or tier 1 past its window without a lookup.
    Blind,
}

/// Demote a tier by the clock. `window_ms` is the target's dedupe window (tier 1 only).
pub fn effective(
    tier: Tier,
    window_ms: Option<i64>,
    margin_ms: i64,
    first_dispatch_ms: i64,
    now_ms: i64,
    has_lookup: bool,
) -> Effective {
    let fallback = if has_lookup {
        Effective::LookupOnly
    } else {
        Effective::Blind
    };
    match tier {
        Tier::One => match window_ms {
            Some(w)
                if now_ms
                    < first_dispatch_ms
                        .saturating_add(w)
                        .saturating_sub(margin_ms) =>
            {
                Effective::DedupeInWindow
            }
            _ => fallback,
        },
        Tier::Two if has_lookup => Effective::LookupOnly,
        Tier::Two | Tier::Three => Effective::Blind,
    }
}

/// A configuration whose dedupe margin cannot cover a send that is cut off at its deadline.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "dedupe margin {margin_ms} ms must exceed send timeout {send_timeout_ms} ms + settle margin \
     {settle_ms} ms (and be shorter than the {window_ms} ms window): raise the margin or lower the \
     send timeout"
)]
pub struct MarginError {
    /// The target's dedupe window.
    pub window_ms: i64,
    /// The configured margin.
    pub margin_ms: i64,
    /// The send timeout.
    pub send_timeout_ms: i64,
    /// The settle margin.
    pub settle_ms: i64,
}

/// Refuse a tier-1 configuration where a resend near the window's end could outlive the key.
pub fn check_margin(
    window_ms: i64,
    margin_ms: i64,
    send_timeout_ms: i64,
    settle_ms: i64,
) -> Result<(), MarginError> {
    if margin_ms > send_timeout_ms.saturating_add(settle_ms) && margin_ms < window_ms {
        Ok(())
    } else {
        Err(MarginError {
            window_ms,
            margin_ms,
            send_timeout_ms,
            settle_ms,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: i64 = 3_600_000;

    #[test]
    fn tier1_is_trusted_only_inside_window_minus_margin() {
        let eff = |now| effective(Tier::One, Some(24 * H), H, 0, now, true);
        assert_eq!(eff(0), Effective::DedupeInWindow);
        assert_eq!(eff(23 * H - 1), Effective::DedupeInWindow);
        assert_eq!(eff(23 * H), Effective::LookupOnly);
        assert_eq!(
            effective(Tier::One, Some(24 * H), H, 0, 25 * H, false),
            Effective::Blind
        );
    }

    #[test]
    fn tier2_without_lookup_is_blind() {
        assert_eq!(effective(Tier::Two, None, 0, 0, 0, false), Effective::Blind);
        assert_eq!(
            effective(Tier::Two, None, 0, 0, 0, true),
            Effective::LookupOnly
        );
        assert_eq!(
            effective(Tier::Three, None, 0, 0, 0, true),
            Effective::Blind
        );
    }

    #[test]
    fn margin_must_cover_send_timeout_and_settle() {
        assert!(check_margin(24 * H, H, 30_000, 5_000).is_ok());
        assert!(check_margin(24 * H, 30_000, 30_000, 5_000).is_err());
        assert!(check_margin(H, H, 1, 1).is_err());
    }

    #[test]
    fn tier_round_trips_as_a_number_and_rejects_others() {
        assert_eq!(serde_json::to_string(&Tier::Two).ok(), Some("2".into()));
        assert!(serde_json::from_str::<Tier>("4").is_err());
    }
}
