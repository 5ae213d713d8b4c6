//! One name for where an effect stands, shared by receipts, `verify`, Temporal failure details and
//! reports: each carries the enum and prints its one label, so nothing downstream parses a string
//! back into a meaning.

use serde::{Deserialize, Serialize};

use super::state::{EffectState, Resolution};

/// Where an effect stands: unresolved, or how it ended.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[non_exhaustive]
pub enum Status {
    /// Proposed; nothing dispatched.
    Proposed,
    /// Dispatched and not resolved: a send may be in flight.
    InFlight,
    /// It landed once.
    Committed,
    /// A check failed; nothing was sent on the refusing path.
    Refused,
    /// The target definitively said no.
    Failed,
    /// Unknowable from here; a person must look.
    Ambiguous,
    /// The target holds it more than once.
    AppliedTwice,
}

impl Status {
    /// Every status, in the order above.
    pub const ALL: [Status; 7] = [
        Status::Proposed,
        Status::InFlight,
        Status::Committed,
        Status::Refused,
        Status::Failed,
        Status::Ambiguous,
        Status::AppliedTwice,
    ];

    /// The label, as written in receipts and shown to people (`COMMITTED`, `APPLIED_TWICE`, …).
    pub fn label(self) -> &'static str {
        match self {
            Self::Proposed => "PROPOSED",
            Self::InFlight => "IN_FLIGHT",
            Self::Committed => "COMMITTED",
            Self::Refused => "REFUSED",
            Self::Failed => "FAILED",
            Self::Ambiguous => "AMBIGUOUS",
            Self::AppliedTwice => "APPLIED_TWICE",
        }
    }

    /// True once the effect is resolved: no later attempt changes it.
    pub fn is_final(self) -> bool {
        !matches!(self, Self::Proposed | Self::InFlight)
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}

impl Resolution {
    /// How it ended, as a status.
    pub fn status(&self) -> Status {
        match self {
            Self::Committed(_) => Status::Committed,
            Self::Refused(_) => Status::Refused,
            Self::Failed(_) => Status::Failed,
            Self::Ambiguous(_) => Status::Ambiguous,
            Self::AppliedTwice(_) => Status::AppliedTwice,
        }
    }
}

impl EffectState {
    /// Where the effect stands; `None` for a key with no records.
    pub fn status(&self) -> Option<Status> {
        match self {
            Self::Absent => None,
            Self::Proposed { .. } => Some(Status::Proposed),
            Self::InFlight { .. } => Some(Status::InFlight),
            Self::Resolved { resolution, .. } => Some(resolution.status()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_status_serializes_as_its_label() {
        for s in Status::ALL {
            assert_eq!(
                serde_json::to_value(s).ok(),
                Some(serde_json::Value::String(s.label().into()))
            );
            assert_eq!(s.to_string(), s.label());
        }
    }
}
