//! `interlock inbox serve`: the approvers' web inbox over the workers' journal. It reads the
//! facts "now" the way the workers do (Stripe's API and, if given, the shop's order service) and
//! hands decisions to the approval workflows on Temporal as signals.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use interlock::{JournalStore, SystemClock};
use interlock_inbox::{Inbox, Temporal, auth::Auth};
use interlock_stripe::{StripeConfig, StripeRefundsSetup};

/// The inbox's commands.
#[derive(clap::Subcommand)]
pub(crate) enum InboxCmd {
    /// Serve the inbox web page until interrupted.
    Serve(ServeArgs),
}

#[derive(clap::Args)]
pub(crate) struct ServeArgs {
    /// Where to listen: loopback by default; an address other hosts reach needs the TLS proxy
    /// in front of the page named with --behind-proxy.
    #[arg(long, default_value = "127.0.0.1:8088")]
    listen: SocketAddr,
    /// The TLS proxies in front of the page (comma-separated IP addresses; name a proxy on this
    /// host as 127.0.0.1): the page then answers them and loopback only, and believes the client
    /// address they put in X-Forwarded-For. Without it no peer's X-Forwarded-For is believed.
    #[arg(long, env = "INTERLOCK_PAGES_BEHIND_PROXY")]
    behind_proxy: Option<String>,
    /// The approver directory (JSON): approvers' public keys, groups, the escalation chain.
    /// Re-read at every request: a person removed from it is refused at once.
    #[arg(long, env = "INTERLOCK_APPROVERS")]
    approvers: PathBuf,
    /// The shop's order service, if the workers read it.
    #[arg(long, env = "INTERLOCK_SHOP_URL")]
    shop_url: Option<String>,
}

pub(crate) fn run(journal: Arc<dyn JournalStore>, cmd: InboxCmd) -> anyhow::Result<()> {
    let InboxCmd::Serve(args) = cmd;
    let reach = crate::page_reach(args.behind_proxy.as_deref())?;
    // Before anything is read or connected: the same rule is checked again where it binds.
    reach.check("the inbox", args.listen, interlock_inbox::EXPOSED_FIX)?;
    // Read once now, so a directory that cannot be read stops the start; then at every request.
    crate::read_approvers(&args.approvers)?;
    let setup = StripeRefundsSetup::new(
        StripeConfig::from_env().context("the inbox reads the facts now from the Stripe API")?,
    )
    .shop(args.shop_url)?;
    let premises = setup.premises();
    let target = interlock::Target::name(&setup.target()).to_owned();
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async move {
        // Temporal's own settings: TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_API_KEY, TLS.
        let client = interlock_temporal::connect::client("interlock-inbox").await?;
        let inbox = Arc::new(Inbox {
            journal,
            approvers: crate::ops_cmd::directory(args.approvers),
            premises: Arc::new(premises),
            target,
            deliver: Temporal::new(client),
            clock: Arc::new(SystemClock),
            auth: Auth::default(),
        });
        let listener = interlock_inbox::bind(args.listen, &reach).await?;
        let addr = listener.local_addr()?;
        eprintln!("interlock inbox: listening on http://{addr}/");
        interlock_inbox::serve(inbox, listener, reach, async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
        Ok(())
    })
}
