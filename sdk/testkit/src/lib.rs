//! What Interlock's own tests and harnesses stand on, kept out of the library users link: scripted
//! faults at the gate's named points, an in-process payments service that behaves the way
//! Stripe's refunds are documented to, throwaway PostgreSQL servers, and a proxy that fails the
//! network to them; the payments service over Stripe's HTTP API (`payments-api`), a credits
//! service with no idempotency for the HTTP target (`ledger`), and the benchmarks' shared report.

pub mod bench_report;
pub mod faults;
pub mod ledger;
pub mod otlp;
pub mod payments_api;
pub mod pg;
pub mod proxy;
pub mod sim;
