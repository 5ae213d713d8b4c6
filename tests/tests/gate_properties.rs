//! Randomized schedules through the real gate and journal: tier × crash point × world events
//! before the decision and during the outage × duplicate deliveries × recoverers × zombie
//! completions × recoverers stalled between their takeover and their resend × revocations and
//! premise moves between the re-check and the send × recoveries through a binding that claims
//! another tier or names another target × requests the service holds past the client's timeout ×
//! saved 500s × clock steps. After each schedule, R1–R7 are checked (a send under a lease revoked
//! before its `DISPATCHED`, on a failed re-check, or beside another send at a tier without
//! dedupe is a violation at the instant it happens), and the journal must agree with the
//! payments service's own records. Prints how many ran; a failure prints the seed that replays it
//! (`INTERLOCK_SEED=<seed> cargo test -p interlock-tests --test gate_properties`).
//! `INTERLOCK_SCHEDULES` sets the count (default 100,000).

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)] // in tests, a panic is the report

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use interlock::core::{EffectState, Event, LookupAnswer, Resolution, SendAnswer};
use interlock::faults::FaultPoint;
use interlock::journal::{Journal, SqliteJournal};
use interlock::target::{SendRequest, Target};
use interlock::{
    Clock, Effect, EffectKey, Gate, GateConfig, GateError, ManualClock, Outcome, Tier,
};
use interlock_testkit::faults::{Action, ScriptedFaults, Stall};
use interlock_testkit::sim::{SimPayments, SimRefundPremises, SimTarget};
use interlock_tests::rng::Rng;
use interlock_tests::world::{
    AMOUNT, LEASE, PAID, PAYMENT, REDECIDED, T0, UNRELATED, WINDOW, World,
};
use serde_json::Value;

/// Wraps the simulated target and checks R1–R5 at the instant of every send.
struct Watch {
    inner: SimTarget,
    journal: Arc<SqliteJournal>,
    first_payload: Value,
    sending: Arc<AtomicI32>,
    violations: Mutex<Vec<String>>,
    sends: AtomicI32,
    /// How many of the key's records existed when the lease was revoked: a `DISPATCHED` at or
    /// after that position must never be sent under.
    revoked_at: Mutex<Option<usize>>,
    /// The next send is held inside the service and the client gives up on it (times out): the
    /// request is still processed, later, when the stall is released.
    detach_next: Mutex<Option<Arc<Stall>>>,
    detached: Mutex<Vec<std::thread::JoinHandle<()>>>,
    /// The lease store, when it is kept apart from the journal.
    apart: Option<Arc<Apart>>,
}

impl Watch {
    /// Revoke the lease, noting where the key's history stood.
    fn revoke(&self, key: &EffectKey) -> Result<(), String> {
        match &self.apart {
            Some(apart) => {
                apart.0.lock().unwrap_or_else(|e| e.into_inner()).revoked_ms = Some(T0);
            }
            None => {
                self.journal
                    .revoke_lease(LEASE)
                    .map_err(|e| e.to_string())?;
            }
        }
        let len = self.journal.history(key).map_err(|e| e.to_string())?.len();
        self.revoked_at
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert(len);
        Ok(())
    }

    fn violate(&self, what: String) {
        self.violations
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(what);
    }
}

impl Watch {
    /// A send by attempt `attempt`, checked against the journal at the instant it leaves.
    fn send_as(&self, req: &SendRequest<'_>, attempt: u32) -> SendAnswer {
        self.sends.fetch_add(1, Ordering::SeqCst);
        match self.journal.history(req.key) {
            Ok(records) => {
                let state = self.journal.state(req.key);
                let token = match state {
                    Ok(EffectState::InFlight { claim, .. })
                        if claim.dispatched && claim.holder.attempt == attempt.to_string() =>
                    {
                        claim.token
                    }
                    Ok(EffectState::InFlight { claim, .. }) if claim.dispatched => {
                        self.violate(format!(
                            "R2: attempt {attempt} sent under claim {} held by attempt {}",
                            claim.token, claim.holder.attempt
                        ));
                        claim.token
                    }
                    other => {
                        self.violate(format!("R1/R2: send while the journal says {other:?}"));
                        0
                    }
                };
                let last = records
                    .iter()
                    .enumerate()
                    .rev()
                    .find_map(|(i, r)| match &r.event {
                        Event::Dispatched(d) if d.token == token => Some((i, d.clone())),
                        _ => None,
                    });
                let revoked_at = *self.revoked_at.lock().unwrap_or_else(|e| e.into_inner());
                match last {
                    Some((i, _)) if revoked_at.is_some_and(|at| i >= at) => self.violate(format!(
                        "R4: sent under DISPATCHED #{i}, written after the lease was revoked"
                    )),
                    Some((_, d)) if d.recheck.holds() => {}
                    Some((_, d)) => {
                        self.violate(format!("R4/R5: sent on a failed re-check {:?}", d.recheck))
                    }
                    None => self.violate("R1: no DISPATCHED for the sending claim".into()),
                }
            }
            Err(e) => self.violate(format!("journal unreadable at send: {e}")),
        }
        if *req.payload != self.first_payload {
            self.violate("R3: sent a payload other than the first proposed".into());
        }
        let concurrent = self.sending.fetch_add(1, Ordering::SeqCst);
        if concurrent > 0 && self.inner.tier() != Tier::One {
            self.violate("R2: two sends of one key in flight at a tier without dedupe".into());
        }
        let detach = self
            .detach_next
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(stall) = detach {
            // The request reaches the service and is held there; the client times out.
            self.inner.0.hold_next(stall.clone());
            let (inner, sending) = (self.inner.clone(), self.sending.clone());
            let (key, payload, timeout) = (req.key.clone(), req.payload.clone(), req.timeout);
            let handle = std::thread::spawn(move || {
                inner.send(&SendRequest {
                    key: &key,
                    payload: &payload,
                    timeout,
                    deadline: None,
                    last_look: None,
                });
                sending.fetch_sub(1, Ordering::SeqCst);
            });
            // The service may answer without holding it (a replay, a key in use).
            while !stall.reached() && !handle.is_finished() {
                std::thread::sleep(Duration::from_millis(1));
            }
            self.detached
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(handle);
            return SendAnswer::Unknown("timed out; the service may still process it".into());
        }
        let answer = self.inner.send(req);
        self.sending.fetch_sub(1, Ordering::SeqCst);
        answer
    }

    fn lookup(&self, key: &EffectKey, payload: &Value) -> LookupAnswer {
        self.inner.lookup(key, payload)
    }
}

/// One attempt's binding to the watched service: honest, or claiming tier 1 whatever the
/// service is (a redeployed worker, `interlock recover --tier 1`), or naming another target.
struct Binding {
    watch: Arc<Watch>,
    attempt: u32,
    claims_tier1: bool,
    name: Option<&'static str>,
}

impl Target for Binding {
    fn name(&self) -> &str {
        self.name.unwrap_or_else(|| self.watch.inner.name())
    }
    fn tier(&self) -> Tier {
        if self.claims_tier1 {
            Tier::One
        } else {
            self.watch.inner.tier()
        }
    }
    fn dedupe_window(&self) -> Option<Duration> {
        if self.claims_tier1 {
            Some(WINDOW)
        } else {
            self.watch.inner.dedupe_window()
        }
    }
    fn has_lookup(&self) -> bool {
        self.watch.inner.has_lookup()
    }
    fn send(&self, req: &SendRequest<'_>) -> SendAnswer {
        self.watch.send_as(req, self.attempt)
    }
    fn lookup(&self, key: &EffectKey, payload: &Value) -> LookupAnswer {
        self.watch.lookup(key, payload)
    }
}

/// A lease store apart from the journal: the gate cannot read it in its transaction and reads
/// it once more when `DISPATCHED` is durable.
struct Apart(Mutex<interlock::Grant>);

impl interlock::LeaseStore for Apart {
    fn check(
        &self,
        id: &str,
        payload: &Value,
        now_ms: i64,
    ) -> Result<interlock::core::LeaseVerdict, interlock::lease::LeaseError> {
        let grant = self.0.lock().unwrap_or_else(|e| e.into_inner());
        Ok(if grant.id == id {
            grant.verdict(payload, now_ms)
        } else {
            interlock::core::LeaseVerdict::Dead {
                reason: format!("no lease {id}"),
            }
        })
    }
    fn describe(&self, _: &str) -> Result<Option<interlock::Grant>, interlock::lease::LeaseError> {
        Ok(Some(
            self.0.lock().unwrap_or_else(|e| e.into_inner()).clone(),
        ))
    }
}

/// What the world does while an attempt is between its premise read and its `DISPATCHED`.
#[derive(Clone, Copy, Debug)]
enum Meanwhile {
    Revoke,
    RefundByHand,
    Ineligible,
}

/// The simulated premises, with a change armed to happen right after the next read: a
/// revocation or a premise move between the re-check and the send.
struct Chaos {
    inner: SimRefundPremises,
    watch: Arc<Watch>,
    next: Mutex<Option<Meanwhile>>,
}

impl interlock::PremiseReader for Chaos {
    fn read(
        &self,
        key: &EffectKey,
        payload: &Value,
    ) -> Result<interlock::core::Premises, interlock::PremiseError> {
        let read = self.inner.read(key, payload);
        let armed = self.next.lock().unwrap_or_else(|e| e.into_inner()).take();
        match armed {
            Some(Meanwhile::Revoke) => {
                if let Err(e) = self.watch.revoke(key) {
                    self.watch.violate(format!("revoking: {e}"));
                }
            }
            Some(Meanwhile::RefundByHand) => self.inner.0.hand_refund(PAYMENT, AMOUNT),
            Some(Meanwhile::Ineligible) => self.inner.0.set_eligible(PAYMENT, false),
            None => {}
        }
        read
    }
    fn repairs(
        &self,
        payload: &Value,
        now: &interlock::core::Premises,
    ) -> Vec<interlock::core::Repair> {
        self.inner.repairs(payload, now)
    }
}

#[derive(Default)]
struct Tally {
    schedules: u64,
    sends: u64,
    committed: u64,
    refused: u64,
    failed: u64,
    ambiguous: u64,
}

fn attempt(
    gate: &Gate,
    target: Arc<Binding>,
    premises: &Arc<Chaos>,
    effect: &Effect,
    n: u32,
    faults: Arc<ScriptedFaults>,
) -> Result<Option<Outcome>, String> {
    let bound = gate
        .clone()
        .with_faults(faults)
        .with_attempt(n.to_string())
        .bind(target, premises.clone())
        .map_err(|e| e.to_string())?;
    match bound.submit(effect) {
        Ok(o) => Ok(Some(o)),
        Err(GateError::Crashed(_)) => Ok(None),
        Err(e) => Err(format!("gate error: {e}")),
    }
}

/// Block until `stall` is reached, or the attempt that should reach it has ended without.
fn reached_or_done<T>(stall: &Stall, attempt: &std::thread::ScopedJoinHandle<'_, T>) {
    while !stall.reached() && !attempt.is_finished() {
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn run_schedule(seed: u64, dir: &std::path::Path, tally: &mut Tally) -> Result<(), String> {
    let mut rng = Rng(seed);
    let tier = [Tier::One, Tier::Two, Tier::Three][rng.below(3) as usize];
    let clock = ManualClock::at(T0);
    let dyn_clock: Arc<dyn Clock> = Arc::new(clock.clone());
    let sim = SimPayments::new(tier, WINDOW, dyn_clock.clone());
    sim.add_payment(PAYMENT, PAID);
    let journal = Arc::new(SqliteJournal::in_memory(dyn_clock.clone()).map_err(|e| e.to_string())?);
    journal
        .grant_lease(&World::grant())
        .map_err(|e| e.to_string())?;
    let mut cfg = GateConfig::beside(dir.join("journal"));
    cfg.send_timeout = Duration::from_secs(30);
    cfg.settle = Duration::from_secs(5);
    // Leases in the journal's own store (read in its transactions), or in a store apart.
    let apart = rng
        .chance(30)
        .then(|| Arc::new(Apart(Mutex::new(World::grant()))));
    let leases: Arc<dyn interlock::LeaseStore> = match &apart {
        Some(a) => a.clone(),
        None => journal.clone(),
    };
    let gate = Gate::new(journal.clone(), leases, dyn_clock, cfg).map_err(|e| e.to_string())?;

    // World events before the decision are part of what the decision sees.
    if rng.chance(20) {
        sim.hand_refund(PAYMENT, 700);
    }
    let key = EffectKey::derive(&["schedule".to_owned(), seed.to_string()]);
    let decide = |amount: i64| -> Result<Effect, String> {
        let e =
            Effect::new(key.clone(), &World::payload(amount), LEASE).map_err(|e| e.to_string())?;
        let p = interlock::PremiseReader::read(&SimRefundPremises(sim.clone()), &key, &e.payload)
            .map_err(|e| e.to_string())?;
        Ok(e.premises(p))
    };
    let effect = decide(AMOUNT)?;
    let watch = Arc::new(Watch {
        inner: SimTarget(sim.clone()),
        journal: journal.clone(),
        first_payload: effect.payload.clone(),
        sending: Arc::new(AtomicI32::new(0)),
        violations: Mutex::new(Vec::new()),
        sends: AtomicI32::new(0),
        revoked_at: Mutex::new(None),
        detach_next: Mutex::new(None),
        detached: Mutex::new(Vec::new()),
        apart,
    });
    let chaos = Arc::new(Chaos {
        inner: SimRefundPremises(sim.clone()),
        watch: watch.clone(),
        next: Mutex::new(None),
    });
    let meanwhile = |rng: &mut Rng| {
        if rng.chance(15) {
            let m = [
                Meanwhile::Revoke,
                Meanwhile::RefundByHand,
                Meanwhile::Ineligible,
            ][rng.below(3) as usize];
            *chaos.next.lock().unwrap_or_else(|e| e.into_inner()) = Some(m);
        }
    };
    let points = [
        FaultPoint::BeforeDispatch,
        FaultPoint::AfterDispatch,
        FaultPoint::AfterSend,
        FaultPoint::AfterRecord,
    ];
    let first = rng.below(9);
    let mut n = 1;
    let honest = |n: u32| {
        Arc::new(Binding {
            watch: watch.clone(),
            attempt: n,
            claims_tier1: false,
            name: None,
        })
    };
    let run =
        |n: u32, faults: Arc<ScriptedFaults>| attempt(&gate, honest(n), &chaos, &effect, n, faults);
    let proposed = || -> Result<bool, String> {
        Ok(gate
            .journal()
            .state(&key)
            .map_err(|e| e.to_string())?
            .first()
            .is_some())
    };
    // A recovery through a binding that claims tier 1 whatever the service is; or, rarely, one
    // bound to another target, which must be refused without touching the effect. Both act on a
    // key already proposed through the honest binding: before that, either would simply be the
    // first proposer, and its claims the ones the journal records.
    let run_elsewhere = |n: u32, rng: &mut Rng| -> Result<Option<Outcome>, String> {
        let proposed = proposed()?;
        let other = proposed && rng.chance(10);
        let target = Arc::new(Binding {
            watch: watch.clone(),
            attempt: n,
            claims_tier1: proposed,
            name: other.then_some("other-payments"),
        });
        match attempt(&gate, target, &chaos, &effect, n, ScriptedFaults::new()) {
            Err(e) if other && e.contains("other-payments") => Ok(None),
            Ok(o) if other => Err(format!("another target's binding acted: {o:?}")),
            r => r,
        }
    };
    let outage = |rng: &mut Rng, may_jump_time: bool| -> Result<(), String> {
        if rng.chance(15) {
            sim.hand_refund(PAYMENT, AMOUNT);
        }
        if rng.chance(15) {
            sim.hand_refund(PAYMENT, UNRELATED);
        }
        if rng.chance(15) {
            watch.revoke(&key)?;
        }
        if rng.chance(10) {
            sim.error_before_apply(1);
        }
        if rng.chance(10) && may_jump_time {
            clock.advance([1_000, 36_000][rng.below(2) as usize]);
        }
        // A step back, well inside what the contract allows.
        if rng.chance(5) {
            clock.advance(-10_000);
        }
        if rng.chance(10) {
            sim.set_eligible(PAYMENT, false);
        }
        if rng.chance(10) && may_jump_time {
            clock.advance(25 * 3_600_000);
        }
        if rng.chance(10) {
            sim.error_after_apply(1);
        }
        if rng.chance(5) {
            sim.set_disputed(PAYMENT, true);
        }
        Ok(())
    };
    // A zombie's first attempt must reach its stall: nothing moves under it before then.
    if !matches!(first, 4 | 5) {
        meanwhile(&mut rng);
    }
    match first {
        0..=3 => {
            let f = ScriptedFaults::new();
            f.arm(points[first as usize], Action::Crash);
            run(n, f)?;
        }
        6 => {
            // A recoverer stalls between reading the state and writing its takeover, or between
            // its takeover and its resend, while others recover; then it goes on.
            let f = ScriptedFaults::new();
            f.arm(points[1 + rng.below(2) as usize], Action::Crash);
            run(n, f)?;
            let stall = Stall::new();
            let f = ScriptedFaults::new();
            let at = [FaultPoint::BeforeTakeover, FaultPoint::AfterTakeover][rng.below(2) as usize];
            f.arm(at, Action::Stall(stall.clone()));
            std::thread::scope(|s| -> Result<(), String> {
                n += 1;
                let stalled = s.spawn(move || run(n, f));
                reached_or_done(&stall, &stalled);
                if rng.chance(60) {
                    clock.advance(36_000);
                }
                outage(&mut rng, true)?;
                for _ in 0..=rng.below(2) {
                    n += 1;
                    meanwhile(&mut rng);
                    run(n, ScriptedFaults::new())?;
                }
                stall.release();
                stalled
                    .join()
                    .map_err(|_| "stalled recoverer panicked".to_owned())??;
                Ok(())
            })?;
        }
        7 => {
            // The service holds the first request past the client's timeout; recoverers come
            // and go before the claim's deadline; then the service processes it.
            let held = Stall::new();
            *watch.detach_next.lock().unwrap_or_else(|e| e.into_inner()) = Some(held.clone());
            run(n, ScriptedFaults::new())?;
            // Only the first attempt's send (if it sent at all) is held.
            watch
                .detach_next
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take();
            if rng.chance(50) {
                clock.advance(20_000);
            }
            outage(&mut rng, false)?;
            for _ in 0..=rng.below(2) {
                n += 1;
                if rng.chance(30) {
                    run_elsewhere(n, &mut rng)?;
                } else {
                    run(n, ScriptedFaults::new())?;
                }
            }
            held.release();
            let detached: Vec<_> = watch
                .detached
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .drain(..)
                .collect();
            for h in detached {
                h.join()
                    .map_err(|_| "the held request panicked".to_owned())?;
            }
        }
        4 | 5 => {
            // A zombie: attempt 1 stalls (before its send, or with its request held inside the
            // service) while other attempts run; then it completes.
            let stall = Stall::new();
            let f = ScriptedFaults::new();
            let held_at_service = first == 5;
            if held_at_service {
                sim.hold_next(stall.clone());
            } else {
                f.arm(FaultPoint::AfterDispatch, Action::Stall(stall.clone()));
            }
            std::thread::scope(|s| -> Result<(), String> {
                let zombie = s.spawn(|| run(1, f));
                reached_or_done(&stall, &zombie);
                // A request held at the service is cut off at the holder's deadline in real
                // life; only a stall before sending may outlive it here.
                if !held_at_service && rng.chance(50) {
                    clock.advance(36_000);
                }
                outage(&mut rng, !held_at_service)?;
                for _ in 0..=rng.below(3) {
                    n += 1;
                    run(n, ScriptedFaults::new())?;
                }
                stall.release();
                zombie.join().map_err(|_| "zombie panicked".to_owned())??;
                Ok(())
            })?;
        }
        _ => {
            run(n, ScriptedFaults::new())?;
        }
    }
    if first <= 3 {
        outage(&mut rng, true)?;
    }
    // Duplicate deliveries and a conflicting re-decision, some crashing in recovery, some through
    // a binding that claims more than the service promises.
    for _ in 0..rng.below(3) {
        n += 1;
        meanwhile(&mut rng);
        if rng.chance(15) {
            run_elsewhere(n, &mut rng)?;
            continue;
        }
        let f = ScriptedFaults::new();
        if rng.chance(30) {
            let p = [
                FaultPoint::AfterTakeover,
                FaultPoint::AfterDispatch,
                FaultPoint::AfterSend,
            ][rng.below(3) as usize];
            f.arm(p, Action::Crash);
        }
        run(n, f)?;
    }
    // R3 binds a payload once the key holds one (every attempt may have died before proposing,
    // in which case a re-decision is simply the first proposal).
    if proposed()? && rng.chance(10) {
        let e30 = decide(REDECIDED)?;
        let bound = gate
            .bind(honest(n), Arc::new(SimRefundPremises(sim.clone())))
            .map_err(|e| e.to_string())?;
        match bound.submit(&e30) {
            Ok(Outcome::Refused(r))
                if r.code == interlock::core::RefusalCode::ConflictingPayload => {}
            other => {
                return Err(format!(
                    "R3: a second payload under the key was not refused: {other:?}"
                ));
            }
        }
    }
    // R7: with no more crashes, the effect ends in one of the four resolutions.
    let mut resolved = None;
    for _ in 0..12 {
        n += 1;
        if let Some(o) = run(n, ScriptedFaults::new())?.filter(Outcome::is_final) {
            resolved = Some(o);
            break;
        }
        clock.advance(36_000);
    }
    let Some(_) = resolved else {
        return Err("R7: no resolution after 12 fault-free attempts".into());
    };

    let violations = watch
        .violations
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    if let Some(v) = violations.first() {
        return Err(v.clone());
    }
    // The journal agrees with the service's own records (R2, R6).
    let tagged: Vec<_> = sim
        .refunds(PAYMENT)
        .into_iter()
        .filter(|r| r.metadata.get("interlock_key").map(String::as_str) == Some(key.as_str()))
        .collect();
    if std::env::var("INTERLOCK_SEED").is_ok() {
        for r in journal.history(&key).map_err(|e| e.to_string())? {
            eprintln!(
                "{} +{}ms {}",
                r.n,
                r.at_ms - T0,
                serde_json::to_string(&r.event).unwrap_or_default()
            );
        }
        eprintln!("service refunds: {:?}", sim.refunds(PAYMENT));
    }
    let state = journal.state(&key).map_err(|e| format!("journal: {e}"))?;
    let EffectState::Resolved { resolution, .. } = state else {
        return Err("R7: not resolved".into());
    };
    match &resolution {
        Resolution::Committed(c) => {
            tally.committed += 1;
            if tagged.len() != 1 {
                return Err(format!(
                    "R2/R6: COMMITTED but the service holds {} refunds with the key",
                    tagged.len()
                ));
            }
            if c.result.get("id").and_then(Value::as_str) != Some(tagged[0].id.as_str()) {
                return Err(
                    "R6: the committed result names another refund than the service holds".into(),
                );
            }
        }
        Resolution::Refused(_) | Resolution::Failed(_) => {
            if matches!(resolution, Resolution::Refused(_)) {
                tally.refused += 1
            } else {
                tally.failed += 1
            }
            if !tagged.is_empty() {
                return Err(format!(
                    "R6: {} but the service holds a refund with the key",
                    resolution.kind()
                ));
            }
        }
        // The simulated service keeps its promises: a double application is a gate bug.
        Resolution::AppliedTwice(t) => {
            return Err(format!(
                "R2: APPLIED_TWICE against a service that dedupes: {}",
                t.reason
            ));
        }
        Resolution::Ambiguous(_) => {
            tally.ambiguous += 1;
            if tagged.len() > 1 {
                return Err("R2: AMBIGUOUS with two refunds at the service".into());
            }
        }
    }
    let late_commits = journal
        .history(&key)
        .map_err(|e| e.to_string())?
        .iter()
        .filter(|r| matches!(r.event, Event::Committed(_)))
        .count();
    if late_commits > 1 {
        return Err("a late answer became a second COMMITTED".into());
    }
    tally.sends += u64::try_from(watch.sends.load(Ordering::SeqCst)).unwrap_or(0);
    tally.schedules += 1;
    Ok(())
}

#[test]
fn randomized_schedules_keep_r1_to_r7_and_agree_with_the_service() {
    let count: u64 = std::env::var("INTERLOCK_SCHEDULES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let seeds: Vec<u64> = match std::env::var("INTERLOCK_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        Some(seed) => vec![seed],
        None => (0..count)
            .map(|i| 0x1A7E_u64.wrapping_mul(1_000_003).wrapping_add(i))
            .collect(),
    };
    let threads = 2;
    let results: Vec<Result<Tally, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let seeds = &seeds;
                s.spawn(move || -> Result<Tally, String> {
                    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
                    let mut tally = Tally::default();
                    for seed in seeds.iter().skip(t).step_by(threads) {
                        run_schedule(*seed, dir.path(), &mut tally)
                            .map_err(|e| format!("seed {seed}: {e}\nreplay: INTERLOCK_SEED={seed} cargo test -p interlock-tests --test gate_properties -- --nocapture"))?;
                    }
                    Ok(tally)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a worker thread panicked".into()))
            })
            .collect()
    });
    let mut total = Tally::default();
    for r in results {
        match r {
            Ok(t) => {
                total.schedules += t.schedules;
                total.sends += t.sends;
                total.committed += t.committed;
                total.refused += t.refused;
                total.failed += t.failed;
                total.ambiguous += t.ambiguous;
            }
            Err(e) => panic!("{e}"),
        }
    }
    eprintln!(
        "property: {} schedules ran, {} sends; resolved {} committed, {} refused, {} failed, {} ambiguous",
        total.schedules, total.sends, total.committed, total.refused, total.failed, total.ambiguous
    );
    assert_eq!(total.schedules, seeds.len() as u64);
    // Every schedule ends resolved (R7), and a commit always stands on a send.
    assert_eq!(
        total.committed + total.refused + total.failed + total.ambiguous,
        total.schedules,
        "a schedule ended unresolved"
    );
    assert!(total.sends >= total.committed, "a commit without a send");
    // The generator keeps reaching every kind of ending, not only the number of schedules.
    if total.schedules >= 10_000 {
        let floor = total.schedules / 200;
        for (kind, n) in [
            ("committed", total.committed),
            ("refused", total.refused),
            ("failed", total.failed),
            ("ambiguous", total.ambiguous),
        ] {
            assert!(
                n >= floor,
                "only {n} schedules ended {kind} (at least {floor} expected)"
            );
        }
    }
}
