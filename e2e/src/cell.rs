//! One cell of the kill matrix: a fresh payment, a lease, a workflow on its own task queue, the
//! interruption, the world's action, a fresh worker, and the verdict from the payments API's own
//! records.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use anyhow::Context;
use interlock::{Clock, Grant, JournalStore, SystemClock, Tier};
use interlock_testkit::faults::Stall;
use interlock_testkit::sim::SimPayments;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The principal the Rust worker acts for (`INTERLOCK_PRINCIPAL`).
pub const RUST_WORKER: &str = "rust-worker";
/// The subject of the Python worker's signed token.
const PYTHON_WORKER_SUBJECT: &str = "python-worker";
/// The gate server's caller the Python worker is, by its signed token (`jwt:` and its subject).
pub const PYTHON_WORKER: &str = "jwt:python-worker";

use e2e_worker::StepTimings;
use e2e_worker::timeline::StepTimeline;

use crate::cases::{E2eCase, Kill, Outage, Setup};
use crate::procs::{DevServer, StarterProc, WorkerProc, now_ms};

/// The system under test, by the worker's name for it.
pub type SystemName = &'static str;

/// Every system, in table order, with the tier the payments API acts as for it. The `gated_py`
/// systems are the Python worker (`worker-examples/python`) through the gate server; the
/// `gated_http` systems the same, with the refund an HTTP target table
/// ([`crate::http_systems`]).
pub const SYSTEMS: [(SystemName, u8); 11] = [
    ("naive", 1),
    ("keyed", 1),
    ("checked", 1),
    ("gated_t1", 1),
    ("gated_t2", 2),
    ("gated_t3", 3),
    ("gated_py_t1", 1),
    ("gated_py_t2", 2),
    ("gated_http_t1", 1),
    ("gated_http_t2", 2),
    ("gated_http_t3", 3),
];

/// The harness's clock: the system clock plus a skew it shares with the workers through a file.
#[derive(Debug)]
pub struct SharedSkew {
    skew: AtomicI64,
    /// The file the workers read.
    pub file: PathBuf,
}

impl SharedSkew {
    /// A zero skew written to `file`.
    pub fn new(file: PathBuf) -> anyhow::Result<Arc<Self>> {
        std::fs::write(&file, "0")?;
        Ok(Arc::new(Self {
            skew: AtomicI64::new(0),
            file,
        }))
    }

    /// Set the skew for everyone.
    pub fn set(&self, ms: i64) -> anyhow::Result<()> {
        std::fs::write(&self.file, ms.to_string())?;
        self.skew.store(ms, Ordering::SeqCst);
        Ok(())
    }
}

impl Clock for SharedSkew {
    fn now_ms(&self) -> i64 {
        SystemClock.now_ms() + self.skew.load(Ordering::SeqCst)
    }
}

/// What every cell shares.
pub struct Env {
    /// The dev server.
    pub server: DevServer,
    /// The payments service behind the API.
    pub sim: Arc<SimPayments>,
    /// The API's base URL.
    pub base_url: String,
    /// The shop's order service, a service of its own (none: the workers decide on Stripe's
    /// facts alone).
    pub shop_url: Option<String>,
    /// Its secret key.
    pub secret: String,
    /// The shared journal (leases are granted and revoked here).
    pub journal: Arc<dyn JournalStore>,
    /// Its name: a file path or a `postgres://` URL.
    pub journal_name: String,
    /// Its PostgreSQL schema (for a `postgres://` journal).
    pub journal_schema: String,
    /// Shared time.
    pub skew: Arc<SharedSkew>,
    /// `harness-worker`.
    pub worker_bin: PathBuf,
    /// `harness-starter`.
    pub starter_bin: PathBuf,
    /// `gate-server`: `interlock serve` with the harness's pause points and clock.
    pub gate_server_bin: PathBuf,
    /// The Python worker's entry point (`worker-examples/python/refund_worker.py`).
    pub python_worker: PathBuf,
    /// Scratch space for cells.
    pub work: PathBuf,
    /// The refund step's heartbeat timeout and retry interval, sent with every workflow.
    pub step: StepTimings,
    /// The identity provider the gate server trusts for the Python worker's token.
    pub idp: crate::idp::Idp,
}

impl Env {
    /// The environment of a worker process polling `queue` against this environment's services.
    pub fn worker_vars(&self, queue: &str) -> Vec<(String, String)> {
        let mut vars = vec![
            (
                "TEMPORAL_ADDRESS".to_owned(),
                format!("http://{}", self.server.address),
            ),
            ("TASK_QUEUE".to_owned(), queue.to_owned()),
            ("STRIPE_API_BASE".to_owned(), self.base_url.clone()),
            ("STRIPE_SECRET_KEY".to_owned(), self.secret.clone()),
            ("INTERLOCK_JOURNAL".to_owned(), self.journal_name.clone()),
            (
                "INTERLOCK_JOURNAL_SCHEMA".to_owned(),
                self.journal_schema.clone(),
            ),
            (
                "INTERLOCK_CLOCK_SKEW_FILE".to_owned(),
                self.skew.file.display().to_string(),
            ),
            ("INTERLOCK_SETTLE_MS".to_owned(), "500".to_owned()),
            ("INTERLOCK_SEND_TIMEOUT_MS".to_owned(), "10000".to_owned()),
            ("RUST_LOG".to_owned(), "info".to_owned()),
            ("INTERLOCK_PRINCIPAL".to_owned(), RUST_WORKER.to_owned()),
        ];
        if let Some(shop) = &self.shop_url {
            vars.push(("INTERLOCK_SHOP_URL".to_owned(), shop.clone()));
        }
        vars
    }

    /// The environment of a Python worker polling `queue` and calling the gate server on
    /// `socket`.
    pub fn python_vars(&self, queue: &str, socket: &Path) -> Vec<(String, String)> {
        vec![
            (
                "TEMPORAL_ADDRESS".to_owned(),
                format!("http://{}", self.server.address),
            ),
            ("TASK_QUEUE".to_owned(), queue.to_owned()),
            (
                "INTERLOCK_GATE_ADDRESS".to_owned(),
                format!("unix://{}", socket.display()),
            ),
            ("INTERLOCK_GATE_TOKEN".to_owned(), self.gate_token()),
            ("PYTHONUNBUFFERED".to_owned(), "1".to_owned()),
        ]
    }

    /// The environment of a gate server (the Stripe key its configuration names, the shared
    /// clock, the journal).
    pub fn server_vars(&self) -> Vec<(String, String)> {
        vec![
            ("STRIPE_SECRET_KEY".to_owned(), self.secret.clone()),
            (
                "INTERLOCK_CLOCK_SKEW_FILE".to_owned(),
                self.skew.file.display().to_string(),
            ),
            ("INTERLOCK_JOURNAL".to_owned(), self.journal_name.clone()),
            ("RUST_LOG".to_owned(), "info".to_owned()),
        ]
    }

    /// The Python worker's token at the gate server: signed by the run's identity provider,
    /// naming the worker and its two targets, live for six hours (a run's cells each start
    /// their worker with a fresh one). Empty (refused by the server) if it cannot be made.
    fn gate_token(&self) -> String {
        self.idp
            .token(
                PYTHON_WORKER_SUBJECT,
                &[
                    "refunds",
                    "refunds_t2",
                    "refunds_http_t1",
                    "refunds_http_t2",
                    "refunds_http_t3",
                ],
                6 * 3_600,
            )
            .unwrap_or_default()
    }

    /// A gate server's configuration listening on `socket`, with targets `refunds` (tier 1) and
    /// `refunds_t2` (the Python worker's defaults), with a shop the HTTP targets
    /// `refunds_http_t1` to `_t3`, and the Rust worker's timings.
    pub fn server_config(&self, socket: &Path) -> anyhow::Result<String> {
        let q = |s: &str| serde_json::to_string(s);
        let shop = match &self.shop_url {
            Some(u) => format!("shop_url = {}\n", q(u)?),
            None => String::new(),
        };
        let mut cfg = format!(
            "listen = {}\njournal = {}\njournal_schema = {}\n\n[gate]\nsend_timeout_ms = 10000\n\
             settle_ms = 500\nretry_after_ms = 500\n",
            q(&format!("unix:{}", socket.display()))?,
            q(&self.journal_name)?,
            q(&self.journal_schema)?,
        );
        // The Python worker is a caller of its own, vouched for by the run's identity provider
        // with a signed token whose claims name it and its targets: what the journal records as
        // the proposer of its effects, and what the cells' leases name.
        let public = self.work.join("idp-public.pem");
        std::fs::write(&public, self.idp.public_pem())?;
        cfg.push_str(&format!(
            "\n[auth.jwt]\nissuer = {}\naudience = {}\nalgorithm = \"EdDSA\"\npublic_key = {}\n",
            q(crate::idp::ISSUER)?,
            q(crate::idp::AUDIENCE)?,
            q(&public.display().to_string())?,
        ));
        for (name, tier) in [("refunds", 1), ("refunds_t2", 2)] {
            cfg.push_str(&format!(
                "\n[targets.{name}]\nkind = \"stripe_refunds\"\ntier = {tier}\napi_base = {}\n{shop}",
                q(&self.base_url)?
            ));
        }
        if let Some(shop) = &self.shop_url {
            cfg.push('\n');
            cfg.push_str(&crate::http_systems::server_tables(&self.base_url, shop)?);
        }
        Ok(cfg)
    }
}

/// One judged cell (read back from a run's JSON to render its report again).
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct CellResult {
    /// System.
    pub system: String,
    /// Case.
    pub case: String,
    /// Repetition, from 1.
    pub rep: u32,
    /// The workflow's answer(s).
    pub outcome: String,
    /// Total refunded on the payment, from the API's records.
    pub refunded_cents: i64,
    /// What it should show.
    pub wanted_cents: i64,
    /// Refunds on the payment.
    pub refunds: usize,
    /// Refunds carrying the request's key in their metadata.
    pub tagged: usize,
    /// Whether the answer agrees with the records.
    pub answer_agrees: bool,
    /// Money right (or honestly short) and the answer agrees.
    pub held: bool,
    /// Held, but the approved refund did not happen (ambiguous, or refused with a repair).
    pub short: bool,
    /// Attempts of the refund activity (Temporal's count).
    pub attempts: Option<u32>,
    /// From the kill (or freeze) to the workflow's close.
    pub crash_to_close_s: Option<f64>,
    /// When the worker (or the gate server) was killed or frozen, ms since the Unix epoch.
    #[serde(default)]
    pub crashed_at_ms: Option<i64>,
    /// The first workflow's refund step in the Temporal server's history.
    #[serde(default)]
    pub timeline: Option<StepTimeline>,
    /// Why there is no timeline: the history could not be read, or not understood.
    #[serde(default)]
    pub history_error: Option<String>,
    /// For a cell with a kill: what the seconds to its close were spent on
    /// ([`crate::classes::class_of`]).
    #[serde(default)]
    pub class: Option<String>,
    /// The cell's wall time.
    pub wall_s: f64,
    /// For gated cells: whether `verify` holds on the effect (journal + the API's records).
    pub verified: Option<bool>,
    /// The verify columns that failed.
    pub verify_failed: Vec<String>,
    /// Every verify column: `holds`, `fails`, or `n/a` (does not apply, or could not be asked).
    pub verify_columns: Vec<(String, String)>,
    /// For gated cells: whether the API's signed webhook was recorded as `CONFIRMED`.
    pub confirmed: Option<bool>,
}

#[cfg(test)]
impl CellResult {
    /// A held cell of `system` in `case` for the report's tests: nothing else judged, no kill.
    pub(crate) fn for_tests(system: &str, case: &str, crash_to_close_s: Option<f64>) -> Self {
        Self {
            system: system.into(),
            case: case.into(),
            rep: 1,
            outcome: String::new(),
            refunded_cents: 0,
            wanted_cents: 0,
            refunds: 0,
            tagged: 0,
            answer_agrees: true,
            held: true,
            short: false,
            attempts: None,
            crash_to_close_s,
            crashed_at_ms: None,
            timeline: None,
            history_error: None,
            class: None,
            wall_s: 0.0,
            verified: None,
            verify_failed: Vec::new(),
            verify_columns: Vec::new(),
            confirmed: None,
        }
    }
}

struct Cell<'a> {
    env: &'a Env,
    id: String,
    dir: PathBuf,
    queue: String,
    workers: Vec<WorkerProc>,
    /// The gate server, for the systems that reach the gate through it.
    server: Option<WorkerProc>,
    /// Its socket.
    socket: PathBuf,
    /// Servers started so far (for log names).
    servers: usize,
}

impl Cell<'_> {
    fn through_server(&self) -> bool {
        !self.socket.as_os_str().is_empty()
    }

    /// A worker: the Rust worker pausing at `pause`, or the Python worker (the gate's pause
    /// points are then the server's).
    fn worker(&mut self, pause: Option<&str>) -> anyhow::Result<usize> {
        let e = self.env;
        let n = self.workers.len();
        let log = self.dir.join(format!("worker-{n}.log"));
        let proc = if self.through_server() {
            let script = e.python_worker.display().to_string();
            WorkerProc::spawn(
                std::path::Path::new("python3"),
                &[script],
                &e.python_vars(&self.queue, &self.socket),
                None,
                &self.dir,
                &log,
            )?
        } else {
            WorkerProc::spawn(
                &e.worker_bin,
                &[],
                &e.worker_vars(&self.queue),
                pause,
                &self.dir,
                &log,
            )?
        };
        self.workers.push(proc);
        Ok(n)
    }

    /// Start (or restart) the gate server, pausing at `points`, and wait until it answers.
    fn start_server(&mut self, points: &str) -> anyhow::Result<()> {
        let e = self.env;
        let config = self.dir.join("gate.toml");
        std::fs::write(&config, e.server_config(&self.socket)?)?;
        let log = self.dir.join(format!("gate-server-{}.log", self.servers));
        self.servers += 1;
        let mut server = WorkerProc::spawn(
            &e.gate_server_bin,
            &["--config".to_owned(), config.display().to_string()],
            &e.server_vars(),
            (!points.is_empty()).then_some(points),
            &self.dir,
            &log,
        )?;
        let started = std::time::Instant::now();
        while std::os::unix::net::UnixStream::connect(&self.socket).is_err() {
            if let Some(status) = server.try_wait()? {
                anyhow::bail!(
                    "the gate server exited ({status}) before it listened: {}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            anyhow::ensure!(
                started.elapsed() < Duration::from_secs(30),
                "the gate server did not listen on {} within 30 s",
                self.socket.display()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        self.server = Some(server);
        Ok(())
    }

    /// The process that pauses at the gate's points for `worker`: the worker itself, or the
    /// gate server it calls.
    fn pauser(&mut self, worker: usize) -> anyhow::Result<&mut WorkerProc> {
        if self.through_server() {
            self.server.as_mut().context("no gate server is running")
        } else {
            self.workers.get_mut(worker).context("no such worker")
        }
    }

    /// SIGKILL `worker`. Through the server, the server's attempt (paused at `paused`, if
    /// given) outlives it: once the server has seen the caller's connection close, which takes
    /// milliseconds, the attempt is let go on and stops at its next step.
    fn kill_worker(&mut self, worker: usize, paused: bool) -> anyhow::Result<()> {
        self.workers
            .get_mut(worker)
            .context("no such worker")?
            .kill9()?;
        if self.through_server() && paused {
            std::thread::sleep(Duration::from_millis(300));
            self.pauser(worker)?.release()?;
        }
        Ok(())
    }

    fn starter(
        &self,
        workflow: &str,
        pi: &str,
        amount: i64,
        lease: &str,
        request: &str,
        system: &str,
    ) -> anyhow::Result<StarterProc> {
        let e = self.env;
        let mut args = [workflow, pi, &amount.to_string(), lease, request, system]
            .map(str::to_owned)
            .to_vec();
        if e.step != StepTimings::default() {
            args.extend([
                format!("--heartbeat-ms={}", e.step.heartbeat_ms),
                format!("--retry-ms={}", e.step.retry_ms),
            ]);
        }
        let vars = [
            (
                "TEMPORAL_ADDRESS".to_owned(),
                format!("http://{}", e.server.address),
            ),
            ("TASK_QUEUE".to_owned(), self.queue.clone()),
        ];
        StarterProc::spawn(&e.starter_bin, &args, &vars)
    }
}

fn outage(env: &Env, o: Outage, pi: &str, lease: &str) -> anyhow::Result<()> {
    match o {
        Outage::None => {}
        Outage::HandRefund(amount) => env.sim.hand_refund(pi, amount),
        Outage::RevokeLease => {
            env.journal.revoke_lease(lease)?;
        }
        Outage::Ineligible => env.sim.set_eligible(pi, false),
        Outage::DayPasses => env.skew.set(25 * 3_600_000)?,
    }
    Ok(())
}

const PAUSE_WAIT: Duration = Duration::from_secs(60);
/// How long `Kill::FreezeAfter` freezes: past the gate's bound on a premise read's age at its
/// dispatch, which for the workers (500 ms settle margin, `GateConfig::premise_max_age` unset) is
/// the default's floor of one second.
const FREEZE: Duration = Duration::from_millis(1_500);

/// Wait until a refund request reached the payments API and is being held there.
fn wait_held(env: &Env) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    while !env.sim.held_reached() {
        anyhow::ensure!(
            started.elapsed() < PAUSE_WAIT,
            "no request reached the payments API"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}
const CLOSE_WAIT: Duration = Duration::from_secs(150);

/// Run one cell.
pub fn run_cell(
    env: &Env,
    case: &E2eCase,
    system: SystemName,
    tier: u8,
    rep: u32,
) -> anyhow::Result<CellResult> {
    anyhow::ensure!(
        case.applies_to(system),
        "case {} does not apply to system {system}",
        case.name
    );
    let t0 = now_ms();
    let id = format!("{}-{}-{}-{}", case.name, system, rep, t0 % 1_000_000);
    let dir = env.work.join(&id);
    std::fs::create_dir_all(&dir)?;
    let (pi, lease, request, wf) = (
        format!("pi_{id}"),
        format!("lease-{id}"),
        format!("req-{id}"),
        format!("wf-{id}"),
    );
    env.skew.set(0)?;
    env.sim
        .set_tier(Tier::try_from(tier).map_err(anyhow::Error::msg)?);
    env.sim.add_payment(&pi, 10_000);
    let grant = Grant::new(&lease, "ana@support", env.skew.now_ms())
        .scope("payment_intent", pi.as_str())
        .cap("amount", 2000)
        .spender(RUST_WORKER)
        .spender(PYTHON_WORKER);
    // One approval for one request where the case is about spending it; elsewhere a standing
    // approval, since the baselines' retries run under keys of their own.
    let grant = if case.setup == Setup::SecondRequestSameLease {
        grant
    } else {
        grant.unlimited()
    };
    env.journal
        .grant_lease(&grant)
        .context("granting the cell's lease")?;
    // The racing request refunds a payment of its own, so no premise of one moves with the
    // other's refund: only the budget stands between them.
    let pi2 = format!("{pi}-2");
    if case.setup == Setup::BudgetLastRoom {
        env.sim.add_payment(&pi2, 10_000);
        // Room for one $20 refund this hour from the cell's task queue (a label the worker's
        // activity journals with each effect, the Rust and the Python worker alike), and two
        // requests for one. The second payment's lease is the first's, on the other payment.
        env.journal
            .grant_lease(
                &Grant::new(format!("{lease}-2"), "ana@support", env.skew.now_ms())
                    .scope("payment_intent", pi2.as_str())
                    .cap("amount", 2000)
                    .spender(RUST_WORKER)
                    .spender(PYTHON_WORKER)
                    .unlimited(),
            )
            .context("granting the racing request's lease")?;
        env.journal
            .set_budget(
                &interlock::budget::Budget {
                    id: format!("room-{id}"),
                    scope: [(
                        "label.task_queue".to_owned(),
                        Value::from(format!("q-{id}")),
                    )]
                    .into(),
                    per: Vec::new(),
                    window: interlock::budget::Window::Rolling { ms: 3_600_000 },
                    limit: interlock::budget::Limit::Sum {
                        field: "amount".into(),
                        max: 2000,
                    },
                },
                "ops@support",
            )
            .context("setting the cell's budget")?;
    }
    if case.setup == Setup::SecondRequestByCharge {
        // One refund per payment an hour from the cell's task queue, counted per payment intent:
        // the second request names the payment by its charge.
        env.journal
            .set_budget(
                &interlock::budget::Budget {
                    id: format!("once-{id}"),
                    scope: [(
                        "label.task_queue".to_owned(),
                        Value::from(format!("q-{id}")),
                    )]
                    .into(),
                    per: vec!["payment_intent".to_owned()],
                    window: interlock::budget::Window::Rolling { ms: 3_600_000 },
                    limit: interlock::budget::Limit::Count { max: 1 },
                },
                "ops@support",
            )
            .context("setting the cell's budget")?;
    }
    match case.setup {
        Setup::ServerErrorAfterApply => env.sim.error_after_apply(1),
        Setup::Disputed => env.sim.set_disputed(&pi, true),
        _ => {}
    }
    let held_response = Stall::new();
    if matches!(case.kill, Kill::AtService | Kill::ServerAtService) {
        env.sim.hold_next_response(held_response.clone());
    }
    let socket = if crate::cases::through_server(system) {
        dir.join("gate.sock")
    } else {
        PathBuf::new()
    };
    let mut cell = Cell {
        env,
        id: id.clone(),
        dir,
        queue: format!("q-{id}"),
        workers: Vec::new(),
        server: None,
        socket,
        servers: 0,
    };
    let first_pause = match case.kill {
        Kill::At(p) | Kill::PauseThenGo(p) | Kill::FreezeAfter(p) | Kill::ServerAt(p) => Some(p),
        Kill::DuringRecovery | Kill::Zombie => Some("after_dispatch"),
        Kill::None | Kill::AtService | Kill::ServerAtService => None,
    };
    let recovery_point = if system.starts_with("gated") {
        "during_recovery"
    } else {
        "after_response"
    };
    if cell.through_server() {
        let points = match case.kill {
            Kill::DuringRecovery => format!("after_dispatch,{recovery_point}"),
            _ => first_pause.unwrap_or_default().to_owned(),
        };
        cell.start_server(&points)?;
    }
    let a = cell.worker(first_pause)?;
    let s1 = cell.starter(&wf, &pi, 2000, &lease, &request, system)?;
    let s2 = match case.setup {
        Setup::SecondWorkflow => Some((
            cell.starter(&format!("{wf}-b"), &pi, 2000, &lease, &request, system)?,
            2000,
        )),
        Setup::BudgetLastRoom => Some((
            cell.starter(
                &format!("{wf}-2"),
                &pi2,
                2000,
                &format!("{lease}-2"),
                &format!("{request}-2"),
                system,
            )?,
            RACING,
        )),
        _ => None,
    };
    let mut crashed_at = None;
    match case.kill {
        Kill::None => {}
        Kill::At(p) => {
            cell.pauser(a)?.wait_paused(p, PAUSE_WAIT)?;
            crashed_at = Some(now_ms());
            cell.kill_worker(a, true)?;
            outage(env, case.outage, &pi, &lease)?;
            cell.worker(None)?;
        }
        Kill::AtService => {
            wait_held(env)?;
            crashed_at = Some(now_ms());
            cell.kill_worker(a, false)?;
            held_response.release();
            outage(env, case.outage, &pi, &lease)?;
            cell.worker(None)?;
        }
        Kill::PauseThenGo(p) => {
            cell.pauser(a)?.wait_paused(p, PAUSE_WAIT)?;
            outage(env, case.outage, &pi, &lease)?;
            cell.pauser(a)?.release()?;
        }
        Kill::FreezeAfter(p) => {
            cell.pauser(a)?.wait_paused(p, PAUSE_WAIT)?;
            crashed_at = Some(now_ms());
            cell.pauser(a)?.signal("STOP")?;
            outage(env, case.outage, &pi, &lease)?;
            std::thread::sleep(FREEZE);
            cell.pauser(a)?.signal("CONT")?;
            cell.pauser(a)?.release()?;
        }
        Kill::DuringRecovery => {
            cell.pauser(a)?.wait_paused("after_dispatch", PAUSE_WAIT)?;
            crashed_at = Some(now_ms());
            cell.kill_worker(a, true)?;
            let b = cell.worker(Some(recovery_point))?;
            cell.pauser(b)?.wait_paused(recovery_point, PAUSE_WAIT)?;
            cell.kill_worker(b, true)?;
            cell.worker(None)?;
        }
        Kill::Zombie => {
            cell.pauser(a)?.wait_paused("after_dispatch", PAUSE_WAIT)?;
            crashed_at = Some(now_ms());
            cell.workers[a].signal("STOP")?;
            cell.worker(None)?;
            // Past the heartbeat timeout and the retry interval (2 s and 1 s by default), with 2 s
            // to spare: another attempt is running.
            std::thread::sleep(Duration::from_millis(
                env.step.heartbeat_ms + env.step.retry_ms + 2_000,
            ));
            cell.workers[a].signal("CONT")?;
            cell.pauser(a)?.release()?;
        }
        Kill::ServerAt(p) => {
            cell.pauser(a)?.wait_paused(p, PAUSE_WAIT)?;
            crashed_at = Some(now_ms());
            cell.pauser(a)?.kill9()?;
            outage(env, case.outage, &pi, &lease)?;
            cell.start_server("")?;
        }
        Kill::ServerAtService => {
            wait_held(env)?;
            crashed_at = Some(now_ms());
            cell.pauser(a)?.kill9()?;
            held_response.release();
            outage(env, case.outage, &pi, &lease)?;
            cell.start_server("")?;
        }
    }
    let r1 = s1
        .wait(CLOSE_WAIT)
        .with_context(|| format!("cell {}", cell.id))?;
    let racing = case.setup == Setup::BudgetLastRoom;
    let mut answers = vec![(r1.clone(), if racing { RACING } else { 2000 })];
    if let Some((s2, amount)) = s2 {
        answers.push((s2.wait(CLOSE_WAIT)?, amount));
    }
    if case.setup == Setup::SecondWorkflowOtherAmount {
        let s = cell.starter(&format!("{wf}-30"), &pi, 3000, &lease, &request, system)?;
        answers.push((s.wait(CLOSE_WAIT)?, 3000));
    }
    if case.setup == Setup::SecondRequestSameLease {
        let other = format!("{request}-2");
        let s = cell.starter(&format!("{wf}-2"), &pi, 2000, &lease, &other, system)?;
        answers.push((s.wait(CLOSE_WAIT)?, ANOTHER_REQUEST));
    }
    if case.setup == Setup::SecondRequestByCharge {
        let charge = env
            .sim
            .charge_of(&pi)
            .context("the payment's charge, to name it by")?;
        let other = format!("{request}-2");
        let s = cell.starter(&format!("{wf}-2"), &charge, 2000, &lease, &other, system)?;
        answers.push((s.wait(CLOSE_WAIT)?, ANOTHER_REQUEST));
    }
    held_response.release();
    let attempts = env.server.refund_attempts(&wf);
    drop(cell);
    let closed = r1.get("closed_at_ms").and_then(Value::as_i64);
    let crash_to_close_s = crashed_at.zip(closed).map(|(k, c)| (c - k) as f64 / 1000.0);
    let mut result = judge(
        env,
        case,
        system,
        rep,
        &pi,
        &request,
        &answers,
        attempts,
        crash_to_close_s,
        t0,
    );
    result.crashed_at_ms = crashed_at;
    match r1.get("timeline").filter(|t| !t.is_null()) {
        Some(t) => match serde_json::from_value(t.clone()) {
            Ok(t) => result.timeline = Some(t),
            Err(e) => result.history_error = Some(format!("the starter's timeline: {e}")),
        },
        None => {
            result.history_error = Some(
                r1.get("history_error")
                    .and_then(Value::as_str)
                    .unwrap_or("the starter gave no timeline")
                    .to_owned(),
            );
        }
    }
    result.class = crate::classes::class_of_cell(&result).map(Into::into);
    if system.starts_with("gated") {
        verify_cell(env, &request, &mut result)?;
    }
    Ok(result)
}

/// The tier `system` runs at, from [`SYSTEMS`].
fn tier_of(system: &str) -> anyhow::Result<u8> {
    SYSTEMS
        .iter()
        .find(|s| s.0 == system)
        .map(|s| s.1)
        .with_context(|| format!("unknown system {system}"))
}

/// The amount an answer is judged with when it is another request's $20 under the approval the
/// first request spent.
const ANOTHER_REQUEST: i64 = -2000;

/// The amount an answer is judged with when it is one of two $20 requests racing for room for
/// one: which of them lands is not fixed, so the two are judged together (as many say they
/// refunded as refunds landed).
const RACING: i64 = -1;

#[allow(clippy::too_many_arguments)]
fn judge(
    env: &Env,
    case: &E2eCase,
    system: &str,
    rep: u32,
    pi: &str,
    request: &str,
    answers: &[(Value, i64)],
    attempts: Option<u32>,
    crash_to_close_s: Option<f64>,
    t0: i64,
) -> CellResult {
    let mut refunds = env.sim.refunds(pi);
    if case.setup == Setup::BudgetLastRoom {
        // The racing request's refunds, on its own payment.
        refunds.extend(env.sim.refunds(&format!("{pi}-2")));
    }
    let total: i64 = refunds.iter().map(|r| r.amount).sum();
    let tagged = refunds
        .iter()
        .filter(|r| r.metadata.get("interlock_key").map(String::as_str) == Some(request))
        .count();
    let ours = total - case.others_cents();
    let wanted = case.wanted_cents();
    let mut agrees = true;
    let mut labels = Vec::new();
    let mut main_short_ok = false;
    // Racing answers: how many say they refunded, judged against the refunds that landed.
    let (mut racing_said, mut any_racing) = (0, false);
    for (i, (answer, amount)) in answers.iter().enumerate() {
        let report = answer.get("report");
        let outcome = report
            .and_then(|r| r.get("outcome"))
            .and_then(Value::as_str)
            .unwrap_or("NO_ANSWER");
        // How it ended, as the report's label has it: the via, the refusal code or the code.
        let code = ["via", "refusal", "code"]
            .iter()
            .find_map(|f| report.and_then(|r| r.get(f)).and_then(Value::as_str));
        let repairs = report
            .and_then(|r| r.get("repairs"))
            .and_then(Value::as_array)
            .is_some_and(|r| !r.is_empty());
        labels.push(match code {
            Some(c) if !c.is_empty() => format!("{outcome}:{c}"),
            _ => outcome.to_owned(),
        });
        let says = match outcome {
            "COMMITTED" | "REFUNDED" => Some(true),
            "REFUSED" | "FAILED" | "ERROR" => Some(false),
            _ => None,
        };
        // The approved $20 is judged by what the payment shows beyond others' refunds; a $30
        // re-decision by whether a $30 refund exists; another request's $20 under the same
        // approval by whether more than the one approved $20 landed.
        let moved = match *amount {
            2000 => ours > 0,
            ANOTHER_REQUEST => ours > 2000,
            RACING => {
                racing_said += usize::from(says == Some(true));
                any_racing = true;
                says.unwrap_or(false)
            }
            other => refunds.iter().any(|r| r.amount == other),
        };
        agrees &= match says {
            Some(s) => s == moved,
            None => true,
        };
        // The request whose money is judged: the first, or either of two racing ones (which
        // of them dispatched first is not fixed).
        if i == 0 || *amount == RACING {
            main_short_ok |= outcome == "AMBIGUOUS" || repairs;
        }
    }
    if any_racing {
        agrees &= racing_said == refunds.len();
    }
    let short = total != wanted && ours == 0 && main_short_ok;
    CellResult {
        system: system.into(),
        case: case.name.into(),
        rep,
        outcome: labels.join(" + "),
        refunded_cents: total,
        wanted_cents: wanted,
        refunds: refunds.len(),
        tagged,
        answer_agrees: agrees,
        held: (total == wanted || short) && agrees,
        short,
        attempts,
        crash_to_close_s,
        crashed_at_ms: None,
        timeline: None,
        history_error: None,
        class: None,
        wall_s: (now_ms() - t0) as f64 / 1000.0,
        verified: None,
        verify_failed: Vec::new(),
        verify_columns: Vec::new(),
        confirmed: None,
    }
}

/// Run `interlock::verify` on a gated cell's effect, against the journal and the payments API's
/// own records, after giving the API's webhook a moment to be recorded.
fn verify_cell(env: &Env, request: &str, cell: &mut CellResult) -> anyhow::Result<()> {
    let key = interlock::EffectKey::fixed(request)?;
    let sim = interlock_testkit::sim::SimTarget(env.sim.clone());
    // An HTTP target's effects are judged by the records its own table lists.
    let http = match crate::http_systems::is_http(&cell.system) {
        true => Some(crate::http_systems::target(
            &env.base_url,
            env.shop_url
                .as_deref()
                .context("the HTTP systems need the shop")?,
            tier_of(&cell.system)?,
            &env.secret,
        )?),
        false => None,
    };
    let target: &dyn interlock::target::TargetRecords = match &http {
        Some(h) => h,
        None => &sim,
    };
    let budgets = env.journal.budget_changes()?;
    let committed = cell.outcome.starts_with("COMMITTED");
    let t0 = std::time::Instant::now();
    let v = loop {
        let v = interlock::verify::verify(
            env.journal.as_ref(),
            &key,
            &interlock::verify::Sources {
                leases: Some(env.journal.as_ref()),
                records: Some(target),
                budgets: Some(&budgets),
                ..interlock::verify::Sources::default()
            },
        );
        let confirmed = v
            .columns
            .iter()
            .any(|c| c.name == "confirmed by target" && c.holds == Some(true));
        if confirmed || !committed || t0.elapsed() > Duration::from_secs(3) {
            break v;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    cell.verified = Some(v.holds());
    cell.verify_columns = v
        .columns
        .iter()
        .map(|c| {
            let state = match c.holds {
                Some(true) => "holds",
                Some(false) => "fails",
                None => "n/a",
            };
            (c.name.to_owned(), state.to_owned())
        })
        .collect();
    cell.verify_failed = v
        .columns
        .iter()
        .filter(|c| c.holds == Some(false))
        .map(|c| format!("{}: {}", c.name, c.detail))
        .collect();
    // The proposer is the caller the worker was known as, never a name it wrote: the Python
    // worker by its token at the gate server, the Rust worker by its configured principal.
    let wanted = if crate::cases::through_server(&cell.system) {
        PYTHON_WORKER
    } else {
        RUST_WORKER
    };
    let proposed_by = v.columns.iter().find(|c| c.name == "callers");
    if let Some(proposed_by) =
        proposed_by.filter(|c| !c.detail.starts_with(&format!("proposed by {wanted}")))
    {
        let proposed_by = &proposed_by.detail;
        cell.verified = Some(false);
        cell.verify_failed.push(format!(
            "callers: {proposed_by:?}, not proposed by {wanted}"
        ));
    }
    cell.confirmed = Some(
        v.columns
            .iter()
            .any(|c| c.name == "confirmed by target" && c.holds == Some(true)),
    );
    Ok(())
}
