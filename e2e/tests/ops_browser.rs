//! The operators' page in a real browser (Debian's chromium, driven through chromedriver). The
//! template's refund worker sends to a payments API that promises nothing (tier 3: no dedupe, no
//! lookup) and is SIGKILLed while the API holds the answer to a refund it applied: the effect is
//! left in flight. Olga, of the operators, signs in with the key her browser made and an operator
//! enrolled; the page refuses to settle
//! it while it is in flight, her "recover now" leaves it `AMBIGUOUS`, the page offers no settling
//! and refuses a statement while the dead worker's send could still land, refuses a look taken
//! before then, a statement signed by another key and a replay of her own, and records her
//! statement once the window has closed; `interlock verify` then names her as the one who settled
//! it. The charts show what the journal holds.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)] // in tests, a panic is the report

mod browser;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use browser::{Kill, browser, chromedriver, free_port, wait_for_port};
use fantoccini::{Client, Locator};
use interlock::approval::ApproverKey;
use interlock::core::settle::Settlement;
use interlock::settle::SignedSettlement;
use interlock::{SystemClock, Tier};
use interlock_e2e::procs::DevServer;
use interlock_testkit::faults::Stall;
use interlock_testkit::payments_api::PaymentsApi;
use interlock_testkit::sim::SimPayments;
use serde_json::{Value, json};

const PORT: u16 = 7504;
const OLGA_SEED: [u8; 32] = [7; 32];

fn bin(name: &str) -> PathBuf {
    interlock_e2e::stack::sibling(name).unwrap()
}

fn now_ms() -> i64 {
    interlock_e2e::procs::now_ms()
}

async fn text(c: &Client, id: &str) -> String {
    c.find(Locator::Id(id))
        .await
        .unwrap_or_else(|_| panic!("no #{id} on the page"))
        .text()
        .await
        .unwrap()
}

/// Fill the settle form with "applied as `reference`" and submit it; the page's answer.
async fn settle_in_browser(c: &Client, reference: &str) -> Result<String, String> {
    c.find(Locator::Id("finding-applied"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    for (id, value) in [
        ("reference", reference),
        ("note", "the dashboard's refunds"),
        ("looked", "now"),
    ] {
        let field = c.find(Locator::Id(id)).await.unwrap();
        field.clear().await.unwrap();
        field.send_keys(value).await.unwrap();
    }
    c.find(Locator::Id("settle"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let t0 = Instant::now();
    loop {
        // The page may still show the last recovery's message: only a settlement's counts.
        if let Ok(done) = c.find(Locator::Id("done")).await
            && let Ok(t) = done.text().await
            && t.starts_with("You settled")
        {
            return Ok(t);
        }
        if let Ok(r) = c.find(Locator::Id("result")).await
            && let Ok(Some(class)) = r.attr("class").await
            && class == "error"
            && let Ok(t) = r.text().await
        {
            return Err(t);
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "no answer to the settlement"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A POST with the browser's session cookie, as a hand-made request would be sent.
fn post(base: &str, path: &str, cookie: &str, body: &Value) -> (u16, Value) {
    let answer = ureq::post(&format!("{base}{path}"))
        .header("Cookie", &format!("interlock_ops_session={cookie}"))
        .header("Content-Type", "application/json")
        .config()
        .http_status_as_error(false)
        .build()
        .send(body.to_string())
        .unwrap();
    let status = answer.status().as_u16();
    let text = answer.into_body().read_to_string().unwrap_or_default();
    let body: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, body)
}

#[test]
fn an_operator_settles_a_killed_tier_3_refund_in_the_browser_and_only_when_nothing_can_land() {
    let dir = tempfile::tempdir().unwrap();
    let server = DevServer::start(dir.path(), PORT).unwrap();
    let sim = SimPayments::new(
        Tier::Three,
        Duration::from_secs(24 * 3600),
        Arc::new(SystemClock),
    );
    sim.add_payment("pi_ok", 5_000);
    sim.add_payment("pi_cut", 10_000);
    let api = PaymentsApi::start(sim.clone(), "sk_test_local").unwrap();
    let journal = dir.path().join("refunds.db");
    let olga = ApproverKey::from_seed("olga", OLGA_SEED);
    let approvers = dir.path().join("approvers.json");
    std::fs::write(
        &approvers,
        json!({
            "approvers": {"olga": {"public_key": olga.public_hex(), "name": "Olga"}},
            "groups": {"operators": ["olga"]},
            "chain": [{"group": "operators", "sla_ms": 60_000}],
        })
        .to_string(),
    )
    .unwrap();
    let env: Vec<(&str, String)> = vec![
        ("TEMPORAL_ADDRESS", server.address.clone()),
        (
            "TEMPORAL_CONFIG_FILE",
            dir.path().join("none.toml").display().to_string(),
        ),
        ("TASK_QUEUE", "refunds".to_owned()),
        ("INTERLOCK_JOURNAL", journal.display().to_string()),
        ("INTERLOCK_APPROVERS", approvers.display().to_string()),
        ("STRIPE_API_BASE", api.base_url.clone()),
        ("STRIPE_SECRET_KEY", "sk_test_local".to_owned()),
        ("INTERLOCK_STRIPE_TIER", "3".to_owned()),
        // The worker's principal, journaled with each effect it proposes.
        ("INTERLOCK_PRINCIPAL", "refund-worker".to_owned()),
    ];
    let run = |name: &str, args: &[&str]| {
        let mut c = Command::new(bin(name));
        c.args(args).envs(env.iter().map(|(k, v)| (*k, v.as_str())));
        c
    };
    for (lease, pi, cap) in [("case-ok", "pi_ok", "1000"), ("case-cut", "pi_cut", "2000")] {
        let scope = format!("payment_intent={pi}");
        let cap = format!("amount={cap}");
        let grant = run(
            "interlock",
            &[
                "lease",
                "grant",
                lease,
                "--approver",
                "ana@support",
                "--scope",
                &scope,
                "--cap",
                &cap,
            ],
        )
        .output()
        .unwrap();
        assert!(
            grant.status.success(),
            "{}",
            String::from_utf8_lossy(&grant.stderr)
        );
    }

    // One refund goes through; the next is applied by the API, which holds its answer while the
    // worker is SIGKILLed: nothing the gate can ask will say whether it landed.
    let worker = Kill::spawn(run("refund-worker", &[]).stderr(Stdio::null()));
    let ok = run("refund-start", &["case-ok", "pi_ok", "1000", "case-ok"])
        .output()
        .unwrap();
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stdout)
    );
    let stall = Stall::new();
    sim.hold_next_response(stall.clone());
    let _starter = Kill::spawn(
        run("refund-start", &["case-cut", "pi_cut", "2000", "case-cut"])
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    let t0 = Instant::now();
    while !stall.reached() {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the refund never reached the payments API"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(worker); // SIGKILL
    stall.release();
    let applied = sim.refunds("pi_cut");
    assert_eq!(applied.len(), 1, "applied before the kill");
    let reference = applied[0].id.clone();

    // The operators' page, as an operator would start it.
    let ops_port = free_port();
    let _ops = Kill::spawn(
        run(
            "interlock",
            &["ops", "serve", "--listen", &format!("127.0.0.1:{ops_port}")],
        )
        .stderr(std::fs::File::create(dir.path().join("ops.log")).unwrap()),
    );
    wait_for_port(ops_port, "the operators' page");
    let (_driver, driver_port) = chromedriver();
    let base = format!("http://127.0.0.1:{ops_port}");

    let rt = tokio::runtime::Runtime::new().unwrap();
    let key = rt.block_on(async {
        let c = browser(driver_port).await;
        // Olga's browser makes her key; an operator enrols it in place of the one she had, and
        // the page, running all along, reads the directory again.
        let public = browser::make_key(&c, &base, "olga").await;
        let next = approvers.with_extension("next");
        std::fs::write(
            &next,
            json!({
                "approvers": {"olga": {"public_key": public, "name": "Olga"}},
                "groups": {"operators": ["olga"]},
                "chain": [{"group": "operators", "sla_ms": 60_000}],
            })
            .to_string(),
        )
        .unwrap();
        std::fs::rename(&next, &approvers).unwrap();
        browser::sign_in(&c, &base, "olga").await;
        let seen = browser::what_script_reads_of_the_key(&c, "olga").await;
        assert_eq!(
            (&seen["extractable"], &seen["exported"]),
            (&json!(false), &json!([])),
            "{seen}"
        );

        // The board: one committed, one in flight, drawn as bars and a latency point.
        let in_flight = text(&c, "in-flight").await;
        assert!(in_flight.contains("IN_FLIGHT"), "{in_flight}");
        let counts = text(&c, "counts").await;
        assert!(counts.contains("COMMITTED"), "{counts}");
        let bars = c.find_all(Locator::Css("svg#outcomes rect.bar")).await.unwrap();
        assert!(!bars.is_empty(), "no bar in the outcomes chart");
        let points = c.find_all(Locator::Css("svg#latency circle.point")).await.unwrap();
        assert_eq!(points.len(), 3, "p50, p90 and p99 of the one answered send");
        assert!(text(&c, "overall").await.contains("over 1 sends"));
        let link = c
            .find(Locator::Css("#in-flight a.effect"))
            .await
            .unwrap();
        let key = link.text().await.unwrap();
        link.click().await.unwrap();
        c.wait().for_element(Locator::Id("history")).await.unwrap();
        assert_eq!(text(&c, "status").await, "IN_FLIGHT");
        let callers = text(&c, "callers").await;
        assert!(
            callers.starts_with("proposed by refund-worker; dispatched by refund-worker"),
            "{callers}"
        );
        assert!(c.find(Locator::Id("settle-form")).await.is_err(), "no settling in flight");
        let cookie = c
            .get_named_cookie("interlock_ops_session")
            .await
            .unwrap()
            .value()
            .to_owned();
        let csrf = c
            .find(Locator::Css("input[name=csrf]"))
            .await
            .unwrap()
            .attr("value")
            .await
            .unwrap()
            .unwrap();
        let statement = |looked: &str| {
            json!({"csrf": csrf, "finding": "not_applied", "note": "", "looked": looked})
        };
        let path = |what: &str| format!("/effect/{key}/{what}");
        // A statement asked for by hand while the effect is in flight is refused.
        let (status, body) = post(&base, &path("statement"), &cookie, &statement("now"));
        assert_eq!(status, 409, "{body}");
        assert!(body["error"].as_str().unwrap().contains("in flight"), "{body}");

        // Recover now: tier 3 cannot ask, so the effect is left for a person.
        let t0 = Instant::now();
        while text(&c, "status").await != "AMBIGUOUS" {
            assert!(t0.elapsed() < Duration::from_secs(60), "recovery never decided it");
            c.find(Locator::Id("recover")).await.unwrap().click().await.unwrap();
            c.wait().for_element(Locator::Id("done")).await.unwrap();
            assert!(text(&c, "done").await.contains("Recovery ran"));
        }
        // The recovery's claim is journaled as the signed-in operator's.
        let callers = text(&c, "callers").await;
        assert!(callers.contains("claimed by olga"), "{callers}");

        // The dead worker's send could still land: settling is refused, whatever was found.
        let note = text(&c, "settle-note").await;
        let quiet_ms: i64 = note
            .split(" ms since the epoch")
            .next()
            .and_then(|s| s.rsplit('(').next())
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no window in {note:?}"));
        assert!(now_ms() < quiet_ms, "the window closed before the test could look");
        assert!(
            c.find(Locator::Id("settle-form")).await.is_err(),
            "settling offered while a send could land"
        );
        let applied = |looked: &str| {
            json!({"csrf": csrf, "finding": "applied", "reference": reference, "note": "",
                   "looked": looked})
        };
        let (status, body) = post(&base, &path("statement"), &cookie, &applied("now"));
        assert_eq!(status, 409, "{body}");
        assert!(body["error"].as_str().unwrap().contains("may still land"), "{body}");
        while now_ms() < quiet_ms + interlock::core::settle::MAX_SKEW_MS + 500 {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // A look taken before a look counts (the window's end and the clocks' margin) does not,
        // even signed after: the boundary itself is refused.
        let (status, body) = post(
            &base,
            &path("statement"),
            &cookie,
            &applied(&(quiet_ms + interlock::core::settle::MAX_SKEW_MS).to_string()),
        );
        assert_eq!(status, 409, "{body}");
        assert!(body["error"].as_str().unwrap().contains("look again after"), "{body}");
        c.refresh().await.unwrap();
        c.wait().for_element(Locator::Id("settle-form")).await.unwrap();

        // A statement signed by a key that is not Olga's is refused.
        let (status, drafted) = post(&base, &path("statement"), &cookie, &applied("now"));
        assert_eq!(status, 200, "{drafted}");
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(drafted["bytes"].as_str().unwrap())
            .unwrap();
        let text_of = String::from_utf8(bytes).unwrap();
        let st: Settlement =
            serde_json::from_str(text_of.strip_prefix("interlock-settlement-v1\n").unwrap())
                .unwrap();
        let forged = SignedSettlement::sign(&ApproverKey::from_seed("olga", [9; 32]), st).unwrap();
        let (status, body) = post(&base, &path("settle"), &cookie, &json!({
            "csrf": csrf, "draft": drafted["draft"], "signature": forged.signature}));
        assert_eq!(status, 403, "{body}");
        assert!(body["error"].as_str().unwrap().contains("does not verify"), "{body}");

        // Olga signs in her browser; the request her page sends is kept to be replayed.
        c.execute(
            "const f = window.fetch; window.fetch = async (u, o) => { \
               if (String(u).endsWith('/settle')) sessionStorage.setItem('sent', o.body); \
               return f(u, o); };",
            vec![],
        )
        .await
        .unwrap();
        let done = settle_in_browser(&c, &reference).await.expect("olga's settlement");
        assert!(done.contains("You settled"), "{done}");
        assert_eq!(text(&c, "status").await, "COMMITTED");
        assert_eq!(text(&c, "how").await, "settled_by_person");
        let by = text(&c, "settled-by").await;
        assert!(by.contains("olga found it applied as") && by.contains(&reference), "{by}");
        let sent = c
            .execute("return sessionStorage.getItem('sent');", vec![])
            .await
            .unwrap();
        let sent: Value = serde_json::from_str(sent.as_str().unwrap()).unwrap();
        let (status, body) = post(&base, &path("settle"), &cookie, &sent);
        assert_eq!(status, 409, "a replayed statement: {body}");
        assert!(body["error"].as_str().unwrap().contains("used"), "{body}");
        // And nothing more can be drafted for it: it is settled.
        let (status, body) = post(&base, &path("statement"), &cookie, &statement("now"));
        assert_eq!(status, 409, "{body}");
        assert!(body["error"].as_str().unwrap().contains("settled already, by olga"), "{body}");
        c.close().await.unwrap();
        key
    });

    // verify names who settled it, with her signature checked against the directory.
    let verify = run(
        "interlock",
        &[
            "verify",
            &key,
            "--approvers",
            &approvers.display().to_string(),
        ],
    )
    .output()
    .unwrap();
    let shown = String::from_utf8_lossy(&verify.stdout);
    assert!(
        verify.status.success(),
        "{shown} {}",
        String::from_utf8_lossy(&verify.stderr)
    );
    assert!(
        shown.contains("settled by") && shown.contains("olga"),
        "{shown}"
    );
    // The payments API's own records: one refund each.
    assert_eq!(sim.refunds("pi_cut").len(), 1);
    assert_eq!(sim.refunds("pi_ok").len(), 1);
}
