//! The end-to-end kill matrix: a real Temporal dev server, real worker processes killed with
//! SIGKILL, and a payments API spoken over HTTP, judged by the payments API's own records.

pub mod cases;
pub mod cell;
pub mod classes;
pub mod day;
pub mod http_systems;
pub mod idp;
pub mod mcp;
pub mod metrics;
pub mod orders;
pub mod plot;
pub mod procs;
pub mod report;
pub mod results;
pub mod stack;
pub mod story;
