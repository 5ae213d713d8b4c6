//! Shared evidence machinery: the simulated refund world, the systems compared in the fault
//! matrix, and the judge that scores each cell against the payments service's own records.

pub mod actors;
pub mod baselines;
pub mod bench;
pub mod cases;
pub mod db_outbox;
pub mod db_shop;
pub mod gated;
pub mod grpc;
pub mod matrix;
pub mod raw_sql;
pub mod rng;
pub mod stores;
pub mod system;
pub mod targets;
pub mod world;
