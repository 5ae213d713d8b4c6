//! Targets by the name callers use. A target that cannot be bound (a tier-1 target whose dedupe
//! window does not cover the gate's timings, a missing secret) stays listed with the reason, so a
//! caller is told why (`FAILED_PRECONDITION`) instead of the server refusing every other target.

use std::collections::BTreeMap;
use std::sync::Arc;

use interlock::target::{Target, TargetRecords};
use interlock::{Bound, Gate, Tier};
use interlock_http::HttpTarget;
use interlock_stripe::{RefundPayload, StripeConfig, StripeRefunds, StripeRefundsSetup};
use serde_json::Value;

use crate::config::TargetConfig;

/// Checks a payload's shape for a target before anything is read or journaled.
pub type PayloadCheck = fn(&Value) -> Result<(), String>;

/// A target that can be used.
#[derive(Clone)]
pub struct TargetEntry {
    /// The gate bound to the target and its premise reader.
    pub bound: Bound,
    /// The target's own records, for `Verify` with `ask_target`.
    pub records: Option<Arc<dyn TargetRecords>>,
    /// The payload's shape, checked before `Decide` and `Submit` (`INVALID_ARGUMENT`).
    pub check_payload: Option<PayloadCheck>,
    /// The premises a submitted effect must carry: every one the target's premise reader reads.
    /// The gate re-checks only the premises an effect was decided on, so an effect submitted
    /// without them would skip the check; the server refuses it (`INVALID_ARGUMENT`).
    pub required_premises: Vec<String>,
}

/// Every configured target: usable, or broken with the reason.
#[derive(Clone, Default)]
pub struct Targets {
    by_name: BTreeMap<String, Result<TargetEntry, String>>,
}

/// Why a target cannot serve a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unusable {
    /// No target has that name.
    Unknown {
        /// The name asked for.
        name: String,
        /// The names there are.
        known: Vec<String>,
    },
    /// The target is configured but cannot be bound.
    Broken {
        /// The target.
        name: String,
        /// Why.
        reason: String,
    },
}

impl Targets {
    /// No targets.
    pub fn new() -> Self {
        Self::default()
    }

    /// Register a usable target under `name`.
    pub fn insert(&mut self, name: impl Into<String>, entry: TargetEntry) {
        self.by_name.insert(name.into(), Ok(entry));
    }

    /// Register a target that cannot be used, with the reason callers will be given.
    pub fn insert_broken(&mut self, name: impl Into<String>, reason: impl Into<String>) {
        self.by_name.insert(name.into(), Err(reason.into()));
    }

    /// Build every configured target over `gate`, reading secrets from the environment.
    pub fn from_config(gate: &Gate, configs: &BTreeMap<String, TargetConfig>) -> Self {
        let mut targets = Self::new();
        for (name, cfg) in configs {
            match build(gate, name, cfg) {
                Ok(entry) => targets.insert(name.clone(), entry),
                Err(reason) => {
                    tracing::error!(target_name = %name, %reason, "target cannot be used; calls naming it fail with FAILED_PRECONDITION");
                    targets.insert_broken(name.clone(), reason);
                }
            }
        }
        targets
    }

    /// The target named `name`.
    pub fn get(&self, name: &str) -> Result<&TargetEntry, Unusable> {
        match self.by_name.get(name) {
            Some(Ok(entry)) => Ok(entry),
            Some(Err(reason)) => Err(Unusable::Broken {
                name: name.to_owned(),
                reason: reason.clone(),
            }),
            None => Err(Unusable::Unknown {
                name: name.chars().take(80).collect(),
                known: self.by_name.keys().cloned().collect(),
            }),
        }
    }

    /// The usable target whose gate sends to the target named `journaled` in a proposal.
    pub fn by_target_name(&self, journaled: &str) -> Option<&TargetEntry> {
        self.by_name
            .values()
            .filter_map(|t| t.as_ref().ok())
            .find(|t| t.bound.target().name() == journaled)
    }

    /// Every name, usable or not.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.by_name.keys().map(String::as_str)
    }
}

/// A target's name: what a caller types, so letters, digits, `_`, `-` and `.` only.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "target name {name:?} must be 1–64 letters, digits, '_', '-' or '.'"
        ))
    }
}

/// The records of the target configured as `name`, for `verify` to ask (no gate needed): a
/// Stripe account's refunds, or an HTTP target's `[records]`; why not, if it lists none or
/// cannot be built (a secret not set).
pub fn records_of(name: &str, cfg: &TargetConfig) -> Result<Arc<dyn TargetRecords>, String> {
    match cfg {
        TargetConfig::StripeRefunds {
            api_base,
            secret_key_env,
            ..
        } => {
            let secret = std::env::var(secret_key_env).map_err(|_| {
                format!(
                    "{secret_key_env} is not set: export the Stripe secret key of target {name}"
                )
            })?;
            let stripe =
                StripeConfig::as_allowed(api_base.clone(), secret).map_err(|e| e.to_string())?;
            Ok(Arc::new(StripeRefunds::new(stripe).named(name)))
        }
        TargetConfig::Http(http) => {
            let target = HttpTarget::from_config(name, http).map_err(|e| e.to_string())?;
            if target.has_records() {
                Ok(Arc::new(target))
            } else {
                Err(format!(
                    "target {name} names no [records] table: the service's own records cannot be \
                     asked"
                ))
            }
        }
    }
}

/// A target under its configured name: the journal records it with every effect and recovers an
/// effect only through a target of that name, so two accounts cannot stand in for each other.
fn build(gate: &Gate, name: &str, cfg: &TargetConfig) -> Result<TargetEntry, String> {
    match cfg {
        TargetConfig::StripeRefunds {
            tier,
            api_base,
            secret_key_env,
            shop_url,
            rules,
        } => {
            let secret = std::env::var(secret_key_env).map_err(|_| {
                format!("{secret_key_env} is not set: export the Stripe secret key the server should use")
            })?;
            let stripe_cfg =
                StripeConfig::as_allowed(api_base.clone(), secret).map_err(|e| e.to_string())?;
            let tier = Tier::try_from(*tier).map_err(|e| e.to_string())?;
            let mut setup = StripeRefundsSetup::new(stripe_cfg)
                .shop(shop_url.clone())
                .map_err(|e| e.to_string())?;
            setup.tier = tier;
            setup.name = name.to_owned();
            let bound = setup
                .bind(gate)
                .map_err(|e| e.to_string())?
                .with_rules(rules)
                .map_err(|e| e.to_string())?;
            tracing::info!(name, api_base = %api_base, tier = ?tier, "stripe refunds target");
            let target = setup.target();
            let required_premises = setup.required_premises();
            Ok(TargetEntry {
                bound,
                records: Some(Arc::new(target)),
                check_payload: Some(|p| RefundPayload::from_value(p).map(drop)),
                required_premises,
            })
        }
        TargetConfig::Http(http) => {
            let target = HttpTarget::from_config(name, http).map_err(|e| e.to_string())?;
            let bound = target.bind(gate, &http.rules).map_err(|e| e.to_string())?;
            tracing::info!(name, tier = ?target.tier(), "http target");
            Ok(TargetEntry {
                bound,
                records: target
                    .has_records()
                    .then(|| Arc::new(target.clone()) as Arc<dyn TargetRecords>),
                // The target's canonical form refuses a payload of another shape
                // (`REFUSED:invalid_payload`) before anything is journaled.
                check_payload: None,
                required_premises: target.premise_names(),
            })
        }
    }
}
