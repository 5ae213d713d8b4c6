use serde_json::json;

use super::*;
use crate::decide::tests::live;
use crate::record::Confirmed;
use crate::record::Premises;
use crate::state::Resolution;
use crate::state::fold;

const TIER2: TierFacts = TierFacts {
    bound: Tier::Two,
    window_ms: None,
    margin_ms: 0,
    has_lookup: true,
};

fn holder(a: &str) -> Holder {
    Holder {
        caller: None,
        host: "h".into(),
        pid: 1,
        attempt: a.into(),
    }
}

fn holding(a: &str, deadline_ms: i64) -> Holding {
    Holding {
        holder: holder(a),
        deadline_ms,
        now_ms: 0,
        max_read_age_ms: i64::MAX,
    }
}

fn proposal(tier: u8) -> Proposed {
    Proposed {
        given_hash: None,
        rules: Vec::new(),
        by: None,
        payload: json!({"amount": 1}),
        payload_hash: "p".into(),
        premises: Premises::new(),
        lease: "l".into(),
        target: "t".into(),
        tier,
        window_ms: None,
        labels: Default::default(),
    }
}

fn state_of(events: &[Event]) -> EffectState {
    fold(events.iter().enumerate().map(|(i, e)| (i as i64, e))).unwrap()
}

fn in_flight(tier: u8) -> Vec<Event> {
    let mut h = authorize(
        &EffectState::Absent,
        &proposal(tier),
        &LeaseVerdict::Live,
        json!({}),
    );
    let s = state_of(&h);
    h.extend(dispatch_first(
        &s,
        "p",
        &live(),
        None,
        &[],
        &holding("a", 5_000),
    ));
    h
}

/// In flight at `tier`, then taken over by "b" (holder seen dead) with claim deadline `deadline`.
fn taken_by_b(tier: u8, deadline: i64) -> Vec<Event> {
    taken_over(in_flight(tier), deadline)
}

/// `h` taken over by "b", its holder seen dead, with claim deadline `deadline`.
fn taken_over(mut h: Vec<Event>, deadline: i64) -> Vec<Event> {
    let seen = claim_of(&state_of(&h));
    h.extend(takeover(
        &state_of(&h),
        &seen,
        TakeoverReason::HolderDead,
        0,
        0,
        &holding("b", deadline),
    ));
    h
}

/// A tier-2 recoverer's facts at `now_ms`, everything holding.
fn tier2_facts(now_ms: i64) -> RecoveryFacts {
    RecoveryFacts {
        tier: TIER2,
        effective_at_takeover: Effective::LookupOnly,
        recheck: live(),
        transient: false,
        has_lookup: true,
        now_ms,
    }
}

fn claim_of(state: &EffectState) -> Claim {
    match state {
        EffectState::InFlight { claim, .. } => claim.clone(),
        other => panic!("not in flight: {other:?}"),
    }
}

#[test]
fn a_takeover_is_written_only_on_the_claim_it_was_planned_on() {
    let mut h = in_flight(2);
    let seen = claim_of(&state_of(&h));
    // B takes over and resends before C's planned takeover reaches the journal.
    let b = takeover(
        &state_of(&h),
        &seen,
        TakeoverReason::HolderDead,
        100,
        50,
        &holding("b", 900),
    );
    assert_eq!(b.len(), 1);
    h.extend(b);
    let b_claim = claim_of(&state_of(&h));
    let facts = tier2_facts(5_000);
    let (resend, plan) = recover(
        &state_of(&h),
        2,
        &facts,
        Some((&LookupAnswer::NotFound, 5_000)),
        &[],
        &holding("b", 8_000),
    );
    assert_eq!(plan, Some(RecoveryPlan::Resend(Via::ReappliedAfterLookup)));
    h.extend(resend);
    let c = takeover(
        &state_of(&h),
        &b_claim,
        TakeoverReason::DeadlinePassed,
        1_000,
        50,
        &holding("c", 3_000),
    );
    assert!(c.is_empty(), "planned on a stale claim: {c:?}");
    assert_eq!(claim_of(&state_of(&h)).quiet_after(None), 8_000);
}

#[test]
fn not_found_speaks_only_for_the_moment_the_lookup_was_asked() {
    let mut h = in_flight(2);
    let seen = claim_of(&state_of(&h));
    h.extend(takeover(
        &state_of(&h),
        &seen,
        TakeoverReason::HolderDead,
        0,
        50,
        &holding("b", 9_000),
    ));
    // The dead holder's request may land until its deadline, 5000. A lookup asked at 10 found
    // nothing; deciding at 6000 on that answer would resend though the request landed at 20.
    let facts = tier2_facts(6_000);
    let s = state_of(&h);
    let early = Some((&LookupAnswer::NotFound, 10));
    let (events, plan) = recover(&s, 2, &facts, early, &[], &holding("b", 9_000));
    assert!(events.is_empty(), "{events:?}");
    assert!(matches!(plan, Some(RecoveryPlan::Wait { .. })), "{plan:?}");
    let late = Some((&LookupAnswer::NotFound, 5_000));
    let (_, plan) = recover(&s, 2, &facts, late, &[], &holding("b", 9_000));
    assert!(matches!(plan, Some(RecoveryPlan::Resend(_))), "{plan:?}");
    // The same holds for a definite failure recorded after a send.
    let definite = SendAnswer::Definite {
        code: "card_declined".into(),
        message: "no".into(),
    };
    assert!(record_answer(&s, 2, &definite, Via::FirstSend, true, 6_000, early).is_empty());
}

#[test]
fn a_resend_judges_the_tier_1_window_when_it_is_decided_not_at_takeover() {
    let mut h = in_flight(1);
    let seen = claim_of(&state_of(&h));
    h.extend(takeover(
        &state_of(&h),
        &seen,
        TakeoverReason::Tier1InWindow,
        0,
        0,
        &holding("b", 9_000),
    ));
    let tier1 = TierFacts {
        bound: Tier::One,
        window_ms: Some(10_000),
        margin_ms: 4_000,
        has_lookup: true,
    };
    // Taken over at 5_000, inside window − margin; the resend is decided at 6_500, past it.
    let facts = RecoveryFacts {
        tier: tier1,
        effective_at_takeover: Effective::DedupeInWindow,
        recheck: live(),
        transient: false,
        has_lookup: true,
        now_ms: 6_500,
    };
    let (events, plan) = recover(&state_of(&h), 2, &facts, None, &[], &holding("b", 9_000));
    assert!(events.is_empty(), "{events:?}");
    assert_eq!(
        plan,
        Some(RecoveryPlan::Lookup),
        "past the window it must look up"
    );
}

#[test]
fn an_attempt_that_lost_the_race_to_propose_continues_from_the_journal_s_proposal() {
    let journaled = proposal(2);
    let h = authorize(
        &EffectState::Absent,
        &journaled,
        &LeaseVerdict::Live,
        json!({}),
    );
    let mine = Proposed {
        lease: "another-lease".into(),
        ..journaled.clone()
    };
    assert!(authorize(&state_of(&h), &mine, &LeaseVerdict::Live, json!({})).is_empty());
    let again = authorize(&state_of(&h), &journaled, &LeaseVerdict::Live, json!({}));
    assert!(
        matches!(&again[..], [Event::Authorized(a)] if a.lease == "l"),
        "{again:?}"
    );
}

#[test]
fn a_takeover_never_narrows_the_window_of_a_send_that_may_still_land() {
    let c = claim_of(&state_of(&in_flight(2)));
    for reason in [
        TakeoverReason::HolderDead,
        TakeoverReason::DeadlinePassed,
        TakeoverReason::Tier1InWindow,
    ] {
        assert_eq!(prior_until(&c, reason, 100, 50), 5_000, "{reason:?}");
    }
}

#[test]
fn recovery_acts_on_the_journaled_tier_and_a_binding_may_only_lower_it() {
    assert_eq!(recovery_tier(2, Tier::One), Tier::Two);
    assert_eq!(recovery_tier(3, Tier::One), Tier::Three);
    assert_eq!(recovery_tier(1, Tier::Two), Tier::Two);
    assert_eq!(recovery_tier(1, Tier::One), Tier::One);
    assert_eq!(recovery_tier(9, Tier::One), Tier::Three);
}

#[test]
fn the_lease_read_in_the_transaction_decides_the_dispatch() {
    let h = authorize(
        &EffectState::Absent,
        &proposal(1),
        &LeaseVerdict::Live,
        json!({}),
    );
    let s = state_of(&h);
    let revoked = Recheck {
        lease: LeaseVerdict::Dead {
            reason: "revoked".into(),
        },
        ..live()
    };
    let out = dispatch_first(&s, "p", &revoked, None, &[], &holding("a", 5));
    assert!(
        matches!(&out[..], [Event::Refused(r)] if r.is_final && r.code == RefusalCode::Lease),
        "{out:?}"
    );
    let unreachable = Recheck {
        lease: LeaseVerdict::Error {
            message: "down".into(),
        },
        ..live()
    };
    let out = dispatch_first(&s, "p", &unreachable, None, &[], &holding("a", 5));
    assert!(
        matches!(&out[..], [Event::Refused(r)] if !r.is_final),
        "{out:?}"
    );
    let out = dispatch_first(
        &s,
        "p",
        &live(),
        Some("premises down"),
        &[],
        &holding("a", 5),
    );
    assert!(
        matches!(&out[..], [Event::Refused(r)] if !r.is_final && r.code == RefusalCode::PremiseError),
        "{out:?}"
    );
    // A dispatch planned on a proposal that is no longer the state writes nothing.
    let dispatched = dispatch_first(&s, "p", &live(), None, &[], &holding("a", 5));
    let mut h2 = h.clone();
    h2.extend(dispatched);
    assert!(dispatch_first(&state_of(&h2), "p", &live(), None, &[], &holding("b", 5)).is_empty());
}

#[test]
fn a_recoverer_acts_only_under_its_own_undispatched_claim() {
    let mut h = taken_by_b(2, 9);
    let facts = tier2_facts(10_000);
    let s = state_of(&h);
    let lookup = Some((&LookupAnswer::NotFound, 10_000));
    assert_eq!(
        recover(&s, 2, &facts, lookup, &[], &holding("c", 9)).1,
        None
    );
    assert_eq!(
        recover(&s, 1, &facts, lookup, &[], &holding("b", 9)).1,
        None
    );
    let (events, plan) = recover(&s, 2, &facts, lookup, &[], &holding("b", 9));
    assert!(matches!(plan, Some(RecoveryPlan::Resend(_))));
    h.extend(events);
    assert_eq!(
        recover(&state_of(&h), 2, &facts, lookup, &[], &holding("b", 9)).1,
        None,
        "one send per claim"
    );
}

#[test]
fn a_transient_failure_at_recovery_waits_instead_of_closing_the_effect() {
    let h = taken_by_b(2, 9);
    let facts = RecoveryFacts {
        tier: TIER2,
        effective_at_takeover: Effective::LookupOnly,
        recheck: Recheck {
            premise_error: Some("premise source unavailable: timeout".into()),
            ..live()
        },
        transient: true,
        has_lookup: true,
        now_ms: 10_000,
    };
    let (events, plan) = recover(
        &state_of(&h),
        2,
        &facts,
        Some((&LookupAnswer::NotFound, 9_000)),
        &[],
        &holding("b", 9),
    );
    assert!(events.is_empty());
    assert!(matches!(plan, Some(RecoveryPlan::Wait { .. })), "{plan:?}");
    let facts = RecoveryFacts {
        transient: false,
        ..facts
    };
    let (_, plan) = recover(
        &state_of(&h),
        2,
        &facts,
        Some((&LookupAnswer::NotFound, 9_000)),
        &[],
        &holding("b", 9),
    );
    assert!(matches!(plan, Some(RecoveryPlan::Refuse(_))), "{plan:?}");
}

#[test]
fn an_answer_after_the_claim_moved_is_recorded_as_late() {
    let mut h = taken_by_b(2, 9);
    let done = SendAnswer::Done(json!({"id": "re_1"}));
    let out = record_answer(&state_of(&h), 1, &done, Via::FirstSend, true, 5, None);
    assert!(
        matches!(&out[..], [Event::LateResult(l)] if l.token == 1),
        "{out:?}"
    );
    h.extend(out);
    let Resolution::Committed(c) = ({
        let mut h = h.clone();
        let s = state_of(&h);
        let facts = RecoveryFacts {
            tier: TIER2,
            effective_at_takeover: Effective::LookupOnly,
            recheck: live(),
            transient: false,
            has_lookup: true,
            now_ms: 6,
        };
        h.extend(recover(&s, 2, &facts, None, &[], &holding("b", 9)).0);
        match state_of(&h) {
            EffectState::Resolved { resolution, .. } => resolution,
            other => panic!("{other:?}"),
        }
    }) else {
        panic!()
    };
    assert_eq!(c.via, Via::LateAnswer);
}

/// Tier 1 in flight, taken over by "b", and resent under the key by "b".
fn resent_by_b() -> Vec<Event> {
    let mut h = taken_by_b(1, 9);
    let facts = RecoveryFacts {
        tier: TierFacts {
            bound: Tier::One,
            window_ms: Some(1_000_000),
            margin_ms: 10,
            has_lookup: true,
        },
        effective_at_takeover: Effective::DedupeInWindow,
        recheck: live(),
        transient: false,
        has_lookup: true,
        now_ms: 6,
    };
    let (events, plan) = recover(&state_of(&h), 2, &facts, None, &[], &holding("b", 9));
    assert_eq!(plan, Some(RecoveryPlan::Resend(Via::IdempotentResend)));
    h.extend(events);
    h
}

#[test]
fn a_tier_1_resend_answered_as_new_is_checked_and_two_under_one_key_close_as_applied_twice() {
    let s = state_of(&resent_by_b());
    let via = Via::IdempotentResend;
    let re = |id: &str| json!({ "id": id });
    let record = |answer: &SendAnswer, lookup: Option<&LookupAnswer>| {
        record_answer(&s, 2, answer, via, true, 7, lookup.map(|l| (l, 7)))
    };
    // A replay is the promise kept: committed as is, no lookup.
    let replayed = SendAnswer::Replayed(re("re_1"));
    assert!(!wants_lookup(&replayed, via, true));
    assert!(matches!(&record(&replayed, None)[..], [Event::Committed(c)] if c.via == via));
    // An answer computed anew is checked first.
    let fresh = SendAnswer::Done(re("re_2"));
    assert!(wants_lookup(&fresh, via, true));
    assert!(!wants_lookup(&fresh, Via::FirstSend, true));
    // Only this one under the key: the first send never reached the service.
    let once = LookupAnswer::Found(re("re_2"));
    assert!(matches!(
        &record(&fresh, Some(&once))[..],
        [Event::Committed(_)]
    ));
    // Another one under the key, or several: applied twice, naming each.
    for lookup in [
        LookupAnswer::Found(re("re_1")),
        LookupAnswer::Several(vec![re("re_1"), re("re_2")]),
    ] {
        let out = record(&fresh, Some(&lookup));
        let [Event::AppliedTwice(t)] = &out[..] else {
            panic!("{lookup:?}: {out:?}");
        };
        assert_eq!(t.found.len(), 2, "{t:?}");
        let mut h = resent_by_b();
        h.extend(out.clone());
        assert!(matches!(
            state_of(&h),
            EffectState::Resolved {
                resolution: Resolution::AppliedTwice(_),
                ..
            }
        ));
    }
    // Several found at recovery closes the effect the same way.
    let mut h = taken_by_b(2, 9);
    let several = LookupAnswer::Several(vec![re("re_1"), re("re_2")]);
    let (out, _) = recover(
        &state_of(&h),
        2,
        &tier2_facts(20),
        Some((&several, 20)),
        &[],
        &holding("b", 9),
    );
    assert!(matches!(&out[..], [Event::AppliedTwice(_)]), "{out:?}");
    h.extend(out);
    assert!(matches!(state_of(&h), EffectState::Resolved { .. }));
}

#[test]
fn a_late_success_and_a_resend_s_success_naming_two_effects_close_as_applied_twice() {
    let mut h = resent_by_b();
    // The first holder's send answers late: re_1.
    let late = SendAnswer::Done(json!({"id": "re_1"}));
    h.extend(record_answer(
        &state_of(&h),
        1,
        &late,
        Via::FirstSend,
        true,
        7,
        None,
    ));
    let s = state_of(&h);
    // The resend's success names the same refund: the promise held.
    let same = SendAnswer::Replayed(json!({"id": "re_1"}));
    let out = record_answer(&s, 2, &same, Via::IdempotentResend, true, 8, None);
    assert!(matches!(&out[..], [Event::Committed(_)]), "{out:?}");
    // It names another: both landed.
    let other = SendAnswer::Replayed(json!({"id": "re_2"}));
    let out = record_answer(&s, 2, &other, Via::IdempotentResend, true, 8, None);
    assert!(
        matches!(&out[..], [Event::AppliedTwice(t)] if t.found.len() == 2),
        "{out:?}"
    );
}

#[test]
fn only_two_different_ids_raise_applied_twice_never_two_shapes_of_one_effect() {
    let s = state_of(&resent_by_b());
    let via = Via::IdempotentResend;
    // The same refund as the send answered it and as the listing shows it, a status apart.
    let sent = SendAnswer::Done(json!({"id": "re_1", "status": "pending"}));
    let listed = LookupAnswer::Found(json!({"id": "re_1", "status": "succeeded", "metadata": {}}));
    let out = record_answer(&s, 2, &sent, via, true, 7, Some((&listed, 7)));
    assert!(matches!(&out[..], [Event::Committed(_)]), "{out:?}");
    // A target whose answers carry no id cannot tell effects apart: it is never accused.
    let bare = SendAnswer::Done(json!({"ok": true}));
    let other = LookupAnswer::Found(json!({"id": "re_7"}));
    let out = record_answer(&s, 2, &bare, via, true, 7, Some((&other, 7)));
    assert!(matches!(&out[..], [Event::Committed(_)]), "{out:?}");
}

#[test]
fn a_second_effect_seen_after_the_commit_turns_it_into_applied_twice() {
    // A's late success (re_1) lands while B resends; D commits on A's late answer; then B's own
    // answer (re_2), with a lookup that found both, arrives under a claim that has moved.
    let mut h = resent_by_b();
    h.extend(record_answer(
        &state_of(&h),
        1,
        &SendAnswer::Done(json!({"id": "re_1"})),
        Via::FirstSend,
        true,
        7,
        None,
    ));
    let committed = vec![Event::Committed(Committed {
        token: 2,
        via: Via::LateAnswer,
        result: json!({"id": "re_1"}),
    })];
    h.extend(committed);
    let both = LookupAnswer::Several(vec![json!({"id": "re_1"}), json!({"id": "re_2"})]);
    let out = record_answer(
        &state_of(&h),
        3,
        &SendAnswer::Done(json!({"id": "re_2"})),
        Via::IdempotentResend,
        true,
        8,
        Some((&both, 8)),
    );
    assert!(
        matches!(&out[..], [Event::LateResult(_), Event::AppliedTwice(t)] if t.found.len() == 2),
        "{out:?}"
    );
    h.extend(out);
    assert!(matches!(
        state_of(&h),
        EffectState::Resolved {
            resolution: Resolution::AppliedTwice(_),
            ..
        }
    ));
}

#[test]
fn two_superseded_sends_answering_two_effects_are_applied_twice_at_recovery() {
    let mut h = taken_by_b(2, 9);
    for (token, id) in [(1, "re_1"), (1, "re_2")] {
        let done = SendAnswer::Done(json!({ "id": id }));
        h.extend(record_answer(
            &state_of(&h),
            token,
            &done,
            Via::FirstSend,
            true,
            5,
            None,
        ));
    }
    let (out, _) = recover(
        &state_of(&h),
        2,
        &tier2_facts(6),
        None,
        &[],
        &holding("b", 9),
    );
    assert!(
        matches!(&out[..], [Event::AppliedTwice(t)] if t.found.len() == 2),
        "{out:?}"
    );
}

#[test]
fn a_clock_stepped_back_does_not_reopen_a_closed_tier_1_window() {
    let facts = TierFacts {
        bound: Tier::One,
        window_ms: Some(100),
        margin_ms: 10,
        has_lookup: true,
    };
    // First dispatch at 0; a record written at 95, past window − margin; the clock now reads 50.
    let mut h = in_flight(1);
    h.push(Event::LateResult(LateResult {
        token: 1,
        answer: json!({"unknown": "timed out"}),
    }));
    let s = fold(
        h.iter()
            .enumerate()
            .map(|(i, e)| (if i + 1 == h.len() { 95 } else { 0 }, e)),
    )
    .unwrap();
    let claim = claim_of(&s);
    assert_eq!(claim.seen_ms, 95);
    assert_eq!(
        facts.effective(&proposal(1), &claim, 50),
        Effective::LookupOnly
    );
}

#[test]
fn a_binding_cannot_stretch_the_dedupe_window_journaled_at_the_proposal() {
    let claims_a_day = TierFacts {
        bound: Tier::One,
        window_ms: Some(86_400_000),
        margin_ms: 10,
        has_lookup: true,
    };
    let claim = claim_of(&state_of(&in_flight(1)));
    let journaled = Proposed {
        window_ms: Some(100),
        ..proposal(1)
    };
    assert_eq!(
        claims_a_day.effective(&journaled, &claim, 95),
        Effective::LookupOnly
    );
    assert_eq!(
        claims_a_day.effective(&journaled, &claim, 50),
        Effective::DedupeInWindow
    );
    // A proposal journaled before windows were recorded trusts the binding, as before.
    assert_eq!(
        claims_a_day.effective(&proposal(1), &claim, 95),
        Effective::DedupeInWindow
    );
}

#[test]
fn a_fresh_key_is_proposed_authorized_and_dispatched_in_one_derivation_or_not_at_all() {
    let p = proposal(1);
    let hold = holding("a", 5);
    let one = propose_and_dispatch(
        &EffectState::Absent,
        &p,
        &live(),
        json!({}),
        None,
        &[],
        &hold,
    );
    // Exactly the records of the two steps written one after the other.
    let mut two = authorize(&EffectState::Absent, &p, &LeaseVerdict::Live, json!({}));
    two.extend(dispatch_first(
        &state_of(&two),
        "p",
        &live(),
        None,
        &[],
        &hold,
    ));
    assert_eq!(one, two);
    assert!(matches!(
        &one[..],
        [Event::Proposed(_), Event::Authorized(_), Event::Dispatched(d)] if d.token == 1
    ));
    // A revoked lease: proposed and refused, nothing dispatched.
    let revoked = Recheck {
        lease: LeaseVerdict::Dead {
            reason: "revoked".into(),
        },
        ..live()
    };
    let out = propose_and_dispatch(
        &EffectState::Absent,
        &p,
        &revoked,
        json!({}),
        None,
        &[],
        &hold,
    );
    assert!(
        matches!(&out[..], [Event::Proposed(_), Event::Refused(r)] if r.is_final && r.code == RefusalCode::Lease),
        "{out:?}"
    );
    // Premises unreachable: authorized, then a retry note; the proposal stays open.
    let out = propose_and_dispatch(
        &EffectState::Absent,
        &p,
        &live(),
        json!({}),
        Some("down"),
        &[],
        &hold,
    );
    assert!(
        matches!(&out[..], [Event::Proposed(_), Event::Authorized(_), Event::Refused(r)] if !r.is_final),
        "{out:?}"
    );
    assert!(matches!(state_of(&out), EffectState::Proposed { .. }));
    // A key another attempt proposed first: nothing, whatever this attempt read.
    for seen in [state_of(&one[..1]), state_of(&one[..2]), state_of(&one)] {
        assert!(propose_and_dispatch(&seen, &p, &live(), json!({}), None, &[], &hold).is_empty());
    }
}

fn confirmation(refund: &str) -> Confirmed {
    Confirmed {
        via: "webhook".into(),
        event: Some(format!("evt_{refund}")),
        refund: Some(refund.into()),
        status: Some("succeeded".into()),
        amount: Some(1),
        payment_intent: Some("pi_1".into()),
        charge: None,
        created: Some(1),
    }
}

/// A tier-3 recoverer's facts with `recheck`.
fn tier3_facts(recheck: Recheck) -> RecoveryFacts {
    RecoveryFacts {
        tier: TierFacts {
            bound: Tier::Three,
            window_ms: None,
            margin_ms: 0,
            has_lookup: false,
        },
        effective_at_takeover: Effective::Blind,
        recheck,
        transient: false,
        has_lookup: false,
        now_ms: 10,
    }
}

#[test]
fn a_confirmation_in_flight_commits_at_recovery_even_at_tier_3() {
    let mut h = in_flight(3);
    h.extend(confirm(&state_of(&h), &confirmation("re_1")));
    let h = taken_over(h, 9_000);
    let facts = tier3_facts(live());
    let (events, plan) = recover(&state_of(&h), 2, &facts, None, &[], &holding("b", 9_000));
    assert_eq!(
        plan.map(|p| matches!(p, RecoveryPlan::CommitFound(Via::ConfirmedByTarget, _))),
        Some(true),
        "{events:?}"
    );
    assert!(matches!(events.as_slice(), [Event::Committed(c)] if c.result["id"] == "re_1"));
}

#[test]
fn a_confirmation_of_another_effect_after_the_commit_closes_it_as_applied_twice() {
    let mut h = in_flight(2);
    h.extend(record_answer(
        &state_of(&h),
        1,
        &SendAnswer::Done(json!({"id": "re_1"})),
        Via::FirstSend,
        true,
        0,
        None,
    ));
    // The same effect confirmed: evidence only.
    assert_eq!(confirm(&state_of(&h), &confirmation("re_1")).len(), 1);
    let twice = confirm(&state_of(&h), &confirmation("re_2"));
    assert!(
        matches!(twice.as_slice(), [Event::Confirmed(_), Event::AppliedTwice(a)] if a.found.len() == 2)
    );
    h.extend(twice);
    assert!(matches!(
        state_of(&h),
        EffectState::Resolved {
            resolution: Resolution::AppliedTwice(_),
            ..
        }
    ));
}

#[test]
fn conflicting_submissions_leave_one_note_per_payload_and_at_most_a_bounded_number() {
    let mut h = in_flight(2);
    let first = conflict(&h, "q1", "p");
    assert_eq!(first.len(), 1);
    h.extend(first);
    assert!(conflict(&h, "q1", "p").is_empty(), "the same payload again");
    for i in 2..100 {
        let more = conflict(&h, &format!("q{i}"), "p");
        h.extend(more);
    }
    let notes = h
        .iter()
        .filter(|e| matches!(e, Event::Refused(r) if !r.is_final))
        .count();
    assert_eq!(notes, MAX_CONFLICT_NOTES);
}

#[test]
fn an_outage_leaves_a_bounded_number_of_retry_notes_and_every_attempt_its_answer() {
    let mut h: Vec<Event> = Vec::new();
    for attempt in 0..200 {
        let note = Event::Refused(retry_note(RefusalCode::PremiseError, "503", "p"));
        let (events, unwritten) = bounded_retry_notes(&h, vec![note]);
        assert_eq!(
            events.len() + usize::from(unwritten.is_some()),
            1,
            "attempt {attempt} is answered by its note, written or not"
        );
        h.extend(events);
    }
    assert_eq!(h.len(), MAX_RETRY_NOTES);
    // Conflict notes and decisions are never held back.
    let (events, unwritten) =
        bounded_retry_notes(&h, vec![Event::Refused(conflict_note("q", "p"))]);
    assert_eq!((events.len(), unwritten), (1, None));
}

#[test]
fn a_note_that_decides_nothing_does_not_invalidate_a_takeover() {
    let mut h = in_flight(2);
    let seen = claim_of(&state_of(&h));
    // A conflicting submission's note lands between the recoverer's read and its write, later
    // than every record before it.
    let mut timed: Vec<(i64, Event)> = h.iter().cloned().zip(0..).map(|(e, i)| (i, e)).collect();
    timed.push((4_000, Event::Refused(conflict_note("q", "p"))));
    let state = fold(timed.iter().map(|(at, e)| (*at, e))).unwrap();
    assert_ne!(claim_of(&state), seen, "the note moved seen_ms");
    let out = takeover(
        &state,
        &seen,
        TakeoverReason::HolderDead,
        100,
        50,
        &holding("b", 900),
    );
    assert_eq!(out.len(), 1, "the takeover was blocked by a note");
    h.extend(out);
}

#[test]
fn a_read_older_than_the_bound_dispatches_nothing_and_recovery_reads_again() {
    let s = state_of(&authorize(
        &EffectState::Absent,
        &proposal(2),
        &LeaseVerdict::Live,
        json!({}),
    ));
    let old = Recheck {
        read_at_ms: Some(1_000),
        ..live()
    };
    let at = |now_ms| Holding {
        now_ms,
        max_read_age_ms: 5_000,
        ..holding("a", 99_000)
    };
    assert_eq!(
        dispatch_first(&s, "p", &old, None, &[], &at(6_000)).len(),
        1
    );
    assert!(dispatch_first(&s, "p", &old, None, &[], &at(6_001)).is_empty());
    let unknown = Recheck {
        read_at_ms: None,
        ..live()
    };
    assert!(dispatch_first(&s, "p", &unknown, None, &[], &at(0)).is_empty());
    assert!(
        propose_and_dispatch(
            &EffectState::Absent,
            &proposal(2),
            &old,
            json!({}),
            None,
            &[],
            &at(60_000)
        )
        .is_empty()
    );
    let h = taken_by_b(2, 9);
    let facts = RecoveryFacts {
        recheck: old,
        ..tier2_facts(10_000)
    };
    let hold = Holding {
        now_ms: 10_000,
        max_read_age_ms: 5_000,
        ..holding("b", 99_000)
    };
    let (events, plan) = recover(
        &state_of(&h),
        2,
        &facts,
        Some((&LookupAnswer::NotFound, 10_000)),
        &[],
        &hold,
    );
    assert!(events.is_empty());
    assert!(
        matches!(plan, Some(RecoveryPlan::Reread { .. })),
        "{plan:?}"
    );
}

#[test]
fn a_withdrawn_dispatch_ends_its_window_at_once_and_only_its_holder_may_withdraw_it() {
    let mut h = in_flight(2);
    assert!(withdraw(&state_of(&h), 1, &holder("z"), "fenced").is_empty());
    let w = withdraw(&state_of(&h), 1, &holder("a"), "fenced");
    assert_eq!(w.len(), 1);
    let mut timed: Vec<(i64, Event)> = h.drain(..).map(|e| (0, e)).collect();
    timed.extend(w.into_iter().map(|e| (700, e)));
    let state = fold(timed.iter().map(|(at, e)| (*at, e))).unwrap();
    assert!(
        claim_of(&state).sends_until.is_empty(),
        "nothing of it can land"
    );
    assert_eq!(claim_of(&state).quiet_after(None), i64::MIN);
}

#[test]
fn an_effect_whose_every_dispatch_was_withdrawn_is_sent_or_refused_at_tier_3_never_ambiguous() {
    let mut h = in_flight(3);
    h.extend(withdraw(
        &state_of(&h),
        1,
        &holder("a"),
        "the claim ran out",
    ));
    let h = taken_over(h, 9_000);
    let facts = tier3_facts;
    let (_, plan) = recover(
        &state_of(&h),
        2,
        &facts(live()),
        None,
        &[],
        &holding("b", 9_000),
    );
    assert_eq!(plan, Some(RecoveryPlan::Resend(Via::FirstSend)));
    let revoked = Recheck {
        lease: LeaseVerdict::Dead {
            reason: "revoked".into(),
        },
        ..live()
    };
    let (events, _) = recover(
        &state_of(&h),
        2,
        &facts(revoked),
        None,
        &[],
        &holding("b", 9_000),
    );
    assert!(
        matches!(events.as_slice(), [Event::Refused(r)] if r.code == RefusalCode::LeaseAtRecovery),
        "{events:?}"
    );
}

#[test]
fn a_confirmation_before_the_send_stops_it_and_any_answer_after_it_commits_on_it() {
    let mut h = in_flight(3);
    h.extend(confirm(&state_of(&h), &confirmation("re_1")));
    assert!(
        !may_send(&state_of(&h), 1, &holder("a")),
        "sent past the target's word"
    );
    assert!(holds_claim(&state_of(&h), 1, &holder("a")));
    for answer in [
        SendAnswer::Definite {
            code: "charge_disputed".into(),
            message: "no".into(),
        },
        SendAnswer::Unknown("timed out".into()),
        SendAnswer::Conflict("other parameters".into()),
        SendAnswer::SavedError("HTTP 500".into()),
    ] {
        let out = record_answer(&state_of(&h), 1, &answer, Via::FirstSend, false, 0, None);
        assert!(
            matches!(out.as_slice(), [Event::Committed(c)] if c.via == Via::ConfirmedByTarget),
            "{answer:?}: {out:?}"
        );
    }
}
