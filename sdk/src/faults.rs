//! Named points in the gate where a test or the kill-matrix harness can stop the world. In
//! production the hook is [`NoFaults`] and costs one virtual call per point.

/// A point in the gate's life where a process could die.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultPoint {
    /// An attempt has started; it has read and written nothing.
    Start,
    /// About to dispatch: nothing is journaled yet for a new key (it is proposed, authorized
    /// and dispatched in one transaction); `PROPOSED`/`AUTHORIZED` are durable for a proposal
    /// an earlier attempt left open.
    BeforeDispatch,
    /// `DISPATCHED` is durable; the request has not been sent.
    AfterDispatch,
    /// The target answered; the answer is not journaled.
    AfterSend,
    /// The answer is journaled; the caller has not heard it.
    AfterRecord,
    /// A recoverer has decided to take the claim on what it read and has not yet written it.
    BeforeTakeover,
    /// A recoverer has taken the claim and has not yet looked up or re-checked.
    AfterTakeover,
}

/// The process "died" at a point: the gate stops at once, writing nothing more.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("simulated crash at {0:?}")]
pub struct Crash(pub FaultPoint);

/// Called at every [`FaultPoint`]. May block (a stalled process), or return [`Crash`].
pub trait Faults: Send + Sync {
    /// The gate reached `point` for `key`.
    fn at(&self, point: FaultPoint, key: &str) -> Result<(), Crash>;
}

/// No faults.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoFaults;

impl Faults for NoFaults {
    fn at(&self, _point: FaultPoint, _key: &str) -> Result<(), Crash> {
        Ok(())
    }
}

/// What a scripted fault does when its point is reached.
#[derive(Clone, Debug)]
pub enum Action {
    /// Die here (once).
    Crash,
    /// Stall here until the test calls [`Stall::release`] (once).
    Stall(std::sync::Arc<Stall>),
}

/// A stall the test releases.
#[derive(Debug, Default)]
pub struct Stall {
    state: std::sync::Mutex<(bool, bool)>,
    cv: std::sync::Condvar,
}

impl Stall {
    /// A new, unreleased stall.
    pub fn new() -> std::sync::Arc<Self> {
        std::sync::Arc::new(Self::default())
    }

    /// Let the stalled attempt go on.
    pub fn release(&self) {
        let mut s = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        s.1 = true;
        self.cv.notify_all();
    }

    /// Block until some attempt is stalled here.
    pub fn wait_reached(&self) {
        let mut s = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        while !s.0 {
            s = self
                .cv
                .wait(s)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }

    /// Whether some attempt has reached the stall.
    pub fn reached(&self) -> bool {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .0
    }

    /// Called by the stalled attempt: announce arrival, wait for release.
    pub fn hold(&self) {
        let mut s = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        s.0 = true;
        self.cv.notify_all();
        while !s.1 {
            s = self
                .cv
                .wait(s)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }
}

/// Faults armed by a test: each fires once, at the first attempt that reaches its point.
#[derive(Debug, Default)]
pub struct ScriptedFaults {
    armed: std::sync::Mutex<Vec<(FaultPoint, Action)>>,
}

impl ScriptedFaults {
    /// No faults armed.
    pub fn new() -> std::sync::Arc<Self> {
        std::sync::Arc::new(Self::default())
    }

    /// Arm `action` at `point`.
    pub fn arm(&self, point: FaultPoint, action: Action) {
        self.armed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push((point, action));
    }

    /// Whether anything is still armed.
    pub fn pending(&self) -> usize {
        self.armed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }
}

impl Faults for ScriptedFaults {
    fn at(&self, point: FaultPoint, _key: &str) -> Result<(), Crash> {
        let action = {
            let mut armed = self
                .armed
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let i = armed.iter().position(|(p, _)| *p == point);
            i.map(|i| armed.remove(i).1)
        };
        match action {
            None => Ok(()),
            Some(Action::Crash) => Err(Crash(point)),
            Some(Action::Stall(s)) => {
                s.hold();
                Ok(())
            }
        }
    }
}
