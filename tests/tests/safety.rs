//! Regressions for the double-refund and late-revocation paths an adversarial read found: each
//! test drives the real gate, journal and simulated payments service through the one schedule
//! that broke the promise, and judges it by the service's own records. Each runs on an SQLite
//! journal and on a PostgreSQL one (`sqlite::…`, `postgres::…`).

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)] // in tests, a panic is the report

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use interlock::core::{LookupAnswer, RefusalCode, SendAnswer, Via};
use interlock::faults::FaultPoint;
use interlock::premise::{PremiseError, PremiseReader};
use interlock::target::{SendRequest, Target};
use interlock::{EffectKey, Gate, JournalStore, Outcome, Tier};
use interlock_testkit::faults::{Action, ScriptedFaults, Stall};
use interlock_testkit::sim::{SimRefundPremises, SimTarget};
use interlock_tests::actors::Bench;
use interlock_tests::stores::Kind;
use interlock_tests::world::{AMOUNT, LEASE, PAYMENT, WINDOW, World};
use serde_json::Value;

/// A binding that claims another tier (or name) for the same service: a redeployed worker, or
/// `interlock recover --tier 1` against a service without Stripe's guarantees.
struct Claims {
    inner: SimTarget,
    tier: Tier,
    name: &'static str,
}

impl Target for Claims {
    fn name(&self) -> &str {
        self.name
    }
    fn tier(&self) -> Tier {
        self.tier
    }
    fn dedupe_window(&self) -> Option<Duration> {
        (self.tier == Tier::One).then_some(WINDOW)
    }
    fn has_lookup(&self) -> bool {
        self.inner.has_lookup()
    }
    fn send(&self, req: &SendRequest<'_>) -> SendAnswer {
        self.inner.send(req)
    }
    fn lookup(&self, key: &EffectKey, payload: &Value) -> LookupAnswer {
        self.inner.lookup(key, payload)
    }
}

fn recovery_acts_on_the_tier_journaled_at_the_first_dispatch_not_the_binding_s(kind: Kind) {
    for (tier, expected) in [
        (Tier::Two, "COMMITTED/found_by_lookup"),
        (Tier::Three, "AMBIGUOUS"),
    ] {
        let b = Bench::new(kind, tier);
        b.first_attempt_dies_at(FaultPoint::AfterSend);
        assert_eq!(b.refunded(), AMOUNT, "the first send landed");
        let claims_tier1 = Arc::new(Claims {
            inner: SimTarget(b.sim.clone()),
            tier: Tier::One,
            name: "sim-payments",
        });
        let gate = b.gate("recover", None);
        let out = b.bind(&gate, claims_tier1).recover(&World::key()).unwrap();
        assert_eq!(out.label(), expected, "tier {tier:?}: {out:?}");
        assert_eq!(
            b.refunded(),
            AMOUNT,
            "tier {tier:?}: the service's records show a second refund"
        );
    }
}

fn recovery_through_another_target_than_the_journaled_one_is_refused(kind: Kind) {
    let b = Bench::new(kind, Tier::Two);
    b.first_attempt_dies_at(FaultPoint::AfterDispatch);
    let other = Arc::new(Claims {
        inner: SimTarget(b.sim.clone()),
        tier: Tier::Two,
        name: "other-payments",
    });
    let gate = b.gate("recover", None);
    let result = b.bind(&gate, other).recover(&World::key());
    let err = result.expect_err("recovering through another target must not act");
    let shown = err.to_string();
    assert!(
        shown.contains("sim-payments") && shown.contains("other-payments"),
        "{shown}"
    );
    assert_eq!(b.refunded(), 0);
}

fn a_takeover_planned_on_a_stale_snapshot_cannot_erase_a_concurrent_resend_s_window(kind: Kind) {
    let b = Bench::new(kind, Tier::Two);
    b.first_attempt_dies_at(FaultPoint::AfterDispatch);

    // B takes the dead holder's claim and pauses before its resend.
    let b_faults = ScriptedFaults::new();
    let b_pause = Stall::new();
    b_faults.arm(FaultPoint::AfterTakeover, Action::Stall(b_pause.clone()));
    let b_bound = b.bind(&b.gate("b", Some(b_faults)), b.sim_target());
    let b_thread = std::thread::spawn(move || b_bound.recover(&World::key()));
    b_pause.wait_reached();

    // B's claim deadline passes; C reads the state and decides to take over on it.
    b.clock.advance(36_000);
    let c_faults = ScriptedFaults::new();
    let c_pause = Stall::new();
    c_faults.arm(FaultPoint::BeforeTakeover, Action::Stall(c_pause.clone()));
    let c_bound = b.bind(&b.gate("c", Some(c_faults)), b.sim_target());
    let c_thread = std::thread::spawn(move || c_bound.recover(&World::key()));
    c_pause.wait_reached();

    // B resends (a fresh DISPATCHED with a new deadline); its request is held at the service.
    let held = Stall::new();
    b.sim.hold_next(held.clone());
    b_pause.release();
    held.wait_reached();

    // C now writes the takeover it planned before B's resend.
    c_pause.release();
    let c_out = c_thread.join().unwrap().unwrap();
    held.release();
    let b_out = b_thread.join().unwrap().unwrap();
    assert_eq!(
        b.refunded(),
        AMOUNT,
        "two refunds: B {} / C {}",
        b_out.label(),
        c_out.label()
    );
    assert!(matches!(c_out, Outcome::InFlight { .. }), "{c_out:?}");
    assert!(
        matches!(
            b_out,
            Outcome::Committed {
                via: Via::ReappliedAfterLookup,
                ..
            }
        ),
        "{b_out:?}"
    );
}

/// Premises whose read takes long enough for a revocation to commit meanwhile.
struct RevokeWhileReading {
    inner: SimRefundPremises,
    journal: Arc<dyn JournalStore>,
    armed: AtomicBool,
}

impl PremiseReader for RevokeWhileReading {
    fn read(
        &self,
        key: &EffectKey,
        payload: &Value,
    ) -> Result<interlock::core::Premises, PremiseError> {
        if self.armed.swap(false, Ordering::SeqCst) {
            assert!(self.journal.revoke_lease(LEASE).unwrap());
        }
        self.inner.read(key, payload)
    }
}

fn a_revocation_that_commits_during_the_premise_reads_stops_the_send(kind: Kind) {
    let b = Bench::new(kind, Tier::One);
    let gate = b.gate("first", None);
    let bound = gate
        .bind(
            b.sim_target(),
            Arc::new(RevokeWhileReading {
                inner: SimRefundPremises(b.sim.clone()),
                journal: b.journal.clone(),
                armed: AtomicBool::new(true),
            }),
        )
        .unwrap();
    let out = bound.submit(&b.effect()).unwrap();
    assert_eq!(b.refunded(), 0, "sent under a revoked lease: {out:?}");
    assert!(
        matches!(&out, Outcome::Refused(r) if r.code == RefusalCode::Lease),
        "{out:?}"
    );
}

/// A lookup during which a revocation commits.
struct RevokeDuringLookup {
    inner: SimTarget,
    journal: Arc<dyn JournalStore>,
}

impl Target for RevokeDuringLookup {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn tier(&self) -> Tier {
        self.inner.tier()
    }
    fn has_lookup(&self) -> bool {
        true
    }
    fn send(&self, req: &SendRequest<'_>) -> SendAnswer {
        self.inner.send(req)
    }
    fn lookup(&self, key: &EffectKey, payload: &Value) -> LookupAnswer {
        let _ = self.journal.revoke_lease(LEASE).unwrap();
        self.inner.lookup(key, payload)
    }
}

fn a_revocation_that_commits_during_recovery_s_lookup_stops_the_resend(kind: Kind) {
    let b = Bench::new(kind, Tier::Two);
    b.first_attempt_dies_at(FaultPoint::AfterDispatch);
    // The first recovery finds nothing while the dead holder's request may still land, and waits.
    let gate = b.gate("recover-1", None);
    let out = b
        .bind(&gate, b.sim_target())
        .recover(&World::key())
        .unwrap();
    assert!(matches!(out, Outcome::InFlight { .. }), "{out:?}");
    // Once it cannot (its deadline has passed), the next recovery looks up again; the lease is
    // revoked meanwhile.
    b.clock.advance(36_000);
    let target = Arc::new(RevokeDuringLookup {
        inner: SimTarget(b.sim.clone()),
        journal: b.journal.clone(),
    });
    let gate = b.gate("recover-2", None);
    let out = b.bind(&gate, target).recover(&World::key()).unwrap();
    assert_eq!(b.refunded(), 0, "resent under a revoked lease: {out:?}");
    assert!(
        matches!(&out, Outcome::Refused(r) if r.code == RefusalCode::LeaseAtRecovery),
        "{out:?}"
    );
}

fn a_saved_500_that_did_not_apply_resolves_as_failed_once_the_lookup_is_quiet(kind: Kind) {
    let b = Bench::new(kind, Tier::One);
    b.sim.error_before_apply(1);
    let gate = b.gate("first", None);
    let bound = b.bind(&gate, b.sim_target());
    let effect = b.effect();
    // The first send gets a fresh 500; the lookup finds nothing, but the send may still land.
    let out = bound.submit(&effect).unwrap();
    assert!(matches!(out, Outcome::InFlight { .. }), "{out:?}");
    // A retry resends under the key and hears the saved 500 replayed; once the first send's
    // window has closed, the lookup's "not found" settles it.
    let out = b
        .bind(&b.gate("retry-1", None), b.sim_target())
        .submit(&effect)
        .unwrap();
    assert!(matches!(out, Outcome::InFlight { .. }), "{out:?}");
    b.clock.advance(36_000);
    let out = b
        .bind(&b.gate("retry-2", None), b.sim_target())
        .submit(&effect)
        .unwrap();
    assert!(
        matches!(&out, Outcome::Failed(f) if f.code == "saved_server_error"),
        "{out:?}"
    );
    assert_eq!(b.refunded(), 0);
    assert!(b.sim.requests() <= 3, "{} requests", b.sim.requests());
}

fn a_saved_500_after_the_refund_applied_commits_by_lookup(kind: Kind) {
    let b = Bench::new(kind, Tier::One);
    b.sim.error_after_apply(1);
    let effect = b.effect();
    let out = b
        .bind(&b.gate("first", None), b.sim_target())
        .submit(&effect)
        .unwrap();
    assert_eq!(out.label(), "COMMITTED/found_by_lookup", "{out:?}");
    assert_eq!(b.refunded(), AMOUNT);
}

/// A lease store kept apart from the journal, revoked while the dispatch is being written: its
/// first `live_checks` answers are live, every later one dead.
struct RevokedDuringDispatch {
    checks: std::sync::atomic::AtomicU32,
    live_checks: u32,
}

impl interlock::LeaseStore for RevokedDuringDispatch {
    fn check(
        &self,
        _: &str,
        _: &Value,
        _: i64,
    ) -> Result<interlock::core::LeaseVerdict, interlock::lease::LeaseError> {
        let n = self.checks.fetch_add(1, Ordering::SeqCst);
        Ok(if n < self.live_checks {
            interlock::core::LeaseVerdict::Live
        } else {
            interlock::core::LeaseVerdict::Dead {
                reason: "revoked".into(),
            }
        })
    }
    fn describe(&self, _: &str) -> Result<Option<interlock::Grant>, interlock::lease::LeaseError> {
        Ok(Some(World::grant()))
    }
}

fn a_separate_lease_store_revoked_while_the_dispatch_is_written_stops_the_send(kind: Kind) {
    let b = Bench::new(kind, Tier::Two);
    let leases = Arc::new(RevokedDuringDispatch {
        checks: std::sync::atomic::AtomicU32::new(0),
        // Live in the transaction that proposes and dispatches the new key (its only read
        // before the send); revoked as that record commits.
        live_checks: 1,
    });
    let gate = Gate::new(
        b.journal.clone(),
        leases,
        Arc::new(b.clock.clone()),
        b.store.config(),
    )
    .unwrap();
    let bound = b.bind(&gate, b.sim_target());
    let effect = b.effect();
    let out = bound.submit(&effect).unwrap();
    assert_eq!(b.sim.requests(), 0, "sent after the revocation: {out:?}");
    assert!(matches!(out, Outcome::InFlight { .. }), "{out:?}");
    // Once the dispatch's window has passed, recovery closes it as refused.
    b.clock.advance(36_000);
    let out = bound.submit(&effect).unwrap();
    assert!(
        matches!(&out, Outcome::Refused(r) if r.code == RefusalCode::LeaseAtRecovery),
        "{out:?}"
    );
    assert_eq!(b.refunded(), 0);
}

fn a_cancelled_attempt_dispatches_takes_over_and_resends_nothing(kind: Kind) {
    let b = Bench::new(kind, Tier::Two);
    let cancelled: interlock::gate::StopCheck = Arc::new(|| true);
    let gate = b.gate("cancelled", None);
    let bound = b.bind(&gate, b.sim_target()).with_stop(cancelled.clone());
    let effect = b.effect();
    let out = bound.submit(&effect).unwrap();
    assert!(matches!(out, Outcome::Superseded { .. }), "{out:?}");
    assert_eq!(b.sim.requests(), 0);
    // An effect left in flight by a dead attempt is not taken over by a cancelled one either.
    b.first_attempt_dies_at(FaultPoint::AfterDispatch);
    let bound = b
        .bind(&b.gate("cancelled-2", None), b.sim_target())
        .with_stop(cancelled);
    let out = bound.recover(&World::key()).unwrap();
    assert!(matches!(out, Outcome::Superseded { .. }), "{out:?}");
    let claims = b
        .journal
        .history(&World::key())
        .unwrap()
        .iter()
        .filter(|r| matches!(r.event, interlock::core::Event::Claimed(_)))
        .count();
    assert_eq!(claims, 0);
    assert_eq!(b.sim.requests(), 0);
}

fn an_attempt_fenced_between_its_dispatch_and_its_send_sends_nothing(kind: Kind) {
    let b = Bench::new(kind, Tier::One);
    // Its caller goes away (a worker killed mid-call to a gate server) and the approval is
    // revoked while the attempt stalls between its dispatch record and its send.
    let out = b.stalled_after_dispatch(b.sim_target(), true, true);
    assert!(matches!(out, Outcome::Superseded { .. }), "{out:?}");
    assert_eq!(
        b.sim.requests(),
        0,
        "sent after its caller went away and its lease was revoked"
    );
    // The next attempt recovers it as after a crash at that point: it re-checks, and refuses.
    b.clock.advance(36_000);
    let out = b
        .bind(&b.gate("next", None), b.sim_target())
        .recover(&World::key())
        .unwrap();
    assert!(
        matches!(&out, Outcome::Refused(r) if r.code == RefusalCode::LeaseAtRecovery),
        "{out:?}"
    );
    assert_eq!(b.refunded(), 0);
}

fn a_cancellation_after_the_dispatch_sends_it_and_the_effect_resolves(kind: Kind) {
    // A cancelled activity may never be retried (its workflow was cancelled): its own dispatch
    // is sent, not left in flight for a recovery that may never come.
    let b = Bench::new(kind, Tier::Two);
    let out = b.stalled_after_dispatch(b.sim_target(), false, false);
    assert!(
        matches!(
            out,
            Outcome::Committed {
                via: Via::FirstSend,
                ..
            }
        ),
        "{out:?}"
    );
    assert!(matches!(
        b.journal.state(&World::key()).unwrap(),
        interlock::core::EffectState::Resolved { .. }
    ));
    assert_eq!(b.refunded(), AMOUNT);
}

/// A lease store that cannot be read.
struct Unreachable;

impl interlock::LeaseStore for Unreachable {
    fn check(
        &self,
        _: &str,
        _: &Value,
        _: i64,
    ) -> Result<interlock::core::LeaseVerdict, interlock::lease::LeaseError> {
        Err(interlock::lease::LeaseError::Store("down".into()))
    }
    fn describe(&self, _: &str) -> Result<Option<interlock::Grant>, interlock::lease::LeaseError> {
        Err(interlock::lease::LeaseError::Store("down".into()))
    }
}

fn a_fence_at_tier_3_withdraws_the_dispatch_and_the_next_attempt_re_checks_and_sends_it_once(
    kind: Kind,
) {
    let b = Bench::new(kind, Tier::Two);
    // Proposed through a binding that claims tier 3; the lease store is down, so the proposal
    // waits, journaled at tier 3.
    let down = Gate::new(
        b.journal.clone(),
        Arc::new(Unreachable),
        Arc::new(b.clock.clone()),
        b.store.config(),
    )
    .unwrap();
    let blind: Arc<dyn Target> = Arc::new(Claims {
        inner: SimTarget(b.sim.clone()),
        tier: Tier::Three,
        name: "sim-payments",
    });
    let out = b.bind(&down, blind).submit(&b.effect()).unwrap();
    assert!(matches!(out, Outcome::Retry { .. }), "{out:?}");
    // A binding of the same service continues it, fenced after its dispatch (its caller went
    // away): the effect recovers at tier 3 (the worse of the journaled and the bound), where the
    // service cannot say "not sent", but the attempt's own withdrawal does. It sends nothing,
    // so a lease revoked while its caller is gone is read by the next attempt, not sent under.
    let out = b.stalled_after_dispatch(b.sim_target(), true, false);
    assert!(matches!(out, Outcome::Superseded { .. }), "{out:?}");
    assert_eq!(b.sim.requests(), 0, "sent after its caller went away");
    // The next attempt sends it, once, never marking it ambiguous.
    let out = b
        .bind(&b.gate("next", None), b.sim_target())
        .submit(&b.effect())
        .unwrap();
    assert_eq!(out.label(), "COMMITTED/first_send", "{out:?}");
    assert_eq!(b.refunded(), AMOUNT);
}

fn a_fence_at_tier_3_after_a_revocation_sends_nothing_and_the_next_attempt_refuses(kind: Kind) {
    let b = Bench::new(kind, Tier::Three);
    let blind: Arc<dyn Target> = Arc::new(Claims {
        inner: SimTarget(b.sim.clone()),
        tier: Tier::Three,
        name: "sim-payments",
    });
    // Its caller goes away and the approval is revoked while the attempt stalls between its
    // dispatch and its send.
    let out = b.stalled_after_dispatch(blind.clone(), true, true);
    assert!(matches!(out, Outcome::Superseded { .. }), "{out:?}");
    assert_eq!(b.sim.requests(), 0, "sent after its lease was revoked");
    let out = b
        .bind(&b.gate("next", None), blind)
        .recover(&World::key())
        .unwrap();
    assert!(
        matches!(&out, Outcome::Refused(r) if r.code == RefusalCode::LeaseAtRecovery),
        "{out:?}"
    );
    assert_eq!(b.refunded(), 0);
}

/// A premise reader during whose read the attempt is cancelled (its caller goes away).
struct CancelledWhileReading {
    inner: SimRefundPremises,
    cancel: Arc<AtomicBool>,
}

impl PremiseReader for CancelledWhileReading {
    fn read(
        &self,
        key: &EffectKey,
        payload: &Value,
    ) -> Result<interlock::core::Premises, PremiseError> {
        self.cancel.store(true, Ordering::SeqCst);
        self.inner.read(key, payload)
    }
}

fn an_attempt_cancelled_while_its_premises_are_read_journals_nothing_at_any_tier(kind: Kind) {
    for tier in [Tier::One, Tier::Two, Tier::Three] {
        let b = Bench::new(kind, tier);
        let cancel = Arc::new(AtomicBool::new(false));
        let seen = cancel.clone();
        let bound = b
            .gate("cancelled-mid-read", None)
            .bind(
                b.sim_target(),
                Arc::new(CancelledWhileReading {
                    inner: SimRefundPremises(b.sim.clone()),
                    cancel: cancel.clone(),
                }),
            )
            .unwrap()
            .with_stop(Arc::new(move || seen.load(Ordering::SeqCst)));
        let effect = b.effect();
        let out = bound.submit(&effect).unwrap();
        assert!(
            matches!(out, Outcome::Superseded { .. }),
            "{tier:?}: {out:?}"
        );
        assert_eq!(b.sim.requests(), 0, "{tier:?}");
        // Nothing to recover: a tier-3 effect is not left to be marked ambiguous.
        assert!(
            b.journal.history(&World::key()).unwrap().is_empty(),
            "{tier:?}"
        );
        let out = b
            .bind(&b.gate("next", None), b.sim_target())
            .submit(&effect)
            .unwrap();
        assert!(
            matches!(
                out,
                Outcome::Committed {
                    via: Via::FirstSend,
                    ..
                }
            ),
            "{tier:?}: {out:?}"
        );
        assert_eq!(b.refunded(), AMOUNT, "{tier:?}");
    }
}

/// The Stripe target, tier 1 as Stripe promises, against a Stripe-compatible server that ignores
/// `Idempotency-Key` (the payments API acting as tier 2).
fn key_ignoring_stripe(
    b: &Bench,
) -> (
    interlock_testkit::payments_api::PaymentsApi,
    Arc<dyn Target>,
) {
    use interlock_stripe::{StripeConfig, StripeRefunds};
    const SECRET: &str = "sk_test_interlock";
    let api = interlock_testkit::payments_api::PaymentsApi::start(b.sim.clone(), SECRET).unwrap();
    let target = StripeRefunds::new(StripeConfig::new(&api.base_url, SECRET).unwrap());
    assert_eq!(target.tier(), Tier::One);
    (api, Arc::new(target))
}

fn a_tier_1_target_that_ignores_its_key_is_recorded_as_applying_twice_and_trusted_as_tier_2(
    kind: Kind,
) {
    let b = Bench::new(kind, Tier::Two);
    let (_api, stripe) = key_ignoring_stripe(&b);
    // The first attempt sends, the refund lands, and the worker dies before journaling it.
    let faults = ScriptedFaults::new();
    faults.arm(FaultPoint::AfterSend, Action::Crash);
    let first = b.bind(&b.gate("first", Some(faults)), stripe.clone());
    assert!(first.submit(&b.effect()).is_err());
    assert_eq!(b.refunded(), AMOUNT);

    // Recovery trusts tier 1 and resends under the key; the server applies it again. The answer
    // is not marked replayed, so a lookup follows and finds both.
    let gate = b.gate("recover", None);
    let bound = b.bind(&gate, stripe.clone());
    let out = bound.recover(&World::key()).unwrap();
    let ids: Vec<String> = b.sim.refunds(PAYMENT).into_iter().map(|r| r.id).collect();
    assert_eq!(ids.len(), 2, "the server applied the resend as new");
    let Outcome::AppliedTwice(twice) = &out else {
        panic!(
            "two refunds under one key recorded as {}: {out:?}",
            out.label()
        );
    };
    for id in &ids {
        assert!(
            twice.found.iter().any(|f| f["id"] == id.as_str()),
            "{id} not named: {twice:?}"
        );
    }
    let verdict = interlock::verify::verify(
        b.journal.as_ref(),
        &World::key(),
        &interlock::verify::Sources::default(),
    );
    let once = verdict
        .columns
        .iter()
        .find(|c| c.name == "happened once")
        .unwrap();
    assert_eq!(once.holds, Some(false), "{once:?}");

    // From now on this process trusts the target no further than tier 2: a second effect left
    // in flight after its send is looked up, not resent.
    assert_eq!(bound.tier(), Tier::Two);
    let key2 = EffectKey::derive(&["case-4471", "refund-2"]);
    let payload = World::payload(AMOUNT);
    let effect2 = bound.decide(key2.clone(), &payload, LEASE).unwrap();
    let faults = ScriptedFaults::new();
    faults.arm(FaultPoint::AfterSend, Action::Crash);
    let dying = b.bind(&gate.clone().with_faults(faults), stripe.clone());
    assert!(dying.submit(&effect2).is_err());
    assert_eq!(b.refunded(), 3 * AMOUNT);
    let out = bound.recover(&key2).unwrap();
    assert_eq!(out.label(), "COMMITTED/found_by_lookup", "{out:?}");
    assert_eq!(b.refunded(), 3 * AMOUNT, "the demoted target was resent to");
    // A gate started afresh over the same journal (a restarted worker, `interlock recover`)
    // remembers it too.
    let restarted = b.bind(&b.gate("restarted", None), stripe);
    assert_eq!(restarted.tier(), Tier::Two);
}

interlock_tests::every_store!(
    recovery_acts_on_the_tier_journaled_at_the_first_dispatch_not_the_binding_s,
    recovery_through_another_target_than_the_journaled_one_is_refused,
    a_takeover_planned_on_a_stale_snapshot_cannot_erase_a_concurrent_resend_s_window,
    a_revocation_that_commits_during_the_premise_reads_stops_the_send,
    a_revocation_that_commits_during_recovery_s_lookup_stops_the_resend,
    a_saved_500_that_did_not_apply_resolves_as_failed_once_the_lookup_is_quiet,
    a_saved_500_after_the_refund_applied_commits_by_lookup,
    a_separate_lease_store_revoked_while_the_dispatch_is_written_stops_the_send,
    a_cancelled_attempt_dispatches_takes_over_and_resends_nothing,
    an_attempt_fenced_between_its_dispatch_and_its_send_sends_nothing,
    a_cancellation_after_the_dispatch_sends_it_and_the_effect_resolves,
    a_fence_at_tier_3_withdraws_the_dispatch_and_the_next_attempt_re_checks_and_sends_it_once,
    a_fence_at_tier_3_after_a_revocation_sends_nothing_and_the_next_attempt_refuses,
    an_attempt_cancelled_while_its_premises_are_read_journals_nothing_at_any_tier,
    a_tier_1_target_that_ignores_its_key_is_recorded_as_applying_twice_and_trusted_as_tier_2,
);
