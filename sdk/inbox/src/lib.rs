//! The approvers' inbox. Each approver signs in by proving they hold their own Ed25519 key (the
//! browser made it, non-extractable, and signs a one-time challenge with it; the key never
//! leaves it, and no script can read it), sees the requests their groups
//! hold with the facts then and now side by side, and approves by signing the exact statement
//! the gate will check — the browser signs only a statement for the request, group, level and
//! payload its page shows. The inbox hands the signed approval to the request's workflow and
//! grants nothing itself; it reads the journal only, and needs a Stripe key only to read the
//! facts now (give it a restricted, read-only one).
//!
//! The operators' page ([`ops`]) is served by the same crate with the same sign-in, as a server
//! of its own: it writes to the journal (recovery, settlements), which the inbox never does.

pub mod auth;
pub mod deliver;
pub mod desk;
pub mod ops;
mod pages;
mod web;

use std::net::SocketAddr;
use std::sync::Arc;

use interlock::approval::Approvers;
use interlock::premise::PremiseReader;
use interlock::reach::{Exposed, Reach};
use interlock::{Clock, JournalStore};

pub use deliver::Temporal;

/// The approver directory as it is now (read again on every request, so that a person removed
/// from it, or a key replaced, counts at once), or why it cannot be read.
pub type Directory = Arc<dyn Fn() -> Result<Arc<Approvers>, String> + Send + Sync>;

/// What the inbox stands on.
pub struct Inbox {
    /// The journal: routes, leases, histories.
    pub journal: Arc<dyn JournalStore>,
    /// Who may approve what: the directory as it is now, read at every request, so a person
    /// removed from it, or a key replaced, counts at once.
    pub approvers: Directory,
    /// Reads the facts as they are now, beside the facts the request was decided on.
    pub premises: Arc<dyn PremiseReader>,
    /// The name of the target the requests are sent to: budgets scoped on `target` match it.
    pub target: String,
    /// Where decisions go.
    pub deliver: Temporal,
    /// The clock approvals are dated by.
    pub clock: Arc<dyn Clock>,
    /// Sign-ins, sessions and statements waiting for a signature.
    pub auth: auth::Auth,
}

/// The inbox could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InboxError {
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// Serving failed.
    #[error("the inbox stopped: {0}")]
    Serve(std::io::Error),
    /// The address is reachable from other hosts and no TLS proxy is named.
    #[error(transparent)]
    Exposed(#[from] Exposed),
}

/// What a page asked to listen where other hosts reach it is told to do.
pub const EXPOSED_FIX: &str = "listen on loopback (the default) and serve the page through a TLS \
     proxy, named by address with --behind-proxy (the page then answers that proxy and loopback \
     only)";

/// How a page may be reached behind the TLS proxies at `proxies`: the sign-in authenticates, the
/// proxy encrypts.
pub fn page_reach(proxies: Vec<std::net::IpAddr>) -> Reach {
    Reach {
        authenticated: true,
        ..Reach::behind(proxies)
    }
}

/// The inbox's routes. Serve them with
/// `into_make_service_with_connect_info::<SocketAddr>()` (as [`serve`] does): sign-in challenges
/// are bounded per client address, and without it every request counts as one client.
pub fn router(inbox: Arc<Inbox>) -> axum::Router {
    pages::router(inbox)
}

/// Serve on `listener`, reached as `reach` says ([`page_reach`]), until `shutdown` resolves.
pub async fn serve(
    inbox: Arc<Inbox>,
    listener: tokio::net::TcpListener,
    reach: Reach,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), InboxError> {
    check(&listener, &reach, "the inbox")?;
    axum::serve(
        listener,
        web::guarded(router(inbox), reach).into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(shutdown)
    .await
    .map_err(InboxError::Serve)
}

/// Bind `addr` for [`serve`], if `reach` allows it there.
pub async fn bind(addr: SocketAddr, reach: &Reach) -> Result<tokio::net::TcpListener, InboxError> {
    reach.check("the page", addr, EXPOSED_FIX)?;
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| InboxError::Bind { addr, source })
}

/// The rule of [`interlock::reach`] on the socket itself, whatever address it was bound by.
fn check(
    listener: &tokio::net::TcpListener,
    reach: &Reach,
    server: &str,
) -> Result<(), InboxError> {
    let addr = listener.local_addr().map_err(|source| InboxError::Bind {
        addr: SocketAddr::from(([0, 0, 0, 0], 0)),
        source,
    })?;
    Ok(reach.check(server, addr, EXPOSED_FIX)?)
}

#[cfg(test)]
pub(crate) mod testing {
    /// ana, alone in support, one level of a second.
    pub(crate) fn directory() -> interlock::approval::Approvers {
        let key = interlock::approval::ApproverKey::from_seed("ana", [1; 32]).public_hex();
        let dir = serde_json::json!({
            "approvers": {"ana": {"public_key": key}},
            "groups": {"support": ["ana"]},
            "chain": [{"group": "support", "sla_ms": 1000}],
        });
        interlock::approval::Approvers::from_json("t", &dir.to_string()).unwrap()
    }
}
