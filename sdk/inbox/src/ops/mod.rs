//! The operators' page: what the gate could not finish by itself, put in front of the people who
//! can. It lists the effects in flight, left `AMBIGUOUS`, applied twice or failed, each with its
//! history, premises, lease and receipt; runs recovery on one on request; and lets a member of
//! the settling group end an `AMBIGUOUS` effect with a statement of what they found at the target,
//! signed in their browser with their own key — the same statement `interlock journal settle`
//! signs, checked by the same rules inside the journal's write transaction, so the page can settle
//! nothing the command line could not.
//!
//! It is a server of its own (`interlock ops serve`) because, unlike the approvers' inbox, it
//! writes to the journal (recovery and settlements): the inbox stays a reader.

pub mod board;
pub mod charts;
mod pages;

use std::net::SocketAddr;
use std::sync::Arc;

use interlock::approval::Approvers;
use interlock::{Clock, EffectKey, JournalStore, Outcome};

use crate::InboxError;
use crate::auth::Auth;

/// Runs recovery on one effect, through the gate bound to its target as `interlock recover`
/// does: afresh for each effect, so that what the journal says of the target since (a demotion
/// after it applied an effect twice) and the directory as it is now are what recovery acts on.
pub trait Recover: Send + Sync {
    /// Whether an effect journaled under `target` can be recovered here; if not, what to do
    /// (the page shows it instead of the button).
    fn covers(&self, target: &str) -> Result<(), String>;
    /// Recover `key` on `operator`'s request, checking signed approvals against `directory`.
    fn recover(
        &self,
        key: &EffectKey,
        operator: &str,
        directory: Arc<Approvers>,
    ) -> Result<Outcome, String>;
}

pub use crate::Directory;

/// What the operators' page stands on.
pub struct Ops {
    /// The journal, opened for writing.
    pub journal: Arc<dyn JournalStore>,
    /// The directory that holds the operators' keys.
    pub approvers: Directory,
    /// The directory group whose members may use the page and settle.
    pub group: String,
    /// Recovery, or why the page cannot run it (it is then left to the workers and the command
    /// line).
    pub recover: Result<Arc<dyn Recover>, String>,
    /// The clock.
    pub clock: Arc<dyn Clock>,
    /// Sign-ins, sessions and statements waiting for a signature.
    pub auth: Auth,
}

/// The page's routes. Serve them as [`serve`] does (with the peers' addresses).
pub fn router(ops: Arc<Ops>) -> axum::Router {
    pages::router(ops)
}

/// Serve on `listener`, reached as `reach` says ([`crate::page_reach`]), until `shutdown`
/// resolves.
pub async fn serve(
    ops: Arc<Ops>,
    listener: tokio::net::TcpListener,
    reach: interlock::reach::Reach,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), InboxError> {
    crate::check(&listener, &reach, "the operators' page")?;
    axum::serve(
        listener,
        crate::web::guarded(router(ops), reach).into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(shutdown)
    .await
    .map_err(InboxError::Serve)
}
