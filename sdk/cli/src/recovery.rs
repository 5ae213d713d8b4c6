//! Which target recovers an effect: the one it was journaled under, found by that name. An
//! effect is recovered only through a target of the name it was proposed under, so the name is
//! read from the journal, never typed: the gate server's file (`--config`) binds every target it
//! configures, HTTP or Stripe; without a file, the Stripe target from the environment recovers
//! effects journaled under `--target-name`. A name neither covers is refused with the fix.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use interlock::{Bound, EffectKey, Gate, JournalStore};
use interlock_server::config::TargetConfig;
use interlock_server::{ServerConfig, Targets};
use interlock_stripe::StripeRefundsSetup;

/// The targets recovery may bind.
pub(crate) struct Recoverers {
    /// The gate server's file and its targets, by name.
    config: Option<(PathBuf, BTreeMap<String, TargetConfig>)>,
    /// The Stripe target from the environment, under its name, or why there is none.
    stripe: Result<StripeRefundsSetup, String>,
    /// The name the Stripe target recovers under.
    stripe_name: String,
}

impl Recoverers {
    /// From the gate server's file, if one is named, and the Stripe target from the environment
    /// under `stripe_name`.
    pub(crate) fn new(
        config: Option<&Path>,
        stripe: Result<StripeRefundsSetup, String>,
        stripe_name: &str,
    ) -> anyhow::Result<Self> {
        let config = match config {
            Some(path) => Some((path.to_owned(), ServerConfig::load(path)?.targets)),
            None => None,
        };
        let stripe = stripe.map(|mut s| {
            s.name = stripe_name.to_owned();
            s
        });
        Ok(Self {
            config,
            stripe,
            stripe_name: stripe_name.to_owned(),
        })
    }

    /// Whether an effect journaled under `target` can be recovered here; if not, the fix.
    pub(crate) fn covers(&self, target: &str) -> Result<(), String> {
        if let Some((_, targets)) = &self.config
            && targets.contains_key(target)
        {
            return Ok(());
        }
        if target == self.stripe_name {
            return self.stripe.as_ref().map(drop).map_err(|why| {
                format!(
                    "{why}; or pass --config with the gate server's file, if it configures \
                     [targets.{target}]"
                )
            });
        }
        let configured = match &self.config {
            Some((path, targets)) => format!(
                "{} configures {}",
                path.display(),
                targets.keys().cloned().collect::<Vec<_>>().join(", ")
            ),
            None => "no --config names the gate server's file".to_owned(),
        };
        Err(format!(
            "the effect was journaled under target {target:?} and {configured}: pass --config \
             with a file that has a [targets.{target}] table (kind = \"http\" or \
             \"stripe_refunds\"; the name must stay the one the effect was journaled under), or \
             --target-name {target} with STRIPE_SECRET_KEY exported for a Stripe target. A \
             target written in Rust is recovered by the program that binds it (Bound::recover)"
        ))
    }

    /// `target` bound to `gate`.
    pub(crate) fn bind(&self, gate: &Gate, target: &str) -> Result<Bound, String> {
        self.covers(target)?;
        if let Some((path, targets)) = &self.config
            && let Some(cfg) = targets.get(target)
        {
            let one = BTreeMap::from([(target.to_owned(), cfg.clone())]);
            return Targets::from_config(gate, &one)
                .get(target)
                .map(|entry| entry.bound.clone())
                .map_err(|e| match e {
                    interlock_server::targets::Unusable::Broken { reason, .. } => format!(
                        "target {target:?} of {} cannot be bound: {reason}",
                        path.display()
                    ),
                    other => format!("{other:?}"),
                });
        }
        match &self.stripe {
            Ok(setup) => setup.bind(gate).map_err(|e| e.to_string()),
            Err(why) => Err(why.clone()),
        }
    }
}

/// The name of the target `key` was journaled under.
pub(crate) fn journaled_target(
    store: &dyn JournalStore,
    key: &EffectKey,
) -> anyhow::Result<String> {
    let state = store.state(key)?;
    state.first().map(|p| p.target.clone()).with_context(|| {
        format!(
            "the journal holds no effect {key}: `interlock journal list` shows the keys it holds"
        )
    })
}
