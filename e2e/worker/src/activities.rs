//! The activities: `decide` reads the premises; `refund_gated` runs the refund through the gate;
//! `refund_naive`, `refund_keyed` and `refund_checked` run it the baselines' ways.

#![allow(missing_docs)] // the Temporal macros generate undocumented marker items

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use interlock::approval::{Approvers, Policy};
use interlock::premise::PremiseReader;
use interlock::{Bound, Clock, EffectKey, Gate, JournalStore, Tier};
use interlock_postgres::PgOptions;
use interlock_stripe::{StripeConfig, StripeRefunds, StripeRefundsSetup};
use interlock_temporal::{GatedEffect, GatedReceipt, gated};
use serde_json::Value;
use temporalio_common::error::ApplicationFailure;
use temporalio_macros::activities;
use temporalio_sdk::activities::{ActivityContext, ActivityError};

use crate::baselines::{self, Attempt};
use crate::model::{Decision, RefundReport, RefundRequest, Reported, System};
use crate::pause::Pause;
use interlock_stripe::RefundPremises;

/// What every activity needs, built once per worker.
pub struct Deps {
    clock: Arc<dyn Clock>,
    base: String,
    secret: String,
    journal: Arc<dyn JournalStore>,
    gates: [Bound; 3],
    stripe: StripeRefunds,
    premises: RefundPremises,
    pause: Option<Arc<Pause>>,
    approvers: Option<Arc<dyn interlock::approval::DirectorySource>>,
    policy: Policy,
}

/// How the worker's activities reach Stripe, the shop and the journal (`harness-worker` fills it
/// from its flags, each with an environment fallback).
#[derive(Clone, Debug)]
pub struct Settings {
    /// Stripe's API (or a server that speaks it).
    pub stripe: StripeConfig,
    /// The journal: a file shared by the workers of one host, or a `postgres://` URL shared by
    /// workers on any number of hosts.
    pub journal: String,
    /// The journal's PostgreSQL schema (for a `postgres://` journal).
    pub journal_schema: String,
    /// The shop's order service, if any (never looked for at Stripe's address).
    pub shop_url: Option<String>,
    /// The gate's settle margin.
    pub settle: Duration,
    /// The gate's send timeout.
    pub send_timeout: Duration,
    /// Whom people's signed approvals are checked against (the approval workflow needs it).
    pub approvers: Option<Approvers>,
    /// The file `approvers` was read from: the gate reads it again whenever it changes, so a
    /// person removed from it approves nothing from the next send on.
    pub approvers_file: Option<std::path::PathBuf>,
    /// Which requests need a person (the approval workflow's); empty clears every request.
    pub policy: Policy,
}

/// The variable naming the principal the worker acts for.
pub const PRINCIPAL_VAR: &str = "INTERLOCK_PRINCIPAL";

impl Deps {
    /// From explicit settings (and the harness's pause and clock variables).
    pub fn new(settings: Settings) -> anyhow::Result<Self> {
        let Settings {
            stripe: cfg,
            journal: journal_name,
            journal_schema,
            shop_url,
            settle,
            send_timeout,
            approvers,
            approvers_file,
            policy,
        } = settings;
        // The directory as it is now, for routing and for accepting approvals as for the gate:
        // read again whenever its file changes.
        let approvers: Option<Arc<dyn interlock::approval::DirectorySource>> =
            match (&approvers_file, approvers) {
                (Some(path), _) => Some(Arc::new(
                    interlock::approval::DirectoryFile::open(path)
                        .with_context(|| format!("the approver directory {}", path.display()))?,
                )),
                (None, Some(dir)) => Some(Arc::new(interlock::approval::Fixed(Arc::new(dir)))),
                (None, None) => None,
            };
        let clock = crate::clock::worker_clock();
        let opts = PgOptions::in_schema(journal_schema);
        let opened = interlock_postgres::open_named(&journal_name, clock.clone(), &opts)
            .with_context(|| {
                format!(
                    "opening the journal {} (INTERLOCK_JOURNAL)",
                    interlock_postgres::shown(&journal_name)
                )
            })?;
        let journal = opened.store;
        let gate_cfg = opened
            .config
            .settle(settle)
            .send_timeout(send_timeout)
            .retry_after(Duration::from_millis(500))
            .build()?;
        let pause = Pause::from_env().map(Arc::new);
        let mut gate = Gate::new(journal.clone(), journal.clone(), clock.clone(), gate_cfg)?;
        if let Some(p) = &pause {
            gate = gate.with_faults(p.clone());
        }
        if let Some(source) = &approvers {
            gate = gate.with_approver_source(source.clone())?;
        }
        // The principal this worker acts for: journaled with each effect it proposes, and who
        // the leases that name their spenders are judged for.
        if let Some(p) = std::env::var(PRINCIPAL_VAR).ok().filter(|p| !p.is_empty()) {
            gate = gate.with_caller(p);
        }
        // The shop's order service is its own service, never looked for at Stripe's address;
        // without one, the premises are Stripe's own.
        let setup = StripeRefundsSetup::new(cfg.clone()).shop(shop_url)?;
        let bind = |tier| {
            let mut at = setup.clone();
            at.tier = tier;
            at.bind(&gate)
        };
        let gates = [bind(Tier::One)?, bind(Tier::Two)?, bind(Tier::Three)?];
        Ok(Self {
            clock,
            base: cfg.base_url.clone(),
            secret: cfg.secret_key.clone(),
            journal,
            gates,
            stripe: setup.target(),
            premises: setup.premises(),
            pause,
            approvers,
            policy,
        })
    }

    /// The premise reader every decision reads with.
    pub fn premises(&self) -> &RefundPremises {
        &self.premises
    }

    /// The approval policy.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The approver directory as it is now, if the worker has one.
    pub fn approvers(&self) -> Result<Option<Arc<Approvers>>, interlock::approval::DirectoryError> {
        self.approvers.as_ref().map(|s| s.current()).transpose()
    }

    /// The journal with its leases and routes.
    pub fn journal(&self) -> &Arc<dyn JournalStore> {
        &self.journal
    }

    /// Now, by the worker's clock.
    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }
}

/// The refund activities.
pub struct RefundActivities {
    /// Shared dependencies.
    pub deps: Arc<Deps>,
}

fn payload(r: &RefundRequest) -> Value {
    r.payload()
}

/// Run a baseline's blocking attempt with the same heartbeats the gated activity gets.
async fn with_heartbeats<T: Send + 'static>(
    ctx: &ActivityContext,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ActivityError> {
    interlock_temporal::with_heartbeats(ctx, work)
        .await
        .map_err(|e| ApplicationFailure::new(format!("worker task died: {e}")).into())
}

/// Temporal's recommended idempotency key for an activity: its workflow run id and its
/// activity id, the same for every attempt.
pub(crate) fn temporal_key(ctx: &ActivityContext) -> String {
    let info = ctx.info();
    format!(
        "{}/{}",
        info.workflow_run_id.as_deref().unwrap_or("standalone"),
        info.activity_id
    )
}

/// The report of a gated step that committed.
pub(crate) fn committed(receipt: &GatedReceipt) -> RefundReport {
    RefundReport {
        outcome: Reported::Committed,
        via: Some(receipt.via),
        detail: if receipt.replayed {
            "replayed from the journal".into()
        } else {
            String::new()
        },
        ..RefundReport::default()
    }
}

fn finish(a: Attempt) -> Result<RefundReport, ActivityError> {
    match a {
        Attempt::Report(r) => Ok(r),
        Attempt::Retry(m) => Err(ApplicationFailure::new(m).into()),
        Attempt::GiveUp(m) => Err(ApplicationFailure::builder(m)
            .type_name("RefundRejected".to_owned())
            .non_retryable(true)
            .build()
            .into()),
    }
}

#[activities]
impl RefundActivities {
    /// Read the premises the refund is decided on.
    #[activity(name = "decide")]
    pub async fn decide(
        self: Arc<Self>,
        _ctx: ActivityContext,
        request: RefundRequest,
    ) -> Result<Decision, ActivityError> {
        let deps = self.deps.clone();
        let r = request.clone();
        let read = tokio::task::spawn_blocking(move || {
            let key = EffectKey::fixed(r.request_id.clone()).map_err(|e| e.to_string())?;
            deps.premises
                .read(&key, &payload(&r))
                .map_err(|e| e.to_string())
        })
        .await
        .map_err(|e| ApplicationFailure::new(e.to_string()))?;
        let premises = read.map_err(ApplicationFailure::new)?;
        Ok(Decision { request, premises })
    }

    /// The refund through the gate at the request's tier.
    #[activity(name = "refund_gated")]
    pub async fn refund_gated(
        self: Arc<Self>,
        ctx: ActivityContext,
        d: Decision,
    ) -> Result<RefundReport, ActivityError> {
        let bound = match d.request.system {
            System::GatedT2 | System::GatedPyT2 | System::GatedHttpT2 => &self.deps.gates[1],
            System::GatedT3 | System::GatedHttpT3 => &self.deps.gates[2],
            _ => &self.deps.gates[0],
        };
        let effect = GatedEffect {
            key: Some(d.request.request_id.clone()),
            payload: payload(&d.request),
            decided: d.premises.clone(),
            lease: d.request.lease.clone(),
            labels: d.request.labels.clone(),
        };
        let receipt = gated(&ctx, bound, effect).await?;
        Ok(RefundReport {
            refund_id: receipt
                .result
                .get("id")
                .and_then(Value::as_str)
                .map(str::to_owned),
            ..committed(&receipt)
        })
    }

    /// The refund with no idempotency key.
    #[activity(name = "refund_naive")]
    pub async fn refund_naive(
        self: Arc<Self>,
        ctx: ActivityContext,
        d: Decision,
    ) -> Result<RefundReport, ActivityError> {
        let deps = self.deps.clone();
        finish(
            with_heartbeats(&ctx, move || {
                baselines::naive(&deps.base, &deps.secret, &d, deps.pause.as_deref())
            })
            .await?,
        )
    }

    /// The refund keyed by workflow run id + activity id.
    #[activity(name = "refund_keyed")]
    pub async fn refund_keyed(
        self: Arc<Self>,
        ctx: ActivityContext,
        d: Decision,
    ) -> Result<RefundReport, ActivityError> {
        let key = temporal_key(&ctx);
        let deps = self.deps.clone();
        finish(
            with_heartbeats(&ctx, move || {
                baselines::keyed(&deps.base, &deps.secret, &d, &key, deps.pause.as_deref())
            })
            .await?,
        )
    }

    /// The refund with a careful hand-written re-check.
    #[activity(name = "refund_checked")]
    pub async fn refund_checked(
        self: Arc<Self>,
        ctx: ActivityContext,
        d: Decision,
    ) -> Result<RefundReport, ActivityError> {
        let deps = self.deps.clone();
        finish(
            with_heartbeats(&ctx, move || {
                let ctx = baselines::CheckedCtx {
                    target: &deps.stripe,
                    premises: &deps.premises,
                    leases: deps.journal.as_ref(),
                    now_ms: deps.clock.now_ms(),
                    base: &deps.base,
                    secret: &deps.secret,
                };
                baselines::checked(&ctx, &d, deps.pause.as_deref())
            })
            .await?,
        )
    }
}
