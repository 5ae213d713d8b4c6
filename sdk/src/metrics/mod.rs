//! Counters and histograms of what this process's gates did, and gauges of what the journal
//! holds, in Prometheus' text format. Two sources, because they answer different questions: a
//! worker killed mid-send takes its counters with it, so "how many effects are in flight or wait
//! for a person" is read from the journal (the only thing that survives), while "how long do sends
//! take, how often is recovery needed, why are attempts refused" is what the process saw.
//!
//! No label carries a key, a payload value or anything else a caller chooses freely: targets are
//! named by their configuration, outcomes and refusal codes come from closed sets.

#[cfg(feature = "metrics-endpoint")]
mod endpoint;
mod journal;
mod registry;
mod render;

#[cfg(feature = "metrics-endpoint")]
pub use endpoint::{DEFAULT_REFRESH, Endpoint, EndpointError};
pub use journal::{BudgetGauge, JournalCounts, budget_gauges, journal_counts};
pub use registry::{BUCKETS, Histogram, Registry, Series, registry};
pub use render::render;

use std::time::Duration;

use crate::gate::Outcome;

/// The outcome label of an attempt: closed set, lower case.
pub fn outcome_label(o: &Outcome) -> &'static str {
    match o {
        Outcome::Committed { .. } => "committed",
        Outcome::Refused(_) => "refused",
        Outcome::Failed(_) => "failed",
        Outcome::Ambiguous(_) => "ambiguous",
        Outcome::AppliedTwice(_) => "applied_twice",
        Outcome::InFlight { .. } => "in_flight",
        Outcome::Retry { .. } => "retry",
        Outcome::Superseded { .. } => "superseded",
    }
}

/// Count one attempt of an effect through `target` that ended with `o`.
pub fn attempt(target: &str, o: &Outcome) {
    let code = match o {
        Outcome::Refused(r) => r.code.as_str(),
        _ => "",
    };
    let replayed = match o {
        Outcome::Committed { replayed: true, .. } => "true",
        _ => "false",
    };
    registry().inc(
        "interlock_attempts_total",
        &[
            ("target", target),
            ("outcome", outcome_label(o)),
            ("refusal_code", code),
            ("replayed", replayed),
        ],
    );
}

/// Count one attempt through `target` that stopped without an outcome (a journal failure).
pub fn attempt_error(target: &str) {
    registry().inc(
        "interlock_attempts_total",
        &[
            ("target", target),
            ("outcome", "error"),
            ("refusal_code", ""),
            ("replayed", "false"),
        ],
    );
}

/// Count one recovery of an in-flight effect through `target` (an attempt that took over its
/// claim), by how this attempt left it.
pub fn recovery(target: &str, o: &Outcome) {
    registry().inc(
        "interlock_recoveries_total",
        &[("target", target), ("ended", outcome_label(o))],
    );
}

/// Observe one send to `target`, from the request to its answer (or giving up).
pub fn send(target: &str, took: Duration) {
    registry().observe(
        "interlock_send_duration_seconds",
        &[("target", target)],
        took,
    );
}

/// Observe one read-decide-append transaction of the journal, its commit included.
pub fn journal_append(took: Duration) {
    registry().observe("interlock_journal_append_duration_seconds", &[], took);
}
