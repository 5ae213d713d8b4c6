//! The inbox's pages and form endpoints. Pages are rendered on the server; the only script signs
//! with the approver's key in the browser. Every POST needs the session's CSRF token, every
//! decision is re-checked against the journal at the moment it is made (the request may have
//! escalated since the page was loaded), and every refusal names the cause.
//!
//! Sign-in challenges are bounded per client (see [`crate::auth`]), and the client is the
//! address the request came from. `interlock inbox serve` listens on loopback behind a TLS proxy,
//! so there every request comes from the proxy: from a loopback peer the client is therefore the
//! address the proxy appended to `X-Forwarded-For` (its last entry), and from any other peer that
//! header is ignored, since the client could have written it. A proxy must append (nginx:
//! `proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;`) or set the header; one that
//! passes a client's own header on unchanged lets clients name themselves, and then only the
//! bound on all challenges together (which evicts nobody) holds.

// A handler's early return is the response itself; boxing it would only add noise.
#![allow(clippy::result_large_err)]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use askama::Template;
use axum::extract::{ConnectInfo, Form, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use base64::Engine as _;
use interlock::EffectKey;
use interlock::approval::{Route, RouteKind, SignedApproval, Statement};
use interlock::core::Premises;
use interlock::receipt::SignatureAlg;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::Inbox;
use crate::auth::{AuthError, Session};
use crate::desk::{self, Item, Standing};

const COOKIE: &str = "interlock_session";
/// How long a signed approval lives: long enough for the send's retries.
const APPROVAL_MS: i64 = 3_600_000;

type Shared = State<Arc<Inbox>>;

pub(crate) fn router(inbox: Arc<Inbox>) -> Router {
    Router::new()
        .route("/", get(home))
        .route("/login", get(login_page).post(login))
        .route("/login/challenge", get(challenge))
        .route("/logout", post(logout))
        .route("/history", get(history))
        .route("/request/{id}", get(request_page))
        .route("/request/{id}/statement", post(statement))
        .route("/request/{id}/approve", post(approve))
        .route("/request/{id}/deny", post(deny))
        .route("/receipt/{id}", get(receipt))
        .route("/static/inbox.js", get(script))
        .layer(axum::middleware::map_response(harden))
        .with_state(inbox)
}

/// Headers every answer carries: scripts only from the inbox itself, never framed, never cached
/// (pages carry the CSRF token), content types taken as given.
async fn harden(mut r: Response) -> Response {
    let h = r.headers_mut();
    for (name, value) in [
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
             frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
        ),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::CACHE_CONTROL, "no-store"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
    ] {
        h.insert(name, HeaderValue::from_static(value));
    }
    r
}

fn now(inbox: &Inbox) -> i64 {
    inbox.clock.now_ms()
}

/// A path segment, percent-encoded.
fn link(id: &str) -> String {
    id.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn render(t: &impl Template) -> Response {
    match t.render() {
        Ok(html) => Html(html).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "a page could not be rendered");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "the page could not be rendered",
            )
                .into_response()
        }
    }
}

#[derive(Template)]
#[template(path = "error.html")]
struct ErrorPage<'a> {
    title: &'a str,
    message: &'a str,
}

fn error_page(status: StatusCode, title: &str, message: &str) -> Response {
    (status, render(&ErrorPage { title, message })).into_response()
}

fn json_error(status: StatusCode, message: impl std::fmt::Display) -> Response {
    (status, Json(json!({ "error": message.to_string() }))).into_response()
}

fn session_token(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE)
        .map(|(_, v)| v.to_owned())
}

/// The signed-in session, or the way to the sign-in page.
fn signed_in(inbox: &Inbox, headers: &HeaderMap) -> Result<(String, Session), Response> {
    let token = session_token(headers).ok_or_else(|| Redirect::to("/login").into_response())?;
    inbox
        .auth
        .session(&token, now(inbox))
        .map(|s| (token, s))
        .map_err(|_| Redirect::to("/login").into_response())
}

/// The session for a form or a JSON call, checked against its CSRF token.
fn checked(inbox: &Inbox, headers: &HeaderMap, csrf: &str) -> Result<(String, Session), AuthError> {
    let token = session_token(headers).ok_or(AuthError::NoSession)?;
    let s = inbox.auth.checked(&token, csrf, now(inbox))?;
    Ok((token, s))
}

fn groups_of(inbox: &Inbox, approver: &str) -> String {
    let g = inbox.approvers.groups_of(approver);
    if g.is_empty() {
        "no group".into()
    } else {
        g.join(", ")
    }
}

async fn items(inbox: &Arc<Inbox>) -> Result<Vec<Item>, Response> {
    let i = inbox.clone();
    tokio::task::spawn_blocking(move || {
        desk::items(i.journal.as_ref(), &i.approvers, &i.auth, now(&i))
    })
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

async fn script() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        include_str!("../static/inbox.js"),
    )
        .into_response()
}

#[derive(Template)]
#[template(path = "login.html")]
struct LoginPage;

async fn login_page() -> Response {
    render(&LoginPage)
}

#[derive(Deserialize)]
struct ChallengeQuery {
    approver: String,
}

/// The address a request came from: the peer's, or, when the peer is a proxy on this host, the
/// one it appended to `X-Forwarded-For`. Without the peer's address (the router served without
/// [`ConnectInfo`]) every request counts as one unknown client.
fn client(peer: Option<SocketAddr>, headers: &HeaderMap) -> IpAddr {
    let Some(peer) = peer.map(|p| p.ip()) else {
        return IpAddr::V4(Ipv4Addr::UNSPECIFIED);
    };
    let loopback = match peer {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    };
    if !loopback {
        return peer;
    }
    headers
        .get_all("x-forwarded-for")
        .iter()
        .next_back()
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.rsplit(',').next())
        .map(str::trim)
        .and_then(|a| {
            a.parse::<IpAddr>()
                .ok()
                .or_else(|| a.parse::<SocketAddr>().ok().map(|s| s.ip()))
        })
        .unwrap_or(peer)
}

async fn challenge(
    State(inbox): Shared,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    headers: HeaderMap,
    Query(q): Query<ChallengeQuery>,
) -> Response {
    let from = client(peer.map(|Extension(ConnectInfo(p))| p), &headers);
    match inbox.auth.challenge(&q.approver, from, now(&inbox)) {
        Ok(nonce) => Json(json!({ "nonce": nonce })).into_response(),
        Err(e) => {
            let busy = e == AuthError::Busy;
            let mut r = json_error(StatusCode::SERVICE_UNAVAILABLE, e);
            if busy {
                tracing::warn!(%from, "sign-in challenges are full: refused one");
                r.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("120"));
            }
            r
        }
    }
}

#[derive(Deserialize)]
struct LoginBody {
    approver: String,
    nonce: String,
    signature: String,
}

async fn login(State(inbox): Shared, Json(b): Json<LoginBody>) -> Response {
    match inbox.auth.login(
        &inbox.approvers,
        &b.approver,
        &b.nonce,
        &b.signature,
        now(&inbox),
    ) {
        Ok((token, _)) => {
            tracing::info!(approver = %b.approver, "signed in");
            let cookie = format!("{COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/");
            let mut r = Json(json!({ "ok": true })).into_response();
            if let Ok(v) = HeaderValue::from_str(&cookie) {
                r.headers_mut().insert(header::SET_COOKIE, v);
            }
            r
        }
        Err(e) => {
            tracing::warn!(approver = %b.approver, error = %e, "sign-in refused");
            json_error(StatusCode::UNAUTHORIZED, e)
        }
    }
}

#[derive(Deserialize)]
struct CsrfForm {
    csrf: String,
}

async fn logout(State(inbox): Shared, headers: HeaderMap, Form(f): Form<CsrfForm>) -> Response {
    match checked(&inbox, &headers, &f.csrf) {
        Ok((token, _)) => {
            inbox.auth.logout(&token);
            let mut r = Redirect::to("/login").into_response();
            r.headers_mut().insert(
                header::SET_COOKIE,
                HeaderValue::from_static("interlock_session=; Max-Age=0; Path=/"),
            );
            r
        }
        Err(e) => error_page(StatusCode::FORBIDDEN, "Not signed out", &e.to_string()),
    }
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
    let (_, s) = match signed_in(&inbox, &headers) {
        Ok(x) => x,
        Err(r) => return r,
    };
    let all = match items(&inbox).await {
        Ok(i) => i,
        Err(r) => return r,
    };
    let waiting = desk::waiting_for(&all, &inbox.approvers, &s.approver)
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
        groups: groups_of(&inbox, &s.approver),
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
fn cannot_decide(inbox: &Inbox, item: &Item, approver: &str) -> Option<String> {
    let r = &item.route;
    if !inbox.approvers.is_member(&r.step.group, approver) {
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
    let (_, s) = match signed_in(&inbox, &headers) {
        Ok(x) => x,
        Err(r) => return r,
    };
    let item = match items(&inbox).await.and_then(|all| find(all, &id)) {
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
    let cannot = cannot_decide(&inbox, &item, &s.approver);
    let r = &item.route;
    render(&RequestPage {
        groups: groups_of(&inbox, &s.approver),
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
    id: &str,
    n: u32,
    approver: &str,
) -> Result<Route, Response> {
    let item = items(inbox).await.and_then(|all| find(all, id))?;
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
    if let Some(why) = cannot_decide(inbox, &item, approver) {
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
    let (token, s) = match checked(&inbox, &headers, &b.csrf) {
        Ok(x) => x,
        Err(e) => return json_error(StatusCode::FORBIDDEN, e),
    };
    let route = match still_there(&inbox, &id, b.n, &s.approver).await {
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
    match inbox.auth.draft(&token, st, route.n, issued) {
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
    let (token, s) = match checked(&inbox, &headers, &b.csrf) {
        Ok(x) => x,
        Err(e) => return json_error(StatusCode::FORBIDDEN, e),
    };
    let Some((st, n)) = inbox.auth.take_draft(&token, &b.draft, now(&inbox)) else {
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
    let genuine = inbox
        .approvers
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
    let route = match still_there(&inbox, &id, n, &s.approver).await {
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
    let s = match checked(&inbox, &headers, &f.csrf) {
        Ok((_, s)) => s,
        Err(e) => return error_page(StatusCode::FORBIDDEN, "Not declined", &e.to_string()),
    };
    let route = match still_there(&inbox, &id, f.n, &s.approver).await {
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
    let (_, s) = match signed_in(&inbox, &headers) {
        Ok(x) => x,
        Err(r) => return r,
    };
    let all = match items(&inbox).await {
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
        groups: groups_of(&inbox, &s.approver),
        approver: s.approver,
        csrf: s.csrf,
        rows,
    })
}

async fn receipt(State(inbox): Shared, headers: HeaderMap, Path(id): Path<String>) -> Response {
    if let Err(r) = signed_in(&inbox, &headers) {
        return r;
    }
    let key = match EffectKey::fixed(id.clone()) {
        Ok(k) => k,
        Err(e) => return json_error(StatusCode::BAD_REQUEST, e),
    };
    let journal = inbox.journal.clone();
    let history = tokio::task::spawn_blocking(move || journal.history(&key)).await;
    match history {
        Ok(Ok(h)) => match interlock::receipt::build(&h) {
            Some(r) => Json(r).into_response(),
            None => json_error(
                StatusCode::NOT_FOUND,
                format!("no effect {id} is in the journal"),
            ),
        },
        Ok(Err(e)) => json_error(StatusCode::SERVICE_UNAVAILABLE, e),
        Err(e) => json_error(StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn forwarded(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append("x-forwarded-for", HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn only_a_proxy_on_this_host_is_believed_about_who_the_client_is() {
        let at = |a: &str| Some(a.parse::<SocketAddr>().unwrap());
        let ip = |a: &str| a.parse::<IpAddr>().unwrap();
        let claims = forwarded(&["192.0.2.66, 198.51.100.20"]);
        // From a proxy on this host: the address it appended, never the client's own claims.
        assert_eq!(client(at("127.0.0.1:9000"), &claims), ip("198.51.100.20"));
        assert_eq!(client(at("[::1]:9000"), &claims), ip("198.51.100.20"));
        assert_eq!(
            client(
                at("127.0.0.1:9000"),
                &forwarded(&["192.0.2.66", "[2001:db8::1]:443"])
            ),
            ip("2001:db8::1"),
            "the last header's last entry"
        );
        assert_eq!(
            client(at("127.0.0.1:9000"), &forwarded(&["unknown"])),
            ip("127.0.0.1")
        );
        assert_eq!(
            client(at("127.0.0.1:9000"), &HeaderMap::new()),
            ip("127.0.0.1")
        );
        // From anyone else, the header is theirs to write: their own address counts.
        assert_eq!(client(at("203.0.113.7:5000"), &claims), ip("203.0.113.7"));
        assert_eq!(client(None, &claims), ip("0.0.0.0"));
    }
}
