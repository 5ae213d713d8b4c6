//! `verify`: re-derive every column of a receipt from the journal and, where the target can be
//! asked, from the target's own records. Any record changed, dropped, reordered or rebuilt makes
//! the `valid` column fail and name the record; "happened once" counts the target's effects that
//! carry the key and reports the untagged ones beside them (a hand refund shows up there).
//!
//! An audit cannot trust the journal to say what exists: rows can be deleted along with the
//! effect they describe. So a whole-journal audit also walks the receipts exported earlier and
//! the target's own records, and an effect that only a receipt or only the target knows fails.
//! A signature that was not checked never counts as holding unless the caller says so.

use serde::Serialize;
use serde_json::Value;

mod approval;
mod budget;
mod settled;

use crate::approval::Approvers;
use crate::core::state::landed_evidence;
use crate::core::{Event, LeaseVerdict, Status};
use crate::effect::EffectKey;
use crate::journal::{Journal, Record};
use crate::lease::LeaseStore;
use crate::receipt::{Receipt, UNSIGNED_NOTE, VerifyingKeyKind, build};
use crate::target::TargetRecords;

/// One column of a verification.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct Column {
    /// Column name.
    pub name: &'static str,
    /// `Some(true)` holds, `Some(false)` fails, `None` does not apply or could not be asked.
    pub holds: Option<bool>,
    /// What was found.
    pub detail: String,
}

/// A verified (or not) effect.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct Verification {
    /// The key.
    pub key: String,
    /// The receipt's outcome as derived from the journal; `None` where no history could be
    /// read.
    pub outcome: Option<Status>,
    /// The columns.
    pub columns: Vec<Column>,
}

impl Verification {
    /// True when no column fails.
    pub fn holds(&self) -> bool {
        self.columns.iter().all(|c| c.holds != Some(false))
    }

    /// A verification that fails on one column for a reason found outside the journal: a
    /// receipt with no journal behind it, a journal key with no receipt, an unreadable file.
    pub fn failed(key: impl Into<String>, detail: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            outcome: None,
            columns: vec![col("valid", Some(false), detail)],
        }
    }
}

/// What verify may consult.
#[derive(Default)]
pub struct Sources<'a> {
    /// The lease store, to check that the approval in the journal is the one on record.
    pub leases: Option<&'a dyn LeaseStore>,
    /// The approver directory, to check a person's signed approval against their public key.
    pub approvers: Option<&'a Approvers>,
    /// The target's own records.
    pub records: Option<&'a dyn TargetRecords>,
    /// A receipt exported earlier (the anchor), to compare the journal with.
    pub receipt: Option<&'a Receipt>,
    /// The key its signature must verify with.
    pub key: Option<&'a VerifyingKeyKind>,
    /// A signed receipt checked without a key neither holds nor fails (instead of failing).
    pub accept_unchecked_signatures: bool,
    /// The journal's log of budget changes, to check that each dispatch counted every budget in
    /// force that matched it (without it only the recorded counts are checked).
    pub budgets: Option<&'a [crate::budget::BudgetChange]>,
    /// The directory group whose members may settle an ambiguous effect (default
    /// [`crate::settle::DEFAULT_GROUP`]); their keys are read from `approvers`.
    pub settlers: Option<&'a str>,
}

fn col(name: &'static str, holds: Option<bool>, detail: impl Into<String>) -> Column {
    Column {
        name,
        holds,
        detail: detail.into(),
    }
}

/// Every effect at the target that carries an interlock key none of `known` names — a refund
/// whose journal rows were deleted, a journal restored from an old backup, or a send under a
/// forged key — and every one that carries a known key on another payment than the one its
/// effect was journaled for (`known` maps each key to its journaled payload), each as a failing
/// verification naming the target's reference.
pub fn strangers(
    records: &dyn TargetRecords,
    known: &std::collections::HashMap<String, Value>,
) -> Result<Vec<Verification>, String> {
    // The payment a refund or a payload is on, by the field the journaled payload names it by.
    let on_field = |v: &Value, field: &str| v.get(field).and_then(Value::as_str).map(str::to_owned);
    let pi = |v: &Value| on_field(v, "payment_intent");
    Ok(records
        .tagged()?
        .iter()
        .filter_map(|r| {
            let key = records.key_of(r)?;
            let id = r.get("id").and_then(Value::as_str).unwrap_or("an effect");
            let on = pi(r).unwrap_or_else(|| "?".into());
            let why = match known.get(key) {
                None => format!(
                    "the target holds {id} ({} on {on}) carrying this key, but neither the \
                     journal nor any receipt knows it",
                    r.get("amount").unwrap_or(&Value::Null)
                ),
                Some(payload) => {
                    let field = if payload.get("charge").is_some() {
                        "charge"
                    } else {
                        "payment_intent"
                    };
                    match (on_field(payload, field), on_field(r, field)) {
                        (Some(journaled), found) if Some(&journaled) != found.as_ref() => format!(
                            "the target holds {id} on {} carrying this key, but the effect was \
                             journaled for {journaled}",
                            found.unwrap_or_else(|| "?".into())
                        ),
                        _ => return None,
                    }
                }
            };
            Some(Verification::failed(key, why))
        })
        .collect())
}

/// Verify one key.
pub fn verify(journal: &dyn Journal, key: &EffectKey, src: &Sources<'_>) -> Verification {
    let history = match journal.history(key) {
        Ok(h) if h.is_empty() => {
            return Verification::failed(key.as_str(), "no record of this key in the journal");
        }
        Ok(h) => h,
        Err(e) => return Verification::failed(key.as_str(), e.to_string()),
    };
    let Some(derived) = build(&history) else {
        return Verification::failed(key.as_str(), "the history does not form an effect");
    };
    let mut columns = vec![valid(&derived, &history, src)];
    columns.push(happened_once(&derived, &history, src.records));
    let dispatches = dispatches(&history);
    let authorized = history
        .iter()
        .any(|r| matches!(r.event, Event::Authorized(_)));
    columns.push(if dispatches.is_empty() {
        col("authorized when fired", None, "nothing was sent")
    } else {
        let dead: Vec<_> = dispatches
            .iter()
            .filter(|(_, d)| d.recheck.lease != LeaseVerdict::Live)
            .collect();
        col(
            "authorized when fired",
            Some(authorized && dead.is_empty()),
            if dead.is_empty() {
                format!(
                    "lease {} live at all {} dispatch(es)",
                    derived.lease,
                    dispatches.len()
                )
            } else {
                format!("{} dispatch(es) under a dead lease", dead.len())
            },
        )
    });
    columns.push(callers(&history));
    columns.push(if dispatches.is_empty() {
        col("premises held", None, "nothing was sent")
    } else {
        // The rules it was proposed under, judged again on what each send stood on: a record
        // that says they held is not taken on its word.
        let rules: &[String] = history
            .iter()
            .find_map(|r| match &r.event {
                Event::Proposed(p) => Some(p.rules.as_slice()),
                _ => None,
            })
            .unwrap_or_default();
        let moved: Vec<_> = dispatches
            .iter()
            .filter(|(_, d)| {
                !d.recheck.holds()
                    || !crate::core::rules::judge_all(
                        rules.iter().map(String::as_str),
                        &d.recheck.premises_now,
                        &derived.payload,
                    )
                    .is_empty()
            })
            .collect();
        let judged = match rules.len() {
            0 => String::new(),
            n => format!(", and its {n} rule(s) held at every send"),
        };
        col(
            "premises held",
            Some(moved.is_empty()),
            if moved.is_empty() {
                format!("re-read before every send; none had moved{judged}")
            } else {
                format!(
                    "{} send(s) on moved premises or on facts its rules forbid",
                    moved.len()
                )
            },
        )
    });
    columns.push(budget::within_budget(&history, &dispatches, src.budgets));
    columns.push(approval::approved_by(&derived));
    columns.push(approval::verified(
        &derived,
        src.leases,
        src.approvers,
        dispatches.last().map(|(at, _)| *at),
    ));
    columns.push(match derived.confirmations.first() {
        Some(c) => col(
            "confirmed by target",
            Some(true),
            format!(
                "via {} ({})",
                c.via,
                c.event.clone().or(c.refund.clone()).unwrap_or_default()
            ),
        ),
        None => col("confirmed by target", None, "no confirmation recorded"),
    });
    columns.push(approval::escalations(&derived));
    columns.push(settled::settled_by(
        &history,
        src.approvers,
        src.settlers.unwrap_or(crate::settle::DEFAULT_GROUP),
        src.accept_unchecked_signatures,
    ));
    Verification {
        key: key.to_string(),
        outcome: Some(derived.outcome),
        columns,
    }
}

/// Who acted on the effect, as the process that journaled each step verified them: the
/// proposer, and the caller of every attempt that dispatched or took over its claim. Neither
/// holds nor fails: the lease's verdict on the proposer is the authority column's.
pub fn callers(history: &[Record]) -> Column {
    let name = |c: Option<&String>| c.map_or("no principal".to_owned(), Clone::clone);
    let mut steps = Vec::new();
    for r in history {
        match &r.event {
            Event::Proposed(p) => steps.push(format!("proposed by {}", name(p.by.as_ref()))),
            Event::Dispatched(d) => steps.push(format!(
                "{} by {} ({})",
                if d.resend { "resent" } else { "dispatched" },
                name(d.holder.caller.as_ref()),
                d.holder.attempt
            )),
            Event::Claimed(c) => steps.push(format!(
                "claimed by {} ({})",
                name(c.holder.caller.as_ref()),
                c.holder.attempt
            )),
            _ => {}
        }
    }
    col("callers", None, steps.join("; "))
}

/// Every `DISPATCHED` of a history, with the time it was written.
fn dispatches(history: &[Record]) -> Vec<(i64, &crate::core::Dispatched)> {
    history
        .iter()
        .filter_map(|r| match &r.event {
            Event::Dispatched(d) => Some((r.at_ms, d)),
            _ => None,
        })
        .collect()
}

fn valid(derived: &Receipt, history: &[Record], src: &Sources<'_>) -> Column {
    let Some(anchor) = src.receipt else {
        return match src.key {
            Some(_) => col(
                "valid",
                Some(false),
                "a key was given but no signed receipt to check the journal against",
            ),
            None => col(
                "valid",
                Some(true),
                format!(
                    "chain of {} records intact; {UNSIGNED_NOTE}",
                    derived.records.len()
                ),
            ),
        };
    };
    if anchor.key != derived.key {
        return col(
            "valid",
            Some(false),
            format!("the receipt is for key {}, not {}", anchor.key, derived.key),
        );
    }
    for (i, want) in anchor.records.iter().enumerate() {
        match derived.records.get(i) {
            None => {
                return col(
                    "valid",
                    Some(false),
                    format!("record {i} of the receipt is missing from the journal (truncated)"),
                );
            }
            Some(have) if have != want => {
                return col(
                    "valid",
                    Some(false),
                    format!("record {i} differs from the receipt (changed, reordered or rebuilt)"),
                );
            }
            Some(_) => {}
        }
    }
    // Evidence journaled after the receipt was exported (a confirmation, a late answer) is read
    // from the journal alone: the receipt's signature does not cover it.
    let unanchored_tail = history
        .get(anchor.records.len()..)
        .filter(|t| !t.is_empty())
        .map(|t| {
            format!(
                "; records {}..{} ({}) came after the receipt and are read from the journal \
                 alone, not anchored by it",
                anchor.records.len(),
                history.len() - 1,
                t.iter()
                    .map(|r| r.event.kind())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
        .unwrap_or_default();
    let mut fields = vec![
        ("payload_hash", anchor.payload_hash == derived.payload_hash),
        ("payload", anchor.payload == derived.payload),
        ("target", anchor.target == derived.target),
        ("tier", anchor.tier == derived.tier),
        ("lease", anchor.lease == derived.lease),
        ("approver", anchor.approver == derived.approver),
        ("grant", anchor.grant == derived.grant),
        (
            "premises_decided",
            anchor.premises_decided == derived.premises_decided,
        ),
        ("escalations", anchor.escalations == derived.escalations),
    ];
    // A receipt exported before later evidence (a confirmation, a late answer, proof of a second
    // application) is a prefix, and anchors everything but that evidence. One exported before
    // the effect resolved anchors nothing of how it ended: that tail could have been rewritten.
    if let Some(tail) = history
        .get(anchor.records.len()..)
        .filter(|t| !t.is_empty())
    {
        // A person's settlement of an ambiguous effect carries its own signature, which the
        // "settled by" column checks; an `AMBIGUOUS` receipt does not anchor it, and need not.
        let settles_it = |e: &Event| {
            matches!(e, Event::Settled(_)) && anchor.outcome == crate::core::Status::Ambiguous
        };
        let unanchored = tail.iter().find(|r| {
            !matches!(
                &r.event,
                Event::Confirmed(_) | Event::LateResult(_) | Event::AppliedTwice(_)
            ) && !matches!(&r.event, Event::Refused(n) if !n.is_final)
                && !settles_it(&r.event)
        });
        // After a final outcome only evidence may follow.
        if !anchor.outcome.is_final() || unanchored.is_some() {
            return col(
                "valid",
                Some(false),
                format!(
                    "the receipt was exported with the effect {}; records {}..{} ({}) came after \
                     and are not anchored by it: export the receipt again to anchor them",
                    anchor.outcome,
                    anchor.records.len(),
                    history.len() - 1,
                    tail.iter()
                        .map(|r| r.event.kind())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            );
        }
    } else {
        fields.extend([
            ("outcome", anchor.outcome == derived.outcome),
            ("how", anchor.how == derived.how),
            ("target_ref", anchor.target_ref == derived.target_ref),
            (
                "premises_rechecked",
                anchor.premises_rechecked == derived.premises_rechecked,
            ),
            ("head", anchor.head == derived.head),
        ]);
    }
    if let Some((f, _)) = fields.iter().find(|(_, same)| !same) {
        return col(
            "valid",
            Some(false),
            format!("the receipt's {f} differs from the journal's"),
        );
    }
    match (src.key, &anchor.signature) {
        (Some(k), _) => match k.check(anchor) {
            Ok(()) => col(
                "valid",
                Some(true),
                format!(
                    "chain matches the signed receipt ({} records); {}{unanchored_tail}",
                    anchor.records.len(),
                    anchor.note
                ),
            ),
            Err(e) => col("valid", Some(false), e),
        },
        (None, Some(_)) if src.accept_unchecked_signatures => col(
            "valid",
            None,
            format!(
                "chain matches the receipt; its signature was NOT checked (accepted unchecked on \
                 request){unanchored_tail}"
            ),
        ),
        (None, Some(_)) => col(
            "valid",
            Some(false),
            "the receipt is signed, but no key was given to check it: an unchecked signature \
             proves nothing; give the key (or accept unchecked signatures explicitly)",
        ),
        (None, None) => col(
            "valid",
            Some(true),
            format!("chain matches the receipt; {UNSIGNED_NOTE}{unanchored_tail}"),
        ),
    }
}

/// The distinct effects the journal heard of under the key: the commit's result, late
/// successes, the target's own confirmations, and whatever an `APPLIED_TWICE` names.
fn heard_of(history: &[Record]) -> Vec<Value> {
    landed_evidence(history.iter().map(|r| &r.event))
}

fn happened_once(
    derived: &Receipt,
    history: &[Record],
    records: Option<&dyn TargetRecords>,
) -> Column {
    let heard = heard_of(history);
    if matches!(derived.outcome, Status::Refused | Status::Failed) && !heard.is_empty() {
        return col(
            "happened once",
            Some(false),
            format!(
                "the journal says {}, but holds a success for the key: {}",
                derived.outcome, heard[0]
            ),
        );
    }
    if heard.len() > 1 || derived.outcome == Status::AppliedTwice {
        let ids: Vec<String> = heard
            .iter()
            .map(|v| {
                v.get("id")
                    .map_or_else(|| v.to_string(), ToString::to_string)
            })
            .collect();
        return col(
            "happened once",
            Some(false),
            format!(
                "the journal records {} effects under the key: {}",
                heard.len(),
                ids.join(", ")
            ),
        );
    }
    let Some(records) = records else {
        return col("happened once", None, "the target was not asked");
    };
    let all = match records.records_for(&derived.payload) {
        Ok(all) => all,
        // Asked and not answered (down, a partial list, a record that cannot be read): what
        // the target holds is unknown, and an audit that was told to ask does not pass on it.
        Err(e) => {
            return col(
                "happened once",
                Some(false),
                format!("the target was asked and could not answer: {e}; ask again when it can"),
            );
        }
    };
    let counts = |r: &&Value| {
        !matches!(
            r.get("status").and_then(Value::as_str),
            Some("failed" | "canceled")
        )
    };
    let tagged: Vec<&Value> = all
        .iter()
        .filter(counts)
        .filter(|r| records.key_of(r) == Some(derived.key.as_str()))
        .collect();
    let untagged: Vec<String> = all
        .iter()
        .filter(counts)
        .filter(|r| records.key_of(r).is_none())
        .map(|r| {
            format!(
                "{} ({})",
                r.get("id").and_then(Value::as_str).unwrap_or("?"),
                r.get("amount").unwrap_or(&Value::Null)
            )
        })
        .collect();
    let beside = if untagged.is_empty() {
        String::new()
    } else {
        format!("; untagged on the same payment: {}", untagged.join(", "))
    };
    let ids: Vec<&str> = tagged
        .iter()
        .filter_map(|r| r.get("id").and_then(Value::as_str))
        .collect();
    let (holds, what) = match derived.outcome {
        Status::Committed => (
            Some(
                tagged.len() == 1
                    && derived
                        .target_ref
                        .as_deref()
                        .is_none_or(|r| ids.contains(&r)),
            ),
            format!(
                "{} effect(s) at the target carry the key: {}",
                tagged.len(),
                ids.join(", ")
            ),
        ),
        Status::Refused | Status::Failed => (
            Some(tagged.is_empty()),
            format!("{} effect(s) at the target carry the key", tagged.len()),
        ),
        _ => (
            if tagged.len() > 1 { Some(false) } else { None },
            format!(
                "{} effect(s) at the target carry the key (outcome {})",
                tagged.len(),
                derived.outcome
            ),
        ),
    };
    col("happened once", holds, format!("{what}{beside}"))
}
