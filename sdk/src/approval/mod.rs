//! A person's approval as the lease. A request that needs judgment is routed to a group; an
//! approver of that group signs, with their own Ed25519 key, the request, the exact payload and
//! the facts they saw; the signed approval is granted as the lease the effect runs under. The
//! gate re-checks the signature, the membership, the expiry, the payload, the facts and the
//! request's current route inside the transaction that writes every send's record — the first
//! send and each resend after a crash — so an approval that was forged, replayed onto another
//! request, lapsed, given for another amount or by a group the request escalated away from
//! never lets a send through.

mod check;
mod directory;
mod live;
mod policy;
mod route;
mod scoreboard;
mod statement;

pub use check::{Against, verdict};
pub use directory::{Approver, Approvers, DirectoryError, Level, MAX_SLA_MS};
pub use live::{DirectoryFile, DirectorySource, Fixed};
pub use policy::{Action, Assessment, Condition, Policy, Rule};
pub use route::{
    Route, RouteKind, RouteStep, StoredRoute, admits, escalations, next_step, parse_detail, reason,
};
pub use scoreboard::{EffectSummary, ScoreError, Scoreboard, Times};
pub(crate) use statement::strictly_verifies;
pub use statement::{ApproverKey, SignedApproval, Statement};
