//! A person's signed approval as the lease: refused when forged, replayed onto another request,
//! expired, given by a group the request escalated away from, or given for another amount or on
//! other facts — at the first send and again at recovery after a crash, judged by the payments
//! service's own records. Each runs on an SQLite journal and on a PostgreSQL one.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)] // in tests, a panic is the report

use std::sync::Arc;

use interlock::approval::{
    ApproverKey, Approvers, RouteKind, RouteStep, Scoreboard, SignedApproval, Statement,
};
use interlock::core::RefusalCode;
use interlock::faults::FaultPoint;
use interlock::lease::LeaseError;
use interlock::{Effect, EffectKey, Gate, GateError, Grant, JournalStore, ManualClock, Outcome};
use interlock::{PremiseReader, Tier};
use interlock_testkit::faults::{Action, ScriptedFaults};
use interlock_testkit::sim::{SimPayments, SimRefundPremises, SimTarget};
use interlock_tests::stores::{Kind, Store};
use interlock_tests::world::{AMOUNT, PAYMENT, T0, World};

const ANA: [u8; 32] = [1; 32];
const BEN: [u8; 32] = [2; 32];
const MIA: [u8; 32] = [3; 32];
const MALLORY: [u8; 32] = [9; 32];
const HOUR: i64 = 3_600_000;

/// support (ana, ben) holds a request for 4 h, then managers (mia).
fn directory(ana_seed: [u8; 32]) -> Approvers {
    Approvers::from_json("test", &directory_json(Some(ana_seed)).to_string()).unwrap()
}

/// [`directory`] as its file holds it; without ana when `ana_seed` is `None`.
fn directory_json(ana_seed: Option<[u8; 32]>) -> serde_json::Value {
    let public = |who: &str, seed| ApproverKey::from_seed(who, seed).public_hex();
    let mut json = serde_json::json!({
        "approvers": {
            "ben": {"public_key": public("ben", BEN)},
            "mia": {"public_key": public("mia", MIA)},
        },
        "groups": {"support": ["ben"], "managers": ["mia"]},
        "chain": [
            {"group": "support", "sla_ms": 4 * HOUR},
            {"group": "managers", "sla_ms": 8 * HOUR},
        ],
    });
    if let Some(seed) = ana_seed {
        json["approvers"]["ana"] =
            serde_json::json!({"public_key": public("ana", seed), "name": "Ana"});
        json["groups"]["support"] = serde_json::json!(["ana", "ben"]);
    }
    json
}

/// Put `json` in place at `path` as a deploy does: written beside, renamed over.
fn put(path: &std::path::Path, json: &serde_json::Value) {
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, json.to_string()).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// One journal, one payments service, one clock, one directory.
struct Desk {
    store: Store,
    clock: ManualClock,
    sim: Arc<SimPayments>,
    journal: Arc<dyn JournalStore>,
}

impl Desk {
    fn new(kind: Kind) -> Self {
        let world = World::new(Tier::Two);
        let store = Store::open(kind, "approvals", Arc::new(world.clock.clone())).unwrap();
        let journal = store.store();
        Self {
            store,
            clock: world.clock,
            sim: world.sim,
            journal,
        }
    }

    fn gate(&self, attempt: &str, dir: Approvers, faults: Option<Arc<ScriptedFaults>>) -> Gate {
        let gate = Gate::new(
            self.journal.clone(),
            self.journal.clone(),
            Arc::new(self.clock.clone()),
            self.store.config(),
        )
        .unwrap()
        .with_attempt(attempt)
        .with_approvers(Arc::new(dir))
        .unwrap();
        match faults {
            Some(f) => gate.with_faults(f),
            None => gate,
        }
    }

    fn submit(&self, dir: Approvers, effect: &Effect) -> Outcome {
        self.gate("send", dir, None)
            .bind(
                Arc::new(SimTarget(self.sim.clone())),
                Arc::new(SimRefundPremises(self.sim.clone())),
            )
            .unwrap()
            .submit(effect)
            .unwrap()
    }

    /// The first attempt dies after journaling its dispatch; once its send can no longer land,
    /// `spoil` runs and a recoverer with `dir` resolves the effect.
    fn recover_after(&self, effect: &Effect, dir: Approvers, spoil: impl FnOnce()) -> Outcome {
        let faults = ScriptedFaults::new();
        faults.arm(FaultPoint::AfterDispatch, Action::Crash);
        let dying = self
            .gate("first", directory(ANA), Some(faults))
            .bind(
                Arc::new(SimTarget(self.sim.clone())),
                Arc::new(SimRefundPremises(self.sim.clone())),
            )
            .unwrap();
        let err = dying.submit(effect).unwrap_err();
        assert!(matches!(err, GateError::Crashed(_)), "{err}");
        self.clock.advance(36_000);
        spoil();
        self.gate("recover", dir, None)
            .bind(
                Arc::new(SimTarget(self.sim.clone())),
                Arc::new(SimRefundPremises(self.sim.clone())),
            )
            .unwrap()
            .recover(&effect.key)
            .unwrap()
    }

    /// Route `request` to support, level 0.
    fn route(&self, request: &EffectKey) {
        self.journal
            .route(
                request.as_str(),
                &RouteStep {
                    kind: RouteKind::Routed,
                    level: 0,
                    group: "support".into(),
                    reason: "needs_judgment: over_limit".into(),
                    repair_of: None,
                    detail: serde_json::Value::Null,
                },
            )
            .unwrap();
    }

    fn escalate(&self, request: &EffectKey) {
        self.journal.route(request.as_str(), &escalation()).unwrap();
    }

    /// The refund of `amount` under `request`, decided on the premises read now.
    fn effect(&self, request: &EffectKey, amount: i64) -> Effect {
        let e = Effect::new(request.clone(), &World::payload(amount), "pending").unwrap();
        let premises = SimRefundPremises(self.sim.clone())
            .read(request, &e.payload)
            .unwrap();
        e.premises(premises)
    }

    /// `who` (signing with `seed`) approves `effect` for `group` at `level`, until `expires_ms`.
    fn sign(
        &self,
        who: &str,
        seed: [u8; 32],
        effect: &Effect,
        group: &str,
        level: u32,
        expires_ms: i64,
    ) -> SignedApproval {
        ApproverKey::from_seed(who, seed)
            .sign(Statement {
                request: effect.key.as_str().to_owned(),
                group: group.into(),
                level,
                approver: who.into(),
                payload: effect.payload.clone(),
                premises: effect.decided.clone(),
                issued_ms: T0,
                expires_ms,
                repair_of: None,
            })
            .unwrap()
    }

    /// Route `request` to support, have ana approve its refund of [`AMOUNT`] until `expires_ms`,
    /// and return the effect running under her approval.
    fn approved_by_ana(&self, request: &EffectKey, expires_ms: i64) -> Effect {
        self.route(request);
        let e = self.effect(request, AMOUNT);
        self.under(self.sign("ana", ANA, &e, "support", 0, expires_ms), e)
    }

    /// Grant `approval` as a lease and return `effect` running under it.
    fn under(&self, approval: SignedApproval, mut effect: Effect) -> Effect {
        let grant = Grant::approved(approval, interlock::Clock::now_ms(&self.clock));
        self.journal.grant_lease(&grant).unwrap();
        effect.lease = grant.id;
        effect
    }

    fn refunded(&self) -> i64 {
        self.sim.refunded(PAYMENT)
    }
}

/// Support's SLA ran out: managers hold the request.
fn escalation() -> RouteStep {
    RouteStep {
        kind: RouteKind::Escalated,
        level: 1,
        group: "managers".into(),
        reason: "sla_breach".into(),
        repair_of: None,
        detail: serde_json::Value::Null,
    }
}

fn request(n: u32) -> EffectKey {
    EffectKey::derive(&[format!("case-{n}"), "refund".into()])
}

/// `out` is a refusal with `code`, for a reason that says `why`.
fn refused_as(out: &Outcome, code: RefusalCode, why: &str) {
    match out {
        Outcome::Refused(r) if r.code == code => {
            assert!(
                r.reason.contains(why),
                "refused for {:?}, not {why:?}",
                r.reason
            );
        }
        other => panic!(
            "expected REFUSED:{code:?} ({why}), got {}: {other:?}",
            other.label()
        ),
    }
}

fn refused_at_send(out: &Outcome, why: &str) {
    refused_as(out, RefusalCode::Lease, why);
}

fn refused_at_recovery(out: &Outcome, why: &str) {
    refused_as(out, RefusalCode::LeaseAtRecovery, why);
}

fn a_genuine_approval_by_the_group_holding_the_request_refunds_once(kind: Kind) {
    let d = Desk::new(kind);
    let key = request(1);
    let effect = d.approved_by_ana(&key, T0 + HOUR);
    let out = d.submit(directory(ANA), &effect);
    assert_eq!(out.label(), "COMMITTED/first_send", "{out:?}");
    assert_eq!(d.refunded(), AMOUNT);
    // And after a crash between the dispatch and the send, recovery sends it once.
    let d = Desk::new(kind);
    let effect = d.approved_by_ana(&key, T0 + HOUR);
    let out = d.recover_after(&effect, directory(ANA), || {});
    assert!(matches!(out, Outcome::Committed { .. }), "{out:?}");
    assert_eq!(d.refunded(), AMOUNT);
}

fn a_forged_approval_is_refused_at_send_and_at_recovery(kind: Kind) {
    // Signed in ana's name with a key that is not hers.
    let d = Desk::new(kind);
    let key = request(1);
    d.route(&key);
    let e = d.effect(&key, AMOUNT);
    let effect = d.under(d.sign("ana", MALLORY, &e, "support", 0, T0 + HOUR), e);
    refused_at_send(&d.submit(directory(ANA), &effect), "forged");
    // A genuine approval whose amount was raised after signing.
    let e = d.effect(&request(2), 5_000);
    d.route(&e.key);
    let mut approval = d.sign(
        "ana",
        ANA,
        &d.effect(&request(2), AMOUNT),
        "support",
        0,
        T0 + HOUR,
    );
    approval.statement.payload = e.payload.clone();
    let effect = d.under(approval, e);
    refused_at_send(&d.submit(directory(ANA), &effect), "forged");
    assert_eq!(d.refunded(), 0);
    // At recovery: ana's key was replaced (lost or stolen) while the effect was in flight.
    let d = Desk::new(kind);
    let effect = d.approved_by_ana(&key, T0 + HOUR);
    let out = d.recover_after(&effect, directory([7; 32]), || {});
    refused_at_recovery(&out, "forged");
    assert_eq!(d.refunded(), 0);
}

fn an_approval_replayed_onto_another_request_is_refused_at_send_and_at_recovery(kind: Kind) {
    let d = Desk::new(kind);
    let (a, b) = (request(1), request(2));
    d.route(&a);
    d.route(&b);
    let ea = d.effect(&a, AMOUNT);
    let approved_a = d.under(d.sign("ana", ANA, &ea, "support", 0, T0 + HOUR), ea);
    // Request B, same refund, run under A's approval.
    let mut eb = d.effect(&b, AMOUNT);
    eb.lease = approved_a.lease.clone();
    refused_at_send(&d.submit(directory(ANA), &eb), "not reusable");
    assert_eq!(d.refunded(), 0);
    // At recovery: B's approval row was swapped for A's while B was in flight.
    let d = Desk::new(kind);
    d.route(&a);
    d.route(&b);
    let ea = d.effect(&a, AMOUNT);
    let a_approval = d.sign("ana", ANA, &ea, "support", 0, T0 + HOUR);
    let eb = d.effect(&b, AMOUNT);
    let effect = d.under(d.sign("ana", ANA, &eb, "support", 0, T0 + HOUR), eb);
    let swapped = serde_json::to_string(&a_approval)
        .unwrap()
        .replace('\'', "''");
    let out = d.recover_after(&effect, directory(ANA), || {
        d.store
            .tamper(&format!(
                "UPDATE {{leases}} SET approval = '{swapped}' WHERE id = '{}'",
                effect.lease
            ))
            .unwrap();
    });
    refused_at_recovery(&out, "not reusable");
    assert_eq!(d.refunded(), 0);
}

fn an_expired_approval_is_refused_at_send_and_at_recovery(kind: Kind) {
    let d = Desk::new(kind);
    let key = request(1);
    let effect = d.approved_by_ana(&key, T0 + 60_000);
    d.clock.advance(61_000);
    refused_at_send(&d.submit(directory(ANA), &effect), "expired");
    assert_eq!(d.refunded(), 0);
    let d = Desk::new(kind);
    let effect = d.approved_by_ana(&key, T0 + 10_000);
    let out = d.recover_after(&effect, directory(ANA), || {});
    refused_at_recovery(&out, "expired");
    assert_eq!(d.refunded(), 0);
}

fn an_approval_from_a_group_the_request_escalated_away_from_is_refused(kind: Kind) {
    // Approved by support, then the request escalated before the send.
    let d = Desk::new(kind);
    let key = request(1);
    let effect = d.approved_by_ana(&key, T0 + HOUR);
    d.escalate(&key);
    refused_at_send(&d.submit(directory(ANA), &effect), "can no longer approve");
    // Support cannot approve it after the escalation either: the grant itself is refused.
    let late = d.sign("ben", BEN, &d.effect(&key, AMOUNT), "support", 0, T0 + HOUR);
    let err = d
        .journal
        .grant_lease(&Grant::approved(late, T0))
        .unwrap_err();
    assert!(
        matches!(&err, LeaseError::Invalid(m) if m.contains("can no longer approve")),
        "{err}"
    );
    // A refused request is closed; on the next ones, a support member cannot sign as managers,
    // and the manager's approval goes through.
    let (posed, genuine) = (request(2), request(3));
    for k in [&posed, &genuine] {
        d.route(k);
        d.escalate(k);
    }
    let e = d.effect(&posed, AMOUNT);
    let effect = d.under(d.sign("ben", BEN, &e, "managers", 1, T0 + HOUR), e);
    refused_at_send(&d.submit(directory(ANA), &effect), "not a member");
    assert_eq!(d.refunded(), 0);
    let e = d.effect(&genuine, AMOUNT);
    let effect = d.under(d.sign("mia", MIA, &e, "managers", 1, T0 + HOUR), e);
    let out = d.submit(directory(ANA), &effect);
    assert_eq!(out.label(), "COMMITTED/first_send", "{out:?}");
    assert_eq!(d.refunded(), AMOUNT);
    // At recovery: the request escalated while the first send was in flight.
    let d = Desk::new(kind);
    let effect = d.approved_by_ana(&key, T0 + HOUR);
    let out = d.recover_after(&effect, directory(ANA), || d.escalate(&key));
    refused_at_recovery(&out, "can no longer approve");
    assert_eq!(d.refunded(), 0);
}

fn an_approval_for_another_amount_or_other_facts_is_refused_at_send_and_at_recovery(kind: Kind) {
    let d = Desk::new(kind);
    let key = request(1);
    d.route(&key);
    let approved = d.effect(&key, AMOUNT);
    let effect = d.under(
        d.sign("ana", ANA, &approved, "support", 0, T0 + HOUR),
        d.effect(&key, 3_000),
    );
    refused_at_send(
        &d.submit(directory(ANA), &effect),
        "covers amount 2000; the effect asks 3000",
    );
    // Same amount, but decided on other facts than the approver saw.
    let key2 = request(2);
    d.route(&key2);
    let seen = d.effect(&key2, AMOUNT);
    let mut effect = d.under(d.sign("ana", ANA, &seen, "support", 0, T0 + HOUR), seen);
    effect = effect.premise("refunded_so_far", 1);
    refused_at_send(&d.submit(directory(ANA), &effect), "other facts");
    assert_eq!(d.refunded(), 0);
    // At recovery: the approval row was swapped for ana's approval of a smaller amount.
    let d = Desk::new(kind);
    d.route(&key);
    let e = d.effect(&key, AMOUNT);
    let smaller =
        serde_json::to_string(&d.sign("ana", ANA, &d.effect(&key, 500), "support", 0, T0 + HOUR))
            .unwrap();
    let effect = d.under(d.sign("ana", ANA, &e, "support", 0, T0 + HOUR), e);
    let out = d.recover_after(&effect, directory(ANA), || {
        d.store
            .tamper(&format!(
                "UPDATE {{leases}} SET approval = '{smaller}' WHERE id = '{}'",
                effect.lease
            ))
            .unwrap();
    });
    refused_at_recovery(&out, "covers amount 500; the effect asks 2000");
    assert_eq!(d.refunded(), 0);
}

fn a_request_routed_to_a_person_is_not_sent_under_a_plain_lease_nor_by_a_gate_without_the_directory(
    kind: Kind,
) {
    let d = Desk::new(kind);
    let key = request(1);
    d.route(&key);
    d.journal
        .grant_lease(&Grant::new("standing-order", "rules", T0).scope("payment_intent", PAYMENT))
        .unwrap();
    let mut effect = d.effect(&key, AMOUNT);
    effect.lease = "standing-order".into();
    refused_at_send(
        &d.submit(directory(ANA), &effect),
        "waits for a signed approval",
    );
    // A gate without the directory cannot tell a genuine approval from a forged one.
    let key = request(2);
    let effect = d.approved_by_ana(&key, T0 + HOUR);
    let out = Gate::new(
        d.journal.clone(),
        d.journal.clone(),
        Arc::new(d.clock.clone()),
        d.store.config(),
    )
    .unwrap()
    .bind(
        Arc::new(SimTarget(d.sim.clone())),
        Arc::new(SimRefundPremises(d.sim.clone())),
    )
    .unwrap()
    .submit(&effect)
    .unwrap();
    // It cannot judge the approval: nothing is sent and nothing final is written, so a gate
    // that has the directory still sends it.
    assert!(
        matches!(&out, Outcome::Retry { reason, .. } if reason.contains("approver directory")),
        "{out:?}"
    );
    assert_eq!(d.refunded(), 0);
    let out = d.submit(directory(ANA), &effect);
    assert_eq!(out.label(), "COMMITTED/first_send", "{out:?}");
    assert_eq!(d.refunded(), AMOUNT);
}

/// Premises read while the request escalates: the escalation commits after the attempt began
/// and before its dispatch's transaction.
struct EscalateWhileReading {
    journal: Arc<dyn JournalStore>,
    inner: SimRefundPremises,
}

impl PremiseReader for EscalateWhileReading {
    fn read(
        &self,
        key: &EffectKey,
        payload: &serde_json::Value,
    ) -> Result<interlock::core::Premises, interlock::PremiseError> {
        self.journal.route(key.as_str(), &escalation()).unwrap();
        self.inner.read(key, payload)
    }
}

fn an_escalation_that_commits_while_the_premises_are_read_stops_the_send(kind: Kind) {
    let d = Desk::new(kind);
    let key = request(1);
    let effect = d.approved_by_ana(&key, T0 + HOUR);
    let reader = EscalateWhileReading {
        journal: d.journal.clone(),
        inner: SimRefundPremises(d.sim.clone()),
    };
    let out = d
        .gate("send", directory(ANA), None)
        .bind(Arc::new(SimTarget(d.sim.clone())), Arc::new(reader))
        .unwrap()
        .submit(&effect)
        .unwrap();
    refused_at_send(&out, "can no longer approve");
    assert_eq!(d.refunded(), 0);
}

fn a_journal_written_at_schema_1_is_upgraded_in_place_keeping_its_leases_and_records(kind: Kind) {
    let d = Desk::new(kind);
    d.journal
        .grant_lease(&Grant::new("case-1", "ana", T0).scope("payment_intent", PAYMENT))
        .unwrap();
    let mut effect = d.effect(&request(1), AMOUNT);
    effect.lease = "case-1".into();
    let out = d.submit(directory(ANA), &effect);
    assert_eq!(out.label(), "COMMITTED/first_send", "{out:?}");
    // As the previous release left it: no routes, no approval column, version 1.
    d.store
        .tamper(
            "DROP TABLE {routes}; ALTER TABLE {leases} DROP COLUMN approval; \
             UPDATE {meta} SET value = '1' WHERE name = 'schema_version';",
        )
        .unwrap();
    let upgraded = d.store.reopen_store().unwrap();
    assert_eq!(upgraded.leases().unwrap().len(), 1);
    assert_eq!(upgraded.history(&effect.key).unwrap().len(), 4);
    upgraded
        .route(
            request(2).as_str(),
            &RouteStep {
                kind: RouteKind::Routed,
                level: 0,
                group: "support".into(),
                reason: "needs_judgment".into(),
                repair_of: None,
                detail: serde_json::Value::Null,
            },
        )
        .unwrap();
    assert_eq!(upgraded.routes(request(2).as_str()).unwrap().len(), 1);
    // And opening it again finds version 2, with nothing more to do.
    assert_eq!(
        d.store
            .reopen_store()
            .unwrap()
            .routes(request(2).as_str())
            .unwrap()
            .len(),
        1
    );
}

fn verify_names_the_approver_checks_the_signature_and_lists_the_escalations(kind: Kind) {
    let d = Desk::new(kind);
    let key = request(1);
    d.route(&key);
    d.escalate(&key);
    let e = d.effect(&key, AMOUNT);
    let effect = d.under(d.sign("mia", MIA, &e, "managers", 1, T0 + HOUR), e);
    assert_eq!(
        d.submit(directory(ANA), &effect).label(),
        "COMMITTED/first_send"
    );
    let target = SimTarget(d.sim.clone());
    let check = |dir: Option<&Approvers>| {
        let v = interlock::verify::verify(
            d.journal.as_ref(),
            &key,
            &interlock::verify::Sources {
                leases: Some(d.journal.as_ref()),
                records: Some(&target),
                approvers: dir,
                ..interlock::verify::Sources::default()
            },
        );
        let column = |name: &str| {
            let c = v.columns.iter().find(|c| c.name == name).unwrap();
            (c.holds, c.detail.clone())
        };
        (
            column("approved by"),
            column("approval verified"),
            column("escalations"),
        )
    };
    let dir = directory(ANA);
    let (by, verified, escalations) = check(Some(&dir));
    assert_eq!(by, (Some(true), "mia for group managers at level 1".into()));
    assert_eq!(verified.0, Some(true), "{verified:?}");
    assert!(
        verified.1.contains("covers amount 2000, the amount sent"),
        "{verified:?}"
    );
    assert_eq!(escalations.0, Some(true));
    assert!(
        escalations.1.starts_with("1: routed to support")
            && escalations
                .1
                .contains("escalated to managers (level 1, sla_breach)"),
        "{escalations:?}"
    );
    // Without the directory the signature is not checked, and says so; with mia's key replaced
    // it fails.
    assert_eq!(check(None).1.0, None);
    let mut rotated = directory(ANA);
    rotated.approvers.get_mut("mia").unwrap().public_key =
        ApproverKey::from_seed("mia", [8; 32]).public_hex();
    let (_, verified, _) = check(Some(&rotated));
    assert_eq!(verified.0, Some(false), "{verified:?}");
    // The receipt carries the escalation.
    let receipt = interlock::receipt::build(&d.journal.history(&key).unwrap()).unwrap();
    assert_eq!(receipt.escalations.len(), 1);
    assert_eq!(receipt.escalations[0]["group"], "managers");
}

fn a_revoked_approval_cannot_be_granted_again_however_its_signature_is_spelled(kind: Kind) {
    let d = Desk::new(kind);
    let key = request(1);
    d.route(&key);
    let e = d.effect(&key, AMOUNT);
    let approval = d.sign("ana", ANA, &e, "support", 0, T0 + HOUR);
    let effect = d.under(approval.clone(), e);
    assert!(d.journal.revoke_lease(&effect.lease).unwrap());
    let mut shouted = approval;
    shouted.signature = shouted.signature.to_uppercase();
    assert!(
        d.journal
            .grant_lease(&Grant::approved(shouted, T0))
            .is_err()
    );
    refused_at_send(&d.submit(directory(ANA), &effect), "revoked");
    assert_eq!(d.refunded(), 0);
}

fn a_closed_request_takes_no_approval_and_sends_nothing(kind: Kind) {
    let d = Desk::new(kind);
    let key = request(1);
    d.route(&key);
    let e = d.effect(&key, AMOUNT);
    // Signed before the request was declined, granted before it too.
    let effect = d.under(d.sign("ana", ANA, &e, "support", 0, T0 + HOUR), e.clone());
    let late = d.sign("ben", BEN, &e, "support", 0, T0 + HOUR);
    d.journal
        .route(
            key.as_str(),
            &RouteStep {
                kind: RouteKind::Closed,
                level: 0,
                group: "support".into(),
                reason: "denied by mia: duplicate of case-9".into(),
                repair_of: None,
                detail: serde_json::Value::Null,
            },
        )
        .unwrap();
    let err = d
        .journal
        .grant_lease(&Grant::approved(late, T0))
        .unwrap_err();
    assert!(err.to_string().contains("closed"), "{err}");
    assert!(d.journal.route(key.as_str(), &escalation()).is_err());
    refused_at_send(&d.submit(directory(ANA), &effect), "was closed");
    assert_eq!(d.refunded(), 0);
}

fn a_lease_bound_to_one_request_authorizes_no_other(kind: Kind) {
    let d = Desk::new(kind);
    let grant = Grant::new("rules-r1", "rules", T0)
        .scope("payment_intent", PAYMENT)
        .cap("amount", AMOUNT)
        .for_request(request(1).as_str());
    d.journal.grant_lease(&grant).unwrap();
    let mut other = d.effect(&request(2), AMOUNT);
    other.lease = "rules-r1".into();
    refused_at_send(&d.submit(directory(ANA), &other), "bound to request");
    assert_eq!(d.refunded(), 0);
    let mut own = d.effect(&request(1), AMOUNT);
    own.lease = "rules-r1".into();
    assert_eq!(
        d.submit(directory(ANA), &own).label(),
        "COMMITTED/first_send"
    );
    assert_eq!(d.refunded(), AMOUNT);
}

fn a_request_a_rule_refused_sends_nothing_under_any_lease_and_is_counted_so(kind: Kind) {
    let d = Desk::new(kind);
    let key = request(1);
    let refused = RouteStep {
        kind: RouteKind::Closed,
        level: 0,
        group: "policy".into(),
        reason: "refused_by_rule: ineligible_order".into(),
        repair_of: None,
        detail: serde_json::Value::Null,
    };
    d.journal.route(key.as_str(), &refused).unwrap();
    assert_eq!(
        d.journal.route(key.as_str(), &refused).unwrap().n,
        0,
        "a second delivery's refusal is the first one"
    );
    let routed = RouteStep {
        kind: RouteKind::Routed,
        reason: "needs_judgment: over_limit".into(),
        group: "support".into(),
        ..refused.clone()
    };
    assert!(d.journal.route(key.as_str(), &routed).is_err());
    let e = d.effect(&key, AMOUNT);
    let approval = d.sign("ana", ANA, &e, "support", 0, T0 + HOUR);
    let err = d
        .journal
        .grant_lease(&Grant::approved(approval, T0))
        .unwrap_err();
    assert!(err.to_string().contains("closed"), "{err}");
    let rules = Grant::new("rules-r1", "rules", T0)
        .scope("payment_intent", PAYMENT)
        .cap("amount", AMOUNT)
        .for_request(key.as_str());
    d.journal.grant_lease(&rules).unwrap();
    let mut under_rules = e;
    under_rules.lease = "rules-r1".into();
    refused_at_send(&d.submit(directory(ANA), &under_rules), "was closed");
    assert_eq!(d.refunded(), 0);
    let board = Scoreboard::read(d.journal.as_ref(), "").unwrap();
    assert_eq!((board.requests, board.refused), (1, 1), "{board:?}");
    assert_eq!(board.refused_by.get("rule"), Some(&1), "{board:?}");
    assert_eq!(board.cleared_no_person, 0, "{board:?}");
}

/// PostgreSQL only: an escalation whose transaction is open when a dispatch reads the request's
/// route. Steps are inserted, never updated, so locking the old step cannot order the dispatch
/// after the new one; the request's route lock must.
#[test]
fn postgres_an_escalation_that_commits_while_a_dispatch_waits_for_it_stops_the_send() {
    let d = Desk::new(Kind::Postgres);
    let key = request(1);
    let effect = d.approved_by_ana(&key, T0 + HOUR);
    let schema = d.store.schema.clone();
    let mut c = ::postgres::Client::connect(d.store.url(), ::postgres::NoTls).unwrap();
    let mut tx = c.transaction().unwrap();
    // What `route` does, held open: the request's route lock, the steps locked, the new step.
    let class: i32 = 0x1c7e_0001;
    let request: &str = key.as_str();
    tx.execute(
        "SELECT pg_advisory_xact_lock($1, hashtext($2))::text",
        &[&class, &request],
    )
    .unwrap();
    tx.execute(
        &format!("SELECT n FROM {schema}.routes WHERE request = $1 FOR UPDATE"),
        &[&key.as_str()],
    )
    .unwrap();
    tx.execute(
        &format!(
            "INSERT INTO {schema}.routes (request, n, kind, level, group_name, reason, repair_of, \
             detail, at_ms) VALUES ($1, 1, 'ESCALATED', 1, 'managers', 'sla_breach', NULL, 'null', 0)"
        ),
        &[&key.as_str()],
    )
    .unwrap();
    let out = std::thread::scope(|scope| {
        let sending = scope.spawn(|| d.submit(directory(ANA), &effect));
        // Commit once the dispatch waits on a lock (or, if it never waits, after 5 s).
        let mut watcher = ::postgres::Client::connect(d.store.url(), ::postgres::NoTls).unwrap();
        let t0 = std::time::Instant::now();
        while t0.elapsed() < std::time::Duration::from_secs(5) && !sending.is_finished() {
            let waiting: i64 = watcher
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' \
                     AND datname = current_database()",
                    &[],
                )
                .unwrap()
                .get(0);
            if waiting > 0 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        tx.commit().unwrap();
        sending.join().unwrap()
    });
    refused_at_send(&out, "can no longer approve");
    assert_eq!(d.refunded(), 0);
}

fn a_person_removed_or_rekeyed_in_the_directory_file_approves_nothing_from_the_next_send(
    kind: Kind,
) {
    let d = Desk::new(kind);
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("approvers.json");
    put(&path, &directory_json(Some(ANA)));
    // A gate started while ana was an approver, reading the file live, as a worker or a gate
    // server running for days does.
    let bound = Gate::new(
        d.journal.clone(),
        d.journal.clone(),
        Arc::new(d.clock.clone()),
        d.store.config(),
    )
    .unwrap()
    .with_approver_file(&path)
    .unwrap()
    .bind(
        Arc::new(SimTarget(d.sim.clone())),
        Arc::new(SimRefundPremises(d.sim.clone())),
    )
    .unwrap();
    let removed = d.approved_by_ana(&request(1), T0 + HOUR);
    let rekeyed = d.approved_by_ana(&request(2), T0 + HOUR);
    put(&path, &directory_json(None));
    let out = bound.submit(&removed).unwrap();
    refused_at_send(&out, "not in the approver directory");
    // Back with a new key (her old one was lost): what the old key signed is refused.
    put(&path, &directory_json(Some(MALLORY)));
    let out = bound.submit(&rekeyed).unwrap();
    refused_at_send(&out, "does not verify");
    assert_eq!(d.refunded(), 0, "nothing was sent");
    // A directory file that does not parse is no directory: nothing is judged, nothing sent.
    let third = d.approved_by_ana(&request(3), T0 + HOUR);
    std::fs::write(&path, "{").unwrap();
    let out = bound.submit(&third).unwrap();
    assert!(matches!(out, Outcome::Retry { .. }), "{out:?}");
    put(&path, &directory_json(Some(ANA)));
    let out = bound.submit(&third).unwrap();
    assert_eq!(out.label(), "COMMITTED/first_send", "{out:?}");
    assert_eq!(d.refunded(), AMOUNT);
}

interlock_tests::every_store!(
    a_person_removed_or_rekeyed_in_the_directory_file_approves_nothing_from_the_next_send,
    a_genuine_approval_by_the_group_holding_the_request_refunds_once,
    a_forged_approval_is_refused_at_send_and_at_recovery,
    an_approval_replayed_onto_another_request_is_refused_at_send_and_at_recovery,
    an_expired_approval_is_refused_at_send_and_at_recovery,
    an_approval_from_a_group_the_request_escalated_away_from_is_refused,
    an_approval_for_another_amount_or_other_facts_is_refused_at_send_and_at_recovery,
    a_request_routed_to_a_person_is_not_sent_under_a_plain_lease_nor_by_a_gate_without_the_directory,
    an_escalation_that_commits_while_the_premises_are_read_stops_the_send,
    a_journal_written_at_schema_1_is_upgraded_in_place_keeping_its_leases_and_records,
    verify_names_the_approver_checks_the_signature_and_lists_the_escalations,
    a_revoked_approval_cannot_be_granted_again_however_its_signature_is_spelled,
    a_closed_request_takes_no_approval_and_sends_nothing,
    a_lease_bound_to_one_request_authorizes_no_other,
    a_request_a_rule_refused_sends_nothing_under_any_lease_and_is_counted_so,
);
