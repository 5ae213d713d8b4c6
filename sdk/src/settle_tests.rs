use std::sync::Arc;

use serde_json::json;

use super::*;
use crate::ManualClock;
use crate::approval::Approver;
use crate::core::{
    Ambiguous, Claimed, Dispatched, Holder, LeaseVerdict, Premises, Proposed, Recheck, Status,
    TakeoverReason,
};
use crate::journal::SqliteJournal;

const KEY: &str = "refund:ord-7";

fn holder(a: &str) -> Holder {
    Holder {
        caller: None,
        host: "h".into(),
        pid: 1,
        attempt: a.into(),
    }
}

/// A tier-3 effect dispatched at 0 (deadline 5,000), taken over at 1,000 and left AMBIGUOUS:
/// its dead holder's send may land until 5,000.
fn ambiguous_journal(clock: &ManualClock) -> SqliteJournal {
    let j = SqliteJournal::in_memory(Arc::new(clock.clone())).unwrap();
    let key = EffectKey::fixed(KEY).unwrap();
    let live = Recheck {
        broken: Vec::new(),
        lease: LeaseVerdict::Live,
        premises_now: Premises::new(),
        changes: vec![],
        premise_error: None,
        read_at_ms: Some(0),
        budgets: Vec::new(),
    };
    let put = |events: Vec<Event>| {
        j.append_with(&key, &mut |_| events.clone()).unwrap();
    };
    put(vec![
        Event::Proposed(Proposed {
            given_hash: None,
            rules: Vec::new(),
            by: None,
            payload: json!({"amount": 500}),
            payload_hash: "p".into(),
            premises: Premises::new(),
            lease: "l".into(),
            target: "t".into(),
            tier: 3,
            window_ms: None,
            labels: Default::default(),
        }),
        Event::Dispatched(Dispatched {
            token: 1,
            holder: holder("a"),
            deadline_ms: 5_000,
            payload_hash: "p".into(),
            recheck: live,
            resend: false,
        }),
    ]);
    clock.advance(1_000);
    put(vec![
        Event::Claimed(Claimed {
            token: 2,
            holder: holder("b"),
            deadline_ms: 9_000,
            reason: TakeoverReason::DeadlinePassed,
            prior_until_ms: 5_000,
        }),
        Event::Ambiguous(Ambiguous {
            reason: "tier 3".into(),
            changes: vec![],
        }),
    ]);
    j
}

fn directory(olga: &ApproverKey, ivan: &ApproverKey) -> Approvers {
    Approvers {
        approvers: [olga, ivan]
            .into_iter()
            .map(|k| {
                (
                    k.approver().to_owned(),
                    Approver {
                        public_key: k.public_hex(),
                        name: String::new(),
                    },
                )
            })
            .collect(),
        groups: [(DEFAULT_GROUP.to_owned(), vec!["olga".to_owned()])]
            .into_iter()
            .collect(),
        chain: Vec::new(),
    }
}

#[test]
fn a_member_s_signed_statement_settles_once_no_send_can_land_and_only_once() {
    let clock = ManualClock::at(0);
    let j = ambiguous_journal(&clock);
    let olga = ApproverKey::from_seed("olga", [7; 32]);
    let ivan = ApproverKey::from_seed("ivan", [8; 32]);
    let dir = directory(&olga, &ivan);
    let settlers = Settlers {
        directory: &dir,
        group: DEFAULT_GROUP,
    };
    let found = Finding::Applied {
        reference: "re_1".into(),
    };
    // Looked at 3,000, while the dead holder's send could still land: refused, nothing written.
    clock.advance(2_000);
    let early = draft(&j, KEY, found.clone(), "olga", "dashboard", 3_000).unwrap();
    let early = SignedSettlement::sign(&olga, early).unwrap();
    let err = settle(&j, settlers, &early).unwrap_err();
    assert!(
        matches!(
            err,
            SettleError::Refused {
                refusal: SettleRefusal::SendMayLand { until_ms: 5_000 },
                ..
            }
        ),
        "{err}"
    );
    clock.advance(9_000);
    let err = settle(&j, settlers, &early).unwrap_err();
    assert!(
        matches!(
            err,
            SettleError::Refused {
                refusal: SettleRefusal::LookedTooEarly { .. },
                ..
            }
        ),
        "{err}"
    );
    // Someone outside the group, a forged signature, a statement edited after signing: refused.
    let by_ivan = draft(&j, KEY, found.clone(), "ivan", "", 11_000).unwrap();
    let by_ivan = SignedSettlement::sign(&ivan, by_ivan).unwrap();
    assert!(matches!(
        settle(&j, settlers, &by_ivan),
        Err(SettleError::NotPermitted { .. })
    ));
    let stmt = draft(&j, KEY, found, "olga", "dashboard", 11_000).unwrap();
    let mut forged = SignedSettlement::sign(
        &ivan,
        Settlement {
            person: "ivan".into(),
            ..stmt.clone()
        },
    )
    .unwrap();
    forged.statement.person = "olga".into();
    assert!(matches!(
        settle(&j, settlers, &forged),
        Err(SettleError::BadSignature { .. })
    ));
    let mut edited = SignedSettlement::sign(&olga, stmt.clone()).unwrap();
    edited.statement.finding = Finding::NotApplied;
    assert!(matches!(
        settle(&j, settlers, &edited),
        Err(SettleError::BadSignature { .. })
    ));
    assert_eq!(
        j.state(&EffectKey::fixed(KEY).unwrap()).unwrap().status(),
        Some(Status::Ambiguous)
    );
    // Olga's statement, looked after the window: settled, and a replay of it is refused.
    let good = SignedSettlement::sign(&olga, stmt).unwrap();
    let record = settle(&j, settlers, &good).unwrap();
    assert_eq!(record.event.kind(), "SETTLED");
    assert_eq!(
        j.state(&EffectKey::fixed(KEY).unwrap()).unwrap().status(),
        Some(Status::Committed)
    );
    let err = settle(&j, settlers, &good).unwrap_err();
    assert!(
        matches!(
            err,
            SettleError::Refused {
                refusal: SettleRefusal::AlreadySettled { .. },
                ..
            }
        ),
        "{err}"
    );
    assert!(
        settlers
            .check_record(match &record.event {
                Event::Settled(s) => s,
                _ => unreachable!(),
            })
            .is_ok()
    );
}

#[test]
fn a_statement_drafted_for_another_effect_does_not_settle_this_one() {
    let clock = ManualClock::at(0);
    let j = ambiguous_journal(&clock);
    let olga = ApproverKey::from_seed("olga", [7; 32]);
    let dir = directory(&olga, &ApproverKey::from_seed("ivan", [8; 32]));
    clock.advance(9_000);
    let mut stmt = draft(&j, KEY, Finding::NotApplied, "olga", "", 9_000).unwrap();
    stmt.ambiguous = "0".repeat(64);
    let signed = SignedSettlement::sign(&olga, stmt).unwrap();
    let settlers = Settlers {
        directory: &dir,
        group: DEFAULT_GROUP,
    };
    assert!(matches!(
        settle(&j, settlers, &signed),
        Err(SettleError::Refused {
            refusal: SettleRefusal::OtherAmbiguity { .. },
            ..
        })
    ));
    let not_there = draft(&j, "refund:ord-8", Finding::NotApplied, "olga", "", 9_000);
    assert!(matches!(
        not_there,
        Err(SettleError::Refused {
            refusal: SettleRefusal::NoSuchEffect,
            ..
        })
    ));
}

#[test]
fn the_target_s_word_recorded_after_the_ambiguity_outweighs_a_person_s_contrary_statement() {
    let clock = ManualClock::at(0);
    let j = ambiguous_journal(&clock);
    // Stripe's webhook for the refund arrives after recovery marked the effect ambiguous.
    j.append_with(&EffectKey::fixed(KEY).unwrap(), &mut |_| {
        vec![Event::Confirmed(crate::core::Confirmed {
            via: "webhook".into(),
            event: Some("evt_1".into()),
            refund: Some("re_1".into()),
            status: Some("succeeded".into()),
            amount: Some(500),
            payment_intent: Some("pi_1".into()),
            charge: None,
            created: Some(1),
        })]
    })
    .unwrap();
    let olga = ApproverKey::from_seed("olga", [7; 32]);
    let dir = directory(&olga, &ApproverKey::from_seed("ivan", [8; 32]));
    let settlers = Settlers {
        directory: &dir,
        group: DEFAULT_GROUP,
    };
    clock.advance(20_000);
    let sign = |finding| {
        let stmt = draft(&j, KEY, finding, "olga", "", 20_000).unwrap();
        SignedSettlement::sign(&olga, stmt).unwrap()
    };
    for wrong in [
        Finding::NotApplied,
        Finding::Applied {
            reference: "re_2".into(),
        },
    ] {
        let err = settle(&j, settlers, &sign(wrong)).unwrap_err();
        assert!(
            matches!(
                err,
                SettleError::Refused {
                    refusal: SettleRefusal::ContradictsEvidence { .. },
                    ..
                }
            ),
            "{err}"
        );
    }
    let right = Finding::Applied {
        reference: "re_1".into(),
    };
    settle(&j, settlers, &sign(right)).unwrap();
}
