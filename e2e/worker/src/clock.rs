//! A harness hook for time: with `INTERLOCK_CLOCK_SKEW_FILE` set, the journal, the gate and the
//! leases read the system clock plus the milliseconds written in that file. The kill matrix uses
//! it to let a day pass for everyone at once — the payments API forgets its keys and the gate sees
//! its dedupe window close — without waiting a day. Unset, this is the system clock.

use std::path::PathBuf;

use interlock::{Clock, SystemClock};

/// The system clock, skewed by a file's contents.
#[derive(Debug, Clone)]
pub struct SkewClock {
    file: PathBuf,
}

impl SkewClock {
    /// From `INTERLOCK_CLOCK_SKEW_FILE`, if set.
    pub fn from_env() -> Option<Self> {
        std::env::var_os("INTERLOCK_CLOCK_SKEW_FILE").map(|f| Self { file: f.into() })
    }
}

impl Clock for SkewClock {
    fn now_ms(&self) -> i64 {
        let skew = std::fs::read_to_string(&self.file)
            .ok()
            .and_then(|s| s.trim().parse::<i64>().ok())
            .unwrap_or(0);
        SystemClock.now_ms().saturating_add(skew)
    }
}

/// The clock a worker runs on: [`SkewClock`] when the harness set one, else the system clock.
pub fn worker_clock() -> std::sync::Arc<dyn Clock> {
    match SkewClock::from_env() {
        Some(c) => std::sync::Arc::new(c),
        None => std::sync::Arc::new(SystemClock),
    }
}
