//! Regressions for the second adversarial read, each in a part the model checker did not see:
//! the target's own confirmation counts wherever a late success counts; a premise read has an
//! age, and a stall after it reads again; a caller looping conflicting payloads neither grows the
//! history nor starves a recoverer; and a fenced dispatch is withdrawn, so the next attempt need
//! not wait out its claim. Each drives the real gate, journal and simulated payments service
//! through the one schedule that broke the promise, on SQLite and on PostgreSQL.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)] // in tests, a panic is the report

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use interlock::approval::Scoreboard;
use interlock::core::{EffectState, Event, RefusalCode, Resolution, Via};
use interlock::faults::{Crash, FaultPoint, Faults};
use interlock::journal::Journal;
use interlock::verify::{Sources, verify};
use interlock::{EffectKey, Outcome, Tier};
use interlock_stripe::webhook::{Delivery, handle, sign};
use interlock_tests::actors::Bench;
use interlock_tests::stores::Kind;
use interlock_tests::world::{AMOUNT, LEASE, PAYMENT, World};
use serde_json::json;

const SECRET: &str = "whsec_round_two";

/// The payments service's signed `refund.updated` for a succeeded refund `id` of the approved
/// amount on the approved payment, carrying the effect's key; delivered to the journal.
fn deliver_confirmation(b: &Bench, id: &str) -> Delivery {
    let now_s = b.clock_now_s();
    let body = json!({
        "id": format!("evt_{id}"), "object": "event", "type": "refund.updated",
        "data": { "object": { "id": id, "object": "refund", "amount": AMOUNT,
                              "status": "succeeded", "payment_intent": PAYMENT, "created": now_s,
                              "metadata": { "interlock_key": World::key().as_str() } } }
    })
    .to_string()
    .into_bytes();
    let sig = sign(&body, SECRET, now_s);
    let journal: &dyn Journal = b.journal.as_ref();
    handle(journal, SECRET, Some(&sig), &body, now_s, 300).unwrap()
}

trait Now {
    fn clock_now_s(&self) -> i64;
}

impl Now for Bench {
    fn clock_now_s(&self) -> i64 {
        use interlock::Clock;
        self.clock.now_ms() / 1000
    }
}

fn history(b: &Bench) -> Vec<Event> {
    b.journal
        .history(&World::key())
        .unwrap()
        .into_iter()
        .map(|r| r.event)
        .collect()
}

fn a_confirmation_after_a_refusal_fails_verify_and_shows_the_effect_landed(kind: Kind) {
    let b = Bench::new(kind, Tier::Two);
    assert!(b.journal.revoke_lease(LEASE).unwrap());
    let out = b
        .bind(&b.gate("first", None), b.sim_target())
        .submit(&b.effect())
        .unwrap();
    assert!(
        matches!(&out, Outcome::Refused(r) if r.code == RefusalCode::Lease),
        "{out:?}"
    );
    // The target says a refund under the key succeeded after all (a send the journal never
    // heard of, a hand refund tagged with the key): the refusal is not the whole story.
    assert_eq!(
        deliver_confirmation(&b, "re_late1"),
        Delivery::Recorded {
            key: World::key().to_string()
        }
    );
    let v = verify(b.journal.as_ref(), &World::key(), &Sources::default());
    assert!(
        !v.holds(),
        "verify passed a refused effect the target confirmed: {v:?}"
    );
    let once = v
        .columns
        .iter()
        .find(|c| c.name == "happened once")
        .unwrap();
    assert_eq!(once.holds, Some(false), "{once:?}");
    let records = b.journal.history(&World::key()).unwrap();
    let receipt = interlock::receipt::build(&records).unwrap();
    assert_eq!(receipt.landed_late, vec!["re_late1".to_owned()]);
    let board = Scoreboard::read(b.journal.as_ref(), "").unwrap();
    assert_eq!(board.landed_after_refusal, 1, "{board:?}");
}

fn a_confirmation_of_a_second_refund_after_the_commit_closes_it_as_applied_twice(kind: Kind) {
    let b = Bench::new(kind, Tier::Two);
    let out = b
        .bind(&b.gate("first", None), b.sim_target())
        .submit(&b.effect())
        .unwrap();
    assert!(matches!(out, Outcome::Committed { .. }), "{out:?}");
    let ours = b.sim.refunds(PAYMENT)[0].id.clone();
    // Its own refund confirmed: evidence, nothing more.
    deliver_confirmation(&b, &ours);
    assert!(verify(b.journal.as_ref(), &World::key(), &Sources::default()).holds());
    // Another refund confirmed under the same key: it landed twice.
    deliver_confirmation(&b, "re_other");
    assert!(matches!(
        b.journal.state(&World::key()).unwrap(),
        EffectState::Resolved {
            resolution: Resolution::AppliedTwice(_),
            ..
        }
    ));
    let v = verify(b.journal.as_ref(), &World::key(), &Sources::default());
    assert!(!v.holds(), "{v:?}");
}

fn a_tier_3_effect_the_target_confirmed_commits_at_recovery_instead_of_turning_ambiguous(
    kind: Kind,
) {
    let b = Bench::new(kind, Tier::Three);
    // The refund lands; the worker dies before it journals the answer.
    b.first_attempt_dies_at(FaultPoint::AfterSend);
    assert_eq!(b.refunded(), AMOUNT);
    let id = b.sim.refunds(PAYMENT)[0].id.clone();
    deliver_confirmation(&b, &id);
    let out = b
        .bind(&b.gate("recover", None), b.sim_target())
        .recover(&World::key())
        .unwrap();
    assert!(
        matches!(
            &out,
            Outcome::Committed {
                via: Via::ConfirmedByTarget,
                result,
                ..
            } if result["id"] == id.as_str()
        ),
        "{out:?}"
    );
    assert_eq!(b.refunded(), AMOUNT);
    assert!(!history(&b).iter().any(|e| matches!(e, Event::Ambiguous(_))));
}

/// Faults that run `act` the first time the gate reaches `point`.
struct OnceAt<F: Fn() + Send + Sync> {
    point: FaultPoint,
    fired: AtomicBool,
    act: F,
}

impl<F: Fn() + Send + Sync> Faults for OnceAt<F> {
    fn at(&self, point: FaultPoint, _key: &str) -> Result<(), Crash> {
        if point == self.point && !self.fired.swap(true, Ordering::SeqCst) {
            (self.act)();
        }
        Ok(())
    }
}

/// Faults that run `act` every time the gate reaches `point`.
struct EveryTimeAt<F: Fn() + Send + Sync> {
    point: FaultPoint,
    act: F,
}

impl<F: Fn() + Send + Sync> Faults for EveryTimeAt<F> {
    fn at(&self, point: FaultPoint, _key: &str) -> Result<(), Crash> {
        if point == self.point {
            (self.act)();
        }
        Ok(())
    }
}

fn conflicting_submissions_neither_starve_a_takeover_nor_grow_the_history(kind: Kind) {
    let b = Arc::new(Bench::new(kind, Tier::Two));
    b.first_attempt_dies_at(FaultPoint::AfterDispatch);
    // A caller loops submissions of another amount under the key; one lands between every
    // recoverer's plan and its takeover.
    let caller = b.bind(&b.gate("caller", None), b.sim_target());
    let other = World {
        clock: b.clock.clone(),
        sim: b.sim.clone(),
    }
    .decide(AMOUNT + 1)
    .unwrap();
    let looping = {
        let (caller, other, clock) = (caller.clone(), other.clone(), b.clock.clone());
        EveryTimeAt {
            point: FaultPoint::BeforeTakeover,
            act: move || {
                clock.advance(1);
                let out = caller.submit(&other).unwrap();
                assert!(
                    matches!(&out, Outcome::Refused(r) if r.code == RefusalCode::ConflictingPayload)
                );
            },
        }
    };
    let recoverer = b.bind(
        &b.gate("recoverer", None).with_faults(Arc::new(looping)),
        b.sim_target(),
    );
    let out = recoverer.submit(&b.effect()).unwrap();
    assert!(
        history(&b).iter().any(|e| matches!(e, Event::Claimed(_))),
        "the recoverer never took the claim: {out:?}"
    );
    // Many more conflicting payloads: each is refused, the history stops growing.
    let before = history(&b).len();
    for extra in 2..200 {
        let e = World {
            clock: b.clock.clone(),
            sim: b.sim.clone(),
        }
        .decide(AMOUNT + extra)
        .unwrap();
        let out = caller.submit(&e).unwrap();
        assert!(matches!(&out, Outcome::Refused(r) if r.code == RefusalCode::ConflictingPayload));
    }
    let notes = history(&b)
        .iter()
        .filter(|e| matches!(e, Event::Refused(r) if !r.is_final))
        .count();
    assert!(
        history(&b).len() <= before + interlock::core::transition::MAX_CONFLICT_NOTES,
        "{} records after 198 conflicting submissions ({notes} notes)",
        history(&b).len()
    );
    assert_eq!(b.sim.requests(), 0, "a conflicting payload was sent");
}

/// A gate for `actor` that stalls once right after its premise read (a pause, SIGSTOP) for
/// six seconds, past the premise bound, while support refunds the whole amount by hand.
fn stalls_after_the_premise_read(b: &Arc<Bench>, actor: &str) -> interlock::Bound {
    let world = b.clone();
    let stall = OnceAt {
        point: FaultPoint::AfterPremiseRead,
        fired: AtomicBool::new(false),
        act: move || {
            world.sim.hand_refund(PAYMENT, AMOUNT);
            world.clock.advance(6_000);
        },
    };
    b.bind(
        &b.gate(actor, None).with_faults(Arc::new(stall)),
        b.sim_target(),
    )
}

fn a_stall_between_the_premise_read_and_the_dispatch_reads_the_premises_again(kind: Kind) {
    let b = Arc::new(Bench::new(kind, Tier::One));
    let bound = stalls_after_the_premise_read(&b, "stalled");
    let out = bound.submit(&b.effect()).unwrap();
    assert_eq!(b.refunded(), AMOUNT, "sent on minutes-old facts: {out:?}");
    assert!(
        matches!(&out, Outcome::Refused(r) if r.code == RefusalCode::StalePremise),
        "{out:?}"
    );
}

fn a_stall_between_recovery_s_premise_read_and_its_resend_reads_the_premises_again(kind: Kind) {
    let b = Arc::new(Bench::new(kind, Tier::One));
    b.first_attempt_dies_at(FaultPoint::AfterDispatch);
    let bound = stalls_after_the_premise_read(&b, "recoverer");
    let out = bound.recover(&World::key()).unwrap();
    assert_eq!(b.refunded(), AMOUNT, "resent on stale facts: {out:?}");
    assert!(!out.label().starts_with("COMMITTED"), "{out:?}");
    // Every dispatch journals when its premises were read.
    for e in history(&b) {
        if let Event::Dispatched(d) = e {
            assert!(d.recheck.read_at_ms.is_some(), "{d:?}");
        }
    }
}

fn a_fenced_dispatch_is_withdrawn_so_the_next_attempt_need_not_wait_out_its_claim(kind: Kind) {
    let b = Bench::new(kind, Tier::Two);
    let out = b.stalled_after_dispatch(b.sim_target(), true, false);
    assert!(matches!(out, Outcome::Superseded { .. }), "{out:?}");
    assert_eq!(b.sim.requests(), 0);
    // No time passes: the next attempt finishes the effect at once.
    let out = b
        .bind(&b.gate("next", None), b.sim_target())
        .submit(&b.effect())
        .unwrap();
    // Nothing left under the withdrawn dispatch: the next send is the first.
    assert_eq!(out.label(), "COMMITTED/first_send", "{out:?}");
    assert_eq!(b.sim.requests(), 1);
    assert_eq!(b.refunded(), AMOUNT);
    let key: EffectKey = World::key();
    assert!(verify(b.journal.as_ref(), &key, &Sources::default()).holds());
}

interlock_tests::every_store!(
    a_confirmation_after_a_refusal_fails_verify_and_shows_the_effect_landed,
    a_confirmation_of_a_second_refund_after_the_commit_closes_it_as_applied_twice,
    a_tier_3_effect_the_target_confirmed_commits_at_recovery_instead_of_turning_ambiguous,
    conflicting_submissions_neither_starve_a_takeover_nor_grow_the_history,
    a_stall_between_the_premise_read_and_the_dispatch_reads_the_premises_again,
    a_stall_between_recovery_s_premise_read_and_its_resend_reads_the_premises_again,
    a_fenced_dispatch_is_withdrawn_so_the_next_attempt_need_not_wait_out_its_claim,
);
