//! Faults a test arms at the gate's named points: crash there once, or stall there until the test
//! lets the attempt go on.

use interlock::faults::{Crash, FaultPoint, Faults};

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
