//! The transport. Loopback TCP or a unix socket by default, because the gate decides who may move
//! money: exposing it on a network is a choice the configuration makes explicitly, with TLS and a
//! bearer token. Health and reflection are served beside the gate so stock tools (`grpcurl`, a
//! load balancer's health check) work without the `.proto` file. A graceful shutdown stops new
//! dispatches at once and waits a bounded time for requests under way; whatever it cuts off is
//! in the journal, and the next attempt recovers it.

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use interlock::gate::ConfigError as GateConfigError;
use interlock::journal::JournalError;
use interlock::reach::Reach;
use interlock::{Clock, Gate, GateError};
use interlock_postgres::PgOptions;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Identity, ServerTlsConfig};
use tonic::{Request, Status};
use tonic_health::ServingStatus;

use crate::callers::{Caller, Callers, Role};
use crate::config::ServerConfig;
use crate::pb;
use crate::pb::gate_service_server::GateServiceServer;
use crate::service::GateApi;
use crate::targets::Targets;

/// Where the server listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listen {
    /// A TCP address (an IP and a port).
    Tcp(SocketAddr),
    /// A unix socket's path.
    Unix(PathBuf),
}

impl Listen {
    /// `127.0.0.1:50051`, `[::1]:50051`, or `unix:/path/to/gate.sock`.
    pub fn parse(text: &str) -> Result<Self, String> {
        if let Some(path) = text.strip_prefix("unix:") {
            let path = path.trim_start_matches("//");
            if !path.starts_with('/') {
                return Err(format!(
                    "{text:?}: a unix socket needs an absolute path, e.g. unix:/run/interlock/gate.sock"
                ));
            }
            return Ok(Self::Unix(PathBuf::from(path)));
        }
        text.parse().map(Self::Tcp).map_err(|_| {
            format!("{text:?} is neither IP:PORT (e.g. 127.0.0.1:50051) nor unix:/absolute/path")
        })
    }
}

/// Why the server could not start or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The journal could not be opened.
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// The gate's configuration is unusable.
    #[error(transparent)]
    GateConfig(#[from] GateConfigError),
    /// The gate could not be built over the journal.
    #[error(transparent)]
    Gate(#[from] GateError),
    /// The bearer token's variable is not set.
    #[error(
        "the server configuration asks for a bearer token in {env}, which is not set or empty: \
         export it, or remove [auth]"
    )]
    Token {
        /// The variable.
        env: String,
    },
    /// A TLS file (or the signed tokens' public key) could not be read.
    #[error("cannot read the file {path}: {source}")]
    Tls {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Two callers were given one credential: a call carrying it could only be one of them.
    #[error(
        "callers {first} and {second} are given the same {what}: give every caller a \
         credential of its own"
    )]
    SharedCredential {
        /// The first caller.
        first: String,
        /// The second.
        second: String,
        /// `token` or `certificate subject`.
        what: &'static str,
    },
    /// The signed-token configuration cannot be used.
    #[error("[auth.jwt]: {0}")]
    Jwt(String),
    /// Client certificates were asked for on a server without TLS.
    #[error("a client CA needs TLS: give the server a certificate ([tls] cert and key)")]
    ClientCaWithoutTls,
    /// The address could not be bound.
    #[error("cannot listen on {address}: {source}")]
    Bind {
        /// The address.
        address: String,
        /// Why.
        source: std::io::Error,
    },
    /// Another server answers on the unix socket.
    #[error("another server is listening on {0}: stop it, or listen elsewhere")]
    InUse(PathBuf),
    /// The socket path holds something that is not a socket.
    #[error("{0} exists and is not a unix socket: remove it, or listen elsewhere")]
    NotASocket(PathBuf),
    /// The transport failed.
    #[error("the gRPC transport failed: {0}")]
    Transport(#[from] tonic::transport::Error),
    /// The drain time would cut off sends under way.
    #[error(
        "drain_ms = {drain_ms} is shorter than the gate's send timeout + settle ({needed_ms} ms): \
         a graceful shutdown would cut off a send under way; raise drain_ms or leave it out"
    )]
    DrainTooShort {
        /// As configured.
        drain_ms: u128,
        /// The least that covers a send.
        needed_ms: u128,
    },
    /// Reflection could not be set up.
    #[error("gRPC reflection: {0}")]
    Reflection(String),
    /// The address is reachable from other hosts and the server is not protected for that.
    #[error(transparent)]
    Exposed(#[from] interlock::reach::Exposed),
}

/// What a gate server asked to listen where others can reach it is told to add.
pub const EXPOSED_FIX: &str = "set [auth] (a bearer token) and [tls] (a certificate) in the \
     server's configuration, or listen on loopback (127.0.0.1) or a unix socket";

/// A bound listener, ready to serve.
#[derive(Debug)]
pub enum Listener {
    /// TCP.
    Tcp(tokio::net::TcpListener),
    /// A unix socket (its path, and the device and inode it was bound as), removed when the
    /// server stops unless another server has taken the path since.
    Unix(tokio::net::UnixListener, PathBuf, (u64, u64)),
}

impl Listener {
    /// Bind `listen`. A stale unix socket (a file nobody answers on) is replaced; a live one or
    /// a file that is not a socket is an error.
    pub async fn bind(listen: &Listen) -> Result<Self, ServeError> {
        match listen {
            Listen::Tcp(addr) => tokio::net::TcpListener::bind(addr)
                .await
                .map(Self::Tcp)
                .map_err(|source| ServeError::Bind {
                    address: addr.to_string(),
                    source,
                }),
            Listen::Unix(path) => {
                clear_stale_socket(path)?;
                let failed = |source| ServeError::Bind {
                    address: format!("unix:{}", path.display()),
                    source,
                };
                // Bound under a private name, made owner-only, then moved into place: no one can
                // connect while the socket still has the umask's permissions.
                let staging = path.with_file_name(format!(
                    ".{}.{}",
                    path.file_name()
                        .map_or_else(|| "gate.sock".into(), |n| n.to_string_lossy()),
                    std::process::id()
                ));
                let _ = std::fs::remove_file(&staging);
                let listener = tokio::net::UnixListener::bind(&staging).map_err(failed)?;
                use std::os::unix::fs::{MetadataExt, PermissionsExt};
                std::fs::set_permissions(&staging, std::fs::Permissions::from_mode(0o600))
                    .and_then(|()| std::fs::rename(&staging, path))
                    .map_err(|e| {
                        let _ = std::fs::remove_file(&staging);
                        failed(e)
                    })?;
                let meta = std::fs::metadata(path).map_err(failed)?;
                Ok(Self::Unix(listener, path.clone(), (meta.dev(), meta.ino())))
            }
        }
    }

    /// The address a client dials: `127.0.0.1:PORT` (the port the system chose for port 0) or
    /// `unix:/path`.
    pub fn address(&self) -> String {
        match self {
            Self::Tcp(l) => l
                .local_addr()
                .map_or_else(|e| format!("unknown ({e})"), |a| a.to_string()),
            Self::Unix(_, path, _) => format!("unix:{}", path.display()),
        }
    }
}

fn clear_stale_socket(path: &Path) -> Result<(), ServeError> {
    use std::os::unix::fs::FileTypeExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    if !meta.file_type().is_socket() {
        return Err(ServeError::NotASocket(path.to_owned()));
    }
    // Only a refused connection shows that nobody listens; any other failure (permissions on
    // another user's socket, say) leaves the file alone.
    match std::os::unix::net::UnixStream::connect(path) {
        Ok(_) => return Err(ServeError::InUse(path.to_owned())),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {}
        Err(source) => {
            return Err(ServeError::Bind {
                address: format!("unix:{}", path.display()),
                source,
            });
        }
    }
    std::fs::remove_file(path).map_err(|source| ServeError::Bind {
        address: format!("unix:{}", path.display()),
        source,
    })
}

/// A server, configured and ready to run.
pub struct Server {
    api: GateApi,
    callers: Callers,
    tls: Option<Identity>,
    client_ca: Option<Certificate>,
    max_message_bytes: usize,
    drain: Duration,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("credentials_required", &self.callers.required())
            .field("tls", &self.tls.is_some())
            .field("client_ca", &self.client_ca.is_some())
            .field("max_message_bytes", &self.max_message_bytes)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// A server for `api` with no token, no TLS and the default limits.
    pub fn new(api: GateApi) -> Self {
        Self {
            api,
            callers: Callers::new(),
            tls: None,
            client_ca: None,
            max_message_bytes: crate::config::DEFAULT_MAX_MESSAGE_BYTES,
            // The library's default send timeout and settle margin, and room for the answer.
            drain: Duration::from_secs(35)
                + Duration::from_millis(crate::config::DRAIN_BEYOND_SEND_MS),
        }
    }

    /// How long a graceful shutdown waits for requests under way. Keep it at least the gate's
    /// send timeout + settle margin, so a send under way finishes and is journaled.
    pub fn drain(mut self, d: Duration) -> Self {
        self.drain = d;
        self
    }

    /// Require a credential on every gate call, and let `authorization: Bearer <token>` in as
    /// the caller `worker`: every target, its own effects. One token shared by every worker
    /// makes them one caller; [`Server::caller`] gives each its own.
    pub fn token(mut self, token: impl Into<Arc<str>>) -> Self {
        self.callers = self.callers.token(
            token,
            Caller::new(crate::callers::SHARED_WORKER, Role::Worker),
        );
        self
    }

    /// Require a credential on every gate call, and let `authorization: Bearer <token>` in as
    /// `caller`.
    pub fn caller(mut self, token: impl Into<Arc<str>>, caller: Caller) -> Self {
        self.callers = self.callers.token(token, caller);
        self
    }

    /// Require a credential on every gate call, and let a client certificate whose subject is
    /// `subject` in as `caller` (the certificate must be signed by [`Server::client_ca_pem`]).
    pub fn caller_by_subject(mut self, subject: impl Into<String>, caller: Caller) -> Self {
        self.callers = self.callers.subject(subject, caller);
        self
    }

    /// Turn lease and budget administration on, for calls carrying `authorization: Bearer
    /// <token>` with this token: the caller `admin`, which also reads every effect whole.
    pub fn admin_token(mut self, token: impl Into<Arc<str>>) -> Self {
        self.callers = self.callers.admin_token(token);
        self
    }

    /// Require a credential on every gate call, and let a signed token `verifier` accepts in as
    /// the caller its claims name (`jwt:` and its subject, a name no other caller has).
    pub fn jwt(mut self, verifier: crate::jwt::JwtVerifier) -> Self {
        self.callers = self.callers.jwt(verifier);
        self
    }

    /// Ask TLS clients for a certificate, verified against this CA (PEM): the subjects of
    /// [`Server::caller_by_subject`]. Needs [`Server::tls_pem`].
    pub fn client_ca_pem(mut self, ca: impl AsRef<[u8]>) -> Self {
        self.client_ca = Some(Certificate::from_pem(ca));
        self
    }

    /// Serve TLS with this certificate chain and private key (PEM).
    pub fn tls_pem(mut self, cert: impl AsRef<[u8]>, key: impl AsRef<[u8]>) -> Self {
        self.tls = Some(Identity::from_pem(cert, key));
        self
    }

    /// Cap every message at `bytes`.
    pub fn max_message_bytes(mut self, bytes: usize) -> Self {
        self.max_message_bytes = bytes;
        self
    }

    /// Build the server a configuration describes: open its journal (`journal` when the file
    /// names none), build the gate (`customize` may add to it, e.g. a test's fault points), bind
    /// its targets, and read its token and TLS files.
    pub fn from_config(
        cfg: &ServerConfig,
        journal: &str,
        clock: Arc<dyn Clock>,
        customize: impl FnOnce(Gate) -> Gate,
    ) -> Result<Self, ServeError> {
        let name = cfg.journal.as_deref().unwrap_or(journal);
        let opened = interlock_postgres::open_named(
            name,
            clock.clone(),
            &PgOptions::in_schema(cfg.journal_schema.clone()),
        )?;
        let mut gate_cfg = opened.config;
        if let Some(d) = cfg.gate.send_timeout() {
            gate_cfg = gate_cfg.send_timeout(d);
        }
        if let Some(d) = cfg.gate.settle() {
            gate_cfg = gate_cfg.settle(d);
        }
        if let Some(d) = cfg.gate.retry_after() {
            gate_cfg = gate_cfg.retry_after(d);
        }
        if let Some(d) = cfg.gate.premise_max_age() {
            gate_cfg = gate_cfg.premise_max_age(d);
        }
        let store = opened.store;
        let gate_cfg = gate_cfg.build()?;
        let send = gate_cfg.send_timeout + gate_cfg.settle;
        let drain = match cfg.drain_ms.map(Duration::from_millis) {
            Some(d) if d < send => {
                return Err(ServeError::DrainTooShort {
                    drain_ms: u128_ms(d),
                    needed_ms: u128_ms(send),
                });
            }
            Some(d) => d,
            None => send + Duration::from_millis(crate::config::DRAIN_BEYOND_SEND_MS),
        };
        let mut gate = Gate::new(store.clone(), store.clone(), clock.clone(), gate_cfg)?;
        if let Some(path) = &cfg.approvers {
            gate = gate.with_approver_file(path)?;
        }
        let gate = customize(gate);
        let targets = Targets::from_config(&gate, &cfg.targets);
        let mut api = GateApi::new(store, targets, clock);
        if let Some(floor) = cfg.gate.min_call_deadline() {
            api = api.with_min_call_deadline(floor);
        }
        let mut server = Self::new(api)
            .max_message_bytes(cfg.max_message_bytes)
            .drain(drain);
        if let Some(tls) = &cfg.tls {
            let read = |path: &PathBuf| {
                std::fs::read(path).map_err(|source| ServeError::Tls {
                    path: path.clone(),
                    source,
                })
            };
            server = server.tls_pem(read(&tls.cert)?, read(&tls.key)?);
            if let Some(ca) = &tls.client_ca {
                server = server.client_ca_pem(read(ca)?);
            }
        }
        if let Some(auth) = &cfg.auth {
            let read = |env: &str| match std::env::var(env) {
                Ok(t) if !t.is_empty() => Ok(t),
                _ => Err(ServeError::Token {
                    env: env.to_owned(),
                }),
            };
            let mut tokens: Vec<(String, String)> = Vec::new();
            let mut distinct = |name: &str, token: String| -> Result<String, ServeError> {
                if let Some((first, _)) = tokens
                    .iter()
                    .find(|(_, t)| same(t.as_bytes(), token.as_bytes()))
                {
                    return Err(ServeError::SharedCredential {
                        first: first.clone(),
                        second: name.to_owned(),
                        what: "token",
                    });
                }
                tokens.push((name.to_owned(), token.clone()));
                Ok(token)
            };
            if let Some(env) = auth.shared_token_env() {
                server = server.token(distinct(crate::callers::SHARED_WORKER, read(env)?)?);
            }
            if let Some(env) = &auth.admin_token_env {
                server = server.admin_token(distinct(crate::callers::ADMIN, read(env)?)?);
            }
            for c in &auth.callers {
                let mut caller = Caller::new(c.name.as_str(), c.role);
                if let Some(t) = &c.targets {
                    caller = caller.only(t.iter().cloned());
                }
                server = match (&c.token_env, &c.subject) {
                    (Some(env), _) => server.caller(distinct(&c.name, read(env)?)?, caller),
                    (None, Some(subject)) => server.caller_by_subject(subject.clone(), caller),
                    (None, None) => server,
                };
            }
            if let Some(j) = &auth.jwt {
                let pem = std::fs::read(&j.public_key).map_err(|source| ServeError::Tls {
                    path: j.public_key.clone(),
                    source,
                })?;
                let claims = crate::jwt::Claims {
                    role: j.role_claim.clone(),
                    targets: j.targets_claim.clone(),
                };
                let verifier = crate::jwt::JwtVerifier::new(
                    &j.algorithm,
                    &pem,
                    &j.issuer,
                    &j.audience,
                    j.leeway_s,
                    claims,
                )
                .map_err(ServeError::Jwt)?
                .max_lifetime(j.max_lifetime_s);
                server = server.jwt(verifier);
            }
        }
        Ok(server)
    }

    /// What protects this server's socket: its TLS and its token.
    pub fn reach(&self) -> Reach {
        Reach {
            tls: self.tls.is_some(),
            authenticated: self.callers.required(),
            proxies: Vec::new(),
        }
    }

    /// Whether this server may listen on `listen` ([`interlock::reach`]): a unix socket and
    /// loopback always, another address only with a token and TLS.
    pub fn check_reach(&self, listen: &Listen) -> Result<(), ServeError> {
        match listen {
            Listen::Tcp(addr) => Ok(self.reach().check("the gate server", *addr, EXPOSED_FIX)?),
            Listen::Unix(_) => Ok(()),
        }
    }

    /// The service, for callers that serve it themselves: with this server's callers, so
    /// that each call is identified and checked there too.
    pub fn api(&self) -> GateApi {
        self.api
            .clone()
            .with_callers(Arc::new(self.callers.clone()))
    }

    /// Serve on `listener` until `shutdown` completes; then drain: no new dispatches, requests
    /// under way get up to the drain time to finish.
    pub async fn run(
        self,
        listener: Listener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServeError> {
        // Checked on the socket itself, whatever address it was bound by.
        if let Listener::Tcp(l) = &listener {
            let addr = l.local_addr().map_err(|source| ServeError::Bind {
                address: listener.address(),
                source,
            })?;
            self.check_reach(&Listen::Tcp(addr))?;
        }
        let (health, health_service) = tonic_health::server::health_reporter();
        health
            .set_service_status(crate::SERVICE_NAME, ServingStatus::Serving)
            .await;
        health.set_service_status("", ServingStatus::Serving).await;
        // Both reflection versions: older grpcurl and grpc_cli ask v1alpha.
        let described = || {
            tonic_reflection::server::Builder::configure()
                .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
                .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        };
        let reflection_error =
            |e: tonic_reflection::server::Error| ServeError::Reflection(e.to_string());
        let reflection_v1 = described().build_v1().map_err(reflection_error)?;
        let reflection_v1alpha = described().build_v1alpha().map_err(reflection_error)?;
        let callers = Arc::new(self.callers.clone());
        let api = self.api.clone().with_callers(callers.clone());
        let gate = InterceptedService::new(
            GateServiceServer::new(api)
                .max_decoding_message_size(self.max_message_bytes)
                .max_encoding_message_size(self.max_message_bytes),
            move |req: Request<()>| authorize(&callers, req),
        );
        let mut builder = tonic::transport::Server::builder();
        if let Some(identity) = self.tls.clone() {
            let mut tls = ServerTlsConfig::new().identity(identity);
            if let Some(ca) = self.client_ca.clone() {
                // Callers known by token may still connect without a certificate.
                tls = tls
                    .client_ca_root(ca)
                    .client_auth_optional(self.callers.by_token());
            }
            builder = builder.tls_config(tls)?;
        } else if self.client_ca.is_some() {
            return Err(ServeError::ClientCaWithoutTls);
        }
        let router = builder
            .add_service(health_service)
            .add_service(reflection_v1)
            .add_service(reflection_v1alpha)
            .add_service(gate);
        let api = self.api.clone();
        let (drained_tx, drained_rx) = tokio::sync::oneshot::channel::<()>();
        let signal = async move {
            shutdown.await;
            tracing::info!("shutting down: no new dispatches; requests under way may finish");
            api.drain();
            health
                .set_service_status(crate::SERVICE_NAME, ServingStatus::NotServing)
                .await;
            let _ = drained_tx.send(());
        };
        let address = listener.address();
        tracing::info!(%address, credentials = self.callers.required(), tls = self.tls.is_some(), client_certificates = self.client_ca.is_some(), "serving interlock.v1.GateService");
        let drain = self.drain;
        let deadline = async move {
            if drained_rx.await.is_ok() {
                tokio::time::sleep(drain).await;
            } else {
                std::future::pending::<()>().await;
            }
        };
        let (served, socket) = match listener {
            Listener::Tcp(l) => {
                // Small answers go out at once, not after the peer's delayed acknowledgement.
                let incoming =
                    tonic::transport::server::TcpIncoming::from(l).with_nodelay(Some(true));
                let serve = router.serve_with_incoming_shutdown(incoming, signal);
                (race(serve, deadline).await, None)
            }
            Listener::Unix(l, path, id) => {
                let serve = router.serve_with_incoming_shutdown(UnixListenerStream::new(l), signal);
                (race(serve, deadline).await, Some((path, id)))
            }
        };
        if let Some((path, id)) = socket {
            use std::os::unix::fs::MetadataExt;
            let ours = std::fs::metadata(&path).is_ok_and(|m| (m.dev(), m.ino()) == id);
            if ours {
                let _ = std::fs::remove_file(path);
            }
        }
        served
    }
}

/// Run `server` on `listen` in a runtime of its own until SIGTERM or SIGINT, then drain; what
/// `interlock serve` does. `ready` is told the address once the socket is bound (the port the
/// system chose, for port 0).
pub fn run_until_signalled(
    server: Server,
    listen: &Listen,
    ready: impl FnOnce(&str),
) -> Result<(), ServeError> {
    server.check_reach(listen)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("interlock-serve")
        .build()
        .map_err(|source| ServeError::Bind {
            address: "a runtime for the server".into(),
            source,
        })?;
    let served = runtime.block_on(async {
        let listener = Listener::bind(listen).await?;
        ready(&listener.address());
        server.run(listener, signalled()).await
    });
    // Requests cut off by the drain deadline may still be blocked in a send: their effects are
    // journaled as in flight, so the process need not wait for them.
    runtime.shutdown_timeout(Duration::from_secs(1));
    served
}

/// SIGTERM or SIGINT.
async fn signalled() {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => {
            tracing::warn!("cannot listen for signals; stop the server with SIGKILL");
            std::future::pending::<()>().await;
        }
    }
}

/// The server's end, or the drain deadline's, whichever comes first.
async fn race(
    serve: impl Future<Output = Result<(), tonic::transport::Error>>,
    deadline: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    tokio::select! {
        r = serve => r.map_err(ServeError::from),
        () = deadline => {
            tracing::warn!(
                "requests still under way at the end of the drain time were cut off; their \
                 effects are in the journal and the next attempt recovers them"
            );
            Ok(())
        }
    }
}

fn u128_ms(d: Duration) -> u128 {
    d.as_millis()
}

/// Let a call in only as a caller its credentials name ([`Callers::identify`]), before its
/// message is decoded; the caller rides in the request's extensions to the service.
fn authorize(callers: &Callers, mut req: Request<()>) -> Result<Request<()>, Status> {
    let caller = identify(callers, &req).inspect_err(|status| {
        tracing::warn!(
            reason = status.message(),
            "refused a call with no valid credential"
        );
    })?;
    req.extensions_mut().insert(caller);
    Ok(req)
}

/// The caller `req` is, by its bearer token and its client certificate.
pub(crate) fn identify<T>(callers: &Callers, req: &Request<T>) -> Result<Caller, Status> {
    let subject = req
        .peer_certs()
        .and_then(|certs| certs.first().and_then(|c| crate::callers::subject_of(c)));
    callers.identify(bearer(req.metadata()), subject.as_deref())
}

/// The bearer token a call carries, if any.
pub(crate) fn bearer(metadata: &tonic::metadata::MetadataMap) -> Option<&str> {
    metadata
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
}

/// Whether `a` is `b`, in time that depends neither on where they differ nor on their lengths:
/// their digests are compared, every byte.
pub(crate) fn same(a: &[u8], b: &[u8]) -> bool {
    use sha2::Digest;
    let (x, y) = (sha2::Sha256::digest(a), sha2::Sha256::digest(b));
    x.iter()
        .zip(y.iter())
        .fold(0u8, |acc, (p, q)| acc | (p ^ q))
        == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_addresses_are_loopback_tcp_or_absolute_unix_paths() {
        assert_eq!(
            Listen::parse("127.0.0.1:50051"),
            Ok(Listen::Tcp(SocketAddr::from(([127, 0, 0, 1], 50051))))
        );
        assert_eq!(
            Listen::parse("unix:///run/g.sock"),
            Ok(Listen::Unix("/run/g.sock".into()))
        );
        assert!(Listen::parse("unix:g.sock").is_err());
        assert!(Listen::parse("localhost").is_err());
    }

    #[test]
    fn only_a_configured_token_passes_and_names_its_caller() {
        let with = |v: &str| {
            let mut r = Request::new(());
            if let Ok(v) = v.parse() {
                r.metadata_mut().insert("authorization", v);
            }
            r
        };
        let callers = Callers::new().token(
            "s3cret",
            Caller::new(crate::callers::SHARED_WORKER, Role::Worker),
        );
        let callers = callers.admin_token("adm1n");
        let name = |r: Result<Request<()>, Status>| {
            r.ok()
                .and_then(|r| r.extensions().get::<Caller>().map(|c| c.name.to_string()))
        };
        assert_eq!(
            name(authorize(&callers, with("Bearer s3cret"))).as_deref(),
            Some("worker")
        );
        assert_eq!(
            name(authorize(&callers, with("Bearer adm1n"))).as_deref(),
            Some("admin")
        );
        assert!(authorize(&callers, with("Bearer s3cre")).is_err());
        assert!(authorize(&callers, with("s3cret")).is_err());
        assert!(authorize(&callers, Request::new(())).is_err());
        assert!(authorize(&Callers::new(), Request::new(())).is_ok());
    }
}
