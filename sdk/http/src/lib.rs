//! A team's own HTTP service as an Interlock target, from configuration alone.
//!
//! Most effects a team wants to gate are one request to a service it runs: credit an account,
//! issue a voucher, cancel a shipment. Writing a [`Target`](interlock::target::Target) in Rust
//! for each is the part a team without a Rust engineer cannot do, and the part where a mistake
//! (a 5xx taken for a failure, a lookup that cannot see keys) sends money twice. This crate reads
//! the request, the service's deduplication, its lookup, its premises and the meaning of its
//! answers from one table ([`HttpTargetConfig`]) and keeps every rule a target must keep:
//!
//! * the tier follows from what is configured, never from a claim;
//! * only a definite answer is a failure: a lost connection, a 5xx and a 4xx that may follow a
//!   send that landed (401, 403, 404, 408, 409, 429, …) are unknown and settled by the tier;
//! * a lookup that cannot be sure (a record without a key, a list with more pages, an unexpected
//!   status) answers unknown, never "not found";
//! * the payload's fields are checked and put in one form before anything is journaled, and a
//!   payload cannot name the host a request goes to.
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let cfg: interlock_http::HttpTargetConfig = toml::from_str(r#"
//!     headers = { Authorization = "Bearer ${LEDGER_TOKEN}" }
//!     payload = { account = "string", amount = "integer" }
//!     rules = ["limit - credited >= payload.amount"]
//!     [send]
//!     url = "${LEDGER_URL}/credits"
//!     key_field = "request_key"
//!     [lookup]
//!     url = "${LEDGER_URL}/credits?request_key={key}"
//!     records = "/data"
//!     key = "/request_key"
//!     [premises.limit]
//!     url = "${LEDGER_URL}/accounts/{account}?excluding={key}"
//!     pointer = "/limit"
//!     [premises.credited]
//!     url = "${LEDGER_URL}/accounts/{account}?excluding={key}"
//!     pointer = "/credited"
//! "#)?;
//! let env = |var: &str| match var {
//!     "LEDGER_URL" => Some("http://127.0.0.1:9".to_owned()),
//!     "LEDGER_TOKEN" => Some("t0ken".to_owned()),
//!     _ => None,
//! };
//! let target = interlock_http::HttpTarget::with_env("credits", &cfg, &env)?;
//! assert_eq!(interlock::target::Target::tier(&target), interlock::Tier::Two);
//! # Ok(())
//! # }
//! ```

mod answer;
mod config;
mod target;
mod template;

pub use config::{
    AnswerOutcome, AnswerRule, BodyKind, ConfigMistake, ErrorFields, FieldKind, FieldType,
    HttpTargetConfig, Idempotency, LookupConfig, Method, PremiseConfig, RecordsConfig, SendConfig,
};
pub use target::{HttpPremises, HttpTarget, HttpTargetError};
