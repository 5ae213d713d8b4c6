//! The order workflow's activities: `decide_order` reads the order's status; `cancel_gated`
//! stages the cancellation through the gate; `cancel_plain`, `cancel_keyed` and
//! `cancel_guarded` write it the baselines' ways, in one transaction of their own.

#![allow(missing_docs)] // the Temporal macros generate undocumented marker items

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use interlock::premise::NoPremises;
use interlock::target::Target;
use interlock::{Bound, Gate};
use interlock_postgres::PgOptions;
use interlock_temporal::{GatedEffect, gated};
use temporalio_common::error::ApplicationFailure;
use temporalio_macros::activities;
use temporalio_sdk::activities::{ActivityContext, ActivityError};

use super::paused::PausedStage;
use super::shop::{self, Baseline, ShopAt, Wrote};
use super::{CancelOrder, OrderDecision};
use crate::model::{RefundReport, Reported};
use crate::pause::Pause;

/// How the order worker reaches the journal and the shop.
#[derive(Clone, Debug)]
pub struct OrderSettings {
    /// The journal: a file, or a `postgres://` URL.
    pub journal: String,
    /// The journal's PostgreSQL schema.
    pub journal_schema: String,
    /// The shop.
    pub shop: ShopAt,
    /// The gate's settle margin.
    pub settle: Duration,
    /// The gate's send timeout: how long a stage may take, and a dead one's claim holds.
    pub send_timeout: Duration,
}

/// What every activity needs, built once per worker.
pub struct OrderDeps {
    shop: ShopAt,
    bound: Bound,
    pause: Option<Arc<Pause>>,
}

impl OrderDeps {
    /// From the settings (and the harness's pause and clock variables).
    pub fn new(s: OrderSettings) -> anyhow::Result<Self> {
        let clock = crate::clock::worker_clock();
        let opened = interlock_postgres::open_named(
            &s.journal,
            clock.clone(),
            &PgOptions::in_schema(s.journal_schema.clone()),
        )
        .with_context(|| {
            format!(
                "opening the journal {} (INTERLOCK_JOURNAL)",
                interlock_postgres::shown(&s.journal)
            )
        })?;
        let cfg = opened
            .config
            .settle(s.settle)
            .send_timeout(s.send_timeout)
            .retry_after(Duration::from_millis(500))
            .build()?;
        let pause = Pause::from_env().map(Arc::new);
        let mut gate = Gate::new(opened.store.clone(), opened.store, clock, cfg)?;
        let mut target = s
            .shop
            .target()
            .context("opening the shop as the gate's target")?;
        if let Some(p) = &pause {
            gate = gate.with_faults(p.clone());
            target = Arc::new(PausedStage::new(target, p.clone())) as Arc<dyn Target>;
        }
        let bound = gate.bind(target, Arc::new(NoPremises))?;
        Ok(Self {
            shop: s.shop,
            bound,
            pause,
        })
    }
}

/// The order activities.
pub struct OrderActivities {
    /// Shared dependencies.
    pub deps: Arc<OrderDeps>,
}

fn failed(e: impl std::fmt::Display) -> ActivityError {
    ApplicationFailure::new(e.to_string()).into()
}

impl OrderActivities {
    /// Run a baseline's transaction on a blocking thread, heartbeating meanwhile: `key` for the
    /// keyed one, `guarded` for the one that checks the order by hand.
    async fn baseline(
        &self,
        ctx: &ActivityContext,
        d: CancelOrder,
        key: Option<String>,
        guarded: bool,
    ) -> Result<RefundReport, ActivityError> {
        let deps = self.deps.clone();
        let wrote = interlock_temporal::with_heartbeats(ctx, move || {
            let at = |point: &str| {
                if let Some(p) = &deps.pause {
                    p.at(point);
                }
            };
            let how = match (&key, guarded) {
                (Some(k), _) => Baseline::Keyed(k),
                (None, true) => Baseline::Guarded,
                (None, false) => Baseline::Plain,
            };
            let refund = d.refund.as_deref().map(|pi| (d.request_id.as_str(), pi));
            deps.shop
                .connect()?
                .cancel_and_credit(d.order, d.customer, d.amount, refund, how, &at)
        })
        .await
        .map_err(failed)?
        .map_err(failed)?;
        Ok(match wrote {
            Wrote::Rows => RefundReport {
                outcome: Reported::Applied,
                ..RefundReport::default()
            },
            Wrote::KeySeen => RefundReport {
                outcome: Reported::Applied,
                detail: "its key was already in the idempotency table".into(),
                ..RefundReport::default()
            },
            Wrote::NotPaid => RefundReport {
                outcome: Reported::Refused,
                detail: "the order was no longer paid: nothing written".into(),
                ..RefundReport::default()
            },
        })
    }
}

#[activities]
impl OrderActivities {
    /// Read the order's status the cancellation is decided on.
    #[activity(name = "decide_order")]
    pub async fn decide_order(
        self: Arc<Self>,
        _ctx: ActivityContext,
        request: CancelOrder,
    ) -> Result<OrderDecision, ActivityError> {
        let deps = self.deps.clone();
        let order = request.order;
        let status = tokio::task::spawn_blocking(move || deps.shop.connect()?.status(order))
            .await
            .map_err(failed)?
            .map_err(failed)?;
        Ok(OrderDecision { request, status })
    }

    /// The cancellation staged through the gate.
    #[activity(name = "cancel_gated")]
    pub async fn cancel_gated(
        self: Arc<Self>,
        ctx: ActivityContext,
        d: OrderDecision,
    ) -> Result<RefundReport, ActivityError> {
        let plan = shop::plan(&d).map_err(|e| {
            ActivityError::from(
                ApplicationFailure::builder(format!("the plan is not valid: {e}"))
                    .non_retryable(true)
                    .build(),
            )
        })?;
        let effect = GatedEffect {
            key: Some(d.request.request_id.clone()),
            payload: plan.to_payload(),
            decided: Default::default(),
            lease: d.request.lease.clone(),
            labels: Default::default(),
        };
        let receipt = gated(&ctx, &self.deps.bound, effect).await?;
        Ok(crate::activities::committed(&receipt))
    }

    /// The cancellation in a plain transaction.
    #[activity(name = "cancel_plain")]
    pub async fn cancel_plain(
        self: Arc<Self>,
        ctx: ActivityContext,
        d: OrderDecision,
    ) -> Result<RefundReport, ActivityError> {
        self.baseline(&ctx, d.request, None, false).await
    }

    /// The cancellation in a transaction guarded by hand: cancel only a paid order, credit only
    /// what it cancelled.
    #[activity(name = "cancel_guarded")]
    pub async fn cancel_guarded(
        self: Arc<Self>,
        ctx: ActivityContext,
        d: OrderDecision,
    ) -> Result<RefundReport, ActivityError> {
        self.baseline(&ctx, d.request, None, true).await
    }

    /// The cancellation in a transaction that also writes its key (workflow run id + activity
    /// id) to an idempotency table, and writes nothing if the key is there.
    #[activity(name = "cancel_keyed")]
    pub async fn cancel_keyed(
        self: Arc<Self>,
        ctx: ActivityContext,
        d: OrderDecision,
    ) -> Result<RefundReport, ActivityError> {
        let key = crate::activities::temporal_key(&ctx);
        self.baseline(&ctx, d.request, Some(key), false).await
    }
}
