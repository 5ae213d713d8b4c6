//! One cell of the order matrix: the shop's rows for it, an approval, a workflow on a queue of
//! its own, the interruption, fresh workers until it closes, and the verdict from the shop.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use e2e_worker::model::Reported;
use e2e_worker::orders::shop::{Conn, Observed, ShopAt};
use e2e_worker::orders::workflow::CancelOrderWorkflow;
use e2e_worker::orders::{CancelOrder, OrderSystem};
use e2e_worker::{RefundReport, StepTimings};
use interlock::{Grant, JournalStore};
use serde::{Deserialize, Serialize};
use temporalio_client::{WorkflowGetResultOptions, WorkflowStartOptions};

use super::relay::{Payments, Refunds};
use super::{Interrupt, OrderCase, World};
use crate::procs::{DevServer, WorkerProc, now_ms};

/// One judged cell.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct OrderCell {
    /// Case.
    pub case: String,
    /// System.
    pub system: String,
    /// The workflow's answer.
    pub outcome: String,
    /// Times the write should have landed (0 or 1).
    pub wanted: i64,
    /// Times it landed, by the customer's credit.
    pub applied: i64,
    /// What the shop's rows say.
    pub observed: Observed,
    /// The customer's credit when the worker was interrupted (killed, or paused for the world).
    pub at_interrupt: Option<i64>,
    /// Whether the interruption came where the case says: before the rows were committed, or
    /// (after `COMMIT`, mid-`COMMIT`) once they were.
    pub interrupted_as_claimed: bool,
    /// Whether the answer agrees with the rows.
    pub answer_agrees: bool,
    /// Interrupted as claimed; landed exactly as wanted, with its audit row, the order's status
    /// as it should be; the answer agrees (and, for the gate, a refusal names the case's
    /// cause).
    pub held: bool,
    /// Where the case asks for a refund: what the payments API shows once it was relayed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refunds: Option<Refunds>,
    /// Attempts of the last activity started (Temporal's count).
    pub attempts: Option<u32>,
    /// The cell's wall time.
    pub wall_s: f64,
}

/// What every cell shares.
pub struct Stage {
    /// The dev server.
    pub server: DevServer,
    /// The shop.
    pub shop: ShopAt,
    /// The harness's own connection to it.
    pub conn: Conn,
    /// On PostgreSQL: the server's commits, held for the mid-`COMMIT` case.
    pub commits: Option<CommitHold>,
    /// On PostgreSQL: the server's owner, who alone may write the substrate's outbox.
    pub admin: Option<String>,
    /// The payments API the refunds go to, and the gate's relay.
    pub payments: Payments,
    /// The journal (leases are granted and revoked here).
    pub journal: Arc<dyn JournalStore>,
    /// Its file.
    pub journal_path: PathBuf,
    /// `order-worker`.
    pub worker_bin: PathBuf,
    /// Scratch space.
    pub work: PathBuf,
    /// The workflows' client.
    pub client: temporalio_client::Client,
    /// Its runtime.
    pub rt: tokio::runtime::Runtime,
}

/// The credit every cell's cancellation gives.
pub(crate) const AMOUNT: i64 = 500;
const PAUSE_WAIT: Duration = Duration::from_secs(60);
const CLOSE_WAIT: Duration = Duration::from_secs(120);

/// A PostgreSQL server's commits, held in the server: with a synchronous standby named that
/// never connects, a `COMMIT` is written and flushed and then waits, invisible to everyone else
/// and holding its locks, until the name is cleared. Only for a server of the harness's own.
pub struct CommitHold {
    admin: postgres::Client,
}

impl CommitHold {
    /// As the server's superuser at `admin`.
    pub fn connect(admin: &str) -> anyhow::Result<Self> {
        let mut admin = postgres::Client::connect(admin, postgres::NoTls)?;
        admin.batch_execute("SET synchronous_commit = local")?;
        Ok(Self { admin })
    }

    fn standby(&mut self, name: &str) -> anyhow::Result<()> {
        self.admin.batch_execute(&format!(
            "ALTER SYSTEM SET synchronous_standby_names = '{name}'"
        ))?;
        self.admin.batch_execute("SELECT pg_reload_conf()")?;
        // The setting reaches every backend at its next command; the waits start with it.
        std::thread::sleep(Duration::from_millis(200));
        Ok(())
    }

    /// Hold every commit from now on.
    pub fn hold(&mut self) -> anyhow::Result<()> {
        self.standby("interlock_matrix_no_such_standby")
    }

    /// Let every held commit finish.
    pub fn release(&mut self) -> anyhow::Result<()> {
        self.standby("")
    }

    /// Wait until a session is held inside its `COMMIT`.
    pub fn wait_holding(&mut self) -> anyhow::Result<()> {
        let started = Instant::now();
        loop {
            let held: i64 = self
                .admin
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep' \
                     AND query ILIKE 'commit%'",
                    &[],
                )?
                .get(0);
            if held > 0 {
                return Ok(());
            }
            if started.elapsed() > PAUSE_WAIT {
                bail!("no COMMIT reached the server within {PAUSE_WAIT:?}");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Stage {
    fn worker(
        &self,
        dir: &Path,
        queue: &str,
        pause: Option<&str>,
        n: usize,
    ) -> anyhow::Result<WorkerProc> {
        let shop = &self.shop;
        let vars: Vec<(String, String)> = [
            (
                "TEMPORAL_ADDRESS",
                format!("http://{}", self.server.address),
            ),
            ("TASK_QUEUE", queue.to_owned()),
            ("INTERLOCK_JOURNAL", self.journal_path.display().to_string()),
            ("SHOP_DATABASE", shop.url.clone()),
            ("SHOP_SUBSTRATE_SCHEMA", shop.substrate.clone()),
            ("SHOP_TABLES_SCHEMA", shop.tables.clone()),
            ("INTERLOCK_DB_STAGE_KEY", shop.stage_key.clone()),
            ("INTERLOCK_SETTLE_MS", "500".to_owned()),
            ("INTERLOCK_SEND_TIMEOUT_MS", "5000".to_owned()),
            ("RUST_LOG", "info".to_owned()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        WorkerProc::spawn(
            &self.worker_bin,
            &[],
            &vars,
            pause,
            dir,
            &dir.join(format!("worker-{n}.log")),
        )
    }

    /// The credit once the dead worker's held commit has landed (it was flushed before it was
    /// held, so it does land), or what the shop shows after ten seconds.
    fn landed(&mut self, order: i64, customer: i64) -> anyhow::Result<i64> {
        let started = Instant::now();
        loop {
            let credit = self.conn.observe(order, customer)?.credit;
            if credit > 0 || started.elapsed() > Duration::from_secs(10) {
                return Ok(credit);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Run one cell: order `n`, its customer, an approval for it, a workflow on a queue of its
    /// own, the interruption, fresh workers until it closes, and the verdict from the shop.
    pub fn run(
        &mut self,
        case: &OrderCase,
        system: OrderSystem,
        n: i64,
    ) -> anyhow::Result<OrderCell> {
        let t0 = Instant::now();
        let id = format!(
            "{}-{}-{}-{}",
            case.name,
            system.name(),
            std::process::id(),
            now_ms() % 1_000_000
        );
        let dir = self.work.join(&id);
        std::fs::create_dir_all(&dir)?;
        let (order, customer) = (n, 1_000 + n);
        let (lease, queue, wf) = (format!("lease-{id}"), format!("q-{id}"), format!("wf-{id}"));
        self.conn.add_order(order, customer, AMOUNT)?;
        self.journal
            .grant_lease(&Grant::new(&lease, "ops@shop", now_ms()).unlimited())
            .context("granting the cell's approval")?;
        let pause = match case.interrupt {
            Interrupt::None | Interrupt::MidCommit | Interrupt::RewriteOutbox => None,
            Interrupt::At(p) | Interrupt::Pause(p, _) => Some(p),
            Interrupt::DuringRecovery => Some("after_response"),
        };
        if case.interrupt == Interrupt::MidCommit {
            self.commits
                .as_mut()
                .context("only a PostgreSQL shop can hold a COMMIT in the server")?
                .hold()?;
        }
        let mut workers = vec![self.worker(&dir, &queue, pause, 0)?];
        // The order's payment, refunded once the cancellation commits, and another payment the
        // rewrite redirects the refund to.
        let refund = (case.interrupt == Interrupt::RewriteOutbox).then(|| {
            (
                self.payments.payment(AMOUNT),
                self.payments.payment(10 * super::relay::REWRITTEN_AMOUNT),
            )
        });
        let request_id = format!("req-{id}");
        let request = CancelOrder {
            request_id: request_id.clone(),
            refund: refund.as_ref().map(|(intent, _)| intent.clone()),
            order,
            customer,
            amount: AMOUNT,
            lease: lease.clone(),
            system,
            step: Some(StepTimings::default()),
        };
        let client = self.client.clone();
        let (q, w) = (queue.clone(), wf.clone());
        let result = self.rt.spawn(async move {
            let handle = client
                .start_workflow(
                    CancelOrderWorkflow::run,
                    request,
                    WorkflowStartOptions::new(q.as_str(), w.as_str()).build(),
                )
                .await?;
            anyhow::Ok(
                handle
                    .get_result(WorkflowGetResultOptions::default())
                    .await?,
            )
        });
        // The shop's credit where the worker was interrupted: whether the kill came where the
        // case says (before the rows were committed, or after).
        let mut at_interrupt = None;
        match case.interrupt {
            Interrupt::None | Interrupt::RewriteOutbox => {}
            Interrupt::At(p) => {
                workers[0].wait_paused(p, PAUSE_WAIT)?;
                at_interrupt = Some(self.conn.observe(order, customer)?.credit);
                workers[0].kill9()?;
                workers.push(self.worker(&dir, &queue, None, 1)?);
            }
            Interrupt::DuringRecovery => {
                workers[0].wait_paused("after_response", PAUSE_WAIT)?;
                at_interrupt = Some(self.conn.observe(order, customer)?.credit);
                workers[0].kill9()?;
                workers.push(self.worker(&dir, &queue, Some("during_recovery"), 1)?);
                workers[1].wait_paused("during_recovery", PAUSE_WAIT)?;
                workers[1].kill9()?;
                workers.push(self.worker(&dir, &queue, None, 2)?);
            }
            Interrupt::MidCommit => {
                let commits = self.commits.as_mut().context("no commit hold")?;
                let killed = commits.wait_holding().and_then(|()| workers[0].kill9());
                // The server finishes the dead worker's commit once the standby is no longer
                // waited for (or the stage's own statement timeout ends the wait); its session
                // then finds its client gone and ends. Released whatever happened, so a failed
                // cell leaves no commit held.
                commits.release()?;
                killed?;
                at_interrupt = Some(self.landed(order, customer)?);
                workers.push(self.worker(&dir, &queue, None, 1)?);
            }
            Interrupt::Pause(p, world) => {
                workers[0].wait_paused(p, PAUSE_WAIT)?;
                at_interrupt = Some(self.conn.observe(order, customer)?.credit);
                match world {
                    World::Ships => self.conn.set_status(order, "shipped")?,
                    World::Revoke => {
                        self.journal.revoke_lease(&lease)?;
                    }
                }
                workers[0].release()?;
            }
        }
        let started = Instant::now();
        while !result.is_finished() {
            let n = workers.len() - 1;
            if let Some(status) = workers
                .last_mut()
                .map(WorkerProc::try_wait)
                .transpose()?
                .flatten()
            {
                let log = std::fs::read_to_string(dir.join(format!("worker-{n}.log")))
                    .unwrap_or_default();
                bail!("{wf}: worker {n} exited ({status}) before the workflow closed: {log}");
            }
            if started.elapsed() > CLOSE_WAIT {
                bail!(
                    "{wf} did not close within {CLOSE_WAIT:?} ({})",
                    dir.display()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let report: RefundReport = self.rt.block_on(result)??;
        drop(workers);
        let refunds = match &refund {
            None => None,
            Some((intent, attacker)) => {
                self.payments.rewrite(
                    system,
                    &self.shop,
                    &mut self.conn,
                    self.admin.as_deref(),
                    &request_id,
                    attacker,
                )?;
                Some(self.payments.relay(
                    system,
                    &self.shop,
                    &mut self.conn,
                    &request_id,
                    (intent, attacker),
                )?)
            }
        };
        let observed = self.conn.observe(order, customer)?;
        let judged = judge(
            case,
            system,
            &report,
            &observed,
            at_interrupt,
            refunds.as_ref(),
        );
        Ok(OrderCell {
            case: case.name.into(),
            system: system.name().into(),
            outcome: report.label(),
            wanted: case.wanted(),
            applied: judged.applied,
            observed,
            at_interrupt,
            interrupted_as_claimed: judged.interrupted_as_claimed,
            answer_agrees: judged.answer_agrees,
            held: judged.held,
            refunds,
            attempts: self.server.refund_attempts(&wf),
            wall_s: t0.elapsed().as_secs_f64(),
        })
    }
}

/// A cell's verdict.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Judged {
    /// Times the credit landed.
    pub applied: i64,
    /// Whether the interruption came where the case says.
    pub interrupted_as_claimed: bool,
    /// Whether the workflow's answer agrees with the rows.
    pub answer_agrees: bool,
    /// Whether the cell holds.
    pub held: bool,
}

/// Judge a cell by the shop's rows. A refusal is an answer only when it is one: a workflow that
/// ended in an error it could not classify agrees with nothing, and a gated refusal must name
/// the case's own cause (`premise_moved` where the order shipped, `lease_dead` where the approval
/// was revoked), so a stage that failed for another reason does not pass for the gate's check.
/// Where the case rewrote a refund, nothing may reach the payment it was rewritten to, nor
/// more than the refund asked for the order's own; the gate's relay must say why it held it.
pub(crate) fn judge(
    case: &OrderCase,
    system: OrderSystem,
    report: &RefundReport,
    observed: &Observed,
    at_interrupt: Option<i64>,
    refunds: Option<&Refunds>,
) -> Judged {
    let applied = observed.credit / AMOUNT;
    let wanted = case.wanted();
    let interrupted_as_claimed = match (case.committed_at_interrupt(), at_interrupt) {
        (None, _) => true,
        (Some(done), Some(credit)) => credit == if done { AMOUNT } else { 0 },
        (Some(_), None) => false,
    };
    let answer_agrees = match report.outcome {
        Reported::Committed | Reported::Applied => applied > 0,
        Reported::Refused | Reported::Failed => applied == 0,
        _ => false,
    };
    let cause_named = match (system, case.refusal()) {
        (OrderSystem::Gated, Some(code)) => report.label().ends_with(&format!(":{code}")),
        _ => true,
    };
    let refunds_held = match (case.interrupt, refunds) {
        (Interrupt::RewriteOutbox, None) => false,
        (_, None) => true,
        (_, Some(r)) => {
            r.to_attacker == 0
                && r.to_order <= AMOUNT
                && (system != OrderSystem::Gated || r.held_as_rewritten())
        }
    };
    let held = refunds_held
        && interrupted_as_claimed
        && applied == wanted
        && observed.credit == applied * AMOUNT
        && observed.audited == applied
        && observed.status == case.status_after()
        && answer_agrees
        && cause_named;
    Judged {
        applied,
        interrupted_as_claimed,
        answer_agrees,
        held,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::orders::CASES;

    fn case(name: &str) -> OrderCase {
        CASES
            .into_iter()
            .find(|c| c.name == name)
            .unwrap_or(CASES[0])
    }

    fn judged(
        case: &OrderCase,
        system: OrderSystem,
        report: &RefundReport,
        observed: &Observed,
        at_interrupt: Option<i64>,
    ) -> Judged {
        judge(case, system, report, observed, at_interrupt, None)
    }

    fn rows(credit: i64, status: &str) -> Observed {
        Observed {
            status: status.into(),
            credit,
            audited: credit / AMOUNT,
        }
    }

    fn answer(outcome: Reported, code: Option<&str>) -> RefundReport {
        RefundReport {
            outcome,
            code: code.map(str::to_owned),
            ..RefundReport::default()
        }
    }

    #[test]
    fn a_gated_failure_for_another_cause_than_the_cases_does_not_hold() {
        let ships = case("order_ships_before_stage");
        let shipped = rows(0, "shipped");
        let right = judged(
            &ships,
            OrderSystem::Gated,
            &answer(Reported::Failed, Some("premise_moved")),
            &shipped,
            Some(0),
        );
        assert!(right.held, "{right:?}");
        let other = judged(
            &ships,
            OrderSystem::Gated,
            &answer(Reported::Failed, Some("database_error")),
            &shipped,
            Some(0),
        );
        assert!(!other.held, "{other:?}");
        let error = judged(
            &ships,
            OrderSystem::Guarded,
            &answer(Reported::Error, None),
            &shipped,
            Some(0),
        );
        assert!(
            !error.answer_agrees && !error.held,
            "an error is no refusal: {error:?}"
        );
    }

    #[test]
    fn a_kill_that_came_before_the_commit_it_claims_to_follow_does_not_hold() {
        let after = case("kill_after_commit");
        let once = rows(AMOUNT, "cancelled");
        let committed = answer(Reported::Committed, None);
        assert!(judged(&after, OrderSystem::Gated, &committed, &once, Some(AMOUNT)).held);
        let early = judged(&after, OrderSystem::Gated, &committed, &once, Some(0));
        assert!(!early.interrupted_as_claimed && !early.held, "{early:?}");
        let mid = case("kill_mid_stage");
        assert!(!judged(&mid, OrderSystem::Gated, &committed, &once, Some(AMOUNT)).held);
    }

    #[test]
    fn twice_the_credit_or_a_missing_audit_or_a_wrong_status_does_not_hold() {
        let clean = case("clean");
        let ok = answer(Reported::Applied, None);
        assert!(
            judged(
                &clean,
                OrderSystem::Plain,
                &ok,
                &rows(AMOUNT, "cancelled"),
                None
            )
            .held
        );
        let twice = judged(
            &clean,
            OrderSystem::Plain,
            &ok,
            &rows(2 * AMOUNT, "cancelled"),
            None,
        );
        assert_eq!((twice.applied, twice.held), (2, false));
        let mut unaudited = rows(AMOUNT, "cancelled");
        unaudited.audited = 0;
        assert!(!judged(&clean, OrderSystem::Plain, &ok, &unaudited, None).held);
        assert!(!judged(&clean, OrderSystem::Plain, &ok, &rows(AMOUNT, "paid"), None).held);
    }

    #[test]
    fn a_rewritten_refund_that_reached_another_payment_or_went_unexplained_does_not_hold() {
        let rewritten = case("outbox_row_rewritten_before_relay");
        let once = rows(AMOUNT, "cancelled");
        let committed = answer(Reported::Committed, None);
        let refunds = |to_order, to_attacker, said: &str| Refunds {
            to_order,
            to_attacker,
            relay_said: said.into(),
        };
        let held = refunds(0, 0, "held: the row was rewritten after its stage");
        let gated = |r: Option<&Refunds>| {
            judge(&rewritten, OrderSystem::Gated, &committed, &once, None, r).held
        };
        assert!(gated(Some(&held)));
        assert!(!gated(None), "a rewrite case with no relay judged");
        assert!(!gated(Some(&refunds(
            0,
            50_000,
            "sent: COMMITTED/first_send"
        ))));
        assert!(
            !gated(Some(&refunds(0, 0, "held: the journal could not be read"))),
            "held for another reason"
        );
        let plain = judge(
            &rewritten,
            OrderSystem::Plain,
            &answer(Reported::Applied, None),
            &once,
            None,
            Some(&refunds(0, 50_000, "sent: re_1")),
        );
        assert!(!plain.held, "{plain:?}");
    }
}
