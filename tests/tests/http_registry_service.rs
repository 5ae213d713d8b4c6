//! The HTTP target against a service this project did not write: npm package `json-server`
//! (pinned, installed by `scripts/setup-tests`), a real Node.js process serving a JSON file as a
//! REST API with no idempotency at all. The gate server's table is all the team writes. Judged by
//! the file json-server keeps: a credit whose answer came too late is found by the lookup and not
//! sent again (tier 2), a misspelt lookup filter (json-server then lists every credit) leaves the
//! credit unknown instead of resending it, tier 3 stays ambiguous, and a fact moved by another
//! client refuses the send.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)] // in tests, a panic is the report

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use interlock::core::{LookupAnswer, RefusalCode, Via};
use interlock::target::Target;
use interlock::{
    Bound, EffectKey, Gate, GateConfig, Grant, Outcome, SqliteJournal, SystemClock, Tier,
};
use interlock_http::{HttpTarget, HttpTargetConfig};
use interlock_server::config::TargetConfig;
use serde_json::{Value, json};

/// json-server as `scripts/setup-tests` installs it.
fn json_server_bin() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let bin = root.join("target/tools/json-server/node_modules/.bin/json-server");
    assert!(
        bin.exists(),
        "{} is missing: run scripts/setup-tests (it installs npm package json-server)",
        bin.display()
    );
    bin
}

/// A json-server process on a free port serving `db.json` in its own directory, answering every
/// request `delay_ms` late (json-server's `--delay`: the request is applied after the pause).
struct JsonServer {
    child: Child,
    base: String,
    db: PathBuf,
    _dir: tempfile::TempDir,
}

impl JsonServer {
    fn start(delay_ms: u64) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("db.json");
        let seed = json!({
            "accounts": [{"id": "acct_1", "status": "open"}],
            "credits": [],
        });
        std::fs::write(&db, seed.to_string()).unwrap();
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(json_server_bin())
            .args([
                "--host",
                "127.0.0.1",
                "--port",
                &port.to_string(),
                "--quiet",
            ])
            .args(["--delay", &delay_ms.to_string()])
            .arg(&db)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("json-server starts");
        let server = JsonServer {
            child,
            base: format!("http://127.0.0.1:{port}"),
            db,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while ureq::get(&format!("{}/accounts/acct_1", server.base))
            .call()
            .is_err()
        {
            assert!(
                Instant::now() < deadline,
                "json-server did not answer in 20 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        server
    }

    /// The credits as json-server's own file holds them.
    fn credits(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.db).unwrap();
        let db: Value = serde_json::from_str(&text).unwrap();
        db["credits"].as_array().cloned().unwrap_or_default()
    }

    /// Another client changes the account's status.
    fn set_status(&self, status: &str) {
        ureq::patch(&format!("{}/accounts/acct_1", self.base))
            .header("Content-Type", "application/json")
            .send(json!({"status": status}).to_string())
            .expect("json-server patches the account");
    }
}

impl Drop for JsonServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The gate server's table for json-server's `credits`, as a team would write it from
/// `docs/targets.md`: a JSON body carrying the key, the account's status as the premise, and at
/// tier 2 a lookup by json-server's field filter.
fn table(lookup_filter: Option<&str>) -> HttpTargetConfig {
    let mut text = String::from(
        r#"
        [targets.credits]
        kind = "http"
        payload = { account = "string", amount = "integer" }
        rules = ['status == "open"']
        read_timeout_ms = 5000
        [targets.credits.send]
        url = "${JSON_SERVER}/credits"
        key_field = "key"
        [targets.credits.premises.status]
        url = "${JSON_SERVER}/accounts/{account}"
        pointer = "/status"
        "#,
    );
    if let Some(filter) = lookup_filter {
        text.push_str(&format!(
            "[targets.credits.lookup]\nurl = \"${{JSON_SERVER}}/credits?{filter}={{key}}\"\nkey = \"/key\"\n"
        ));
    }
    let cfg = interlock_server::ServerConfig::parse(&text, Path::new("t.toml"))
        .expect("the server's file");
    match cfg.targets.get("credits") {
        Some(TargetConfig::Http(http)) => (**http).clone(),
        other => panic!("not an HTTP target: {other:?}"),
    }
}

struct World {
    server: JsonServer,
    bound: Bound,
    target: HttpTarget,
    _dir: tempfile::TempDir,
}

/// A journal with a lease, and the gate bound to json-server through `cfg`: sends cut off after
/// 0.5 s, settled after 1 s more, premise reads that may age 1.5 s.
fn world(cfg: &HttpTargetConfig, delay_ms: u64) -> World {
    let server = JsonServer::start(delay_ms);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.db");
    let clock = Arc::new(SystemClock);
    let journal = Arc::new(SqliteJournal::open(&path, clock.clone()).unwrap());
    journal
        .grant_lease(&Grant::new("ticket-1", "ana@support", 0).uses(10))
        .unwrap();
    let config = GateConfig::builder(&path)
        .send_timeout(Duration::from_millis(500))
        .settle(Duration::from_secs(1))
        // A read answered 0.8 s late may still carry a dispatch (at most the claim's 1.5 s).
        .premise_max_age(Duration::from_millis(1_500))
        .build()
        .unwrap();
    let gate = Gate::new(journal.clone(), journal, clock, config).unwrap();
    let base = server.base.clone();
    let env = move |var: &str| (var == "JSON_SERVER").then(|| base.clone());
    let target = HttpTarget::with_env("credits", cfg, &env).unwrap();
    let bound = target.bind(&gate, &cfg.rules).unwrap();
    World {
        server,
        bound,
        target,
        _dir: dir,
    }
}

fn credit(amount: i64) -> Value {
    json!({"account": "acct_1", "amount": amount})
}

fn submit(w: &World, key: &str, amount: i64) -> Outcome {
    let effect = w
        .bound
        .decide(EffectKey::fixed(key).unwrap(), &credit(amount), "ticket-1")
        .expect("decided");
    w.bound.submit(&effect).expect("submitted")
}

/// The outcome once the claim (send timeout and settle window) has passed, as the next attempt
/// would see it.
fn settled(w: &World, key: &str, first: Outcome) -> Outcome {
    match first {
        Outcome::InFlight { .. } => {
            std::thread::sleep(Duration::from_millis(1_600));
            w.bound.recover(&EffectKey::fixed(key).unwrap()).unwrap()
        }
        other => other,
    }
}

fn keys(credits: &[Value]) -> Vec<&str> {
    credits.iter().filter_map(|c| c["key"].as_str()).collect()
}

#[test]
fn json_server_credit_lands_once_and_a_repeat_is_answered_from_the_journal() {
    let w = world(&table(Some("key")), 0);
    assert_eq!(w.target.tier(), Tier::Two);
    let first = submit(&w, "req-1", 2_500);
    assert!(
        matches!(
            first,
            Outcome::Committed {
                via: Via::FirstSend,
                replayed: false,
                ..
            }
        ),
        "{first:?}"
    );
    let again = submit(&w, "req-1", 2_500);
    assert!(
        matches!(again, Outcome::Committed { replayed: true, .. }),
        "{again:?}"
    );
    let credits = w.server.credits();
    assert_eq!(keys(&credits), ["req-1"], "{credits:?}");
    assert_eq!(credits[0]["amount"], 2_500);
}

#[test]
fn json_server_credit_answered_too_late_is_found_by_the_lookup_and_not_sent_again() {
    // Every request waits 0.8 s, the send is cut off after 0.5 s: the credit lands unseen.
    let w = world(&table(Some("key")), 800);
    let first = submit(&w, "req-late", 1_000);
    let out = settled(&w, "req-late", first);
    assert!(
        matches!(
            out,
            Outcome::Committed {
                via: Via::FoundByLookup,
                ..
            }
        ),
        "{out:?}"
    );
    let again = w
        .bound
        .recover(&EffectKey::fixed("req-late").unwrap())
        .unwrap();
    assert!(matches!(again, Outcome::Committed { .. }), "{again:?}");
    assert_eq!(keys(&w.server.credits()), ["req-late"]);
}

#[test]
fn json_server_lookup_with_a_misspelt_filter_leaves_the_credit_unknown_instead_of_resending() {
    // json-server ignores a filter on a field no credit has and lists every credit.
    let w = world(&table(Some("kye")), 800);
    let other = settled(&w, "req-other", submit(&w, "req-other", 500));
    assert!(
        !matches!(other, Outcome::Failed(_)),
        "the first credit landed: {other:?}"
    );
    let key = EffectKey::fixed("req-blind").unwrap();
    let _ = submit(&w, "req-blind", 1_000);
    match w.target.lookup(&key, &credit(1_000)) {
        LookupAnswer::Unknown(why) => assert!(why.contains("does not filter"), "{why}"),
        other => panic!("a list of other keys proves nothing: {other:?}"),
    }
    for _ in 0..2 {
        let out = w.bound.recover(&key).unwrap();
        assert!(
            !matches!(out, Outcome::Committed { .. } | Outcome::Failed(_)),
            "a lookup that cannot tell must not settle: {out:?}"
        );
    }
    assert_eq!(keys(&w.server.credits()), ["req-other", "req-blind"]);
}

#[test]
fn json_server_at_tier_3_leaves_a_late_credit_ambiguous_and_never_resends_it() {
    let w = world(&table(None), 800);
    assert_eq!(w.target.tier(), Tier::Three);
    let out = settled(&w, "req-t3", submit(&w, "req-t3", 1_000));
    assert!(matches!(out, Outcome::Ambiguous(_)), "{out:?}");
    assert_eq!(keys(&w.server.credits()), ["req-t3"]);
}

#[test]
fn json_server_account_closed_by_another_client_refuses_the_send() {
    let w = world(&table(Some("key")), 0);
    let effect = w
        .bound
        .decide(EffectKey::fixed("req-c").unwrap(), &credit(700), "ticket-1")
        .unwrap();
    w.server.set_status("closed");
    match w.bound.submit(&effect).unwrap() {
        Outcome::Refused(r) => assert!(
            matches!(r.code, RefusalCode::StalePremise | RefusalCode::PremiseRule),
            "{r:?}"
        ),
        other => panic!("must be refused: {other:?}"),
    }
    assert!(w.server.credits().is_empty());
}
