//! A refund workflow whose refund step is a gated Temporal activity: decide (read the premises)
//! → refund (through `interlock_temporal::gated`) → report. The same workflow can run the refund
//! through the baselines Interlock is measured against (a naive retry, Temporal's recommended
//! idempotency key, a careful hand-written re-check), so the kill matrix compares like with like.

pub mod activities;
pub mod approvals;
pub mod baselines;
pub mod clock;
pub mod connect;
pub mod model;
pub mod orders;
pub mod pause;
pub mod timeline;
pub mod workflow;

pub use activities::{Deps, RefundActivities, Settings};
pub use model::{Decision, RefundReport, RefundRequest, StepTimings, System};
pub use workflow::RefundWorkflow;

/// Logs to stderr at `RUST_LOG`'s level (default `info`) and traces exported when the `OTEL_*`
/// variables ask, for this crate's binaries; keep what it returns for the life of the process.
pub fn init_logs(service: &str) -> anyhow::Result<interlock_telemetry::Telemetry> {
    Ok(interlock_telemetry::install(service, "info")?)
}
