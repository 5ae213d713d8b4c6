//! The `interlock` command line as a new user meets it: on a journal with a real effect in it,
//! every command answers, errors name the cause and the fix, and `verify` exits 1 when something
//! does not hold.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)] // in tests, a panic is the report

use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use interlock::{EffectKey, Gate, GateConfig, Grant, Outcome, SqliteJournal, SystemClock, Tier};
use interlock_testkit::sim::{RefundPayload, SimPayments, SimRefundPremises, SimTarget};

fn cli(journal: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_interlock"))
        .arg("--journal")
        .arg(journal)
        .args(args)
        .env_remove("INTERLOCK_HMAC_KEY")
        .output()
        .expect("run interlock")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn journal_with_a_refund(dir: &Path) -> (std::path::PathBuf, String) {
    let path = dir.join("journal.db");
    let clock = Arc::new(SystemClock);
    let journal = Arc::new(SqliteJournal::open(&path, clock.clone()).unwrap());
    journal
        .grant_lease(
            &Grant::new("case-4471", "ana@support", 0)
                .scope("payment_intent", "pi_881")
                .cap("amount", 2000),
        )
        .unwrap();
    let payments = SimPayments::new(Tier::One, Duration::from_secs(86_400), clock.clone());
    payments.add_payment("pi_881", 10_000);
    let gate = Gate::new(journal.clone(), journal, clock, GateConfig::beside(&path)).unwrap();
    let bound = gate
        .bind(
            Arc::new(SimTarget(payments.clone())),
            Arc::new(SimRefundPremises(payments)),
        )
        .unwrap();
    let key = EffectKey::fixed("case-4471-refund").unwrap();
    let payload = RefundPayload::of_payment_intent("pi_881", 2000, "usd");
    let effect = bound.decide(key.clone(), &payload, "case-4471").unwrap();
    assert!(matches!(
        bound.submit(&effect).unwrap(),
        Outcome::Committed { .. }
    ));
    (path, key.to_string())
}

#[test]
fn a_new_user_can_list_show_score_and_manage_leases() {
    let dir = tempfile::tempdir().unwrap();
    let (j, key) = journal_with_a_refund(dir.path());
    let list = cli(&j, &["journal", "list"]);
    assert!(list.status.success(), "{}", text(&list));
    assert!(text(&list).contains(&key) && text(&list).contains("COMMITTED"));
    let show = cli(&j, &["journal", "show", &key]);
    assert!(
        text(&show).contains("DISPATCHED") && text(&show).contains("chain of 4 records intact"),
        "{}",
        text(&show)
    );
    let score = cli(&j, &["scoreboard", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&score.stdout).unwrap();
    assert_eq!(v["requests"], 1);
    assert_eq!(v["outcomes"]["COMMITTED"], 1);
    assert_eq!(v["cleared_no_person"], 1, "a plain lease, never routed");
    let score = text(&cli(&j, &["scoreboard", "--prefix", "nobody-"]));
    assert!(
        score.contains("requests") && score.contains(" 0"),
        "{score}"
    );
    let grant = cli(
        &j,
        &[
            "lease",
            "grant",
            "case-9",
            "--approver",
            "bo@support",
            "--scope",
            "payment_intent=pi_9",
            "--cap",
            "amount=500",
            "--expires-in",
            "3600",
        ],
    );
    assert!(grant.status.success(), "{}", text(&grant));
    let budget = cli(
        &j,
        &[
            "lease",
            "grant",
            "ops-day",
            "--approver",
            "ops",
            "--unlimited",
            "--total",
            "amount=50000",
        ],
    );
    assert!(budget.status.success(), "{}", text(&budget));
    let leases: serde_json::Value =
        serde_json::from_slice(&cli(&j, &["lease", "list", "--json"]).stdout).unwrap();
    assert_eq!(leases.as_array().unwrap().len(), 3);
    // The refund spent its approval; the new grants say what they allow.
    let by_id = |id: &str| {
        leases
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["id"] == id)
            .cloned()
            .unwrap()
    };
    assert_eq!(by_id("case-4471")["uses"], 1);
    assert_eq!(by_id("case-4471")["used"][0]["key"], key.as_str());
    assert_eq!(by_id("case-9")["uses"], 1);
    assert!(by_id("ops-day").get("uses").is_none());
    assert_eq!(
        by_id("ops-day")["total"],
        serde_json::json!(["amount", 50000])
    );
    let table = text(&cli(&j, &["lease", "list"]));
    assert!(
        table.contains(&format!("1/1 uses by {key}")) && table.contains("0/50000 amount"),
        "{table}"
    );
    let zero = cli(
        &j,
        &["lease", "grant", "z", "--approver", "a", "--uses", "0"],
    );
    assert_eq!(zero.status.code(), Some(2), "{}", text(&zero));
    assert!(text(&zero).contains("--uses"), "{}", text(&zero));
    assert!(cli(&j, &["lease", "revoke", "case-9"]).status.success());
    let again = cli(&j, &["lease", "revoke", "case-9"]);
    assert_eq!(again.status.code(), Some(3));
    assert!(
        text(&again).contains("no live lease case-9"),
        "{}",
        text(&again)
    );
}

#[test]
fn errors_name_the_cause_and_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let missing = cli(&dir.path().join("nope.db"), &["journal", "list"]);
    assert_eq!(missing.status.code(), Some(3));
    assert!(
        text(&missing).contains("pass --journal PATH or set INTERLOCK_JOURNAL"),
        "{}",
        text(&missing)
    );
    let (j, _) = journal_with_a_refund(dir.path());
    let unknown = cli(&j, &["journal", "show", "no-such-key"]);
    assert_eq!(unknown.status.code(), Some(3));
    assert!(
        text(&unknown).contains("interlock journal list"),
        "{}",
        text(&unknown)
    );
    let bad_cap = cli(
        &j,
        &["lease", "grant", "x", "--approver", "a", "--cap", "amount"],
    );
    assert!(text(&bad_cap).contains("field=value"), "{}", text(&bad_cap));
}

#[test]
fn the_operators_page_will_not_start_over_a_journal_that_is_not_there_or_with_nobody_to_admit() {
    let dir = tempfile::tempdir().unwrap();
    let directory = |groups: serde_json::Value| {
        let key = interlock::approval::ApproverKey::from_seed("olga", [7; 32]).public_hex();
        let path = dir.path().join("approvers.json");
        let body = serde_json::json!({
            "approvers": {"olga": {"public_key": key}},
            "groups": groups,
            "chain": [{"group": "support", "sla_ms": 1000}],
        });
        std::fs::write(&path, body.to_string()).unwrap();
        path.display().to_string()
    };
    let with_operators = directory(serde_json::json!({"support": ["olga"], "operators": ["olga"]}));
    let missing = dir.path().join("typo.db");
    let out = cli(
        &missing,
        &[
            "ops",
            "serve",
            "--approvers",
            &with_operators,
            "--listen",
            "127.0.0.1:0",
        ],
    );
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(text(&out).contains("no journal at"), "{}", text(&out));
    assert!(
        !missing.exists(),
        "an empty journal was created in its place"
    );
    let (j, _) = journal_with_a_refund(dir.path());
    let nobody = directory(serde_json::json!({"support": ["olga"]}));
    let out = cli(
        &j,
        &[
            "ops",
            "serve",
            "--approvers",
            &nobody,
            "--listen",
            "127.0.0.1:0",
        ],
    );
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(
        text(&out).contains("no member in group \"operators\""),
        "{}",
        text(&out)
    );
}

#[test]
fn verify_exits_0_on_an_intact_journal_and_1_after_tampering() {
    let s = Signed::new();
    let export = s.export();
    assert!(
        text(&export).contains("1 signed receipt"),
        "{}",
        text(&export)
    );
    let ok = s.verify_with_key();
    assert_eq!(ok.status.code(), Some(0), "{}", text(&ok));
    assert!(text(&ok).contains("1 of 1 effect(s) hold"));
    // Change the refunded amount in the journal, as someone with sqlite3 would.
    let conn = rusqlite::Connection::open(&s.j).unwrap();
    conn.execute("UPDATE records SET body = replace(body, '\"amount\":2000', '\"amount\":200') WHERE n = 0 AND key = ?1", [&s.key]).unwrap();
    drop(conn);
    let bad = s.verify_with_key();
    assert_eq!(bad.status.code(), Some(1), "{}", text(&bad));
    assert!(
        text(&bad).contains("FAIL valid") && text(&bad).contains("record 0"),
        "{}",
        text(&bad)
    );
    // Ed25519: keygen, export, verify with the public key alone.
    let dir2 = tempfile::tempdir().unwrap();
    let (j2, _) = journal_with_a_refund(dir2.path());
    let sk = dir2.path().join("receipt.key");
    let kg = cli(&j2, &["receipt", "keygen", "--out", sk.to_str().unwrap()]);
    let public = dir2.path().join("receipt.pub");
    std::fs::write(&public, &kg.stdout).unwrap();
    let out = dir2.path().join("r");
    assert!(
        cli(
            &j2,
            &[
                "receipt",
                "export",
                "--all",
                "--out",
                out.to_str().unwrap(),
                "--ed25519-key-file",
                sk.to_str().unwrap()
            ]
        )
        .status
        .success()
    );
    let v = cli(
        &j2,
        &[
            "verify",
            "--all",
            "--receipts",
            out.to_str().unwrap(),
            "--ed25519-public-key-file",
            public.to_str().unwrap(),
        ],
    );
    assert_eq!(v.status.code(), Some(0), "{}", text(&v));
}

/// A journal with one refund, a shared receipt key, and where its receipts go.
struct Signed {
    _dir: tempfile::TempDir,
    j: std::path::PathBuf,
    key: String,
    keyfile: String,
    receipts: String,
}

impl Signed {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let (j, key) = journal_with_a_refund(dir.path());
        let keyfile = dir.path().join("hmac.key");
        std::fs::write(&keyfile, "a shared receipt key").unwrap();
        let receipts = dir.path().join("receipts").display().to_string();
        Self {
            keyfile: keyfile.display().to_string(),
            receipts,
            _dir: dir,
            j,
            key,
        }
    }

    fn export(&self) -> Output {
        let args = ["receipt", "export", "--all", "--out", &self.receipts];
        cli(
            &self.j,
            &[&args[..], &["--hmac-key-file", &self.keyfile]].concat(),
        )
    }

    /// `verify --all --receipts DIR` and `extra`.
    fn verify(&self, extra: &[&str]) -> Output {
        let args = ["verify", "--all", "--receipts", &self.receipts];
        cli(&self.j, &[&args[..], extra].concat())
    }

    fn verify_with_key(&self) -> Output {
        self.verify(&["--hmac-key-file", &self.keyfile])
    }

    fn receipt_file(&self) -> std::path::PathBuf {
        Path::new(&self.receipts).join(format!("{}.json", self.key))
    }
}

#[test]
fn verify_all_walks_the_receipts_and_fails_an_effect_the_journal_lost() {
    let s = Signed::new();
    assert!(s.export().status.success());
    assert_eq!(s.verify_with_key().status.code(), Some(0));
    // Delete the effect's rows, as someone with sqlite3 would; its signed receipt remains.
    let conn = rusqlite::Connection::open(&s.j).unwrap();
    conn.execute("DELETE FROM records WHERE key = ?1", [&s.key])
        .unwrap();
    drop(conn);
    let lost = s.verify_with_key();
    assert_eq!(lost.status.code(), Some(1), "{}", text(&lost));
    let shown = text(&lost);
    assert!(
        shown.contains(&s.key) && shown.contains("no record of this key"),
        "{shown}"
    );
    assert!(shown.contains("0 of 1 effect(s) hold"), "{shown}");
}

#[test]
fn verify_fails_a_signature_it_did_not_check_unless_told_to_accept_it() {
    let s = Signed::new();
    assert!(s.export().status.success());
    // Replace the signature by zeros.
    let file = s.receipt_file();
    let mut r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    r["signature"]["value"] = serde_json::json!("0".repeat(64));
    std::fs::write(&file, r.to_string()).unwrap();
    let out = s.verify(&[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("no key was given"), "{}", text(&out));
    let accepted = s.verify(&["--accept-unchecked-signatures"]);
    assert_eq!(accepted.status.code(), Some(0), "{}", text(&accepted));
    assert!(
        text(&accepted).contains("NOT checked"),
        "{}",
        text(&accepted)
    );
    // A file in the receipts directory that is not a receipt fails too, by name.
    std::fs::write(Path::new(&s.receipts).join("stray.json"), "{}").unwrap();
    let stray = s.verify(&["--accept-unchecked-signatures"]);
    assert_eq!(stray.status.code(), Some(1), "{}", text(&stray));
    assert!(text(&stray).contains("stray.json"), "{}", text(&stray));
}

#[test]
fn an_old_receipt_beside_the_current_one_fails_and_export_never_overwrites_another_history() {
    let s = Signed::new();
    assert!(s.export().status.success());
    let file = s.receipt_file();
    let old = Path::new(&s.receipts).join(format!("{}.old.json", s.key));
    std::fs::copy(&file, &old).unwrap();
    let out = s.verify_with_key();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("two receipts name this key"),
        "{}",
        text(&out)
    );
    std::fs::remove_file(&old).unwrap();
    assert_eq!(s.verify_with_key().status.code(), Some(0));
    // A receipt for another history sits where export would write: it is kept, export fails.
    let mut r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    r["records"][0] = serde_json::json!("0".repeat(64));
    std::fs::write(&file, r.to_string()).unwrap();
    let again = s.export();
    assert!(!again.status.success(), "{}", text(&again));
    assert!(
        text(&again).contains("no longer extends"),
        "{}",
        text(&again)
    );
    let kept: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(kept, r);
}

fn cli_on(journal: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_interlock"))
        .args(["--journal", journal])
        .args(args)
        .env_remove("INTERLOCK_HMAC_KEY")
        .output()
        .expect("run interlock")
}

#[test]
fn a_journal_moves_between_sqlite_and_postgres_with_every_chain_intact() {
    let dir = tempfile::tempdir().unwrap();
    let (sqlite, key) = journal_with_a_refund(dir.path());
    let sqlite = sqlite.display().to_string();
    let cluster = interlock_testkit::pg::Cluster::shared().unwrap();
    let schema = cluster.fresh_schema("moved");
    let pg = cluster.url().to_owned();
    let on_pg = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_interlock"))
            .args(["--journal", &pg, "--journal-schema", &schema])
            .args(args)
            .env_remove("INTERLOCK_HMAC_KEY")
            .output()
            .expect("run interlock")
    };
    let dump = dir.path().join("dump.jsonl");
    let out = cli_on(
        &sqlite,
        &["journal", "export", "--out", dump.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("1 lease(s) and 4 record(s) of 1 effect(s)"),
        "{}",
        text(&out)
    );

    // Inspection never creates a journal that is not there.
    let missing = on_pg(&["journal", "list"]);
    assert_eq!(missing.status.code(), Some(3), "{}", text(&missing));
    assert!(
        text(&missing).contains("no Interlock journal here"),
        "{}",
        text(&missing)
    );

    let into_pg = on_pg(&["journal", "import", "--from", dump.to_str().unwrap()]);
    assert!(into_pg.status.success(), "{}", text(&into_pg));
    assert!(
        text(&into_pg).contains("1 effect(s) copied"),
        "{}",
        text(&into_pg)
    );
    let show = on_pg(&["journal", "show", &key]);
    assert!(
        text(&show).contains("chain of 4 records intact"),
        "{}",
        text(&show)
    );
    let verify = on_pg(&["verify", &key]);
    assert!(verify.status.success(), "{}", text(&verify));
    let leases = on_pg(&["lease", "list"]);
    assert!(text(&leases).contains("case-4471"), "{}", text(&leases));

    // Again: nothing doubles.
    let again = on_pg(&["journal", "import", "--from", dump.to_str().unwrap()]);
    assert!(
        text(&again).contains("0 effect(s) copied, 1 already here"),
        "{}",
        text(&again)
    );

    // And back to a new SQLite file: the same records, hash for hash.
    let back = dir.path().join("back.db").display().to_string();
    let dump2 = dir.path().join("dump2.jsonl");
    assert!(
        on_pg(&["journal", "export", "--out", dump2.to_str().unwrap()])
            .status
            .success()
    );
    let into_sqlite = cli_on(
        &back,
        &["journal", "import", "--from", dump2.to_str().unwrap()],
    );
    assert!(into_sqlite.status.success(), "{}", text(&into_sqlite));
    let records = |j: &str| {
        let o = cli_on(j, &["journal", "show", &key, "--json"]);
        let mut v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        for r in v.as_array_mut().unwrap() {
            r.as_object_mut().unwrap().remove("seq");
        }
        v
    };
    assert_eq!(records(&sqlite), records(&back));
    assert!(cli_on(&back, &["verify", &key]).status.success());

    // An edited export is refused and names what broke; the journal is left as it was.
    let edited = std::fs::read_to_string(&dump)
        .unwrap()
        .replace("\"amount\":2000", "\"amount\":9000");
    let bad = dir.path().join("edited.jsonl");
    std::fs::write(&bad, edited).unwrap();
    let fresh = dir.path().join("fresh.db").display().to_string();
    let refused = cli_on(
        &fresh,
        &["journal", "import", "--from", bad.to_str().unwrap()],
    );
    assert_eq!(refused.status.code(), Some(3), "{}", text(&refused));
    assert!(
        text(&refused).contains(&key) && text(&refused).contains("record"),
        "{}",
        text(&refused)
    );
    let empty = cli_on(&fresh, &["journal", "list"]);
    assert!(
        text(&empty).contains("holds no effects"),
        "{}",
        text(&empty)
    );
}

/// A journal holding a tier-3 refund whose worker died after DISPATCHED, which `interlock recover`
/// has left AMBIGUOUS: nothing can say whether it landed.
fn ambiguous_refund(dir: &Path) -> std::path::PathBuf {
    use interlock::faults::FaultPoint;
    use interlock_stripe::{StripeConfig, StripeRefunds};
    use interlock_testkit::faults::{Action, ScriptedFaults};

    let path = dir.join("journal.db");
    let clock = Arc::new(SystemClock);
    let journal = Arc::new(SqliteJournal::open(&path, clock.clone()).unwrap());
    journal
        .grant_lease(
            &Grant::new("case-1", "ana@support", 0)
                .scope("payment_intent", "pi_1")
                .cap("amount", 2000),
        )
        .unwrap();
    let faults = ScriptedFaults::new();
    faults.arm(FaultPoint::AfterDispatch, Action::Crash);
    // A claim lives 3 s (send timeout + settle): its request may land until then.
    let config = GateConfig::builder(&path)
        .send_timeout(Duration::from_secs(2))
        .settle(Duration::from_secs(1))
        .build()
        .unwrap();
    let gate = Gate::new(journal.clone(), journal, clock, config)
        .unwrap()
        .with_faults(faults);
    let dead = StripeConfig::new("http://127.0.0.1:9", "sk_test_x").unwrap();
    let bound = gate
        .bind(
            Arc::new(StripeRefunds::new(dead).assume_tier(Tier::Three)),
            Arc::new(interlock::premise::NoPremises),
        )
        .unwrap();
    let payload = RefundPayload::of_payment_intent("pi_1", 2000, "usd");
    let effect = bound
        .decide(
            EffectKey::fixed("case-1-refund").unwrap(),
            &payload,
            "case-1",
        )
        .unwrap();
    assert!(bound.submit(&effect).is_err(), "the scripted crash");

    let recover = Command::new(env!("CARGO_BIN_EXE_interlock"))
        .arg("--journal")
        .arg(&path)
        .args(["recover", "case-1-refund", "--tier", "3"])
        .env("STRIPE_API_BASE", "http://127.0.0.1:9")
        .env("STRIPE_SECRET_KEY", "sk_test_x")
        .output()
        .unwrap();
    assert_eq!(recover.status.code(), Some(4), "{}", text(&recover));
    assert!(text(&recover).contains("AMBIGUOUS"), "{}", text(&recover));
    path
}

#[test]
fn exit_codes_tell_usage_runtime_and_unsettled_apart() {
    let dir = tempfile::tempdir().unwrap();
    let path = ambiguous_refund(dir.path());
    let usage = cli(&path, &["journal", "list", "--no-such-flag"]);
    assert_eq!(usage.status.code(), Some(2), "{}", text(&usage));
    let runtime = cli(&path, &["journal", "show", "no-such-key"]);
    assert_eq!(runtime.status.code(), Some(3), "{}", text(&runtime));
    assert!(
        !text(&runtime).contains("Error {"),
        "no Debug output: {}",
        text(&runtime)
    );
    // An MCP proxy configuration that cannot be used is a usage error, not the runtime error a
    // host restarts the proxy on.
    let file = dir.path().join("interlock.mcp.json");
    std::fs::write(&file, r#"{"tools": {}}"#).unwrap();
    let config = file.to_str().unwrap();
    let unusable = cli(&path, &["mcp-proxy", "--config", config, "--", "true"]);
    assert_eq!(unusable.status.code(), Some(2), "{}", text(&unusable));
    assert!(
        text(&unusable).contains("reads TOML"),
        "{}",
        text(&unusable)
    );
}

#[test]
fn budgets_are_set_listed_shown_and_removed_with_who_changed_them() {
    let dir = tempfile::tempdir().unwrap();
    let (j, _) = journal_with_a_refund(dir.path());
    let set = cli(
        &j,
        &[
            "budget",
            "set",
            "refunds-daily",
            "--by",
            "ops@example",
            "--calendar",
            "day",
            "--utc-offset",
            "+02:00",
            "--sum",
            "amount=50000",
            "--scope",
            "label.agent=42",
        ],
    );
    assert!(set.status.success(), "{}", text(&set));
    assert!(
        text(&set).contains("per calendar day (UTC+02:00)"),
        "{}",
        text(&set)
    );
    let list: serde_json::Value =
        serde_json::from_slice(&cli(&j, &["budget", "list", "--json"]).stdout).unwrap();
    assert_eq!(list[0]["budget"]["id"], "refunds-daily");
    assert_eq!(list[0]["max"], 50000);
    // A label is text, whatever it looks like.
    assert_eq!(list[0]["budget"]["scope"]["label.agent"], "42");
    let show = text(&cli(&j, &["budget", "show", "refunds-daily"]));
    assert!(
        show.contains("#0") && show.contains("by ops@example"),
        "{show}"
    );
    // Only the limit and the window change under one id.
    let reshaped = cli(
        &j,
        &[
            "budget",
            "set",
            "refunds-daily",
            "--by",
            "ops@example",
            "--rolling",
            "1h",
            "--count",
            "3",
        ],
    );
    assert_eq!(reshaped.status.code(), Some(3), "{}", text(&reshaped));
    assert!(
        text(&reshaped).contains("set a new id"),
        "{}",
        text(&reshaped)
    );
    let both = cli(
        &j,
        &[
            "budget",
            "set",
            "x",
            "--by",
            "a",
            "--rolling",
            "1h",
            "--calendar",
            "day",
            "--count",
            "1",
        ],
    );
    assert_eq!(both.status.code(), Some(2), "{}", text(&both));
    let removed = cli(
        &j,
        &["budget", "remove", "refunds-daily", "--by", "cfo@example"],
    );
    assert!(removed.status.success(), "{}", text(&removed));
    let again = cli(
        &j,
        &["budget", "remove", "refunds-daily", "--by", "cfo@example"],
    );
    assert_eq!(again.status.code(), Some(3));
    let show: serde_json::Value =
        serde_json::from_slice(&cli(&j, &["budget", "show", "refunds-daily", "--json"]).stdout)
            .unwrap();
    assert!(show["in_force"].is_null());
    assert_eq!(show["changes"][1]["by"], "cfo@example");
}

#[test]
fn an_operator_settles_an_ambiguous_effect_once_no_send_can_land_and_verify_names_them() {
    use interlock::approval::ApproverKey;

    let dir = tempfile::tempdir().unwrap();
    let path = ambiguous_refund(dir.path());
    let olga = ApproverKey::from_seed("olga", [7; 32]);
    let ivan = ApproverKey::from_seed("ivan", [8; 32]);
    for (who, seed) in [("olga", [7u8; 32]), ("ivan", [8u8; 32])] {
        std::fs::write(dir.path().join(format!("{who}.key")), hex(&seed)).unwrap();
    }
    let directory = serde_json::json!({
        "approvers": {
            "olga": {"public_key": olga.public_hex(), "name": "Olga"},
            "ivan": {"public_key": ivan.public_hex(), "name": "Ivan"},
        },
        "groups": {"operators": ["olga"], "support": ["ivan"]},
        "chain": [{"group": "support", "sla_ms": 60000}],
    });
    let approvers = dir.path().join("approvers.json");
    std::fs::write(&approvers, directory.to_string()).unwrap();
    let settle = |who: &str, finding: &[&str]| {
        let key = dir.path().join(format!("{who}.key"));
        let mut args = vec!["journal", "settle", "case-1-refund", "--person", who];
        args.extend(finding);
        args.extend(["--signing-key-file", key.to_str().unwrap()]);
        args.extend(["--approvers", approvers.to_str().unwrap()]);
        args.extend(["--note", "no refund on pi_1 in the dashboard"]);
        args.extend(["--looked-at", "now"]);
        cli(&path, &args)
    };
    // Recovery took the dead worker's claim a moment ago: its request may still land.
    let early = settle("olga", &["--not-applied"]);
    assert_eq!(early.status.code(), Some(3), "{}", text(&early));
    assert!(text(&early).contains("may still land"), "{}", text(&early));
    let outsider = settle("ivan", &["--not-applied"]);
    assert_eq!(outsider.status.code(), Some(3), "{}", text(&outsider));
    assert!(
        text(&outsider).contains("not a member of group operators"),
        "{}",
        text(&outsider)
    );
    let neither = settle("olga", &[]);
    assert_eq!(neither.status.code(), Some(2), "{}", text(&neither));
    // Until the dead worker's claim's deadline, which the refusal names.
    let until: i64 = text(&early)
        .split("until ")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no time in {}", text(&early)));
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    // A look counts once the clocks' margin has passed too.
    let wait = u64::try_from(until + interlock::core::settle::MAX_SKEW_MS + 200)
        .unwrap()
        .saturating_sub(now.as_millis() as u64);
    std::thread::sleep(Duration::from_millis(wait));
    let settled = settle("olga", &["--not-applied"]);
    assert_eq!(settled.status.code(), Some(0), "{}", text(&settled));
    assert!(
        text(&settled).contains("settled by olga → FAILED"),
        "{}",
        text(&settled)
    );
    let replayed = settle("olga", &["--applied", "re_1"]);
    assert_eq!(replayed.status.code(), Some(3), "{}", text(&replayed));
    assert!(
        text(&replayed).contains("settled already, by olga"),
        "{}",
        text(&replayed)
    );
    let verify = cli(
        &path,
        &[
            "verify",
            "case-1-refund",
            "--approvers",
            approvers.to_str().unwrap(),
        ],
    );
    assert!(
        text(&verify).contains("olga found it not applied (no refund on pi_1 in the dashboard)"),
        "{}",
        text(&verify)
    );
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A team's shop database (orders and customers' credit), before the substrate is installed.
fn shop_database(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("shop.db");
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch(
            "CREATE TABLE orders (id INTEGER PRIMARY KEY, status TEXT NOT NULL);
             CREATE TABLE customers (id INTEGER PRIMARY KEY, credit INTEGER NOT NULL);
             INSERT INTO orders VALUES (1, 'paid'); INSERT INTO customers VALUES (10, 0);",
        )
        .unwrap();
    path
}

/// The shop with the substrate installed by `interlock db install`, and a gate on a journal
/// beside it whose lease `ops` allows any number of effects: the shop, the journal, the gate.
fn installed_shop(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf, Gate) {
    let shop = shop_database(dir);
    let journal_path = dir.join("journal.db");
    let out = cli(
        &journal_path,
        &[
            "db",
            "install",
            "--database",
            shop.to_str().unwrap(),
            "--observe",
            "orders,customers",
        ],
    );
    assert!(
        out.status.success() && text(&out).contains("observing orders, customers"),
        "{}",
        text(&out)
    );
    let clock = Arc::new(SystemClock);
    let journal = Arc::new(SqliteJournal::open(&journal_path, clock.clone()).unwrap());
    journal
        .grant_lease(&Grant::new("ops", "ana@support", 0).unlimited())
        .unwrap();
    let gate = Gate::new(
        journal.clone(),
        journal,
        clock,
        GateConfig::beside(&journal_path),
    )
    .unwrap();
    (shop, journal_path, gate)
}

#[test]
fn db_install_then_verify_holds_until_a_committed_effects_marker_is_gone() {
    use interlock_db::{Plan, Policy, SqliteDb, Statement};
    let dir = tempfile::tempdir().unwrap();
    let (shop, journal_path, gate) = installed_shop(dir.path());
    let shop_arg = shop.to_str().unwrap();
    let db = SqliteDb::open(&shop, Policy::default()).unwrap();
    let bound = gate
        .bind(Arc::new(db), Arc::new(interlock::premise::NoPremises))
        .unwrap();
    let plan = Plan::new(vec![
        Statement {
            name: "cancel_order".into(),
            sql: "UPDATE orders SET status = 'cancelled' WHERE id = :order".into(),
            params: [("order".to_owned(), 1.into())].into(),
        },
        Statement {
            name: "credit_customer".into(),
            sql: "UPDATE customers SET credit = credit + :amount WHERE id = :customer".into(),
            params: [
                ("amount".to_owned(), 500.into()),
                ("customer".to_owned(), 10.into()),
            ]
            .into(),
        },
    ])
    .unwrap();
    let submit = |key: &str, plan: &Plan| {
        let effect =
            interlock::Effect::new(EffectKey::fixed(key).unwrap(), &plan.to_payload(), "ops")
                .unwrap();
        bound.submit(&effect).unwrap()
    };
    assert!(matches!(
        submit("cancel-1", &plan),
        Outcome::Committed { .. }
    ));
    let understated = plan.clone().footprint([("orders".to_owned(), 1)].into());
    let second = submit("cancel-2", &understated);
    assert!(matches!(second, Outcome::Failed(_)), "{second:?}");

    let out = cli(&journal_path, &["db", "verify", "--database", shop_arg]);
    let shown = text(&out);
    assert_eq!(out.status.code(), Some(0), "{shown}");
    assert!(
        shown.contains("cancel-1  committed; marker holds its receipt")
            && shown.contains("cancel-2  FAILED; no marker")
            && shown.contains("2 database effect(s)"),
        "{shown}"
    );

    // A marker no journal record names: a commit the gate did not make.
    let conn = rusqlite::Connection::open(&shop).unwrap();
    conn.execute(
        "INSERT INTO interlock_markers (key, plan_hash, diff_hash, receipt) VALUES ('ghost', 'h', 'h', '{}')",
        [],
    )
    .unwrap();
    let out = cli(&journal_path, &["db", "verify", "--database", shop_arg]);
    let shown = text(&out);
    assert_eq!(out.status.code(), Some(1), "{shown}");
    assert!(
        shown.contains("FAIL ghost  the database holds its marker, but the journal has no database effect under it"),
        "{shown}"
    );
    conn.execute("DELETE FROM interlock_markers WHERE key = 'ghost'", [])
        .unwrap();

    // The database loses the committed effect's marker: the journal and it disagree.
    rusqlite::Connection::open(&shop)
        .unwrap()
        .execute("DELETE FROM interlock_markers", [])
        .unwrap();
    let out = cli(&journal_path, &["db", "verify", "--database", shop_arg]);
    let shown = text(&out);
    assert_eq!(out.status.code(), Some(1), "{shown}");
    assert!(
        shown.contains("FAIL cancel-1  committed in the journal, but the database holds no marker"),
        "{shown}"
    );
}

#[test]
fn db_relay_delivers_a_committed_plans_refund_once_and_then_finds_nothing_waiting() {
    use interlock_db::{Outgoing, Plan, Policy, SqliteDb, Statement};
    use interlock_testkit::payments_api::PaymentsApi;
    const SECRET: &str = "sk_test_cli_relay";
    let dir = tempfile::tempdir().unwrap();
    let (shop, journal_path, gate) = installed_shop(dir.path());
    let shop_arg = shop.to_str().unwrap();
    let policy = Policy {
        outbox: [("stripe-refunds".to_owned(), ["ops".to_owned()].into())].into(),
        ..Policy::default()
    };
    let db = SqliteDb::open(&shop, policy).unwrap();
    let bound = gate
        .bind(Arc::new(db), Arc::new(interlock::premise::NoPremises))
        .unwrap();
    let plan = Plan::new(vec![Statement {
        name: "cancel_order".into(),
        sql: "UPDATE orders SET status = 'cancelled' WHERE id = :order".into(),
        params: [("order".to_owned(), 1.into())].into(),
    }])
    .unwrap()
    .then_send(Outgoing {
        id: "refund".into(),
        target: "stripe-refunds".into(),
        lease: "ops".into(),
        payload: serde_json::json!({"payment_intent": "pi_cli", "amount": 2000, "currency": "usd"}),
    })
    .unwrap();
    let effect = interlock::Effect::new(
        EffectKey::fixed("cancel-9").unwrap(),
        &plan.to_payload(),
        "ops",
    )
    .unwrap();
    assert!(matches!(
        bound.submit(&effect).unwrap(),
        Outcome::Committed { .. }
    ));

    let payments = SimPayments::new(
        Tier::One,
        Duration::from_secs(86_400),
        Arc::new(SystemClock),
    );
    payments.add_payment("pi_cli", 10_000);
    let api = PaymentsApi::start(payments.clone(), SECRET).unwrap();
    let relay = || {
        Command::new(env!("CARGO_BIN_EXE_interlock"))
            .arg("--journal")
            .arg(&journal_path)
            .args(["db", "relay", "--database", shop_arg])
            .env("STRIPE_API_BASE", &api.base_url)
            .env("STRIPE_SECRET_KEY", SECRET)
            .output()
            .unwrap()
    };
    // A plain connection rewrites the waiting call (another payment, a bigger amount): `db
    // verify` fails naming it, and the relay sends nothing; put back, it is delivered.
    let verify = || {
        Command::new(env!("CARGO_BIN_EXE_interlock"))
            .arg("--journal")
            .arg(&journal_path)
            .args(["db", "verify", "--database", shop_arg])
            .output()
            .unwrap()
    };
    assert_eq!(verify().status.code(), Some(0), "{}", text(&verify()));
    let plain = rusqlite::Connection::open(&shop).unwrap();
    let staged: String = plain
        .query_row("SELECT payload FROM interlock_outbox", [], |r| r.get(0))
        .unwrap();
    plain
        .execute(
            "UPDATE interlock_outbox SET payload = ?1",
            [r#"{"payment_intent":"pi_cli","amount":9000,"currency":"usd"}"#],
        )
        .unwrap();
    let out = verify();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("rewritten"), "{}", text(&out));
    let out = relay();
    assert_ne!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        text(&out).contains("waiting   cancel-9/refund"),
        "{}",
        text(&out)
    );
    assert!(
        payments.refunds("pi_cli").is_empty(),
        "the rewritten call was sent"
    );
    plain
        .execute("UPDATE interlock_outbox SET payload = ?1", [&staged])
        .unwrap();
    let out = relay();
    let shown = text(&out);
    assert_eq!(out.status.code(), Some(0), "{shown}");
    assert!(
        shown.contains("delivered cancel-9/refund  COMMITTED"),
        "{shown}"
    );
    assert_eq!(payments.refunds("pi_cli").len(), 1);
    let out = relay();
    assert!(
        text(&out).contains("nothing waits in the outbox"),
        "{}",
        text(&out)
    );
    assert_eq!(payments.refunds("pi_cli").len(), 1, "refunded once");
}
