//! The gate as a gRPC service (`interlock.v1.GateService`, `proto/interlock/v1/gate.proto`), so
//! that a Temporal worker written in Python, TypeScript, Go or Java gets the same gate, journal and
//! receipts as a Rust one without reimplementing the protocol. The server owns the journal, the
//! leases and the liveness locks; a worker's activity body is one `Submit` call.
//!
//! The safety of a send never rests on the connection: an attempt runs to its next step boundary
//! and stops there when its caller goes away or the server drains ([`Bound::with_stop`],
//! [`Bound::with_fence`]); a send already under way finishes and its answer is journaled; a server
//! killed mid-send leaves an in-flight record that the next attempt, through any server on the
//! same journal, recovers by the target's tier.
//!
//! * [`config`]: the configuration file (listen address, journal, targets, callers, TLS, limits).
//! * [`callers`]: who a call is (by token or client certificate) and what that caller may do.
//! * [`jwt`]: callers vouched for by signed tokens, with their role and targets as claims.
//! * [`targets`]: targets by name, built from the configuration or registered by code.
//! * [`service`]: the RPCs, each run on the blocking pool.
//! * [`convert`]: messages to library types and back, with every malformed field named.
//! * [`status`]: library errors to gRPC status codes.
//! * [`serve`]: the transport: TCP or a unix socket, TLS, the bearer token, health and reflection,
//!   message limits, graceful shutdown.
//!
//! [`Bound::with_stop`]: interlock::Bound::with_stop
//! [`Bound::with_fence`]: interlock::Bound::with_fence

pub mod callers;
pub mod config;
pub mod convert;
pub mod deadline;
pub mod jwt;
mod page_token;
pub mod serve;
pub mod service;
pub mod status;
pub mod targets;
pub mod withheld;

/// The generated messages and service (`interlock.v1`).
#[allow(missing_docs, unreachable_pub, clippy::all, clippy::pedantic)]
pub mod pb {
    tonic::include_proto!("interlock.v1");

    /// The encoded descriptor set, for gRPC reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        tonic::include_file_descriptor_set!("interlock_v1_descriptor");
}

pub use config::{ConfigError, ServerConfig};
pub use serve::{Listen, Listener, ServeError, Server, run_until_signalled};
pub use service::GateApi;
pub use targets::{TargetEntry, Targets};

/// The service's full name, as health checks and reflection list it.
pub const SERVICE_NAME: &str = "interlock.v1.GateService";
