//! The services an end-to-end run stands on, started the same way for the kill matrix and the
//! overhead benchmark: a Temporal dev server, the payments API (Stripe's endpoints) and the shop's
//! order service as two services, the shared journal, and optionally the webhook receiver.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use interlock::{Clock, Tier};
use interlock_postgres::PgOptions;
use interlock_testkit::sim::SimPayments;

use crate::cell::{Env, SharedSkew};
use crate::procs::DevServer;
use interlock_testkit::payments_api::{PaymentsApi, Routes};

/// A child process killed when dropped.
pub(crate) struct ChildGuard(pub(crate) Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What runs beside the [`Env`] and stops when dropped.
pub struct Services {
    /// The payments API (Stripe's endpoints).
    pub api: PaymentsApi,
    /// The shop's order service, if any.
    pub shop: Option<PaymentsApi>,
    _receiver: Option<ChildGuard>,
}

/// How to start the stack.
pub struct Options<'a> {
    /// Scratch directory (the dev server's database, the journal, logs).
    pub work: &'a Path,
    /// The dev server's port (it also takes the next three; the webhook receiver port + 10).
    pub port: u16,
    /// No shop order service: workers decide on Stripe's facts alone.
    pub no_shop: bool,
    /// Send the payments API's signed webhooks to `interlock webhook serve`.
    pub webhooks: bool,
    /// A PostgreSQL server and schema for the journal (workers then share only the database);
    /// none: an SQLite journal in `work`.
    pub database: Option<(String, String)>,
}

/// The binary `name` beside the running one (or, for a test binary in `deps/`, in the directory
/// above), or an error saying how to build it.
pub fn sibling(name: &str) -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let mut dir = exe.parent().context("no binary directory")?;
    if dir.ends_with("deps") {
        dir = dir.parent().context("no binary directory")?;
    }
    let path = dir.join(name);
    if !path.exists() {
        bail!(
            "{} is missing: build it with `cargo build -p interlock-cli -p e2e-worker -p interlock-e2e \
             -p refund-template`",
            path.display()
        );
    }
    Ok(path)
}

/// Check that the Python worker can run: its packages are installed and its gRPC stubs can be
/// generated (what `scripts/setup` does).
pub fn check_python() -> anyhow::Result<()> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../worker-examples/python");
    let out = Command::new("python3")
        .arg(dir.join("gen_stubs.py"))
        .output()
        .context("running python3 (the Python worker's systems need it)")?;
    if !out.status.success() {
        bail!(
            "the Python worker cannot run ({}): run scripts/setup, which installs \
             worker-examples/python/requirements.txt",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let out = Command::new("python3")
        .args(["-c", "import temporalio, grpc"])
        .output()?;
    if !out.status.success() {
        bail!(
            "the Python worker's packages are missing ({}): run scripts/setup",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Start everything and return the environment cells and benchmarks run in.
pub fn start(o: &Options<'_>) -> anyhow::Result<(Env, Services)> {
    let (worker_bin, starter_bin) = (sibling("harness-worker")?, sibling("harness-starter")?);
    let gate_server_bin = sibling("gate-server")?;
    let python_worker = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../worker-examples/python/refund_worker.py");
    eprintln!("starting the Temporal dev server on 127.0.0.1:{} …", o.port);
    let server = DevServer::start(o.work, o.port)?;
    let skew = SharedSkew::new(o.work.join("clock-skew"))?;
    let sim = SimPayments::new(
        Tier::One,
        Duration::from_secs(24 * 3600),
        skew.clone() as Arc<dyn Clock>,
    );
    let secret = "sk_test_e2e".to_owned();
    // Stripe's API and the shop's order service are two services, as they are in production.
    let api = PaymentsApi::start_on(sim.clone(), &secret, 0, Routes::StripeOnly)?;
    let shop = if o.no_shop {
        None
    } else {
        Some(PaymentsApi::start_on(
            sim.clone(),
            &secret,
            0,
            Routes::ShopOnly,
        )?)
    };
    let (journal_name, journal_schema) = match &o.database {
        Some((url, schema)) => (url.clone(), schema.clone()),
        None => (
            o.work.join("journal.db").display().to_string(),
            "interlock".to_owned(),
        ),
    };
    let journal = interlock_postgres::open_named(
        &journal_name,
        skew.clone() as Arc<dyn Clock>,
        &PgOptions::in_schema(journal_schema.clone()),
    )?
    .store;
    let receiver = if o.webhooks {
        // The API's signed refund webhooks go to `interlock webhook serve`, which records them.
        let webhook_secret = "whsec_e2e";
        let hook_port = o.port + 10;
        let child = Command::new(sibling("interlock")?)
            .args(["webhook", "serve", "--port", &hook_port.to_string()])
            .env("INTERLOCK_JOURNAL", &journal_name)
            .env("INTERLOCK_JOURNAL_SCHEMA", &journal_schema)
            .env("STRIPE_WEBHOOK_SECRET", webhook_secret)
            .stderr(std::fs::File::create(o.work.join("webhooks.log"))?)
            .spawn()
            .context("starting `interlock webhook serve`")?;
        let mut child = ChildGuard(child);
        // A receiver that cannot listen (the port held by a process an interrupted run left
        // behind) exits at once; the API's webhooks would then go to that process's journal and
        // every confirmation would be lost without a word.
        std::thread::sleep(Duration::from_millis(300));
        if let Some(status) = child.0.try_wait()? {
            bail!(
                "`interlock webhook serve` exited ({status}) instead of listening on port \
                 {hook_port}: is a receiver left over from an interrupted run still holding it? \
                 ({})",
                o.work.join("webhooks.log").display()
            );
        }
        api.send_webhooks(&format!("http://127.0.0.1:{hook_port}/"), webhook_secret);
        Some(child)
    } else {
        None
    };
    let env = Env {
        server,
        sim,
        base_url: api.base_url.clone(),
        shop_url: shop.as_ref().map(|s| s.base_url.clone()),
        secret,
        journal,
        journal_name,
        journal_schema,
        skew,
        worker_bin,
        starter_bin,
        gate_server_bin,
        python_worker,
        work: o.work.to_owned(),
        step: e2e_worker::StepTimings::default(),
        idp: crate::idp::Idp::new()?,
    };
    Ok((
        env,
        Services {
            api,
            shop,
            _receiver: receiver,
        },
    ))
}
