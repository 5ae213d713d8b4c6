//! Named pause points for the kill matrix. A worker started with `INTERLOCK_PAUSE_AT=<point>`
//! and `INTERLOCK_PAUSE_DIR=<dir>` stops the first attempt that reaches the point, writes
//! `<dir>/paused-<pid>` and waits for `<dir>/go-<pid>`; the harness meanwhile kills it with SIGKILL
//! (or freezes it with SIGSTOP to make a zombie). Without the variables it costs nothing.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use interlock::faults::{Crash, FaultPoint, Faults};

/// A configured pause point.
#[derive(Debug)]
pub struct Pause {
    point: String,
    dir: PathBuf,
    fired: AtomicBool,
}

impl Pause {
    /// From the environment, if set.
    pub fn from_env() -> Option<Self> {
        let point = std::env::var("INTERLOCK_PAUSE_AT")
            .ok()
            .filter(|p| !p.is_empty())?;
        let dir =
            PathBuf::from(std::env::var("INTERLOCK_PAUSE_DIR").unwrap_or_else(|_| ".".into()));
        Some(Self {
            point,
            dir,
            fired: AtomicBool::new(false),
        })
    }

    /// Pause here if `point` is the configured one and no attempt paused yet.
    pub fn at(&self, point: &str) {
        if point != self.point || self.fired.swap(true, Ordering::SeqCst) {
            return;
        }
        let pid = std::process::id();
        let marker = self.dir.join(format!("paused-{pid}"));
        if let Err(e) = std::fs::write(&marker, point) {
            tracing::error!(%e, marker = %marker.display(), "cannot write the pause marker");
            return;
        }
        tracing::warn!(point, "paused for the harness");
        let go = self.dir.join(format!("go-{pid}"));
        while !go.exists() {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// The gate's fault points under the harness's names.
pub fn point_name(p: FaultPoint) -> &'static str {
    match p {
        FaultPoint::Start => "before_journal",
        FaultPoint::BeforeDispatch => "before_dispatch",
        FaultPoint::AfterDispatch => "after_dispatch",
        FaultPoint::AfterSend => "after_response",
        FaultPoint::AfterRecord => "after_journal",
        FaultPoint::BeforeTakeover => "before_takeover",
        FaultPoint::AfterTakeover => "during_recovery",
    }
}

impl Faults for Pause {
    fn at(&self, point: FaultPoint, _key: &str) -> Result<(), Crash> {
        Pause::at(self, point_name(point));
        Ok(())
    }
}
