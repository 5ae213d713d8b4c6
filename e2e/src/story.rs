//! The people in an approval story, and the desk they work at. Each approver holds their own
//! Ed25519 key; the workers hold only the directory of public keys and the policy. A person reads
//! what the journal's route shows them — the payload and the facts read for it — signs exactly
//! that, and sends the signed approval to the request's workflow as a signal, as the inbox does.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use e2e_worker::RefundRequest;
use e2e_worker::approvals::{ApprovalWorkflow, AskInput, AskReport, Denial, Way};
use interlock::approval::{ApproverKey, Approvers, Policy, Route, SignedApproval, Statement};
use interlock::core::Premises;
use interlock::verify::{Sources, verify};
use interlock::{EffectKey, JournalStore};
use interlock_testkit::sim::SimTarget;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use temporalio_client::errors::WorkflowStartError;
use temporalio_client::{
    Client, WorkflowGetResultOptions, WorkflowQueryOptions, WorkflowSignalOptions,
    WorkflowStartOptions, WorkflowTerminateOptions,
};

/// An hour, in ms.
pub const HOUR_MS: i64 = 3_600_000;

/// An approver and their own key.
pub struct Person {
    /// Their id in the directory.
    pub id: &'static str,
    /// Their private key.
    pub key: ApproverKey,
}

impl Person {
    /// `id`, with a key derived from their id (a story's keys are fixed, so its records are).
    pub fn new(id: &'static str) -> Self {
        let seed: [u8; 32] = Sha256::digest(format!("interlock-story:{id}")).into();
        Self {
            id,
            key: ApproverKey::from_seed(id, seed),
        }
    }

    /// Sign what `route` shows, for the group and level it is at, valid for an hour from
    /// `now_ms`.
    pub fn approve(&self, route: &Route, now_ms: i64) -> anyhow::Result<SignedApproval> {
        let detail = &route.step.detail;
        let payload = detail
            .get("payload")
            .cloned()
            .context("the route shows no payload to approve")?;
        let premises: Premises =
            serde_json::from_value(detail.get("premises").cloned().unwrap_or(Value::Null))
                .context("the route shows no facts to approve")?;
        Ok(self.key.sign(Statement {
            request: route.request.clone(),
            group: route.step.group.clone(),
            level: route.step.level,
            approver: self.id.to_owned(),
            payload,
            premises,
            issued_ms: now_ms,
            expires_ms: now_ms + HOUR_MS,
            repair_of: route.step.repair_of.clone(),
        })?)
    }
}

/// A refund request for the approval workflow: `amount` cents on `payment`, through the gate at
/// tier 1 (the policy or a person provides its lease).
pub fn refund(id: &str, payment: &str, amount: i64) -> RefundRequest {
    RefundRequest {
        request_id: id.into(),
        payment: payment.into(),
        amount,
        currency: "usd".into(),
        lease: String::new(),
        system: e2e_worker::System::GatedT1,
        labels: Default::default(),
        step: None,
    }
}

/// Support (ana, ben) holds a request for 4 h, then managers (mia) for 8 h.
pub fn directory(people: &[Person]) -> anyhow::Result<Approvers> {
    let approvers: serde_json::Map<String, Value> = people
        .iter()
        .map(|p| (p.id.to_owned(), json!({ "public_key": p.key.public_hex() })))
        .collect();
    let dir = json!({
        "approvers": approvers,
        "groups": { "support": ["ana", "ben"], "managers": ["mia"] },
        "chain": [
            { "group": "support", "sla_ms": 4 * HOUR_MS },
            { "group": "managers", "sla_ms": 8 * HOUR_MS },
        ],
    });
    Ok(Approvers::from_json("story", &dir.to_string())?)
}

/// Refunds over $50 or for a flagged customer need a person; an ineligible order, or one others
/// already refunded as much as is asked, is refused.
pub fn policy() -> anyhow::Result<Policy> {
    Ok(serde_json::from_value(json!({ "rules": [
        { "name": "over_limit", "when": { "over": { "field": "amount", "max": 5000 } }, "then": "route" },
        { "name": "flagged_customer", "when": { "premise": { "premise": "customer_flagged", "equals": true } }, "then": "route" },
        { "name": "ineligible_order", "when": { "premise": { "premise": "order_eligible", "equals": false } }, "then": "refuse" },
        { "name": "already_refunded", "when": { "at_least": { "premise": "refunded_by_others", "field": "amount" } }, "then": "refuse" },
    ]}))?)
}

/// Write the directory and the policy where the workers read them; returns the worker's
/// environment for them.
pub fn write_config(
    dir: &Path,
    approvers: &Approvers,
    policy: &Policy,
) -> anyhow::Result<Vec<(String, String)>> {
    let a = dir.join("approvers.json");
    let p = dir.join("policy.json");
    std::fs::write(&a, serde_json::to_string_pretty(approvers)?)?;
    std::fs::write(&p, serde_json::to_string_pretty(policy)?)?;
    Ok(vec![
        ("INTERLOCK_APPROVERS".into(), a.display().to_string()),
        ("INTERLOCK_POLICY".into(), p.display().to_string()),
    ])
}

/// Where people meet the workflows: Temporal for signals and results, the journal for routes.
pub struct Desk {
    /// Temporal.
    pub client: Client,
    /// The journal the workers share.
    pub journal: Arc<dyn JournalStore>,
    /// The workers' task queue.
    pub queue: String,
}

impl Desk {
    /// Start the approval workflow `workflow_id` for `request`, through the gate.
    pub async fn ask(
        &self,
        workflow_id: &str,
        request: RefundRequest,
        sla_divisor: u32,
    ) -> anyhow::Result<()> {
        let input = AskInput {
            request,
            sla_divisor,
            max_repairs: 1,
            way: Way::RulesAndGate,
        };
        self.start(workflow_id, input).await
    }

    /// Start the approval workflow `workflow_id` with `input`.
    pub async fn start(&self, workflow_id: &str, input: AskInput) -> anyhow::Result<()> {
        if !self.deliver(workflow_id, input).await? {
            bail!("workflow {workflow_id} is already running");
        }
        Ok(())
    }

    /// Deliver a request as workflow `workflow_id`: `false` when a workflow with that id is
    /// still running, which Temporal refuses to start twice (a closed one gets a new run).
    pub async fn deliver(&self, workflow_id: &str, input: AskInput) -> anyhow::Result<bool> {
        match self
            .client
            .start_workflow(
                ApprovalWorkflow::run,
                input,
                WorkflowStartOptions::new(self.queue.as_str(), workflow_id).build(),
            )
            .await
        {
            Ok(_) => Ok(true),
            Err(WorkflowStartError::AlreadyStarted { .. }) => Ok(false),
            Err(e) => Err(e).with_context(|| format!("starting {workflow_id}")),
        }
    }

    /// Wait until `request`'s latest route step satisfies `ready`.
    pub async fn route_where(
        &self,
        request: &str,
        ready: impl Fn(&Route) -> bool,
        timeout: Duration,
    ) -> anyhow::Result<Route> {
        let t0 = Instant::now();
        loop {
            let routes = self.journal.routes(request)?;
            if let Some(last) = routes.last().filter(|r| ready(r)) {
                return Ok(last.clone());
            }
            if t0.elapsed() > timeout {
                bail!(
                    "request {request} did not reach the expected step within {timeout:?}; its \
                     route: {routes:?}"
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Send `offer` to the workflow of `route`'s request.
    pub async fn send(&self, route: &Route, offer: SignedApproval) -> anyhow::Result<()> {
        let wf = workflow_of(route)?;
        self.client
            .get_workflow_handle::<ApprovalWorkflow>(wf.as_str())
            .signal(
                ApprovalWorkflow::approve,
                offer,
                WorkflowSignalOptions::default(),
            )
            .await
            .with_context(|| format!("signalling {wf}"))?;
        Ok(())
    }

    /// Decline `route`'s request as `who`.
    pub async fn deny(&self, route: &Route, who: &str, reason: &str) -> anyhow::Result<()> {
        let wf = workflow_of(route)?;
        self.client
            .get_workflow_handle::<ApprovalWorkflow>(wf.as_str())
            .signal(
                ApprovalWorkflow::deny,
                Denial {
                    request: route.request.clone(),
                    approver: who.to_owned(),
                    reason: reason.to_owned(),
                },
                WorkflowSignalOptions::default(),
            )
            .await?;
        Ok(())
    }

    /// Terminate `workflow_id`'s open run, as an operator would.
    pub async fn terminate(&self, workflow_id: &str, reason: &str) -> anyhow::Result<()> {
        self.client
            .get_workflow_handle::<ApprovalWorkflow>(workflow_id)
            .terminate(WorkflowTerminateOptions::builder().reason(reason).build())
            .await
            .with_context(|| format!("terminating {workflow_id}"))
    }

    /// Wait until `workflow_id`'s open run waits for a person.
    pub async fn waiting(&self, workflow_id: &str, timeout: Duration) -> anyhow::Result<()> {
        let t0 = Instant::now();
        loop {
            let status = self
                .client
                .get_workflow_handle::<ApprovalWorkflow>(workflow_id)
                .query(
                    ApprovalWorkflow::status,
                    (),
                    WorkflowQueryOptions::default(),
                )
                .await;
            if status.as_ref().is_ok_and(|s| s.waiting) {
                return Ok(());
            }
            if t0.elapsed() > timeout {
                bail!("{workflow_id} did not wait for a person within {timeout:?}: {status:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The workflow's report, once it closes.
    pub async fn report(&self, workflow_id: &str) -> anyhow::Result<AskReport> {
        self.client
            .get_workflow_handle::<ApprovalWorkflow>(workflow_id)
            .get_result(WorkflowGetResultOptions::default())
            .await
            .with_context(|| format!("waiting for {workflow_id}"))
    }
}

/// The workflow a route's detail names.
pub fn workflow_of(route: &Route) -> anyhow::Result<String> {
    route
        .step
        .detail
        .get("workflow_id")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .with_context(|| format!("request {}'s route names no workflow", route.request))
}

/// `verify` on each key, with the payments API's records and the approver directory.
pub fn verify_keys(
    env: &crate::cell::Env,
    directory: &Approvers,
    keys: &[impl AsRef<str>],
) -> anyhow::Result<Vec<Value>> {
    let target = SimTarget(env.sim.clone());
    let budgets = env.journal.budget_changes()?;
    let mut rows = Vec::new();
    for k in keys {
        let key = EffectKey::fixed(k.as_ref())?;
        // The target's webhook may still be on its way for a refund just made.
        let mut v;
        let t0 = std::time::Instant::now();
        loop {
            v = verify(
                env.journal.as_ref(),
                &key,
                &Sources {
                    leases: Some(env.journal.as_ref()),
                    records: Some(&target),
                    approvers: Some(directory),
                    budgets: Some(&budgets),
                    ..Sources::default()
                },
            );
            let confirmed = v
                .columns
                .iter()
                .any(|c| c.name == "confirmed by target" && c.holds == Some(true));
            let committed = v.outcome == Some(interlock::core::Status::Committed);
            if confirmed || !committed || t0.elapsed() > Duration::from_secs(10) {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        rows.push(serde_json::to_value(&v).context("a verification")?);
    }
    Ok(rows)
}

/// Print a story's record, and unless `check`, write it to `out` as `<stem>.json` and
/// `<stem>.md`; then fail with `problems`, if any.
pub fn publish(
    out: &Path,
    stem: &str,
    record: &Value,
    md: &str,
    check: bool,
    problems: &[String],
) -> anyhow::Result<()> {
    #[allow(clippy::print_stdout)] // the record is the harness's output
    {
        println!("{md}");
    }
    if !check {
        std::fs::create_dir_all(out)?;
        std::fs::write(
            out.join(format!("{stem}.json")),
            serde_json::to_string_pretty(record)? + "\n",
        )?;
        std::fs::write(out.join(format!("{stem}.md")), md)?;
    }
    if !problems.is_empty() {
        bail!("{stem} did not hold: {}", problems.join("; "));
    }
    Ok(())
}
