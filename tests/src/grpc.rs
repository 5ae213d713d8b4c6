//! A gate server in this process, on loopback, over a simulated payments service: what the
//! hostile-request test attacks and the gRPC benchmark measures. The server is the real one
//! (`interlock_server::Server` on a real socket); only the payments service is simulated.

use std::sync::Arc;
use std::time::Duration;

use interlock::core::Premises;
use interlock::premise::{PremiseError, PremiseReader};
use interlock::{Clock, EffectKey, Gate, GateConfig, SqliteJournal, SystemClock, Tier};
use interlock_server::pb::gate_service_client::GateServiceClient;
use interlock_server::{GateApi, Listen, Listener, ServeError, Server, TargetEntry, Targets};
use interlock_stripe::RefundPayload;
use interlock_testkit::faults::Stall;
use interlock_testkit::sim::{SimPayments, SimRefundPremises, SimTarget};
use serde_json::Value;
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

/// The admin token every test server takes for `GrantLease` and `RevokeLease`.
pub const ADMIN: &str = "admin-token-for-tests";

/// A running server and what it stands on.
pub struct Running {
    /// `127.0.0.1:PORT` or `unix:/path`.
    pub address: String,
    /// The journal it writes.
    pub journal: Arc<SqliteJournal>,
    /// The simulated payments service behind its targets.
    pub sim: Arc<SimPayments>,
    /// The gate's binding to the `refunds` target, for in-process comparison.
    pub bound: interlock::Bound,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<Result<(), ServeError>>>,
    _dir: tempfile::TempDir,
}

/// How to start one.
#[derive(Default)]
pub struct Options {
    /// A bearer token the server requires.
    pub token: Option<String>,
    /// The largest message (default: the server's).
    pub max_message_bytes: Option<usize>,
    /// Listen on a unix socket in the temporary directory instead of loopback TCP.
    pub unix: bool,
    /// Serve TLS with this certificate and key (PEM).
    pub tls: Option<(Vec<u8>, Vec<u8>)>,
    /// Hold the next premise read of `refunds` (after `arm`) until the test releases it.
    pub premises: Option<Arc<HeldPremises>>,
    /// Faults at the gate's points (a stall after the dispatch, say).
    pub faults: Option<Arc<interlock_testkit::faults::ScriptedFaults>>,
    /// Every premise read of `refunds` takes this long (a slow order service).
    pub premise_delay: Option<Duration>,
    /// Callers known by bearer token, each with its own name, role and targets.
    pub callers: Vec<(String, interlock_server::callers::Caller)>,
    /// Callers known by the subject of a client certificate `client_ca` signed.
    pub subjects: Vec<(String, interlock_server::callers::Caller)>,
    /// Ask TLS clients for a certificate this CA (PEM) signed.
    pub client_ca: Option<Vec<u8>>,
    /// Judge signed approvals against the approver directory in this file, read live.
    pub approvers: Option<std::path::PathBuf>,
    /// Callers vouched for by signed tokens this verifier accepts.
    pub jwt: Option<interlock_server::jwt::JwtVerifier>,
}

/// A premise reader that takes `delay` to answer.
struct SlowPremises {
    inner: Arc<dyn PremiseReader>,
    delay: Duration,
}

impl PremiseReader for SlowPremises {
    fn read(&self, key: &EffectKey, payload: &Value) -> Result<Premises, PremiseError> {
        std::thread::sleep(self.delay);
        self.inner.read(key, payload)
    }
}

/// A premise reader that holds one armed read until the test releases it.
pub struct HeldPremises {
    inner: SimRefundPremises,
    armed: std::sync::Mutex<Option<Arc<Stall>>>,
}

impl HeldPremises {
    /// Over `sim`'s refund premises.
    pub fn new(sim: Arc<SimPayments>) -> Arc<Self> {
        Arc::new(Self {
            inner: SimRefundPremises(sim),
            armed: std::sync::Mutex::new(None),
        })
    }

    /// Hold the next read on `stall`.
    pub fn arm(&self, stall: Arc<Stall>) {
        *self
            .armed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(stall);
    }
}

impl PremiseReader for HeldPremises {
    fn read(&self, key: &EffectKey, payload: &Value) -> Result<Premises, PremiseError> {
        let held = self
            .armed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(stall) = held {
            stall.hold();
        }
        self.inner.read(key, payload)
    }
}

/// Start a server with target `refunds` (tier 1, 24 h dedupe window) and target `short_window`
/// (tier 1 with a 1 s window, which no gate timing covers: it cannot be bound). `sim` is the
/// payments service behind `refunds` (a new one when `None`).
pub async fn start(opts: Options, sim: Option<Arc<SimPayments>>) -> anyhow::Result<Running> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("journal.db");
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let journal = Arc::new(SqliteJournal::open(&path, clock.clone())?);
    let sim = sim.unwrap_or_else(|| {
        SimPayments::new(Tier::One, Duration::from_secs(24 * 3600), clock.clone())
    });
    let mut premises: Arc<dyn PremiseReader> = match &opts.premises {
        Some(p) => p.clone(),
        None => Arc::new(SimRefundPremises(sim.clone())),
    };
    if let Some(delay) = opts.premise_delay {
        premises = Arc::new(SlowPremises {
            inner: premises,
            delay,
        });
    }
    let mut gate = Gate::new(
        journal.clone(),
        journal.clone(),
        clock.clone(),
        GateConfig::beside(&path),
    )?;
    if let Some(f) = &opts.faults {
        gate = gate.with_faults(f.clone());
    }
    if let Some(path) = &opts.approvers {
        gate = gate.with_approver_file(path)?;
    }
    let bound = gate.bind(Arc::new(SimTarget(sim.clone())), premises)?;
    let mut targets = Targets::new();
    targets.insert(
        "refunds",
        TargetEntry {
            bound: bound.clone(),
            records: Some(Arc::new(SimTarget(sim.clone()))),
            check_payload: Some(|p| RefundPayload::from_value(p).map(drop)),
            required_premises: ["amount_paid", "order_eligible", "refunded_by_others"]
                .map(str::to_owned)
                .to_vec(),
        },
    );
    let short = SimPayments::new(Tier::One, Duration::from_secs(1), clock.clone());
    match gate.bind(
        Arc::new(SimTarget(short.clone())),
        Arc::new(SimRefundPremises(short)),
    ) {
        Ok(_) => anyhow::bail!("a 1 s dedupe window was accepted"),
        Err(e) => targets.insert_broken("short_window", e.to_string()),
    }
    let mut server = Server::new(GateApi::new(journal.clone(), targets, clock)).admin_token(ADMIN);
    if let Some(t) = &opts.token {
        server = server.token(t.as_str());
    }
    if let Some(n) = opts.max_message_bytes {
        server = server.max_message_bytes(n);
    }
    if let Some((cert, key)) = &opts.tls {
        server = server.tls_pem(cert, key);
    }
    for (token, caller) in &opts.callers {
        server = server.caller(token.as_str(), caller.clone());
    }
    for (subject, caller) in &opts.subjects {
        server = server.caller_by_subject(subject.as_str(), caller.clone());
    }
    if let Some(ca) = &opts.client_ca {
        server = server.client_ca_pem(ca);
    }
    if let Some(v) = opts.jwt {
        server = server.jwt(v);
    }
    let listen = if opts.unix {
        Listen::Unix(dir.path().join("gate.sock"))
    } else {
        Listen::parse("127.0.0.1:0").map_err(anyhow::Error::msg)?
    };
    let listener = Listener::bind(&listen).await?;
    let address = listener.address();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(server.run(listener, async move {
        let _ = stopped.await;
    }));
    Ok(Running {
        address,
        journal,
        sim,
        bound,
        stop: Some(stop),
        task: Some(task),
        _dir: dir,
    })
}

impl Running {
    /// Stop the server gracefully and wait for it.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            t.await??;
        }
        Ok(())
    }
}

/// A grant of lease `lease-1` by ana@support: one refund of at most $20 of `payment`.
pub fn lease_for(payment: &str) -> interlock_server::pb::GrantLeaseRequest {
    use interlock_server::pb;
    pb::GrantLeaseRequest {
        lease: Some(pb::Lease {
            id: "lease-1".into(),
            approver: "ana@support".into(),
            scope_json: [(
                "payment_intent".to_owned(),
                serde_json::Value::from(payment).to_string(),
            )]
            .into(),
            cap_field: "amount".into(),
            cap_max: 2000,
            ..pb::Lease::default()
        }),
    }
}

/// Adds `authorization: Bearer …` when it holds a token.
#[derive(Clone)]
pub struct Bearer(pub Option<String>);

impl Interceptor for Bearer {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(t) = &self.0 {
            let v = format!("Bearer {t}")
                .parse()
                .map_err(|_| tonic::Status::invalid_argument("token is not a header value"))?;
            req.metadata_mut().insert("authorization", v);
        }
        Ok(req)
    }
}

/// A client of the gate service.
pub type Client = GateServiceClient<InterceptedService<Channel, Bearer>>;

/// Connect to `address` (TCP or `unix:/path`), sending `token` if given.
pub async fn client(address: &str, token: Option<&str>) -> anyhow::Result<Client> {
    Ok(GateServiceClient::with_interceptor(
        channel(address).await?,
        Bearer(token.map(str::to_owned)),
    ))
}

/// Connect to `address` over TLS, trusting `ca` (PEM) for the name `localhost`.
pub async fn tls_client(address: &str, ca: &[u8]) -> anyhow::Result<Client> {
    tls_connect(address, ca, None).await
}

/// Connect to `address` over TLS, trusting `ca` (PEM) for the name `localhost`, presenting the
/// client certificate `cert` with its `key` (PEM).
pub async fn mtls_client(
    address: &str,
    ca: &[u8],
    cert: &[u8],
    key: &[u8],
) -> anyhow::Result<Client> {
    tls_connect(
        address,
        ca,
        Some(tonic::transport::Identity::from_pem(cert, key)),
    )
    .await
}

async fn tls_connect(
    address: &str,
    ca: &[u8],
    identity: Option<tonic::transport::Identity>,
) -> anyhow::Result<Client> {
    let mut tls = tonic::transport::ClientTlsConfig::new()
        .ca_certificate(tonic::transport::Certificate::from_pem(ca))
        .domain_name("localhost");
    if let Some(id) = identity {
        tls = tls.identity(id);
    }
    let channel = tonic::transport::Endpoint::try_from(format!("https://{address}"))?
        .tls_config(tls)?
        .connect()
        .await
        .map_err(|e| anyhow::anyhow!("TLS connection to {address}: {e:?}"))?;
    Ok(GateServiceClient::with_interceptor(channel, Bearer(None)))
}

/// A channel to `address` (TCP or `unix:/path`), for any of the server's services.
pub async fn channel(address: &str) -> anyhow::Result<Channel> {
    Ok(match address.strip_prefix("unix:") {
        Some(path) => {
            let path = path.to_owned();
            tonic::transport::Endpoint::try_from("http://gate.local")?
                .connect_with_connector(tower::service_fn(move |_: http::Uri| {
                    let path = path.clone();
                    async move {
                        let stream = tokio::net::UnixStream::connect(path).await?;
                        Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
                    }
                }))
                .await?
        }
        None => {
            tonic::transport::Endpoint::try_from(format!("http://{address}"))?
                .connect()
                .await?
        }
    })
}
