//! The inbox's pages and form endpoints. Pages are rendered on the server; the only script signs
//! with the approver's key in the browser. Every POST needs the session's CSRF token, every
//! decision is re-checked against the journal at the moment it is made (the request may have
//! escalated since the page was loaded), and every refusal names the cause.
//!
//! Sign-in, sessions and the headers are the shared door's ([`crate::web`]).

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
use interlock::EffectKey;
use interlock::approval::{Approvers, Route, RouteKind, SignedApproval, Statement};
use interlock::core::Premises;
use interlock::receipt::SignatureAlg;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::Inbox;
use crate::auth::{AuthError, Drafted};
use crate::desk::{self, Item, Standing};
use crate::web::{
    Door, checked, door_routes, error_page, harden, json_error, link, render, signed_in,
};
/// How long a signed approval lives: long enough for the send's retries.
const APPROVAL_MS: i64 = 3_600_000;

type Shared = State<Arc<Inbox>>;

pub(crate) fn router(inbox: Arc<Inbox>) -> Router {
    door_routes::<Inbox>()
        .route("/", get(home))
        .route("/history", get(history))
        .route("/request/{id}", get(request_page))
        .route("/request/{id}/statement", post(statement))
        .route("/request/{id}/approve", post(approve))
        .route("/request/{id}/deny", post(deny))
        .layer(axum::middleware::map_response(harden))
        .with_state(inbox)
}

impl Door for Inbox {
    fn auth(&self) -> &crate::auth::Auth {
        &self.auth
    }
    fn approvers(&self) -> Result<Arc<interlock::approval::Approvers>, String> {
        (self.approvers)()
    }
    fn journal(&self) -> &Arc<dyn interlock::JournalStore> {
        &self.journal
    }
    fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }
    const NAME: &'static str = "Interlock inbox";
    const COOKIE: &'static str = "interlock_session";
}

fn now(inbox: &Inbox) -> i64 {
    inbox.clock.now_ms()
}

fn groups_of(dir: &Approvers, approver: &str) -> String {
    let g = dir.groups_of(approver);
    if g.is_empty() {
        "no group".into()
    } else {
        g.join(", ")
    }
}

/// The requests routed to people, judged against `dir`, the directory as this request read it.
async fn items(inbox: &Arc<Inbox>, dir: Arc<Approvers>) -> Result<Vec<Item>, Response> {
    let i = inbox.clone();
    tokio::task::spawn_blocking(move || desk::items(i.journal.as_ref(), &dir, &i.auth, now(&i)))
        .await
        .map_err(|e| error_page(StatusCode::INTERNAL_SERVER_ERROR, "Inbox", &e.to_string()))?
        .map_err(|e| {
            error_page(
                StatusCode::SERVICE_UNAVAILABLE,
                "The journal could not be read",
                &e.to_string(),
            )
        })
}

struct Row {
    request: String,
    link: String,
    repair: bool,
    summary: String,
    reason: String,
    group: String,
    level: u32,
    sla: String,
}

#[derive(Template)]
#[template(path = "inbox.html")]
struct InboxPage {
    approver: String,
    groups: String,
    csrf: String,
    done: Option<String>,
    waiting: Vec<Row>,
}

#[derive(Deserialize)]
struct Done {
    done: Option<String>,
}

async fn home(State(inbox): Shared, headers: HeaderMap, Query(d): Query<Done>) -> Response {
    let (s, dir) = match signed_in(inbox.as_ref(), &headers) {
        Ok(x) => x,
        Err(r) => return r,
    };
    let all = match items(&inbox, dir.clone()).await {
        Ok(i) => i,
        Err(r) => return r,
    };
    let waiting = desk::waiting_for(&all, &dir, &s.approver)
        .into_iter()
        .map(|i| Row {
            request: i.route.request.clone(),
            link: link(&i.route.request),
            repair: i.is_repair(),
            summary: i.summary(),
            reason: i.route.step.reason.clone(),
            group: i.route.step.group.clone(),
            level: i.route.step.level,
            sla: i.sla_left_ms.map_or_else(|| "–".into(), desk::duration),
        })
        .collect();
    render(&InboxPage {
        groups: groups_of(&dir, &s.approver),
        approver: s.approver,
        csrf: s.csrf,
        done: d.done,
        waiting,
    })
}

#[derive(Template)]
#[template(path = "request.html")]
struct RequestPage {
    approver: String,
    groups: String,
    csrf: String,
    request: String,
    link: String,
    n: u32,
    repair: bool,
    repair_of: String,
    summary: String,
    group: String,
    level: u32,
    kind: &'static str,
    reason: String,
    sla: String,
    standing: String,
    changes: Vec<(String, String, String)>,
    repair_summary: String,
    facts: Vec<(String, String, String, bool)>,
    facts_error: Option<String>,
    budgets: Vec<desk::BudgetRow>,
    budgets_error: Option<String>,
    payload: String,
    payload_compact: String,
    can_decide: bool,
    cannot: String,
}

fn find(all: Vec<Item>, id: &str) -> Result<Item, Response> {
    all.into_iter()
        .find(|i| i.route.request == id)
        .ok_or_else(|| {
            error_page(
                StatusCode::NOT_FOUND,
                "No such request",
                &format!("no request {id} was ever routed to a person"),
            )
        })
}

/// Why `approver` cannot decide `item` now, if they cannot.
fn cannot_decide(dir: &Approvers, item: &Item, approver: &str) -> Option<String> {
    let r = &item.route;
    if !dir.is_member(&r.step.group, approver) {
        return Some(format!(
            "request {} is held by group {} (level {}); you are not a member of it",
            r.request, r.step.group, r.step.level
        ));
    }
    match &item.standing {
        Standing::Waiting => None,
        Standing::Sent(by) | Standing::Approved(by) => Some(format!(
            "request {} is already approved by {by}: it cannot be approved twice",
            r.request
        )),
        other => Some(format!("request {} is {}", r.request, other.label())),
    }
}

async fn request_page(
    State(inbox): Shared,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let (s, dir) = match signed_in(inbox.as_ref(), &headers) {
        Ok(x) => x,
        Err(r) => return r,
    };
    let item = match items(&inbox, dir.clone())
        .await
        .and_then(|all| find(all, &id))
    {
        Ok(i) => i,
        Err(r) => return r,
    };
    let d = &item.route.step.detail;
    let then: Premises = serde_json::from_value(d["premises"].clone()).unwrap_or_default();
    let payload = d["payload"].clone();
    let reader = inbox.premises.clone();
    let key = EffectKey::fixed(id.clone());
    let now_read = tokio::task::spawn_blocking(move || match key {
        Ok(k) => reader.read(&k, &payload).map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    })
    .await
    .unwrap_or_else(|e| Err(e.to_string()));
    let (now_facts, facts_error) = match now_read {
        Ok(p) => (p, None),
        Err(e) => (Premises::new(), Some(e)),
    };
    let mut names: Vec<&String> = then.keys().chain(now_facts.keys()).collect();
    names.sort();
    names.dedup();
    let show = |v: Option<&Value>| v.map_or_else(|| "–".to_owned(), Value::to_string);
    let facts = names
        .into_iter()
        .map(|k| {
            let (a, b) = (then.get(k), now_facts.get(k));
            let moved = facts_error.is_none() && a != b;
            (k.clone(), show(a), show(b), moved)
        })
        .collect();
    let changes = d["changes"]
        .as_array()
        .map(|cs| {
            cs.iter()
                .map(|c| {
                    (
                        c["field"].as_str().unwrap_or("?").to_owned(),
                        c["was"].to_string(),
                        c["now"].to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let (budgets, budgets_error) = {
        let i = inbox.clone();
        let (request, payload) = (id.clone(), d["payload"].clone());
        match tokio::task::spawn_blocking(move || {
            desk::budgets(i.journal.as_ref(), &request, &payload, &i.target, now(&i))
                .map_err(|e| e.to_string())
        })
        .await
        .unwrap_or_else(|e| Err(e.to_string()))
        {
            Ok(rows) => (rows, None),
            Err(e) => (Vec::new(), Some(e)),
        }
    };
    let cannot = cannot_decide(&dir, &item, &s.approver);
    let r = &item.route;
    render(&RequestPage {
        groups: groups_of(&dir, &s.approver),
        approver: s.approver.clone(),
        csrf: s.csrf.clone(),
        request: r.request.clone(),
        link: link(&r.request),
        n: r.n,
        repair: item.is_repair(),
        repair_of: r.step.repair_of.clone().unwrap_or_default(),
        summary: item.summary(),
        group: r.step.group.clone(),
        level: r.step.level,
        kind: r.step.kind.label(),
        reason: r.step.reason.clone(),
        sla: item.sla_left_ms.map_or_else(|| "–".into(), desk::duration),
        standing: item.standing.label(),
        changes,
        repair_summary: d["repair"]["summary"].as_str().unwrap_or("").to_owned(),
        facts,
        facts_error,
        budgets,
        budgets_error,
        payload: serde_json::to_string_pretty(&d["payload"]).unwrap_or_default(),
        payload_compact: d["payload"].to_string(),
        can_decide: cannot.is_none(),
        cannot: cannot.unwrap_or_default(),
    })
}

#[derive(Deserialize)]
struct StatementBody {
    csrf: String,
    n: u32,
}

/// The request's route as the page showed it (step `n`), still where it was and decidable by
/// `approver`; otherwise the refusal to answer with.
async fn still_there(
    inbox: &Arc<Inbox>,
    dir: &Arc<Approvers>,
    id: &str,
    n: u32,
    approver: &str,
) -> Result<Route, Response> {
    let item = items(inbox, dir.clone())
        .await
        .and_then(|all| find(all, id))?;
    let r = &item.route;
    if r.n != n {
        return Err(json_error(
            StatusCode::CONFLICT,
            format!(
                "request {id} moved since the page was loaded: it is now with group {} at level {} \
                 ({}); approvals for the step you saw can no longer be given",
                r.step.group,
                r.step.level,
                r.step.kind.label()
            ),
        ));
    }
    if let Some(why) = cannot_decide(dir, &item, approver) {
        return Err(json_error(StatusCode::FORBIDDEN, why));
    }
    Ok(item.route)
}

async fn statement(
    State(inbox): Shared,
    headers: HeaderMap,
    Path(id): Path<String>,
    Json(b): Json<StatementBody>,
) -> Response {
    let (token, s, dir) = match checked(inbox.as_ref(), &headers, &b.csrf) {
        Ok(x) => x,
        Err(e) => return json_error(StatusCode::FORBIDDEN, e),
    };
    let route = match still_there(&inbox, &dir, &id, b.n, &s.approver).await {
        Ok(r) => r,
        Err(r) => return r,
    };
    let d = &route.step.detail;
    let premises: Premises = match serde_json::from_value(d["premises"].clone()) {
        Ok(p) => p,
        Err(e) => {
            return json_error(
                StatusCode::UNPROCESSABLE_ENTITY,
                format!("request {id} shows no readable facts to approve: {e}"),
            );
        }
    };
    let issued = now(&inbox);
    let st = Statement {
        request: route.request.clone(),
        group: route.step.group.clone(),
        level: route.step.level,
        approver: s.approver.clone(),
        payload: d["payload"].clone(),
        premises,
        issued_ms: issued,
        expires_ms: issued + APPROVAL_MS,
        repair_of: route.step.repair_of.clone(),
    };
    let bytes = base64::engine::general_purpose::STANDARD.encode(st.signed_bytes());
    match inbox.auth.draft(
        &token,
        Drafted::Approval {
            statement: st,
            step: route.n,
        },
        issued,
    ) {
        Ok(draft) => Json(json!({ "draft": draft, "bytes": bytes })).into_response(),
        Err(e) => json_error(StatusCode::SERVICE_UNAVAILABLE, e),
    }
}

#[derive(Deserialize)]
struct ApproveBody {
    csrf: String,
    draft: String,
    signature: String,
}

async fn approve(
    State(inbox): Shared,
    headers: HeaderMap,
    Path(id): Path<String>,
    Json(b): Json<ApproveBody>,
) -> Response {
    let (token, s, dir) = match checked(inbox.as_ref(), &headers, &b.csrf) {
        Ok(x) => x,
        Err(e) => return json_error(StatusCode::FORBIDDEN, e),
    };
    let Some(Drafted::Approval {
        statement: st,
        step: n,
    }) = inbox.auth.take_draft(&token, &b.draft, now(&inbox))
    else {
        return json_error(
            StatusCode::CONFLICT,
            "the statement to sign is unknown, used or expired: reload the page and approve again",
        );
    };
    if st.request != id {
        return json_error(
            StatusCode::BAD_REQUEST,
            "the statement is for another request",
        );
    }
    let approval = SignedApproval {
        statement: st,
        alg: SignatureAlg::Ed25519,
        signature: b.signature.to_ascii_lowercase(),
    };
    let genuine = dir
        .key_of(&s.approver)
        .is_some_and(|k| approval.verifies_with(&k));
    if !genuine {
        return json_error(
            StatusCode::BAD_REQUEST,
            AuthError::BadSignature(s.approver.clone()),
        );
    }
    // The request may have escalated (or been approved) since the statement was drafted from
    // step `n`: steps are only appended, so the same step means the same group and level.
    let route = match still_there(&inbox, &dir, &id, n, &s.approver).await {
        Ok(r) => r,
        Err(r) => return r,
    };
    let Some(workflow) = route.step.detail["workflow_id"].as_str().map(str::to_owned) else {
        return json_error(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("request {id} names no workflow to send the approval to"),
        );
    };
    if !inbox.auth.decide(&id, route.n, &s.approver, now(&inbox)) {
        return json_error(
            StatusCode::CONFLICT,
            format!("request {id} is already approved: it cannot be approved twice"),
        );
    }
    if let Err(e) = inbox.deliver.approve(&workflow, &approval).await {
        inbox.auth.undecide(&id, route.n);
        return json_error(StatusCode::BAD_GATEWAY, e);
    }
    tracing::info!(request = %id, approver = %s.approver, %workflow, "approval delivered");
    let what = if route.step.kind == RouteKind::Repair {
        "accepted the repair"
    } else {
        "approved"
    };
    Json(json!({ "message": format!("You {what} {id}; its workflow checks your approval and sends it through the gate.") }))
        .into_response()
}

#[derive(Deserialize)]
struct DenyForm {
    csrf: String,
    n: u32,
    reason: String,
}

async fn deny(
    State(inbox): Shared,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(f): Form<DenyForm>,
) -> Response {
    let (s, dir) = match checked(inbox.as_ref(), &headers, &f.csrf) {
        Ok((_, s, dir)) => (s, dir),
        Err(e) => return error_page(StatusCode::FORBIDDEN, "Not declined", &e.to_string()),
    };
    let route = match still_there(&inbox, &dir, &id, f.n, &s.approver).await {
        Ok(r) => r,
        Err(r) => return r,
    };
    let Some(workflow) = route.step.detail["workflow_id"].as_str().map(str::to_owned) else {
        return error_page(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Not declined",
            &format!("request {id} names no workflow"),
        );
    };
    if !inbox.auth.decide(&id, route.n, &s.approver, now(&inbox)) {
        return error_page(
            StatusCode::CONFLICT,
            "Not declined",
            &format!("request {id} was already decided"),
        );
    }
    if let Err(e) = inbox
        .deliver
        .deny(&workflow, &id, &s.approver, &f.reason)
        .await
    {
        inbox.auth.undecide(&id, route.n);
        return error_page(StatusCode::BAD_GATEWAY, "Not declined", &e.to_string());
    }
    inbox.auth.deny(&id);
    Redirect::to(&format!("/?done={}", link(&format!("You declined {id}.")))).into_response()
}

struct HistoryRow {
    request: String,
    link: String,
    summary: String,
    route: String,
    standing: String,
    receipt: bool,
}

#[derive(Template)]
#[template(path = "history.html")]
struct HistoryPage {
    approver: String,
    groups: String,
    csrf: String,
    rows: Vec<HistoryRow>,
}

async fn history(State(inbox): Shared, headers: HeaderMap) -> Response {
    let (s, dir) = match signed_in(inbox.as_ref(), &headers) {
        Ok(x) => x,
        Err(r) => return r,
    };
    let all = match items(&inbox, dir.clone()).await {
        Ok(i) => i,
        Err(r) => return r,
    };
    let rows = all
        .iter()
        .rev()
        .map(|i| HistoryRow {
            request: i.route.request.clone(),
            link: link(&i.route.request),
            summary: i.summary(),
            route: format!(
                "{} to {} (level {}): {}",
                i.route.step.kind.label(),
                i.route.step.group,
                i.route.step.level,
                i.route.step.reason
            ),
            standing: i.standing.label(),
            receipt: matches!(i.standing, Standing::Effect(_)),
        })
        .collect();
    render(&HistoryPage {
        groups: groups_of(&dir, &s.approver),
        approver: s.approver,
        csrf: s.csrf,
        rows,
    })
}
