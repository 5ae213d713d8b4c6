//! Targets for store and gate tests that judge by what the target itself applied.

#![allow(clippy::unwrap_used)] // a poisoned lock in a test target is the test's report

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use interlock::core::{LookupAnswer, SendAnswer};
use interlock::target::{SendRequest, Target};
use interlock::{EffectKey, Tier};
use serde_json::{Value, json};

/// A target that applies each key once and remembers it: a tier-1 target answers a repeated key
/// with the first result (as Stripe's idempotency keys do), a tier-2 one applies it again. Every
/// application is counted; lookups report what was applied.
#[derive(Debug)]
pub struct Counting {
    tier: Tier,
    applied: Mutex<HashMap<String, Vec<Value>>>,
    /// Requests received.
    pub sends: AtomicUsize,
    delay: Duration,
}

impl Counting {
    /// A target of `tier` that takes `delay` to answer.
    pub fn new(tier: Tier, delay: Duration) -> Arc<Self> {
        Arc::new(Self {
            tier,
            applied: Mutex::default(),
            sends: AtomicUsize::new(0),
            delay,
        })
    }

    /// How many times anything was applied.
    pub fn applications(&self) -> usize {
        self.applied.lock().unwrap().values().map(Vec::len).sum()
    }
}

impl Target for Counting {
    fn name(&self) -> &str {
        "counting"
    }
    fn tier(&self) -> Tier {
        self.tier
    }
    fn dedupe_window(&self) -> Option<Duration> {
        (self.tier == Tier::One).then_some(Duration::from_secs(86_400))
    }
    fn has_lookup(&self) -> bool {
        true
    }
    fn send(&self, req: &SendRequest<'_>) -> SendAnswer {
        self.sends.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(self.delay);
        let mut applied = self.applied.lock().unwrap();
        let seen = applied.entry(req.key.to_string()).or_default();
        if let (Tier::One, Some(first)) = (self.tier, seen.first()) {
            return SendAnswer::Replayed(first.clone());
        }
        let result = json!({ "id": format!("re_{}", seen.len()) });
        seen.push(result.clone());
        SendAnswer::Done(result)
    }
    fn lookup(&self, key: &EffectKey, _payload: &Value) -> LookupAnswer {
        match self
            .applied
            .lock()
            .unwrap()
            .get(key.as_str())
            .map(Vec::as_slice)
        {
            None | Some([]) => LookupAnswer::NotFound,
            Some([one]) => LookupAnswer::Found(one.clone()),
            Some(several) => LookupAnswer::Several(several.to_vec()),
        }
    }
}

/// A payments service that applies every request (or refuses the keys it is told to with a
/// 4xx) and, at tier 2, can be asked by key.
pub struct Ledger {
    tier: Tier,
    applied: Mutex<Vec<(String, i64)>>,
    /// Keys it refuses with a 4xx.
    pub refuse: Mutex<HashSet<String>>,
    /// Requests received.
    pub sends: AtomicUsize,
}

impl Ledger {
    /// A service of `tier` that has applied nothing.
    pub fn new(tier: Tier) -> Arc<Self> {
        Arc::new(Self {
            tier,
            applied: Mutex::default(),
            refuse: Mutex::default(),
            sends: AtomicUsize::new(0),
        })
    }

    /// Every key it applied, with the amount.
    pub fn applied(&self) -> Vec<(String, i64)> {
        self.applied.lock().unwrap().clone()
    }
}

impl Target for Ledger {
    fn name(&self) -> &str {
        "payments"
    }
    fn tier(&self) -> Tier {
        self.tier
    }
    fn dedupe_window(&self) -> Option<Duration> {
        None
    }
    fn has_lookup(&self) -> bool {
        self.tier == Tier::Two
    }
    fn send(&self, req: &SendRequest<'_>) -> SendAnswer {
        self.sends.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(5));
        if self.refuse.lock().unwrap().contains(req.key.as_str()) {
            return SendAnswer::Definite {
                code: "charge_disputed".into(),
                message: "the charge is disputed".into(),
            };
        }
        let amount = req.payload["amount"].as_i64().unwrap_or(0);
        let mut applied = self.applied.lock().unwrap();
        applied.push((req.key.to_string(), amount));
        SendAnswer::Done(json!({ "id": format!("re_{}", applied.len()) }))
    }
    fn lookup(&self, key: &EffectKey, _payload: &Value) -> LookupAnswer {
        let applied = self.applied.lock().unwrap();
        match applied.iter().position(|(k, _)| k == key.as_str()) {
            Some(i) => LookupAnswer::Found(json!({ "id": format!("re_{}", i + 1) })),
            None => LookupAnswer::NotFound,
        }
    }
}
