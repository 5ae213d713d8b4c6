//! The kill matrix's points inside a database stage. The gate calls a stage's last look after
//! the statements ran, were measured and judged, and before the marker and `COMMIT`; wrapping the
//! look lets the harness stop a worker with its transaction open — before the look (`mid_stage`)
//! or after it passed (`after_verdict`) — without the substrate knowing it is watched.

use std::sync::Arc;
use std::time::Duration;

use interlock::EffectKey;
use interlock::target::{LastLook, Looked, LookupAnswer, SendAnswer, SendRequest, Target, Tier};
use serde_json::Value;

use crate::pause::Pause;

/// A database target whose stages pause at the harness's points.
pub struct PausedStage {
    inner: Arc<dyn Target>,
    pause: Arc<Pause>,
}

impl PausedStage {
    /// `inner`, pausing where `pause` says.
    pub fn new(inner: Arc<dyn Target>, pause: Arc<Pause>) -> Self {
        Self { inner, pause }
    }
}

impl Target for PausedStage {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn tier(&self) -> Tier {
        self.inner.tier()
    }

    fn dedupe_window(&self) -> Option<Duration> {
        self.inner.dedupe_window()
    }

    fn has_lookup(&self) -> bool {
        self.inner.has_lookup()
    }

    fn send(&self, req: &SendRequest<'_>) -> SendAnswer {
        let Some(gates) = req.last_look else {
            return self.inner.send(req);
        };
        let look = || {
            self.pause.at("mid_stage");
            let looked = gates.look();
            if looked == Looked::Holds {
                self.pause.at("after_verdict");
            }
            looked
        };
        let mut paused = *req;
        paused.last_look = Some(LastLook::new(&look));
        self.inner.send(&paused)
    }

    fn lookup(&self, key: &EffectKey, payload: &Value) -> LookupAnswer {
        self.inner.lookup(key, payload)
    }
}
