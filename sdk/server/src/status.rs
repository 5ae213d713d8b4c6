//! Library errors as gRPC status codes. A caller's retry policy keys on the code, so the code says
//! whether trying again can help: `UNAVAILABLE` for what may pass (a busy journal, a premise
//! source down), `INVALID_ARGUMENT` / `NOT_FOUND` / `FAILED_PRECONDITION` for what will not.
//! Messages name the cause and the fix, never a secret (journal URLs are shown without passwords).

use interlock::GateError;
use interlock::gate::DecideError;
use interlock::journal::JournalError;
use interlock::lease::LeaseError;
use interlock::premise::PremiseError;
use interlock::target::CanonicalError;
use tonic::{Code, Status};

use crate::convert::Invalid;
use crate::targets::Unusable;

/// A malformed request field.
pub fn invalid(e: &Invalid) -> Status {
    Status::invalid_argument(e.to_string())
}

/// A target that cannot serve the request.
pub fn unusable(u: Unusable) -> Status {
    match u {
        Unusable::Unknown { name, known } => Status::not_found(format!(
            "no target named {name:?} is configured on this server; configured: {}",
            known.join(", ")
        )),
        Unusable::Broken { name, reason } => Status::failed_precondition(format!(
            "target {name} is configured but cannot be used: {reason}; fix the server's \
             configuration and restart it"
        )),
    }
}

/// A journal error: transient ones (busy, server unreachable, disk full) may pass; a damaged
/// journal (`DATA_LOSS`) or one that is not this build's (`FAILED_PRECONDITION`) will not by
/// itself, so a caller stops retrying and a person looks.
pub fn journal(e: &JournalError) -> Status {
    let code = match e {
        JournalError::Corrupt { .. } | JournalError::History { .. } => Code::DataLoss,
        JournalError::NotADatabase { .. }
        | JournalError::Foreign { .. }
        | JournalError::SchemaVersion { .. } => Code::FailedPrecondition,
        _ => Code::Unavailable,
    };
    Status::new(code, e.to_string())
}

/// A gate error. Nothing was sent after it.
pub fn gate(e: &GateError) -> Status {
    match e {
        GateError::Journal(j) => journal(j),
        GateError::Locks { .. } => Status::unavailable(e.to_string()),
        GateError::UnknownKey(_) => Status::not_found(e.to_string()),
        GateError::Margin { .. } | GateError::TargetMismatch { .. } | GateError::Config(_) => {
            Status::failed_precondition(e.to_string())
        }
        _ => Status::internal(e.to_string()),
    }
}

/// A decision that could not be made.
pub fn decide(e: &DecideError) -> Status {
    match e {
        DecideError::Effect(_) => Status::invalid_argument(e.to_string()),
        DecideError::Premises(PremiseError::Unavailable(_)) => Status::unavailable(e.to_string()),
        DecideError::Premises(_) => Status::failed_precondition(e.to_string()),
        DecideError::Canonical(CanonicalError::Unavailable(_)) => {
            Status::unavailable(e.to_string())
        }
        DecideError::Canonical(_) => Status::invalid_argument(e.to_string()),
        // The facts forbid the effect: no retry of the same decision can help.
        DecideError::Rules { .. } => Status::failed_precondition(e.to_string()),
        _ => Status::internal(e.to_string()),
    }
}

/// A lease store error.
pub fn lease(e: &LeaseError) -> Status {
    match e {
        LeaseError::Invalid(_) => Status::invalid_argument(e.to_string()),
        _ => Status::unavailable(e.to_string()),
    }
}

/// Work that died on the blocking pool (a bug): the caller may retry; the journal decides.
pub fn died(e: &tokio::task::JoinError) -> Status {
    Status::internal(format!("the server's worker task died: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_passing_trouble_is_unavailable() {
        let busy = JournalError::Busy {
            path: "j.db".into(),
            waited_ms: 5000,
        };
        let corrupt = JournalError::Corrupt {
            path: "j.db".into(),
            place: "key k record 1".into(),
            what: "hash".into(),
        };
        assert_eq!(journal(&busy).code(), Code::Unavailable);
        assert_eq!(journal(&corrupt).code(), Code::DataLoss);
        assert_eq!(
            gate(&GateError::UnknownKey("k".into())).code(),
            Code::NotFound
        );
        assert_eq!(
            decide(&DecideError::Premises(PremiseError::Unavailable(
                "down".into()
            )))
            .code(),
            Code::Unavailable
        );
        assert_eq!(
            unusable(Unusable::Broken {
                name: "r".into(),
                reason: "margin".into()
            })
            .code(),
            Code::FailedPrecondition
        );
    }
}
