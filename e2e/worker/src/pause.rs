//! Named pause points for the kill matrix. A worker (or gate server) started with
//! `INTERLOCK_PAUSE_AT=<point>[,<point>…]` and `INTERLOCK_PAUSE_DIR=<dir>` stops the first attempt
//! that reaches each point, writes the point's name to `<dir>/paused-<pid>` and waits for
//! `<dir>/go-<pid>`; the harness meanwhile kills it with SIGKILL (or freezes it with SIGSTOP to
//! make a zombie), or lets it go on, after which both files are removed so the next point can
//! pause. Without the variables it costs nothing.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use interlock::faults::{Crash, FaultPoint, Faults};

/// A configured pause point.
#[derive(Debug)]
pub struct Pause {
    points: Vec<String>,
    dir: PathBuf,
    fired: Mutex<HashSet<String>>,
}

impl Pause {
    /// From the environment, if set.
    pub fn from_env() -> Option<Self> {
        let points: Vec<String> = std::env::var("INTERLOCK_PAUSE_AT")
            .ok()?
            .split(',')
            .filter(|p| !p.is_empty())
            .map(str::to_owned)
            .collect();
        if points.is_empty() {
            return None;
        }
        let dir =
            PathBuf::from(std::env::var("INTERLOCK_PAUSE_DIR").unwrap_or_else(|_| ".".into()));
        Some(Self {
            points,
            dir,
            fired: Mutex::new(HashSet::new()),
        })
    }

    /// Pause here if `point` is a configured one and no attempt paused at it yet.
    pub fn at(&self, point: &str) {
        if !self.points.iter().any(|p| p == point)
            || !self
                .fired
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(point.to_owned())
        {
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
        let _ = std::fs::remove_file(&marker);
        let _ = std::fs::remove_file(&go);
    }
}

/// The gate's fault points under the harness's names.
pub fn point_name(p: FaultPoint) -> &'static str {
    match p {
        FaultPoint::Start => "before_journal",
        FaultPoint::BeforeDispatch => "before_dispatch",
        FaultPoint::AfterPremiseRead => "after_premise_read",
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
