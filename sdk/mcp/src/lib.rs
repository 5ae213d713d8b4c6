//! The MCP proxy: an agent's MCP client talks to it as it would to its MCP server, and the proxy
//! passes every message through untouched except the `tools/call` requests for the tools its
//! configuration names. Those go through the gate — journaled before they go out, their premises
//! read from another tool of the same server before every send, the approval checked live, a
//! crash recovered on the next start — so an agent gets the gate's guarantees with no code of its
//! own. This crate keeps the library free of MCP: the library does not know the protocol, and the
//! proxy only maps it onto the gate.
//!
//! The parts: the configuration ([`config`]); the judging of every client frame before anything
//! is sent ([`frame`]); which effect a call is ([`key`]); the server as a child process
//! ([`upstream`]); a gated tool as the gate's target and premise reader ([`tool`]), or a tool
//! the proxy offers itself and sends over HTTP ([`http_tool`]); what the
//! agent hears back ([`answer`]); and the run that ties them ([`proxy`]).

pub mod answer;
pub mod config;
pub mod frame;
pub mod http_tool;
pub mod key;
pub mod proxy;
pub mod tool;
pub mod upstream;

pub use config::ProxyConfig;
pub use proxy::{ProxyError, run};
