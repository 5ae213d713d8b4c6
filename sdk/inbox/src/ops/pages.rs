//! The operators' pages and form endpoints. Every page needs a signed-in member of the settling
//! group; every POST needs the session's CSRF token. A settlement is drafted from the journal by
//! the server, checked against the same rules it will face when recorded (so nobody is asked to
//! sign what would be refused), signed in the browser, and recorded only by
//! [`interlock::settle::settle`], which checks the signature against the directory and the rules
//! again inside the journal's write transaction. A draft is used once: a replayed signature is
//! refused before it reaches the journal, and one that did would find the effect settled.

// A handler's early return is the response itself; boxing it would only add noise.
#![allow(clippy::result_large_err)]

use std::sync::Arc;

use askama::Template;
use axum::extract::{Form, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine as _;
use interlock::approval::Approvers;
use interlock::core::settle::{Finding, MAX_SKEW_MS, Settled};
use interlock::core::{Event, Status};
use interlock::journal::Record;
use interlock::receipt::SignatureAlg;
use interlock::settle::{SettleError, Settlers, SignedSettlement};
use interlock::{EffectKey, Outcome};
use serde::Deserialize;
use serde_json::{Value, json};

use super::Ops;
use super::board::{self, Board, Buckets, EffectRow};
use super::charts::{self, clock, datetime};
use crate::auth::{Drafted, Session};
use crate::web::{
    CsrfForm, Door, checked, door_routes, error_page, harden, json_error, link, render, signed_in,
};

type Shared = State<Arc<Ops>>;

impl Door for Ops {
    fn auth(&self) -> &crate::auth::Auth {
        &self.auth
    }
    fn approvers(&self) -> Result<Arc<Approvers>, String> {
        (self.approvers)()
    }
    fn refuses(&self, person: &str, directory: &Approvers) -> Option<String> {
        (!directory.is_member(&self.group, person)).then(|| {
            format!(
                "{person} is not a member of group {}, whose members use this page and settle \
                 ambiguous effects: add them to it in the approver directory",
                self.group
            )
        })
    }
    fn journal(&self) -> &Arc<dyn interlock::JournalStore> {
        &self.journal
    }
    fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }
    const NAME: &'static str = "Interlock operations";
    const COOKIE: &'static str = "interlock_ops_session";
}

pub(crate) fn router(ops: Arc<Ops>) -> Router {
    door_routes::<Ops>()
        .route("/", get(home))
        .route("/effect/{id}", get(effect_page))
        .route("/effect/{id}/recover", post(recover))
        .route("/effect/{id}/statement", post(statement))
        .route("/effect/{id}/settle", post(settle))
        .layer(axum::extract::DefaultBodyLimit::max(BODY_LIMIT))
        .layer(axum::middleware::map_response(harden))
        .with_state(ops)
}

/// The largest form or JSON body the page takes.
const BODY_LIMIT: usize = 16 * 1024;
/// The longest note a settlement keeps (it stays in the journal for good).
const MAX_NOTE: usize = 2_000;
/// The longest reference at the target.
const MAX_REFERENCE: usize = 255;
/// Rows listed per section of the board (the counts above it are whole).
const MAX_ROWS: usize = 200;

/// The operator behind a JSON call, checked against its CSRF token, and the directory as it is
/// now.
fn operator_checked(
    ops: &Ops,
    headers: &HeaderMap,
    csrf: &str,
) -> Result<(String, Session, Arc<Approvers>), Response> {
    checked(ops, headers, csrf).map_err(|e| json_error(StatusCode::FORBIDDEN, e))
}

/// Run `f` off the async workers (the journal blocks).
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| Err(e.to_string()))
}

#[derive(Deserialize)]
struct Done {
    done: Option<String>,
}

struct RowView {
    key: String,
    link: String,
    status: &'static str,
    target: String,
    payload: String,
    how: String,
    last: String,
}

impl RowView {
    fn of(e: &EffectRow) -> Self {
        let mut how = e.how.clone();
        if !e.landed_late.is_empty() {
            how = format!("{how}; LANDED LATE: {}", e.landed_late.join(", "));
        }
        Self {
            key: e.key.clone(),
            link: link(&e.key),
            status: e.status.label(),
            target: format!("{} (tier {})", e.target, e.tier),
            payload: e.payload.clone(),
            how,
            last: format!("{} UTC", datetime(e.last_ms)),
        }
    }
}

struct Section {
    id: &'static str,
    title: &'static str,
    what: &'static str,
    total: usize,
    rows: Vec<RowView>,
}

impl Section {
    fn of(
        b: &Board,
        statuses: &[Status],
        (id, title, what): (&'static str, &'static str, &'static str),
    ) -> Self {
        let mut all: Vec<&EffectRow> = statuses.iter().flat_map(|st| b.at(*st)).collect();
        all.sort_by(|x, y| y.last_ms.cmp(&x.last_ms).then_with(|| x.key.cmp(&y.key)));
        Self {
            id,
            title,
            what,
            total: all.len(),
            rows: all.into_iter().take(MAX_ROWS).map(RowView::of).collect(),
        }
    }
}

#[derive(Template)]
#[template(path = "ops.html")]
struct HomePage {
    person: String,
    csrf: String,
    done: Option<String>,
    counts: Vec<(&'static str, u64)>,
    sections: Vec<Section>,
    outcomes_svg: String,
    latency_svg: String,
    span: String,
    overall: String,
}

async fn home(State(ops): Shared, headers: HeaderMap, Query(d): Query<Done>) -> Response {
    let s = match signed_in(ops.as_ref(), &headers) {
        Ok((s, _)) => s,
        Err(r) => return r,
    };
    let o = ops.clone();
    let b = match blocking(move || Board::read(o.journal.as_ref()).map_err(|e| e.to_string())).await
    {
        Ok(b) => b,
        Err(e) => {
            return error_page(
                StatusCode::SERVICE_UNAVAILABLE,
                "The journal could not be read",
                &e,
            );
        }
    };
    let now = ops.now_ms();
    let from = b.effects.iter().map(|e| e.last_ms).min().unwrap_or(now);
    let buckets = Buckets::covering(from, now);
    let (per, all) = board::latency(&b.samples, &buckets);
    let sections = vec![
        Section::of(
            &b,
            &[Status::InFlight, Status::Proposed],
            (
                "in-flight",
                "In flight",
                "dispatched (or proposed) and not decided: a worker's retry or recovery decides it",
            ),
        ),
        Section::of(
            &b,
            &[Status::Ambiguous],
            (
                "ambiguous",
                "Ambiguous",
                "the gate cannot know whether it landed: look at the target and settle it",
            ),
        ),
        Section::of(
            &b,
            &[Status::AppliedTwice],
            (
                "applied-twice",
                "Applied twice",
                "the target holds it more than once: reverse the extra ones there",
            ),
        ),
        Section::of(
            &b,
            &[Status::Failed],
            (
                "failed",
                "Failed",
                "the target said no (or a person found nothing of it)",
            ),
        ),
    ];
    let overall = all.map_or_else(
        || "no send was answered in this span".to_owned(),
        |p| {
            format!(
                "p50 {} ms, p90 {} ms, p99 {} ms over {} sends",
                p.p50, p.p90, p.p99, p.n
            )
        },
    );
    render(&HomePage {
        person: s.approver,
        csrf: s.csrf,
        done: d.done,
        counts: b
            .counts()
            .into_iter()
            .map(|(k, v)| (k.label(), v))
            .collect(),
        sections,
        outcomes_svg: charts::outcomes(&buckets, &board::outcomes(&b.effects, &buckets)),
        latency_svg: charts::latency(&buckets, &per),
        span: format!(
            "{} to {} UTC, {} buckets of {} s",
            datetime(buckets.start_ms),
            clock(buckets.start_of(buckets.n)),
            buckets.n,
            buckets.width_ms / 1000
        ),
        overall,
    })
}

struct RecordView {
    n: u32,
    at: String,
    kind: &'static str,
    detail: String,
}

#[derive(Template)]
#[template(path = "ops_effect.html")]
struct EffectPage {
    person: String,
    csrf: String,
    done: Option<String>,
    key: String,
    link: String,
    status: &'static str,
    how: String,
    target_ref: String,
    target: String,
    payload: String,
    lease: String,
    approver: String,
    grant: String,
    premises: Vec<(String, String, String, bool)>,
    records: Vec<RecordView>,
    /// Who proposed it and the caller of each dispatch and takeover, as journaled.
    callers: String,
    settled_by: Option<String>,
    can_recover: bool,
    recover_note: String,
    ambiguous: bool,
    settle_open: bool,
    settle_note: String,
}

/// Who settled an effect and how, as `verify` names them.
fn settled_by(records: &[Record]) -> Option<String> {
    records.iter().find_map(|r| match &r.event {
        Event::Settled(Settled { statement: s, .. }) => Some(format!(
            "{} found it {} (looked at {} UTC; note: {})",
            s.person,
            match &s.finding {
                Finding::Applied { reference } => format!("applied as {reference}"),
                Finding::NotApplied => "not applied".to_owned(),
            },
            datetime(s.looked_ms),
            if s.note.is_empty() { "none" } else { &s.note }
        )),
        _ => None,
    })
}

/// A record's event as JSON, cut to a readable length.
fn detail(event: &Event) -> String {
    let mut s = serde_json::to_string(event).unwrap_or_default();
    if s.len() > 600 {
        let mut cut = 600;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push('…');
    }
    s
}

async fn effect_page(
    State(ops): Shared,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(d): Query<Done>,
) -> Response {
    let s = match signed_in(ops.as_ref(), &headers) {
        Ok((s, _)) => s,
        Err(r) => return r,
    };
    let key = match EffectKey::fixed(id.clone()) {
        Ok(k) => k,
        Err(e) => return error_page(StatusCode::BAD_REQUEST, "No such effect", &e.to_string()),
    };
    let j = ops.journal.clone();
    let records = match blocking(move || j.history(&key).map_err(|e| e.to_string())).await {
        Ok(r) => r,
        Err(e) => {
            return error_page(
                StatusCode::SERVICE_UNAVAILABLE,
                "The journal could not be read",
                &e,
            );
        }
    };
    let Some(r) = interlock::receipt::build(&records) else {
        return error_page(
            StatusCode::NOT_FOUND,
            "No such effect",
            &format!("the journal holds no effect under {id}"),
        );
    };
    let show = |v: Option<&Value>| v.map_or_else(|| "–".to_owned(), Value::to_string);
    let rechecked = r.premises_rechecked.clone().unwrap_or_default();
    let mut names: Vec<&String> = r.premises_decided.keys().chain(rechecked.keys()).collect();
    names.sort();
    names.dedup();
    let premises = names
        .into_iter()
        .map(|k| {
            let (a, b) = (r.premises_decided.get(k), rechecked.get(k));
            let moved = r.premises_rechecked.is_some() && a != b;
            (k.clone(), show(a), show(b), moved)
        })
        .collect();
    let (can_recover, recover_note) = match (&ops.recover, r.outcome) {
        (_, s) if !matches!(s, Status::InFlight | Status::Proposed) => (false, String::new()),
        (Err(why), _) => (false, format!("Recovery cannot run from this page: {why}")),
        (Ok(rec), _) if rec.covers(&r.target).is_err() => (
            false,
            format!(
                "Recovery cannot run from this page for this effect: {}",
                rec.covers(&r.target).err().unwrap_or_default()
            ),
        ),
        (Ok(_), Status::Proposed) => (
            true,
            "Nothing was sent yet. Recovery continues the proposal as a worker's retry would: it \
             re-checks the lease and the premises and sends, or refuses."
                .to_owned(),
        ),
        (Ok(_), _) => (
            true,
            "Runs recovery now, as a worker's retry would: it takes the claim once its holder is \
             gone or its deadline passed, asks the target where its tier allows, and decides it."
                .to_owned(),
        ),
    };
    let ambiguous = r.outcome == Status::Ambiguous;
    let now = ops.now_ms();
    let (settle_open, settle_note) = if ambiguous {
        match interlock::core::settle::window(records.iter().map(|x| (x.at_ms, &x.event))) {
            Ok(w) => {
                let counts_from = w.quiet_after_ms.saturating_add(MAX_SKEW_MS);
                let note = format!(
                    "No send of it can land at the target after {} UTC ({} ms since the epoch); \
                     a look counts from {} UTC.",
                    datetime(w.quiet_after_ms),
                    w.quiet_after_ms,
                    datetime(counts_from),
                );
                if now > counts_from {
                    (
                        true,
                        format!("{note} Look at the target now, and sign what you find."),
                    )
                } else {
                    (
                        false,
                        format!(
                            "{note} Until then a send may still land there, and what you see can \
                             still change: look after then, and reload this page to settle."
                        ),
                    )
                }
            }
            Err(refusal) => (false, format!("It cannot be settled: {refusal}")),
        }
    } else {
        (false, String::new())
    };
    render(&EffectPage {
        person: s.approver,
        csrf: s.csrf,
        done: d.done,
        link: link(&r.key),
        key: r.key.clone(),
        status: r.outcome.label(),
        how: r.how.clone().unwrap_or_default(),
        target_ref: r.target_ref.clone().unwrap_or_default(),
        target: format!("{} (tier {})", r.target, u8::from(r.tier)),
        payload: serde_json::to_string_pretty(&r.payload).unwrap_or_default(),
        lease: r.lease.clone(),
        approver: r.approver.clone().unwrap_or_else(|| "–".to_owned()),
        grant: serde_json::to_string_pretty(&r.grant).unwrap_or_default(),
        premises,
        records: records
            .iter()
            .map(|x| RecordView {
                n: x.n,
                at: format!("{} UTC ({})", datetime(x.at_ms), x.at_ms),
                kind: x.event.kind(),
                detail: detail(&x.event),
            })
            .collect(),
        settled_by: settled_by(&records),
        callers: interlock::verify::callers(&records).detail,
        can_recover,
        recover_note,
        ambiguous,
        settle_open,
        settle_note,
    })
}

async fn recover(
    State(ops): Shared,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(f): Form<CsrfForm>,
) -> Response {
    let (s, dir) = match checked(ops.as_ref(), &headers, &f.csrf) {
        Ok((_, s, dir)) => (s, dir),
        Err(e) => return error_page(StatusCode::FORBIDDEN, "Not recovered", &e.to_string()),
    };
    let key = match EffectKey::fixed(id.clone()) {
        Ok(k) => k,
        Err(e) => return error_page(StatusCode::BAD_REQUEST, "Not recovered", &e.to_string()),
    };
    let recoverer = match &ops.recover {
        Ok(r) => r.clone(),
        Err(why) => {
            return error_page(
                StatusCode::SERVICE_UNAVAILABLE,
                "Not recovered",
                &format!("recovery cannot run from this page: {why}"),
            );
        }
    };
    let operator = s.approver.clone();
    let out = blocking(move || recoverer.recover(&key, &operator, dir)).await;
    let shown_outcome = match &out {
        Ok(o) => o.label(),
        Err(_) => "error".into(),
    };
    let message = match out {
        Ok(o) => match &o {
            Outcome::InFlight {
                retry_after,
                reason,
            }
            | Outcome::Retry {
                retry_after,
                reason,
            } => format!(
                "Recovery ran: {} — not decided yet: {reason}; try again in {:.1} s.",
                o.label(),
                retry_after.as_secs_f64()
            ),
            _ => format!("Recovery ran: {}.", o.label()),
        },
        Err(e) => {
            return error_page(
                StatusCode::SERVICE_UNAVAILABLE,
                "Not recovered",
                &format!("recovery of {id} failed: {e}"),
            );
        }
    };
    // The message may quote the premises' values; the log says how it ended.
    tracing::info!(key = %id, operator = %s.approver, outcome = %shown_outcome, "recovery from the operators' page");
    Redirect::to(&format!("/effect/{}?done={}", link(&id), link(&message))).into_response()
}

#[derive(Deserialize)]
struct StatementBody {
    csrf: String,
    /// `applied` or `not_applied`.
    finding: String,
    #[serde(default)]
    reference: String,
    #[serde(default)]
    note: String,
    /// `now`, or ms since the epoch.
    looked: String,
}

/// The answer to a settlement the journal's rules or the directory refused.
fn refused(e: &SettleError) -> Response {
    let status = match e {
        SettleError::Refused { .. } => StatusCode::CONFLICT,
        SettleError::BadSignature { .. }
        | SettleError::UnknownPerson { .. }
        | SettleError::NotPermitted { .. } => StatusCode::FORBIDDEN,
        SettleError::Key(_) => StatusCode::BAD_REQUEST,
        _ => StatusCode::SERVICE_UNAVAILABLE,
    };
    json_error(status, e)
}

async fn statement(
    State(ops): Shared,
    headers: HeaderMap,
    Path(id): Path<String>,
    Json(b): Json<StatementBody>,
) -> Response {
    let (token, s, _) = match operator_checked(&ops, &headers, &b.csrf) {
        Ok(x) => x,
        Err(r) => return r,
    };
    if b.note.len() > MAX_NOTE || b.reference.len() > MAX_REFERENCE {
        return json_error(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!(
                "a note is kept to {MAX_NOTE} bytes and a reference to {MAX_REFERENCE}: shorten \
                 them"
            ),
        );
    }
    // The note stays in the journal for good and `verify` prints it to terminals.
    if b.note.chars().any(|c| c.is_control() && c != '\n') {
        return json_error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "the note holds control characters: write it as plain text",
        );
    }
    let finding = match b.finding.as_str() {
        "applied" => Finding::Applied {
            reference: b.reference.clone(),
        },
        "not_applied" => Finding::NotApplied,
        other => {
            return json_error(
                StatusCode::UNPROCESSABLE_ENTITY,
                format!("the finding must be `applied` or `not_applied`, got {other:?}"),
            );
        }
    };
    let now = ops.now_ms();
    let looked_ms = match b.looked.trim() {
        "" => {
            return json_error(
                StatusCode::UNPROCESSABLE_ENTITY,
                "say when you looked at the target: `now` if you just did, or the time in ms \
                 since the epoch (when you looked, not when you sign)",
            );
        }
        "now" => now,
        ms => match ms.parse::<i64>() {
            Ok(v) if v > now => {
                return json_error(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    format!(
                        "you say you looked at {v}, after this page's clock ({now}): give the \
                         time you looked, in ms since the epoch"
                    ),
                );
            }
            Ok(v) => v,
            Err(_) => {
                return json_error(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    format!(
                        "when you looked must be `now` or the time in ms since the epoch, got \
                         {ms:?}"
                    ),
                );
            }
        },
    };
    let (o, person, note) = (ops.clone(), s.approver.clone(), b.note.clone());
    let drafted = blocking(move || {
        let j = o.journal.as_ref();
        let st = interlock::settle::draft(j, &id, finding, &person, &note, looked_ms)
            .and_then(|st| interlock::settle::precheck(j, &st, now).map(|()| st));
        Ok(st)
    })
    .await;
    let st = match drafted {
        Ok(Ok(st)) => st,
        Ok(Err(e)) => return refused(&e),
        Err(e) => return json_error(StatusCode::INTERNAL_SERVER_ERROR, e),
    };
    let bytes =
        base64::engine::general_purpose::STANDARD.encode(interlock::settle::signed_bytes(&st));
    match ops.auth.draft(&token, Drafted::Settlement(st), now) {
        Ok(draft) => Json(json!({ "draft": draft, "bytes": bytes })).into_response(),
        Err(e) => json_error(StatusCode::SERVICE_UNAVAILABLE, e),
    }
}

#[derive(Deserialize)]
struct SettleBody {
    csrf: String,
    draft: String,
    signature: String,
}

async fn settle(
    State(ops): Shared,
    headers: HeaderMap,
    Path(id): Path<String>,
    Json(b): Json<SettleBody>,
) -> Response {
    let (token, s, dir) = match operator_checked(&ops, &headers, &b.csrf) {
        Ok(x) => x,
        Err(r) => return r,
    };
    let Some(Drafted::Settlement(st)) = ops.auth.take_draft(&token, &b.draft, ops.now_ms()) else {
        return json_error(
            StatusCode::CONFLICT,
            "the statement to sign is unknown, used or expired: a statement is signed and \
             recorded once; reload the page and settle again",
        );
    };
    if st.effect != id {
        return json_error(
            StatusCode::BAD_REQUEST,
            "the statement is for another effect",
        );
    }
    let signed = SignedSettlement {
        statement: st,
        alg: SignatureAlg::Ed25519,
        signature: b.signature.to_ascii_lowercase(),
    };
    let o = ops.clone();
    let out = blocking(move || {
        let settlers = Settlers {
            directory: &dir,
            group: &o.group,
        };
        Ok(interlock::settle::settle(o.journal.as_ref(), settlers, &signed).map(|r| (r, signed)))
    })
    .await;
    match out {
        Ok(Ok((record, signed))) => {
            let found = match &signed.statement.finding {
                Finding::Applied { reference } => format!("applied as {reference}"),
                Finding::NotApplied => "not applied".to_owned(),
            };
            tracing::info!(key = %id, operator = %s.approver, %found, record = record.n, "settled from the operators' page");
            Json(json!({
                "message": format!(
                    "You settled {id}: {found}. The journal holds your signed statement (record {}); \
                     verify names you.",
                    record.n
                )
            }))
            .into_response()
        }
        Ok(Err(e)) => {
            tracing::warn!(key = %id, operator = %s.approver, error = %e, "settlement refused");
            refused(&e)
        }
        Err(e) => json_error(StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

#[cfg(test)]
#[path = "pages_tests.rs"]
mod tests;
