//! The outbox's promise, run against any substrate: a call exists only once its plan committed,
//! and the relay delivers it through the gate once — also when an earlier relay sent it and died
//! before marking it. Judged by what the receiving target itself applied.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, ensure};
use interlock::lease::Grant;
use interlock::premise::NoPremises;
use interlock::target::Target;
use interlock::{Effect, EffectKey, Gate, GateConfig, ManualClock, Outcome, SqliteJournal, Tier};
use interlock_db::{Outbox, Outgoing, Plan, Policy, relay};
use serde_json::json;

use crate::targets::Counting;

const T0: i64 = 1_700_000_000_000;
const LEASE: &str = "shop-ops";

/// A refund the plan asks for once it commits, delivered by the target named `counting`.
pub fn refund(id: &str) -> Outgoing {
    Outgoing {
        id: id.into(),
        target: "counting".into(),
        lease: LEASE.into(),
        payload: json!({"refund": id, "amount": 500}),
    }
}

/// A policy whose outbox allows refunds to `counting` under the shop's lease, and nothing else.
pub fn policy() -> Policy {
    Policy {
        outbox: [("counting".to_owned(), [LEASE.to_owned()].into())].into(),
        ..Policy::default()
    }
}

/// A gate on a new SQLite journal (in the directory returned with it), its settle margin 0, the
/// shop's lease granted.
fn gate_on_a_journal() -> anyhow::Result<(tempfile::TempDir, Arc<SqliteJournal>, Gate)> {
    let dir = tempfile::tempdir()?;
    let journal_path = dir.path().join("journal.db");
    let clock = ManualClock::at(T0);
    let journal = Arc::new(SqliteJournal::open(&journal_path, Arc::new(clock.clone()))?);
    journal.grant_lease(&Grant::new(LEASE, "ops", T0).unlimited())?;
    let mut cfg = GateConfig::beside(&journal_path);
    cfg.settle = Duration::from_millis(0);
    let gate = Gate::new(journal.clone(), journal.clone(), Arc::new(clock), cfg)?;
    Ok((dir, journal, gate))
}

/// Submit `refused` (a plan the substrate must refuse) and `committed` (one it must commit),
/// each asking for a refund, through a gate bound to `db` (judged by [`policy`]); then the
/// committed plan asking for a call the policy does not allow; then relay the outbox to a
/// counting target, once as if an earlier relay had sent the call and died before marking it.
pub fn outbox_round<D>(db: Arc<D>, refused: Plan, committed: Plan) -> anyhow::Result<()>
where
    D: Target + Outbox + 'static,
{
    let (_dir, _journal, gate) = gate_on_a_journal()?;
    let staged = gate.bind(db.clone(), Arc::new(NoPremises))?;
    let submit = |key: &str, plan: &Plan| -> anyhow::Result<Outcome> {
        let effect = Effect::new(EffectKey::derive(&[key]), &plan.to_payload(), LEASE)?;
        Ok(staged.submit(&effect)?)
    };

    let outcome = submit("refused", &refused.then_send(refund("never"))?)?;
    ensure!(
        matches!(&outcome, Outcome::Failed(f) if f.code == "refused"),
        "the refused plan: {outcome:?}"
    );
    ensure!(
        db.pending(0, 10)?.is_empty(),
        "a refused plan's call reached the outbox"
    );
    let mut stray = refund("stray");
    stray.target = "elsewhere".into();
    let outcome = submit("stray", &committed.clone().then_send(stray)?)?;
    ensure!(
        matches!(&outcome, Outcome::Failed(f)
            if f.code == "refused" && f.message == "outbox: refused; call `stray`"),
        "a call the policy does not allow: {outcome:?}"
    );
    ensure!(db.pending(0, 10)?.is_empty(), "nor did the stray call");

    let outcome = submit("committed", &committed.then_send(refund("once"))?)?;
    ensure!(
        matches!(outcome, Outcome::Committed { .. }),
        "the committed plan: {outcome:?}"
    );
    let pending = db.pending(0, 10)?;
    ensure!(pending.len() == 1, "one call waits: {pending:?}");

    let payments = Counting::new(Tier::One, Duration::ZERO);
    let pay = gate.bind(payments.clone(), Arc::new(NoPremises))?;
    // An earlier relay sent it and died before marking it.
    let call = &pending[0];
    pay.submit(&Effect::new(call.effect_key(), &call.payload, &call.lease)?)?;
    let targets = BTreeMap::from([("counting".to_owned(), &pay)]);
    let relayed = relay(&*db, &targets, 10)?;
    let (_, label) = relayed
        .delivered
        .first()
        .context("the call was delivered")?;
    ensure!(
        relayed.delivered.len() == 1 && label.contains("replayed"),
        "answered from the journal, not sent again: {relayed:?}"
    );
    ensure!(
        relay(&*db, &targets, 10)?.delivered.is_empty(),
        "nothing left"
    );
    ensure!(
        payments.applications() == 1
            && payments.sends.load(std::sync::atomic::Ordering::SeqCst) == 1,
        "the refund reached its target once"
    );
    Ok(())
}

/// Commit `committed` asking for one refund through a gate bound to `db`; let `rewrite` change
/// the waiting outbox row the way a plain connection to the database could (to a refund of
/// 50,000 to another account); then relay. The rewritten row is not sent, and the relay's report
/// says why: judged by what the counting target applied.
pub fn rewritten_round<D>(
    db: Arc<D>,
    committed: Plan,
    rewrite: impl FnOnce(&str),
) -> anyhow::Result<()>
where
    D: Target + Outbox + 'static,
{
    let (_dir, journal, gate) = gate_on_a_journal()?;
    let staged = gate.bind(db.clone(), Arc::new(NoPremises))?;
    let plan = committed.clone().then_send(refund("once"))?;
    let effect = Effect::new(EffectKey::derive(&["rewritten"]), &plan.to_payload(), LEASE)?;
    let outcome = staged.submit(&effect)?;
    ensure!(
        matches!(outcome, Outcome::Committed { .. }),
        "the plan commits: {outcome:?}"
    );
    let pending = db.pending(0, 10)?;
    ensure!(pending.len() == 1, "one call waits: {pending:?}");
    interlock_db::as_planned(journal.as_ref(), &pending[0])
        .map_err(|why| anyhow::anyhow!("the row as staged is the plan's: {why}"))?;
    rewrite(&json!({"refund": "attacker", "amount": 50_000}).to_string());
    let rewritten = db.pending(0, 10)?;
    ensure!(
        interlock_db::as_planned(journal.as_ref(), &rewritten[0]).is_err(),
        "the rewritten row passes as the plan's: {rewritten:?}"
    );
    // A plan the substrate refused (it asks for a call its policy forbids) committed nothing:
    // a row copying its call, inserted by hand, is no call of a committed plan.
    let stray = Outgoing {
        target: "elsewhere".into(),
        ..refund("stray")
    };
    let refused_key = EffectKey::derive(&["refused-with-call"]);
    let refused = Effect::new(
        refused_key.clone(),
        &committed.then_send(stray.clone())?.to_payload(),
        LEASE,
    )?;
    let out = staged.submit(&refused)?;
    ensure!(
        !matches!(out, Outcome::Committed { .. }),
        "the plan asking for a forbidden call commits: {out:?}"
    );
    let copied = interlock_db::Request {
        source: rewritten[0].source.clone(),
        seq: 99,
        plan_key: refused_key.as_str().to_owned(),
        id: stray.id.clone(),
        target: stray.target.clone(),
        lease: stray.lease.clone(),
        payload: stray.payload.clone(),
    };
    let why = interlock_db::as_planned(journal.as_ref(), &copied)
        .err()
        .context("a refused plan's call passes as planned")?;
    ensure!(why.contains("committed nothing"), "{why}");
    let payments = Counting::new(Tier::One, Duration::ZERO);
    let pay = gate.bind(payments.clone(), Arc::new(NoPremises))?;
    let targets = BTreeMap::from([("counting".to_owned(), &pay)]);
    let relayed = relay(&*db, &targets, 10)?;
    ensure!(
        relayed.delivered.is_empty(),
        "a rewritten row was delivered: {relayed:?}"
    );
    let (_, why) = relayed.waiting.first().context("the row waits")?;
    ensure!(why.contains("rewritten"), "the report says why: {why}");
    ensure!(
        payments.sends.load(std::sync::atomic::Ordering::SeqCst) == 0,
        "nothing reached the payments target"
    );
    Ok(())
}

/// Commit `committed` asking for one e-mail through a gate on one journal, then submit the same
/// plan under the same key through a gate on another journal over the same database (`db` and
/// `db_again`, two handles on it): the second journal holds it committed too, found by the
/// marker. Then relay from both journals to a tier-3 target that takes whatever it is sent. The
/// database gives the call to the first relay that claims it; the other leaves it, saying whose
/// it is: judged by what the target applied.
pub fn two_journals_round<D>(db: Arc<D>, db_again: Arc<D>, committed: Plan) -> anyhow::Result<()>
where
    D: Target + Outbox + 'static,
{
    let (_dir_a, _journal_a, gate_a) = gate_on_a_journal()?;
    let (_dir_b, journal_b, gate_b) = gate_on_a_journal()?;
    let plan = committed.then_send(refund("mail"))?;
    let effect = Effect::new(EffectKey::derive(&["twice"]), &plan.to_payload(), LEASE)?;
    let in_a = gate_a
        .bind(db.clone(), Arc::new(NoPremises))?
        .submit(&effect)?;
    ensure!(
        matches!(in_a, Outcome::Committed { .. }),
        "journal A: {in_a:?}"
    );
    let in_b = gate_b
        .bind(db_again.clone(), Arc::new(NoPremises))?
        .submit(&effect)?;
    ensure!(
        matches!(in_b, Outcome::Committed { .. }),
        "journal B holds it committed too: {in_b:?}"
    );
    let mail = Counting::new(Tier::Three, Duration::ZERO);
    let pay_a = gate_a.bind(mail.clone(), Arc::new(NoPremises))?;
    let pay_b = gate_b.bind(mail.clone(), Arc::new(NoPremises))?;
    // Journal B's relay claims the call and sends it, and dies before marking it delivered.
    let pending = db_again.pending(0, 10)?;
    ensure!(pending.len() == 1, "one call waits: {pending:?}");
    let call = &pending[0];
    ensure!(
        db_again
            .claim(call, &interlock::Journal::instance(journal_b.as_ref())?)?
            .is_none(),
        "the first claim is B's"
    );
    pay_b.submit(&Effect::new(call.effect_key(), &call.payload, &call.lease)?)?;
    // Journal A's relay finds it pending, its plan committed in A: the claim stops it.
    let from_a = relay(&*db, &BTreeMap::from([("counting".to_owned(), &pay_a)]), 10)?;
    ensure!(
        from_a.delivered.is_empty(),
        "journal A's relay delivered it again: {from_a:?}"
    );
    let (_, why) = from_a.waiting.first().context("the call waits for A")?;
    ensure!(
        why.contains("claimed by the relay of journal"),
        "the report says whose it is: {why}"
    );
    // B's next pass answers it from B's journal and marks it.
    let from_b = relay(
        &*db_again,
        &BTreeMap::from([("counting".to_owned(), &pay_b)]),
        10,
    )?;
    ensure!(
        from_b.delivered.len() == 1 && from_b.delivered[0].1.contains("replayed"),
        "journal B's relay marks it from its journal: {from_b:?}"
    );
    let sent = mail.sends.load(std::sync::atomic::Ordering::SeqCst);
    ensure!(sent == 1, "the e-mail went out {sent} times");
    Ok(())
}
