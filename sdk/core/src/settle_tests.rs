use serde_json::json;

use super::*;
use crate::decide::tests::live;
use crate::record::{Ambiguous, Claimed, Dispatched, Holder, Premises, Proposed};
use crate::record::{LateResult, TakeoverReason};
use crate::state::{fold, landed_evidence};

fn holder(a: &str) -> Holder {
    Holder {
        caller: None,
        host: "h".into(),
        pid: 1,
        attempt: a.into(),
    }
}

/// A tier-3 effect dispatched at 0 (deadline 5,000), taken at 1,000 from a holder seen dead whose
/// send may land until `prior_until`, and left AMBIGUOUS at 1,000: each record with its time.
fn ambiguous(prior_until: i64) -> Vec<(i64, Event)> {
    vec![
        (
            0,
            Event::Proposed(Proposed {
                given_hash: None,
                rules: Vec::new(),
                by: None,
                payload: json!({"amount": 1}),
                payload_hash: "p".into(),
                premises: Premises::new(),
                lease: "l".into(),
                target: "t".into(),
                tier: 3,
                window_ms: None,
                labels: Default::default(),
            }),
        ),
        (
            0,
            Event::Dispatched(Dispatched {
                token: 1,
                holder: holder("a"),
                deadline_ms: 5_000,
                payload_hash: "p".into(),
                recheck: live(),
                resend: false,
            }),
        ),
        (
            1_000,
            Event::Claimed(Claimed {
                token: 2,
                holder: holder("b"),
                deadline_ms: 9_000,
                reason: TakeoverReason::HolderDead,
                prior_until_ms: prior_until,
            }),
        ),
        (
            1_000,
            Event::Ambiguous(Ambiguous {
                reason: "tier 3".into(),
                changes: Vec::new(),
            }),
        ),
    ]
}

fn window_of(h: &[(i64, Event)]) -> Result<Window, SettleRefusal> {
    window(h.iter().map(|(t, e)| (*t, e)))
}

fn statement(finding: Finding, looked_ms: i64) -> Settlement {
    Settlement {
        effect: "k".into(),
        ambiguous: "hash-of-ambiguous".into(),
        finding,
        person: "olga".into(),
        note: "searched the dashboard".into(),
        looked_ms,
    }
}

fn applied() -> Finding {
    Finding::Applied {
        reference: "re_9".into(),
    }
}

/// A look this long after the window closes counts, whatever the signer's clock says.
const AFTER: i64 = 4_000 + MAX_SKEW_MS + 1;

#[test]
fn settling_waits_until_no_send_can_land_and_for_a_look_taken_clearly_after_that() {
    let h = ambiguous(4_000);
    let w = window_of(&h).unwrap();
    assert_eq!((w.index, w.token, w.quiet_after_ms), (3, 2, 4_000));
    let check_at = |looked, now| {
        check(
            "k",
            &w,
            "hash-of-ambiguous",
            &statement(applied(), looked),
            &[],
            (now, MAX_SKEW_MS),
        )
    };
    assert_eq!(
        check_at(3_000, 3_500),
        Err(SettleRefusal::SendMayLand { until_ms: 4_000 })
    );
    // Looked after the window by the signer's clock, but not by more than the clocks may
    // disagree: a fast clock could be hiding a look taken before it closed.
    assert_eq!(
        check_at(4_100, AFTER + 500),
        Err(SettleRefusal::LookedTooEarly {
            looked_ms: 4_100,
            until_ms: 4_000,
            margin_ms: MAX_SKEW_MS
        })
    );
    assert_eq!(check_at(AFTER, AFTER + 500), Ok(()));
    // Stamped too far ahead of the journal's clock.
    assert!(matches!(
        check_at(AFTER + MAX_SKEW_MS + 1_000, AFTER),
        Err(SettleRefusal::LookedInFuture { .. })
    ));
}

#[test]
fn a_statement_settles_only_the_ambiguity_it_names_of_the_effect_it_names() {
    let w = window_of(&ambiguous(4_000)).unwrap();
    let s = statement(Finding::NotApplied, AFTER);
    let check_now = |key, hash, s: &Settlement| check(key, &w, hash, s, &[], (AFTER, MAX_SKEW_MS));
    assert_eq!(check_now("k", "hash-of-ambiguous", &s), Ok(()));
    assert!(matches!(
        check_now("k2", "hash-of-ambiguous", &s),
        Err(SettleRefusal::OtherEffect { .. })
    ));
    assert!(matches!(
        check_now("k", "another-hash", &s),
        Err(SettleRefusal::OtherAmbiguity { .. })
    ));
    for reference in [" ", "re_1 ", "re\t1", ""] {
        let odd = statement(
            Finding::Applied {
                reference: reference.into(),
            },
            AFTER,
        );
        assert_eq!(
            check_now("k", "hash-of-ambiguous", &odd),
            Err(SettleRefusal::NoReference),
            "{reference:?}"
        );
    }
}

#[test]
fn a_statement_that_contradicts_the_target_s_recorded_word_is_refused() {
    let w = window_of(&ambiguous(4_000)).unwrap();
    let landed = [json!({"id": "re_9", "status": "succeeded"})];
    let at = |finding| {
        check(
            "k",
            &w,
            "hash-of-ambiguous",
            &statement(finding, AFTER),
            &landed,
            (AFTER, MAX_SKEW_MS),
        )
    };
    assert!(matches!(
        at(Finding::NotApplied),
        Err(SettleRefusal::ContradictsEvidence { .. })
    ));
    assert!(matches!(
        at(Finding::Applied {
            reference: "re_8".into()
        }),
        Err(SettleRefusal::ContradictsEvidence { .. })
    ));
    assert_eq!(at(applied()), Ok(()));
}

#[test]
fn an_effect_in_flight_or_already_decided_is_not_settled() {
    let mut h = ambiguous(4_000);
    h.pop();
    assert_eq!(window_of(&h), Err(SettleRefusal::InFlight));
    assert_eq!(window_of(&[]), Err(SettleRefusal::NoSuchEffect));
    let mut settled_once = ambiguous(4_000);
    let w = window_of(&settled_once).unwrap();
    settled_once.push((
        5_000,
        settled(&w, statement(applied(), 5_000), "ed25519", "00"),
    ));
    assert_eq!(
        window_of(&settled_once),
        Err(SettleRefusal::AlreadySettled { by: "olga".into() })
    );
    assert_eq!(
        window_of(&ambiguous(4_000)[..1]),
        Err(SettleRefusal::NeverSent)
    );
}

#[test]
fn applied_ends_committed_by_the_person_and_not_applied_ends_failed() {
    for (finding, status) in [
        (applied(), Status::Committed),
        (Finding::NotApplied, Status::Failed),
    ] {
        let mut h = ambiguous(4_000);
        let w = window_of(&h).unwrap();
        h.push((
            5_000,
            settled(&w, statement(finding.clone(), 5_000), "ed25519", "00"),
        ));
        let state = fold(h.iter().map(|(t, e)| (*t, e))).unwrap();
        assert_eq!(state.status(), Some(status));
        let evidence = landed_evidence(h.iter().map(|(_, e)| e));
        match finding {
            Finding::Applied { .. } => {
                let EffectState::Resolved {
                    resolution: Resolution::Committed(c),
                    ..
                } = state
                else {
                    panic!("{state:?}")
                };
                assert_eq!((c.via, c.token), (Via::SettledByPerson, 2));
                assert_eq!(c.result["id"], "re_9");
                assert_eq!(c.result[SETTLED_BY], "olga");
                assert_eq!(evidence.len(), 1);
            }
            Finding::NotApplied => assert!(evidence.is_empty()),
        }
    }
}

#[test]
fn a_settlement_is_grammatical_only_after_an_ambiguity() {
    let mut h = ambiguous(4_000);
    let w = window_of(&h).unwrap();
    h.pop();
    h.push((
        5_000,
        settled(&w, statement(applied(), 5_000), "ed25519", "00"),
    ));
    assert!(fold(h.iter().map(|(t, e)| (*t, e))).is_err());
}

#[test]
fn a_definite_late_answer_closes_its_send_s_window_and_an_unknown_one_does_not() {
    // The dead holder's request was answered before the ambiguity: a definite answer proves it
    // was processed (nothing of it can land later), an unknown one proves nothing.
    for (answer, quiet_after) in [
        (json!({"failed": {"code": "card_declined"}}), 1_000),
        (json!({"unknown": "connection reset"}), 4_000),
    ] {
        let mut h = ambiguous(4_000);
        h.insert(
            3,
            (1_000, Event::LateResult(LateResult { token: 1, answer })),
        );
        assert_eq!(window_of(&h).unwrap().quiet_after_ms, quiet_after);
    }
}
