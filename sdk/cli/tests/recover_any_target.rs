//! `interlock recover` on a team's own target: an effect is recovered through the target of the
//! gate server's file that has the name it was journaled under, whatever its kind; without the
//! file the command names the target and the fix instead of asking for Stripe's key.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)] // in tests, a panic is the report

use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::Duration;

use interlock::faults::FaultPoint;
use interlock::{EffectKey, Gate, GateConfig, Grant, SqliteJournal, SystemClock};
use interlock_http::HttpTarget;
use interlock_server::config::TargetConfig;
use interlock_testkit::faults::{Action, ScriptedFaults};
use interlock_testkit::ledger::{Ledger, target_table};
use serde_json::json;

const TOKEN: &str = "ledger-token";

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A journal whose credit `req-1` was dispatched by a worker that crashed before sending it.
fn crashed_credit(dir: &Path, ledger: &Ledger) -> std::path::PathBuf {
    let path = dir.join("journal.db");
    let clock = Arc::new(SystemClock);
    let journal = Arc::new(SqliteJournal::open(&path, clock.clone()).unwrap());
    journal
        .grant_lease(&Grant::new("ticket-1", "ana@support", 0).scope("account", "acct_1"))
        .unwrap();
    let faults = ScriptedFaults::new();
    faults.arm(FaultPoint::AfterDispatch, Action::Crash);
    let config = GateConfig::builder(&path)
        .send_timeout(Duration::from_secs(1))
        .settle(Duration::from_millis(500))
        .build()
        .unwrap();
    let gate = Gate::new(journal.clone(), journal, clock, config)
        .unwrap()
        .with_faults(faults);
    let server_file = target_table("credits", true);
    let cfg = interlock_server::ServerConfig::parse(&server_file, Path::new("serve.toml")).unwrap();
    let Some(TargetConfig::Http(http)) = cfg.targets.get("credits") else {
        panic!("not an HTTP target")
    };
    let base = ledger.base_url.clone();
    let env = move |v: &str| match v {
        "LEDGER_URL" => Some(base.clone()),
        "LEDGER_TOKEN" => Some(TOKEN.to_owned()),
        _ => None,
    };
    let bound = HttpTarget::with_env("credits", http, &env)
        .unwrap()
        .bind(&gate, &http.rules)
        .unwrap();
    let effect = bound
        .decide(
            EffectKey::fixed("req-1").unwrap(),
            &json!({"account": "acct_1", "amount": 700}),
            "ticket-1",
        )
        .unwrap();
    assert!(bound.submit(&effect).is_err(), "the scripted crash");
    std::fs::write(dir.join("serve.toml"), server_file).unwrap();
    path
}

fn recover(journal: &Path, ledger: &Ledger, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_interlock"))
        .arg("--journal")
        .arg(journal)
        .args(["recover", "req-1"])
        .args(extra)
        .env("LEDGER_URL", &ledger.base_url)
        .env("LEDGER_TOKEN", TOKEN)
        .env_remove("STRIPE_SECRET_KEY")
        .env_remove("INTERLOCK_HMAC_KEY")
        .output()
        .unwrap()
}

#[test]
fn recover_finds_an_http_target_by_its_journaled_name_in_the_server_s_file() {
    let ledger = Ledger::start(TOKEN).unwrap();
    ledger.open("acct_1", 10_000);
    let dir = tempfile::tempdir().unwrap();
    let journal = crashed_credit(dir.path(), &ledger);

    let bare = recover(&journal, &ledger, &[]);
    assert_eq!(bare.status.code(), Some(3), "{}", text(&bare));
    assert!(
        text(&bare).contains("\"credits\"") && text(&bare).contains("--config"),
        "the target and the fix are named: {}",
        text(&bare)
    );

    let other = dir.path().join("other.toml");
    std::fs::write(&other, "[targets.refunds]\nkind = \"stripe_refunds\"\n").unwrap();
    let wrong = recover(&journal, &ledger, &["--config", other.to_str().unwrap()]);
    assert_eq!(wrong.status.code(), Some(3), "{}", text(&wrong));
    assert!(
        text(&wrong).contains("configures refunds"),
        "{}",
        text(&wrong)
    );
    assert!(ledger.credits().is_empty(), "nothing sent by a refusal");

    let file = dir.path().join("serve.toml");
    let mut out = recover(&journal, &ledger, &["--config", file.to_str().unwrap()]);
    for _ in 0..10 {
        if out.status.code() == Some(0) {
            break;
        }
        // The crashed claim may still be inside its deadline: as an operator would, run again.
        std::thread::sleep(Duration::from_millis(500));
        out = recover(&journal, &ledger, &["--config", file.to_str().unwrap()]);
    }
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains("COMMITTED"), "{}", text(&out));
    let credits = ledger.credits();
    assert_eq!(credits.len(), 1, "{credits:?}");
    assert_eq!(credits[0].request_key.as_deref(), Some("req-1"));

    let again = recover(&journal, &ledger, &["--config", file.to_str().unwrap()]);
    assert_eq!(again.status.code(), Some(0), "{}", text(&again));
    assert_eq!(ledger.credits().len(), 1, "a second recovery sends nothing");

    // verify asks the same target, found the same way, for the service's own records.
    let verify = || {
        Command::new(env!("CARGO_BIN_EXE_interlock"))
            .arg("--journal")
            .arg(&journal)
            .args(["verify", "req-1", "--ask-target", "--config"])
            .arg(&file)
            .env("LEDGER_URL", &ledger.base_url)
            .env("LEDGER_TOKEN", TOKEN)
            .output()
            .unwrap()
    };
    let holds = verify();
    assert_eq!(holds.status.code(), Some(0), "{}", text(&holds));
    assert!(
        text(&holds).contains("1 effect(s) at the target carry the key"),
        "{}",
        text(&holds)
    );
    ledger.credit_by_hand("acct_1", 700, Some("req-1"));
    let twice = verify();
    assert_eq!(twice.status.code(), Some(1), "{}", text(&twice));
    assert!(
        text(&twice).contains("2 effect(s) at the target carry the key"),
        "{}",
        text(&twice)
    );
}

/// A free loopback port (bound and released: another process could take it, but rarely does).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap()
}

fn start_server(dir: &Path, ledger: &Ledger, port: u16) -> std::process::Child {
    let n = std::fs::read_dir(dir).unwrap().count();
    let child = Command::new(env!("CARGO_BIN_EXE_interlock"))
        .args(["serve", "--config"])
        .arg(dir.join("serve.toml"))
        .env("LEDGER_URL", &ledger.base_url)
        .env("LEDGER_TOKEN", TOKEN)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(dir.join(format!("serve-{n}.log"))).unwrap())
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the gate server did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

/// A real gate server with the ledger as an HTTP target, SIGKILLed while its credit is applied
/// and unanswered: `interlock recover --config` finds the credit by the lookup, and the caller's
/// retry on the restarted server is answered from the journal. One credit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gate_server_killed_mid_credit_leaves_one_credit_recovered_through_its_file() {
    use interlock_server::pb;
    use interlock_server::pb::gate_service_client::GateServiceClient;

    let ledger = Ledger::start(TOKEN).unwrap();
    ledger.open("acct_1", 10_000);
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal.db");
    let grant = Command::new(env!("CARGO_BIN_EXE_interlock"))
        .arg("--journal")
        .arg(&journal)
        .args(["lease", "grant", "ticket-1", "--approver", "ana@support"])
        .args(["--scope", "account=acct_1"])
        .output()
        .unwrap();
    assert!(grant.status.success(), "{}", text(&grant));
    let port = free_port();
    std::fs::write(
        dir.path().join("serve.toml"),
        format!(
            "listen = \"127.0.0.1:{port}\"\njournal = \"{}\"\n\n{}",
            journal.display(),
            target_table("credits", true)
        ),
    )
    .unwrap();
    let mut server = start_server(dir.path(), &ledger, port);
    let address = format!("http://127.0.0.1:{port}");
    let mut client = GateServiceClient::connect(address.clone()).await.unwrap();
    let effect = client
        .decide(pb::DecideRequest {
            target: "credits".into(),
            key: "req-k".into(),
            payload_json: r#"{"account":"acct_1","amount":900}"#.into(),
            lease: "ticket-1".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .effect
        .unwrap();
    let submit = pb::SubmitRequest {
        target: "credits".into(),
        effect: Some(effect),
        attempt: String::new(),
    };
    ledger.hold_next_answer(Duration::from_secs(30));
    let mut dying = client.clone();
    let first = submit.clone();
    let in_flight = tokio::spawn(async move { dying.submit(first).await });
    let t0 = std::time::Instant::now();
    while ledger.credits().is_empty() {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the credit was not sent"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    server.kill().unwrap(); // SIGKILL, with the credit applied and its answer held
    server.wait().unwrap();
    assert!(
        in_flight.await.unwrap().is_err(),
        "the caller heard nothing"
    );

    let file = dir.path().join("serve.toml");
    let recovered = tokio::task::spawn_blocking(move || {
        let args = ["recover", "req-k", "--config", file.to_str().unwrap()];
        let run = || {
            Command::new(env!("CARGO_BIN_EXE_interlock"))
                .arg("--journal")
                .arg(&journal)
                .args(args)
                .env("LEDGER_URL", &ledger.base_url)
                .env("LEDGER_TOKEN", TOKEN)
                .output()
                .unwrap()
        };
        let mut out = run();
        for _ in 0..40 {
            if out.status.code() == Some(0) {
                break;
            }
            std::thread::sleep(Duration::from_millis(500));
            out = run();
        }
        (out, ledger)
    })
    .await
    .unwrap();
    let (out, ledger) = recovered;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains("COMMITTED"), "{}", text(&out));
    assert_eq!(ledger.credits().len(), 1, "{:?}", ledger.credits());

    let mut again = start_server(dir.path(), &ledger, port);
    let mut client = GateServiceClient::connect(address).await.unwrap();
    let answer = client.submit(submit).await.unwrap().into_inner();
    let kind = answer.outcome.and_then(|o| o.kind);
    assert!(
        matches!(kind, Some(pb::outcome::Kind::Committed(_))),
        "{kind:?}"
    );
    again.kill().unwrap();
    let _ = again.wait();
    assert_eq!(ledger.credits().len(), 1, "the retry sent nothing");
}
