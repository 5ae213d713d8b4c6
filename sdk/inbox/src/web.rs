//! What the inbox and the operators' page share: the sign-in by a person's own key, the session
//! and its CSRF token, the headers that keep scripts to the server's own, and how an answer or a
//! refusal is rendered. Both pages stand on a [`Door`]; a person signed in at one is not signed in
//! at the other (each server keeps its own sessions, under a cookie of its own name, since
//! cookies do not tell ports apart). A door may admit only some of the directory (the operators'
//! page admits its group). Each request reads the door's directory again (both pages re-read
//! their file) and asks whether the session's person is still in it, with the key they signed in
//! with, and admitted: a person removed, or whose key was replaced, loses the session's use at
//! once, and their next sign-in is refused.
//!
//! Sign-in challenges are bounded per client (see [`crate::auth`]), and the client is the
//! address the request came from. A server off loopback stands behind a TLS proxy named by address
//! (`--behind-proxy`, [`interlock::reach`]): it answers that proxy and loopback peers only, and
//! from the proxy the client is the address it appended to `X-Forwarded-For` (its last entry).
//! From any other peer that header is ignored, loopback included, since the client could have
//! written it. A proxy must append (nginx: `proxy_set_header X-Forwarded-For
//! $proxy_add_x_forwarded_for;`) or set the header; one that passes a client's own header on
//! unchanged lets clients name themselves, and then only the bound on all challenges together
//! (which evicts nobody) holds.

// A handler's early return is the response itself; boxing it would only add noise.
#![allow(clippy::result_large_err)]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use askama::Template;
use axum::extract::{ConnectInfo, Form, Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use interlock::approval::Approvers;
use interlock::reach::Reach;
use interlock::{EffectKey, JournalStore};
use serde::Deserialize;
use serde_json::json;

use crate::auth::{Auth, AuthError, Session};

/// What a page that people sign in to stands on.
pub(crate) trait Door: Send + Sync + 'static {
    /// Sign-ins, sessions and drafts.
    fn auth(&self) -> &Auth;
    /// The directory that holds the people's keys, as it is now.
    fn approvers(&self) -> Result<Arc<Approvers>, String>;
    /// Why `person` may not use this page, if they may not.
    fn refuses(&self, _person: &str, _directory: &Approvers) -> Option<String> {
        None
    }
    /// The journal receipts are read from.
    fn journal(&self) -> &Arc<dyn JournalStore>;
    /// The clock sessions are dated by.
    fn now_ms(&self) -> i64;
    /// The page's name, in its heading.
    const NAME: &'static str;
    /// The session cookie's name.
    const COOKIE: &'static str;
}

/// `router` as served under `reach`: a peer it does not admit is answered 403 before any route
/// runs, and [`client`] believes `X-Forwarded-For` from the proxies it names alone.
pub(crate) fn guarded(router: Router, reach: Reach) -> Router {
    // Behind a TLS proxy the browser speaks https: the session cookie is `__Host-` and `Secure`
    // (sent over TLS only, to this host only, and not settable by a sibling host or over plain
    // HTTP), and the page asks the browser never to use plain HTTP for it (HSTS).
    let router = if reach.proxies.is_empty() {
        router
    } else {
        router.layer(axum::middleware::from_fn(over_tls))
    };
    router
        .layer(axum::middleware::from_fn(admit))
        .layer(Extension(Arc::new(reach)))
}

/// The prefix a cookie set over TLS carries: the browser keeps it only if `Secure`, for this host,
/// at path `/`, and no other host or plain-HTTP page can set one.
const HOST_PREFIX: &str = "__Host-";

/// For a page served through a TLS proxy: only `__Host-` cookies are read (named without the
/// prefix for the handlers), every cookie set is `__Host-` and `Secure`, and HSTS is sent.
async fn over_tls(mut request: Request, next: Next) -> Response {
    let kept: Vec<String> = request
        .headers()
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().strip_prefix(HOST_PREFIX).map(str::to_owned))
        .collect();
    let h = request.headers_mut();
    h.remove(header::COOKIE);
    if let (false, Ok(v)) = (kept.is_empty(), HeaderValue::from_str(&kept.join("; "))) {
        h.insert(header::COOKIE, v);
    }
    let mut r = next.run(request).await;
    let set: Vec<HeaderValue> = r
        .headers()
        .get_all(header::SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(|v| {
            let secure = if v.contains("; Secure") {
                ""
            } else {
                "; Secure"
            };
            HeaderValue::from_str(&format!("{HOST_PREFIX}{v}{secure}")).ok()
        })
        .collect();
    let h = r.headers_mut();
    h.remove(header::SET_COOKIE);
    for v in set {
        h.append(header::SET_COOKIE, v);
    }
    h.insert(
        header::STRICT_TRANSPORT_SECURITY,
        HeaderValue::from_static("max-age=31536000"),
    );
    r
}

async fn admit(
    Extension(reach): Extension<Arc<Reach>>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    request: Request,
    next: Next,
) -> Response {
    match peer {
        Some(Extension(ConnectInfo(p))) if reach.admits(p.ip()) => next.run(request).await,
        // Without the peer's address nothing can be told: refused when a proxy is named.
        None if reach.proxies.is_empty() => next.run(request).await,
        _ => {
            tracing::warn!(peer = ?peer.map(|Extension(ConnectInfo(p))| p), "refused a peer that is not the configured TLS proxy");
            (
                StatusCode::FORBIDDEN,
                "this page answers its TLS proxy only: open it through the proxy's https address\n",
            )
                .into_response()
        }
    }
}

/// The routes every door has: sign-in, sign-out, the script, receipts.
pub(crate) fn door_routes<D: Door>() -> Router<Arc<D>> {
    Router::new()
        .route("/login", get(login_page::<D>).post(login::<D>))
        .route("/login/challenge", get(challenge::<D>))
        .route("/logout", post(logout::<D>))
        .route("/receipt/{id}", get(receipt::<D>))
        .route("/static/inbox.js", get(script))
}

/// Headers every answer carries: scripts only from the server itself, never framed, never cached
/// (pages carry the CSRF token), content types taken as given.
pub(crate) async fn harden(mut r: Response) -> Response {
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

/// A path segment, percent-encoded.
pub(crate) fn link(id: &str) -> String {
    id.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

pub(crate) fn render(t: &impl Template) -> Response {
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

pub(crate) fn error_page(status: StatusCode, title: &str, message: &str) -> Response {
    (status, render(&ErrorPage { title, message })).into_response()
}

pub(crate) fn json_error(status: StatusCode, message: impl std::fmt::Display) -> Response {
    (status, Json(json!({ "error": message.to_string() }))).into_response()
}

fn session_token(cookie: &str, headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == cookie)
        .map(|(_, v)| v.to_owned())
}

/// Whether the door admits the session's person by the directory as it is now: still in it, with
/// the key they signed in with, and admitted by the page.
fn admitted<D: Door>(door: &D, s: &Session) -> Result<Arc<Approvers>, AuthError> {
    let person = &s.approver;
    let dir = door.approvers().map_err(AuthError::Directory)?;
    match dir.key_of(person) {
        None => return Err(AuthError::UnknownApprover(person.to_owned())),
        Some(k) if hex::encode(k.to_bytes()) != s.key => {
            return Err(AuthError::KeyReplaced(person.to_owned()));
        }
        Some(_) => {}
    }
    match door.refuses(person, &dir) {
        Some(why) => Err(AuthError::NotAdmitted(why)),
        None => Ok(dir),
    }
}

/// The signed-in session (of a person the door still admits) and the directory as it is now, or
/// the way to the sign-in page.
pub(crate) fn signed_in<D: Door>(
    door: &D,
    headers: &HeaderMap,
) -> Result<(Session, Arc<Approvers>), Response> {
    let token =
        session_token(D::COOKIE, headers).ok_or_else(|| Redirect::to("/login").into_response())?;
    let s = door
        .auth()
        .session(&token, door.now_ms())
        .map_err(|_| Redirect::to("/login").into_response())?;
    match admitted(door, &s) {
        Ok(dir) => Ok((s, dir)),
        Err(e) => Err(error_page(
            StatusCode::FORBIDDEN,
            "Not admitted",
            &e.to_string(),
        )),
    }
}

/// The session for a form or a JSON call, checked against its CSRF token, of a person the door
/// still admits, and the directory as it is now.
pub(crate) fn checked<D: Door>(
    door: &D,
    headers: &HeaderMap,
    csrf: &str,
) -> Result<(String, Session, Arc<Approvers>), AuthError> {
    let token = session_token(D::COOKIE, headers).ok_or(AuthError::NoSession)?;
    let s = door.auth().checked(&token, csrf, door.now_ms())?;
    let dir = admitted(door, &s)?;
    Ok((token, s, dir))
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
struct LoginPage {
    name: &'static str,
}

async fn login_page<D: Door>() -> Response {
    render(&LoginPage { name: D::NAME })
}

#[derive(Deserialize)]
struct ChallengeQuery {
    approver: String,
}

/// The address a request came from: the peer's, or, when the peer is a proxy `reach` names, the
/// one it appended to `X-Forwarded-For`. Without the peer's address (the router served without
/// [`ConnectInfo`]) every request counts as one unknown client.
fn client(peer: Option<SocketAddr>, reach: Option<&Reach>, headers: &HeaderMap) -> IpAddr {
    let Some(peer) = peer.map(|p| p.ip()) else {
        return IpAddr::V4(Ipv4Addr::UNSPECIFIED);
    };
    if !reach.is_some_and(|r| r.is_proxy(peer)) {
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

async fn challenge<D: Door>(
    State(door): State<Arc<D>>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    reach: Option<Extension<Arc<Reach>>>,
    headers: HeaderMap,
    Query(q): Query<ChallengeQuery>,
) -> Response {
    let from = client(
        peer.map(|Extension(ConnectInfo(p))| p),
        reach.as_ref().map(|Extension(r)| r.as_ref()),
        &headers,
    );
    match door.auth().challenge(&q.approver, from, door.now_ms()) {
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

async fn login<D: Door>(State(door): State<Arc<D>>, Json(b): Json<LoginBody>) -> Response {
    let dir = match door.approvers() {
        Ok(d) => d,
        Err(e) => return json_error(StatusCode::SERVICE_UNAVAILABLE, AuthError::Directory(e)),
    };
    match door
        .auth()
        .login(&dir, &b.approver, &b.nonce, &b.signature, door.now_ms())
    {
        Ok((token, _)) => {
            // Whom the page does not admit gets no session (and is told so only once their key
            // is proven).
            if let Some(why) = door.refuses(&b.approver, &dir) {
                door.auth().logout(&token);
                tracing::warn!(approver = %b.approver, page = D::NAME, "sign-in refused: {why}");
                return json_error(StatusCode::FORBIDDEN, why);
            }
            tracing::info!(approver = %b.approver, page = D::NAME, "signed in");
            let cookie = format!("{}={token}; HttpOnly; SameSite=Strict; Path=/", D::COOKIE);
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
pub(crate) struct CsrfForm {
    pub(crate) csrf: String,
}

async fn logout<D: Door>(
    State(door): State<Arc<D>>,
    headers: HeaderMap,
    Form(f): Form<CsrfForm>,
) -> Response {
    // Signing out needs only the session and its token: a person the page no longer admits may
    // still end their session.
    let token = session_token(D::COOKIE, &headers).unwrap_or_default();
    match door.auth().checked(&token, &f.csrf, door.now_ms()) {
        Ok(_) => {
            door.auth().logout(&token);
            let mut r = Redirect::to("/login").into_response();
            if let Ok(v) = HeaderValue::from_str(&format!("{}=; Max-Age=0; Path=/", D::COOKIE)) {
                r.headers_mut().insert(header::SET_COOKIE, v);
            }
            r
        }
        Err(e) => error_page(StatusCode::FORBIDDEN, "Not signed out", &e.to_string()),
    }
}

async fn receipt<D: Door>(
    State(door): State<Arc<D>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    if let Err(r) = signed_in(door.as_ref(), &headers) {
        return r;
    }
    let key = match EffectKey::fixed(id.clone()) {
        Ok(k) => k,
        Err(e) => return json_error(StatusCode::BAD_REQUEST, e),
    };
    let journal = door.journal().clone();
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
    fn only_a_named_proxy_is_believed_about_who_the_client_is() {
        let at = |a: &str| Some(a.parse::<SocketAddr>().unwrap());
        let ip = |a: &str| a.parse::<IpAddr>().unwrap();
        let claims = forwarded(&["192.0.2.66, 198.51.100.20"]);
        let local = Reach::behind(vec![ip("127.0.0.1"), ip("::1")]);
        let remote = Reach::behind(vec![ip("203.0.113.9")]);
        // From the named proxy: the address it appended, never the client's own claims.
        let by = |peer, reach| client(at(peer), Some(reach), &claims);
        assert_eq!(by("127.0.0.1:9000", &local), ip("198.51.100.20"));
        assert_eq!(by("[::1]:9000", &local), ip("198.51.100.20"));
        assert_eq!(by("203.0.113.9:9000", &remote), ip("198.51.100.20"));
        assert_eq!(
            client(
                at("127.0.0.1:9000"),
                Some(&local),
                &forwarded(&["192.0.2.66", "[2001:db8::1]:443"])
            ),
            ip("2001:db8::1"),
            "the last header's last entry"
        );
        assert_eq!(
            client(at("127.0.0.1:9000"), Some(&local), &forwarded(&["unknown"])),
            ip("127.0.0.1")
        );
        assert_eq!(
            client(at("127.0.0.1:9000"), Some(&local), &HeaderMap::new()),
            ip("127.0.0.1")
        );
        // A loopback peer that is not the named proxy, or any peer with no proxy named, writes
        // the header itself: its own address counts.
        assert_eq!(by("127.0.0.1:9000", &remote), ip("127.0.0.1"));
        assert_eq!(client(at("127.0.0.1:9000"), None, &claims), ip("127.0.0.1"));
        let none = Reach::loopback_only();
        assert_eq!(by("127.0.0.1:9000", &none), ip("127.0.0.1"));
        assert_eq!(by("203.0.113.7:5000", &local), ip("203.0.113.7"));
        assert_eq!(client(None, Some(&local), &claims), ip("0.0.0.0"));
    }

    #[tokio::test]
    async fn behind_a_named_proxy_no_other_peer_is_answered() {
        let ip = |a: &str| a.parse::<IpAddr>().unwrap();
        let app = guarded(
            Router::new().route("/", get(|| async { "ok" })),
            Reach::behind(vec![ip("192.0.2.9")]),
        );
        let open = guarded(
            Router::new().route("/", get(|| async { "ok" })),
            Reach::loopback_only(),
        );
        for (app, peer, want) in [
            (&app, Some("203.0.113.5:1"), 403),
            (&app, None, 403),
            (&app, Some("[::ffff:192.0.2.9]:1"), 200),
            (&app, Some("127.0.0.1:1"), 200),
            (&open, Some("203.0.113.5:1"), 200),
        ] {
            let mut req = axum::http::Request::get("/")
                .body(axum::body::Body::empty())
                .unwrap();
            if let Some(p) = peer {
                req.extensions_mut()
                    .insert(ConnectInfo(p.parse::<SocketAddr>().unwrap()));
            }
            let r = tower::ServiceExt::oneshot(app.clone(), req).await.unwrap();
            assert_eq!(r.status().as_u16(), want, "{peer:?}");
        }
    }

    #[tokio::test]
    async fn through_a_tls_proxy_the_session_cookie_is_host_only_secure_and_hsts_is_sent() {
        // A page that sets a session cookie and says which session it was sent.
        let page = || {
            Router::new().route(
                "/",
                get(|headers: HeaderMap| async move {
                    let seen = session_token("s", &headers).unwrap_or_default();
                    let mut r = seen.into_response();
                    r.headers_mut().insert(
                        header::SET_COOKIE,
                        HeaderValue::from_static("s=new; HttpOnly; SameSite=Strict; Path=/"),
                    );
                    r
                }),
            )
        };
        let proxy: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let ask = |app: Router, cookie: &'static str| async move {
            let mut req = axum::http::Request::get("/")
                .header(header::COOKIE, cookie)
                .body(axum::body::Body::empty())
                .unwrap();
            req.extensions_mut().insert(ConnectInfo(proxy));
            let r = tower::ServiceExt::oneshot(app, req).await.unwrap();
            let set = r
                .headers()
                .get(header::SET_COOKIE)
                .map(|v| v.to_str().unwrap().to_owned());
            let hsts = r.headers().contains_key(header::STRICT_TRANSPORT_SECURITY);
            let body = axum::body::to_bytes(r.into_body(), 1024).await.unwrap();
            (String::from_utf8_lossy(&body).into_owned(), set, hsts)
        };
        let tls = guarded(page(), Reach::behind(vec![proxy.ip()]));
        let (seen, set, hsts) = ask(tls.clone(), "__Host-s=good").await;
        assert_eq!(seen, "good");
        assert_eq!(
            set.as_deref(),
            Some("__Host-s=new; HttpOnly; SameSite=Strict; Path=/; Secure")
        );
        assert!(hsts);
        // A cookie without the prefix could have been set by another host or over plain HTTP:
        // it is not read.
        assert_eq!(ask(tls, "s=planted").await.0, "");
        // On loopback, with no proxy, the page is plain HTTP: no prefix, no HSTS.
        let plain = guarded(page(), Reach::loopback_only());
        let (seen, set, hsts) = ask(plain, "s=good").await;
        assert_eq!(seen, "good");
        assert_eq!(
            set.as_deref(),
            Some("s=new; HttpOnly; SameSite=Strict; Path=/")
        );
        assert!(!hsts);
    }
}
