//! A gate server in this process, on loopback, over a simulated payments service: what the
//! hostile-request test attacks and the gRPC benchmark measures. The server is the real one
//! (`interlock_server::Server` on a real socket); only the payments service is simulated.

use std::sync::Arc;
use std::time::Duration;

use interlock::{Clock, Gate, GateConfig, SqliteJournal, SystemClock, Tier};
use interlock_server::pb::gate_service_client::GateServiceClient;
use interlock_server::{GateApi, Listen, Listener, ServeError, Server, TargetEntry, Targets};
use interlock_stripe::RefundPayload;
use interlock_testkit::sim::{SimPayments, SimRefundPremises, SimTarget};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

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
}

/// Start a server with target `refunds` (tier 1, 24 h dedupe window) and target `short_window`
/// (tier 1 with a 1 s window, which no gate timing covers: it cannot be bound).
pub async fn start(opts: Options) -> anyhow::Result<Running> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("journal.db");
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let journal = Arc::new(SqliteJournal::open(&path, clock.clone())?);
    let sim = SimPayments::new(Tier::One, Duration::from_secs(24 * 3600), clock.clone());
    let gate = Gate::new(
        journal.clone(),
        journal.clone(),
        clock.clone(),
        GateConfig::beside(&path),
    )?;
    let bound = gate.bind(
        Arc::new(SimTarget(sim.clone())),
        Arc::new(SimRefundPremises(sim.clone())),
    )?;
    let mut targets = Targets::new();
    targets.insert(
        "refunds",
        TargetEntry {
            bound: bound.clone(),
            records: Some(Arc::new(SimTarget(sim.clone()))),
            check_payload: Some(|p| RefundPayload::from_value(p).map(drop)),
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
    let mut server = Server::new(GateApi::new(journal.clone(), targets, clock));
    if let Some(t) = &opts.token {
        server = server.token(t.as_str());
    }
    if let Some(n) = opts.max_message_bytes {
        server = server.max_message_bytes(n);
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
    let channel = match address.strip_prefix("unix:") {
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
    };
    Ok(GateServiceClient::with_interceptor(
        channel,
        Bearer(token.map(str::to_owned)),
    ))
}
