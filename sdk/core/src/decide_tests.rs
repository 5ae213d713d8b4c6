use serde_json::json;

use super::*;
use crate::record::{Holder, Proposed, TakeoverReason};
use crate::state::Claim;

/// A re-check on which everything still holds.
pub(crate) fn live() -> Recheck {
    Recheck {
        broken: Vec::new(),
        lease: LeaseVerdict::Live,
        premises_now: Premises::new(),
        changes: vec![],
        premise_error: None,
        read_at_ms: Some(0),
        budgets: Vec::new(),
    }
}

fn stale() -> Recheck {
    Recheck {
        changes: vec![Change {
            field: "refunded_by_others".into(),
            was: json!(0),
            now: json!(2000),
        }],
        ..live()
    }
}

fn revoked() -> Recheck {
    Recheck {
        lease: LeaseVerdict::Dead {
            reason: "revoked".into(),
        },
        ..live()
    }
}

fn proposed(hash: &str) -> Proposed {
    Proposed {
        given_hash: None,
        rules: Vec::new(),
        by: None,
        payload: json!({}),
        payload_hash: hash.into(),
        premises: Premises::new(),
        lease: "l".into(),
        target: "t".into(),
        tier: 1,
        window_ms: None,
        labels: Default::default(),
    }
}

fn claim(deadline_ms: i64) -> Claim {
    Claim {
        token: 1,
        holder: Holder {
            caller: None,
            host: "h".into(),
            pid: 1,
            attempt: "a".into(),
        },
        deadline_ms,
        first_dispatch_ms: 0,
        dispatched: true,
        sends_until: [(1, deadline_ms)].into_iter().collect(),
        late_done: Vec::new(),
        seen_ms: 0,
    }
}

#[test]
fn a_key_bound_to_one_payload_refuses_every_other_in_every_state() {
    let states = [
        EffectState::Proposed {
            first: proposed("a"),
        },
        EffectState::InFlight {
            first: proposed("a"),
            claim: claim(0),
        },
        EffectState::Resolved {
            first: proposed("a"),
            resolution: Resolution::Ambiguous(Ambiguous {
                reason: String::new(),
                changes: vec![],
            }),
        },
    ];
    for s in &states {
        assert_eq!(
            plan_submit(s, "b"),
            SubmitPlan::Conflict {
                recorded: "a".into()
            }
        );
    }
    assert_eq!(plan_submit(&EffectState::Absent, "b"), SubmitPlan::Fresh);
    assert_eq!(plan_submit(&states[0], "a"), SubmitPlan::Continue);
    assert!(matches!(
        plan_submit(&states[1], "a"),
        SubmitPlan::Recover(_)
    ));
    assert!(matches!(
        plan_submit(&states[2], "a"),
        SubmitPlan::Replay(_)
    ));
}

#[test]
fn diff_names_each_moved_premise_and_a_vanished_one_as_null() {
    let decided: Premises = [("a".to_owned(), json!(1)), ("b".to_owned(), json!(true))]
        .into_iter()
        .collect();
    let now: Premises = [("a".to_owned(), json!(2))].into_iter().collect();
    let d = diff(&decided, &now);
    assert_eq!(d.len(), 2);
    assert_eq!(
        d[0],
        Change {
            field: "a".into(),
            was: json!(1),
            now: json!(2)
        }
    );
    assert_eq!(d[1].now, json!(null));
    assert!(diff(&decided, &decided).is_empty());
}

#[test]
fn lease_is_checked_before_premises_and_errors_fail_closed() {
    let both = Recheck {
        lease: LeaseVerdict::Dead {
            reason: "revoked".into(),
        },
        ..stale()
    };
    assert_eq!(check_fresh(&both).map(|r| r.code), Some(RefusalCode::Lease));
    let err = Recheck {
        lease: LeaseVerdict::Error {
            message: "db down".into(),
        },
        ..live()
    };
    assert_eq!(
        check_fresh(&err).map(|r| r.code),
        Some(RefusalCode::LeaseError)
    );
    let perr = Recheck {
        premise_error: Some("boom".into()),
        ..live()
    };
    assert_eq!(
        check_fresh(&perr).map(|r| r.code),
        Some(RefusalCode::PremiseError)
    );
    assert_eq!(
        check_fresh(&stale()).map(|r| r.code),
        Some(RefusalCode::StalePremise)
    );
    assert_eq!(check_fresh(&live()), None);
}

#[test]
fn takeover_needs_evidence_the_holder_cannot_be_sending() {
    let c = claim(1_000);
    assert_eq!(
        plan_takeover(&c, 0, true, Effective::LookupOnly),
        TakeoverPlan::Take(TakeoverReason::HolderDead)
    );
    assert_eq!(
        plan_takeover(&c, 999, false, Effective::LookupOnly),
        TakeoverPlan::Wait { until_ms: 1_000 }
    );
    assert_eq!(
        plan_takeover(&c, 1_000, false, Effective::Blind),
        TakeoverPlan::Take(TakeoverReason::DeadlinePassed)
    );
    assert_eq!(
        plan_takeover(&c, 0, false, Effective::DedupeInWindow),
        TakeoverPlan::Take(TakeoverReason::Tier1InWindow)
    );
}

fn input(effective: Effective, recheck: Recheck, has_lookup: bool) -> RecoveryInput {
    RecoveryInput {
        effective,
        recheck,
        has_lookup,
        now_ms: 100,
        quiet_after_ms: 50,
        late_done: Vec::new(),
        transient: false,
        nothing_sent: false,
    }
}

#[test]
fn recovery_table_matches_the_contract_s_recovery_table() {
    let found = LookupAnswer::Found(json!({"id": "re_1"}));
    let none = LookupAnswer::NotFound;
    let unknown = LookupAnswer::Unknown("503".into());
    let commit = RecoveryPlan::CommitFound(Via::FoundByLookup, json!({"id": "re_1"}));
    // tier 1 in window, checks hold: resend under the same key, no lookup needed
    assert_eq!(
        plan_recovery(&input(Effective::DedupeInWindow, live(), true), None),
        RecoveryPlan::Resend(Via::IdempotentResend)
    );
    // tier 1 in window / 2, checks fail, lookup finds it: committed
    for eff in [Effective::DedupeInWindow, Effective::LookupOnly] {
        assert_eq!(
            plan_recovery(&input(eff, stale(), true), None),
            RecoveryPlan::Lookup
        );
        assert_eq!(
            plan_recovery(&input(eff, stale(), true), Some(&found)),
            commit
        );
        let RecoveryPlan::Refuse(r) = plan_recovery(&input(eff, stale(), true), Some(&none)) else {
            panic!()
        };
        assert_eq!(r.code, RefusalCode::StalePremiseAtRecovery);
        let RecoveryPlan::Refuse(r) = plan_recovery(&input(eff, revoked(), true), Some(&none))
        else {
            panic!()
        };
        assert_eq!(r.code, RefusalCode::LeaseAtRecovery);
        assert!(matches!(
            plan_recovery(&input(eff, stale(), true), Some(&unknown)),
            RecoveryPlan::Wait { .. }
        ));
    }
    // checks fail, no lookup: ambiguous
    assert!(matches!(
        plan_recovery(&input(Effective::DedupeInWindow, stale(), false), None),
        RecoveryPlan::Ambiguous(_)
    ));
    // tier 2, checks hold, nothing found: re-apply
    assert_eq!(
        plan_recovery(&input(Effective::LookupOnly, live(), true), Some(&none)),
        RecoveryPlan::Resend(Via::ReappliedAfterLookup)
    );
    assert_eq!(
        plan_recovery(&input(Effective::LookupOnly, live(), true), Some(&found)),
        commit
    );
    // tier 3: always ambiguous, and it says why
    let RecoveryPlan::Ambiguous(a) = plan_recovery(&input(Effective::Blind, stale(), true), None)
    else {
        panic!()
    };
    assert!(a.reason.contains("moved"));
    assert_eq!(a.changes.len(), 1);
}

#[test]
fn not_found_proves_nothing_while_an_earlier_send_may_still_land() {
    for (eff, check) in [
        (Effective::LookupOnly, live()),
        (Effective::DedupeInWindow, stale()),
        (Effective::LookupOnly, revoked()),
    ] {
        let early = RecoveryInput {
            now_ms: 10,
            quiet_after_ms: 50,
            ..input(eff, check, true)
        };
        assert_eq!(
            plan_recovery(&early, Some(&LookupAnswer::NotFound)),
            RecoveryPlan::Wait { reason: "not found yet, but an earlier send may still land; looking again once it cannot".into(), until_ms: Some(50) }
        );
    }
}

#[test]
fn a_superseded_sends_late_success_settles_recovery_at_every_tier() {
    for eff in [
        Effective::DedupeInWindow,
        Effective::LookupOnly,
        Effective::Blind,
    ] {
        let late = RecoveryInput {
            late_done: vec![json!({"id": "re_9"})],
            ..input(eff, stale(), false)
        };
        assert_eq!(
            plan_recovery(&late, None),
            RecoveryPlan::CommitFound(Via::LateAnswer, json!({"id": "re_9"}))
        );
    }
}

#[test]
fn a_definite_failure_is_looked_up_first_because_failed_can_still_have_landed() {
    let four = SendAnswer::Definite {
        code: "charge_disputed".into(),
        message: "no".into(),
    };
    assert_eq!(
        after_send(&four, Via::FirstSend, true, true, None),
        AfterSend::Lookup
    );
    assert_eq!(
        after_send(
            &four,
            Via::FirstSend,
            true,
            true,
            Some(&LookupAnswer::Found(json!(1)))
        ),
        AfterSend::Commit(Via::FailedButLanded, json!(1))
    );
    assert!(matches!(
        after_send(
            &four,
            Via::FirstSend,
            true,
            true,
            Some(&LookupAnswer::NotFound)
        ),
        AfterSend::Fail { .. }
    ));
    assert!(matches!(
        after_send(&four, Via::FirstSend, false, true, None),
        AfterSend::Fail { .. }
    ));
    assert!(matches!(
        after_send(
            &four,
            Via::FirstSend,
            true,
            true,
            Some(&LookupAnswer::Unknown("x".into()))
        ),
        AfterSend::StayInFlight(_)
    ));
    // An earlier claim's send may still land: a refusal of this one proves nothing yet.
    assert!(matches!(
        after_send(
            &four,
            Via::FirstSend,
            true,
            false,
            Some(&LookupAnswer::NotFound)
        ),
        AfterSend::StayInFlight(_)
    ));
}

#[test]
fn an_unknown_answer_is_never_a_failure() {
    let unk = SendAnswer::Unknown("502".into());
    assert_eq!(
        after_send(&unk, Via::FirstSend, true, true, None),
        AfterSend::Lookup
    );
    assert!(matches!(
        after_send(
            &unk,
            Via::FirstSend,
            true,
            true,
            Some(&LookupAnswer::NotFound)
        ),
        AfterSend::StayInFlight(_)
    ));
    assert!(matches!(
        after_send(&unk, Via::FirstSend, false, true, None),
        AfterSend::StayInFlight(_)
    ));
    assert_eq!(
        after_send(
            &unk,
            Via::FirstSend,
            true,
            true,
            Some(&LookupAnswer::Found(json!(2)))
        ),
        AfterSend::Commit(Via::FoundByLookup, json!(2))
    );
    // A resend's success is trusted as is when the service says it replayed it, and checked
    // by a lookup when it was computed anew.
    assert_eq!(
        after_send(
            &SendAnswer::Replayed(json!(3)),
            Via::IdempotentResend,
            true,
            true,
            None
        ),
        AfterSend::Commit(Via::IdempotentResend, json!(3))
    );
    assert_eq!(
        after_send(
            &SendAnswer::Done(json!(3)),
            Via::IdempotentResend,
            true,
            true,
            None
        ),
        AfterSend::Lookup
    );
    let conflict = SendAnswer::Conflict("x".into());
    assert_eq!(
        after_send(&conflict, Via::FirstSend, true, true, None),
        AfterSend::Lookup
    );
    assert!(matches!(
        after_send(
            &conflict,
            Via::FirstSend,
            true,
            true,
            Some(&LookupAnswer::NotFound)
        ),
        AfterSend::Refuse(_)
    ));
    assert!(matches!(
        after_send(
            &conflict,
            Via::FirstSend,
            true,
            false,
            Some(&LookupAnswer::NotFound)
        ),
        AfterSend::StayInFlight(_)
    ));
    assert!(matches!(
        after_send(&conflict, Via::FirstSend, false, true, None),
        AfterSend::Refuse(_)
    ));
}
