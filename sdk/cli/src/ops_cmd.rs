//! `interlock ops serve`: the operators' page over the workers' journal. It writes to the journal
//! (recovery and settlements), so it opens it for writing, unlike the inbox; recovery goes through
//! the gate bound to each effect's own target, found by the name it was journaled under in the
//! gate server's file (`--config`), or the Stripe target configured as the workers configure it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use interlock::approval::Approvers;
use interlock::gate::GateConfigBuilder;
use interlock::{Clock, EffectKey, Gate, JournalStore, Outcome, SystemClock};
use interlock_inbox::auth::Auth;
use interlock_inbox::ops::{Directory, Ops, Recover};
use interlock_stripe::StripeRefundsSetup;

use interlock_postgres::Opened;

use crate::recovery::{Recoverers, journaled_target};

/// The operators' page's commands.
#[derive(clap::Subcommand)]
pub(crate) enum OpsCmd {
    /// Serve the operators' page until interrupted.
    Serve(ServeArgs),
}

#[derive(clap::Args)]
pub(crate) struct ServeArgs {
    /// Where to listen: loopback by default; an address other hosts reach needs the TLS proxy
    /// in front of the page named with --behind-proxy.
    #[arg(long, default_value = "127.0.0.1:8089")]
    listen: SocketAddr,
    /// The TLS proxies in front of the page (comma-separated IP addresses; name a proxy on this
    /// host as 127.0.0.1): the page then answers them and loopback only, and believes the client
    /// address they put in X-Forwarded-For. Without it no peer's X-Forwarded-For is believed.
    #[arg(long, env = "INTERLOCK_PAGES_BEHIND_PROXY")]
    behind_proxy: Option<String>,
    /// The approver directory (JSON) the workers check signed approvals against, holding the
    /// operators' public keys too (recovery checks approvals against it). Re-read at every request.
    #[arg(long, env = "INTERLOCK_APPROVERS")]
    approvers: PathBuf,
    /// The directory group whose members may use the page and settle.
    #[arg(long, default_value = interlock::settle::DEFAULT_GROUP)]
    group: String,
    /// The gate server's file (`interlock serve --config`): each effect is recovered through
    /// the target of the file that has the name it was journaled under (HTTP or Stripe).
    #[arg(long)]
    config: Option<PathBuf>,
    /// The name under which the Stripe target from the environment recovers, when no --config
    /// covers an effect's target.
    #[arg(long, default_value = interlock_stripe::refunds::DEFAULT_NAME)]
    target_name: String,
}

/// Recovery through the gate bound to the effect's own target, bound afresh for each effect:
/// what the journal says of the target since the page started (a demotion after it applied an
/// effect twice) and the directory as it is now are what recovery acts on, as `interlock recover`.
struct ByGate {
    store: Arc<dyn JournalStore>,
    config: GateConfigBuilder,
    targets: Recoverers,
}

impl Recover for ByGate {
    fn covers(&self, target: &str) -> Result<(), String> {
        self.targets.covers(target)
    }

    fn recover(
        &self,
        key: &EffectKey,
        operator: &str,
        directory: Arc<Approvers>,
    ) -> Result<Outcome, String> {
        let target = journaled_target(self.store.as_ref(), key).map_err(|e| format!("{e:#}"))?;
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let gate = Gate::new(
            self.store.clone(),
            self.store.clone(),
            clock,
            self.config.clone().build().map_err(|e| e.to_string())?,
        )
        .map_err(|e| e.to_string())?
        .with_attempt(format!("ops-page:{operator}"))
        // The operator signed in with their own key: the verified caller of this recovery.
        .with_caller(operator)
        .with_approvers(directory)
        .map_err(|e| e.to_string())?;
        let bound = self.targets.bind(&gate, &target)?;
        bound.recover(key).map_err(|e| e.to_string())
    }
}

/// Recovery with the targets of the gate server's file and the Stripe target as the workers
/// configure it (`STRIPE_API_BASE`, `STRIPE_SECRET_KEY`, `INTERLOCK_STRIPE_TIER`,
/// `INTERLOCK_SHOP_URL`), or why there is none.
fn recoverer(
    opened: &Opened,
    config: Option<&std::path::Path>,
    target_name: &str,
) -> Result<Arc<dyn Recover>, String> {
    let stripe = StripeRefundsSetup::from_env().map_err(|e| e.to_string());
    if config.is_none()
        && let Err(why) = &stripe
    {
        return Err(why.clone());
    }
    let targets = Recoverers::new(config, stripe, target_name).map_err(|e| format!("{e:#}"))?;
    // Checked once here, so that a configuration that cannot build says so at start-up.
    opened.config.clone().build().map_err(|e| e.to_string())?;
    Ok(Arc::new(ByGate {
        store: opened.store.clone(),
        config: opened.config.clone(),
        targets,
    }))
}

/// The approver directory, read from `path` at each call.
pub(crate) fn directory(path: PathBuf) -> Directory {
    Arc::new(move || {
        crate::read_approvers(&path)
            .map(Arc::new)
            .map_err(|e| format!("{e:#}"))
    })
}

pub(crate) fn run(opened: Opened, cmd: OpsCmd) -> anyhow::Result<()> {
    let OpsCmd::Serve(args) = cmd;
    let reach = crate::page_reach(args.behind_proxy.as_deref())?;
    // Before anything is read or connected: the same rule is checked again where it binds.
    reach.check(
        "the operators' page",
        args.listen,
        interlock_inbox::EXPOSED_FIX,
    )?;
    let approvers = crate::read_approvers(&args.approvers)?;
    if approvers
        .groups
        .get(&args.group)
        .is_none_or(std::vec::Vec::is_empty)
    {
        anyhow::bail!(
            "the approver directory {} has no member in group {:?}, whose members use the page: \
             add the operators to it (or name their group with --group)",
            args.approvers.display(),
            args.group
        );
    }
    let recover = recoverer(&opened, args.config.as_deref(), &args.target_name);
    if let (Some(path), Err(why)) = (&args.config, &recover) {
        anyhow::bail!("{}: {why}", path.display());
    }
    if let Err(why) = &recover {
        eprintln!("warning: the page cannot run recovery (it lists and settles): {why}");
    }
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async move {
        let ops = Arc::new(Ops {
            journal: opened.store,
            approvers: directory(args.approvers),
            group: args.group,
            recover,
            clock: Arc::new(SystemClock),
            auth: Auth::default(),
        });
        let listener = interlock_inbox::bind(args.listen, &reach).await?;
        let addr = listener.local_addr()?;
        eprintln!("interlock ops: listening on http://{addr}/");
        interlock_inbox::ops::serve(ops, listener, reach, async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
        Ok(())
    })
}
