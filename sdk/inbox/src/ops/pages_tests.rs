//! The page's doors, driven in-process: who gets a session, when a session stops counting, and
//! what a statement may carry. The browser test (`e2e/tests/ops_browser.rs`) drives the rest.

use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use ed25519_dalek::{Signer as _, SigningKey};
use interlock::approval::{ApproverKey, Approvers};
use interlock::{SqliteJournal, SystemClock};
use serde_json::{Value, json};
use tower::ServiceExt as _;

use super::super::{Directory, Ops};
use crate::auth::{Auth, login_bytes};

const OLGA: [u8; 32] = [7; 32];
const ANA: [u8; 32] = [8; 32];

/// olga (and ana, when `ana` is in the group) with `olga_seed`'s key.
fn directory(olga_seed: [u8; 32], operators: &[&str]) -> Arc<Approvers> {
    let key = |id: &str, seed| ApproverKey::from_seed(id, seed).public_hex();
    let dir = json!({
        "approvers": {"olga": {"public_key": key("olga", olga_seed)},
                      "ana": {"public_key": key("ana", ANA)}},
        "groups": {"operators": operators, "support": ["ana"]},
        "chain": [{"group": "support", "sla_ms": 1000}],
    });
    Arc::new(Approvers::from_json("t", &dir.to_string()).unwrap())
}

struct Page {
    router: axum::Router,
    directory: Arc<Mutex<Arc<Approvers>>>,
    _dir: tempfile::TempDir,
}

fn page() -> Page {
    let dir = tempfile::tempdir().unwrap();
    let journal = SqliteJournal::open(dir.path().join("j.db"), Arc::new(SystemClock)).unwrap();
    let current = Arc::new(Mutex::new(directory(OLGA, &["olga"])));
    let read = current.clone();
    let approvers: Directory = Arc::new(move || Ok(read.lock().unwrap().clone()));
    let ops = Ops {
        journal: Arc::new(journal),
        approvers,
        group: "operators".into(),
        recover: Err("not in these tests".into()),
        clock: Arc::new(SystemClock),
        auth: Auth::default(),
    };
    Page {
        router: super::router(Arc::new(ops)),
        directory: current,
        _dir: dir,
    }
}

async fn call(p: &Page, req: Request<Body>) -> (StatusCode, Option<String>, String) {
    let r = p.router.clone().oneshot(req).await.unwrap();
    let status = r.status();
    let cookie = r
        .headers()
        .get(header::SET_COOKIE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = axum::body::to_bytes(r.into_body(), 1 << 20).await.unwrap();
    (status, cookie, String::from_utf8_lossy(&body).into_owned())
}

/// Sign `who` in with `seed`; the session cookie, or the refusal.
async fn sign_in(p: &Page, who: &str, seed: [u8; 32]) -> Result<String, (StatusCode, String)> {
    let req = Request::get(format!("/login/challenge?approver={who}"))
        .body(Body::empty())
        .unwrap();
    let (_, _, body) = call(p, req).await;
    let nonce = serde_json::from_str::<Value>(&body).unwrap()["nonce"]
        .as_str()
        .unwrap()
        .to_owned();
    let sig = SigningKey::from_bytes(&seed).sign(&login_bytes(&nonce, who));
    let login = json!({"approver": who, "nonce": nonce, "signature": hex::encode(sig.to_bytes())});
    let req = Request::post("/login")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(login.to_string()))
        .unwrap();
    match call(p, req).await {
        (StatusCode::OK, Some(cookie), _) => Ok(cookie.split(';').next().unwrap().to_owned()),
        (status, _, body) => Err((status, body)),
    }
}

async fn get(p: &Page, path: &str, cookie: &str) -> (StatusCode, String) {
    let req = Request::get(path)
        .header(header::COOKIE, cookie)
        .body(Body::empty())
        .unwrap();
    let (status, _, body) = call(p, req).await;
    (status, body)
}

/// The CSRF token the board's sign-out form carries.
fn csrf(board: &str) -> String {
    let at = board.find(r#"name="csrf" value=""#).unwrap() + r#"name="csrf" value=""#.len();
    board[at..].split('"').next().unwrap().to_owned()
}

#[tokio::test]
async fn a_person_outside_the_group_proves_their_key_and_gets_no_session() {
    let p = page();
    let refused = sign_in(&p, "ana", ANA).await.unwrap_err();
    assert_eq!(refused.0, StatusCode::FORBIDDEN);
    assert!(
        refused.1.contains("not a member of group operators"),
        "{}",
        refused.1
    );
    // A wrong key is refused as a wrong key, saying nothing of the group.
    let wrong = sign_in(&p, "ana", OLGA).await.unwrap_err();
    assert_eq!(wrong.0, StatusCode::UNAUTHORIZED);
    assert!(!wrong.1.contains("operators"), "{}", wrong.1);
    let cookie = sign_in(&p, "olga", OLGA).await.unwrap();
    assert!(cookie.starts_with("interlock_ops_session="), "{cookie}");
    assert_eq!(get(&p, "/", &cookie).await.0, StatusCode::OK);
}

#[tokio::test]
async fn a_session_stops_counting_when_its_person_leaves_the_group_or_their_key_is_replaced() {
    let p = page();
    let cookie = sign_in(&p, "olga", OLGA).await.unwrap();
    assert_eq!(get(&p, "/", &cookie).await.0, StatusCode::OK);
    *p.directory.lock().unwrap() = directory(OLGA, &["ana"]);
    let (status, body) = get(&p, "/", &cookie).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(body.contains("not a member of group operators"), "{body}");
    // Back in the group, under another key: the session signed in with the old one is worthless.
    *p.directory.lock().unwrap() = directory([9; 32], &["olga"]);
    let (status, body) = get(&p, "/", &cookie).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(body.contains("another key for olga"), "{body}");
    *p.directory.lock().unwrap() = directory(OLGA, &["olga"]);
    assert_eq!(get(&p, "/", &cookie).await.0, StatusCode::OK);
}

#[tokio::test]
async fn a_statement_is_refused_for_a_bad_note_a_look_in_the_future_or_no_look_at_all() {
    let p = page();
    let cookie = sign_in(&p, "olga", OLGA).await.unwrap();
    let (_, board) = get(&p, "/", &cookie).await;
    let token = csrf(&board);
    let ask = |body: Value| {
        Request::post("/effect/refund-1/statement")
            .header(header::COOKIE, cookie.as_str())
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body.to_string()))
            .unwrap()
    };
    let statement = |note: &str, looked: &str| json!({"csrf": token, "finding": "not_applied", "note": note, "looked": looked});
    for (body, says) in [
        (statement("\u{1b}[31mall fine", "now"), "control characters"),
        (statement(&"x".repeat(2_001), "now"), "a note is kept to"),
        (statement("", ""), "say when you looked"),
        (statement("", "99999999999999"), "after this page's clock"),
        (statement("", "yesterday"), "ms since the epoch"),
    ] {
        let (status, _, answer) = call(&p, ask(body)).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
        assert!(answer.contains(says), "{says}: {answer}");
    }
    // Without the session's token, nothing is drafted.
    let mut forged = statement("", "now");
    forged["csrf"] = json!("forged");
    let (status, _, _) = call(&p, ask(forged)).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // A well-formed statement about an effect the journal does not hold is refused by the rules.
    let (status, _, answer) = call(&p, ask(statement("looked", "now"))).await;
    assert_eq!(status, StatusCode::CONFLICT, "{answer}");
    assert!(answer.contains("holds no effect"), "{answer}");
}
