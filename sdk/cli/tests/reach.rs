//! Every server the `interlock` command starts, asked on its command line to listen where other
//! hosts reach it without the protection that needs: each refuses before it binds, naming the
//! fix, whatever path the address came by (a flag over a checked configuration file included).
//! Behind a named TLS proxy the same address is served.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)] // in tests, a panic is the report

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn interlock(journal: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_interlock"));
    c.arg("--journal")
        .arg(journal)
        .env("STRIPE_SECRET_KEY", "sk_test_reach")
        .env("STRIPE_API_BASE", "http://127.0.0.1:9")
        .env_remove("INTERLOCK_METRICS_BEHIND_PROXY")
        .env_remove("INTERLOCK_PAGES_BEHIND_PROXY")
        .env_remove("INTERLOCK_METRICS_LISTEN")
        .stdin(Stdio::null());
    c
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn directory(dir: &Path) -> String {
    let key = interlock::approval::ApproverKey::from_seed("olga", [7; 32]).public_hex();
    let path = dir.join("approvers.json");
    let body = serde_json::json!({
        "approvers": {"olga": {"public_key": key}},
        "groups": {"support": ["olga"], "operators": ["olga"]},
        "chain": [{"group": "support", "sla_ms": 1000}],
    });
    std::fs::write(&path, body.to_string()).unwrap();
    path.display().to_string()
}

/// A journal file, created by a command that writes one.
fn journal(dir: &Path) -> std::path::PathBuf {
    let j = dir.join("journal.db");
    let out = interlock(&j)
        .args([
            "lease",
            "grant",
            "l-1",
            "--approver",
            "ana",
            "--scope",
            "payment_intent=pi_1",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    j
}

#[test]
fn no_server_listens_where_other_hosts_reach_it_without_authentication_and_tls() {
    let dir = tempfile::tempdir().unwrap();
    let j = journal(dir.path());
    let approvers = directory(dir.path());
    let config = dir.path().join("serve.toml");
    // A configuration that passes its own check: loopback, no token, no TLS.
    std::fs::write(
        &config,
        "listen = \"127.0.0.1:0\"\n[targets.refunds]\nkind = \"stripe_refunds\"\n",
    )
    .unwrap();
    let config = config.display().to_string();
    let cases: Vec<(&str, Vec<&str>, &str)> = vec![
        (
            "interlock serve --listen",
            vec!["serve", "--config", &config, "--listen", "0.0.0.0:0"],
            "[tls]",
        ),
        (
            "interlock serve --metrics-listen",
            vec![
                "serve",
                "--config",
                &config,
                "--metrics-listen",
                "0.0.0.0:0",
            ],
            "INTERLOCK_METRICS_BEHIND_PROXY",
        ),
        (
            "interlock ops serve",
            vec![
                "ops",
                "serve",
                "--approvers",
                &approvers,
                "--listen",
                "0.0.0.0:0",
            ],
            "--behind-proxy",
        ),
        (
            "interlock inbox serve",
            vec![
                "inbox",
                "serve",
                "--approvers",
                &approvers,
                "--listen",
                "[::]:0",
            ],
            "--behind-proxy",
        ),
        (
            "interlock metrics",
            vec!["metrics", "--listen", "0.0.0.0:0"],
            "--behind-proxy",
        ),
        (
            "interlock webhook serve",
            vec!["webhook", "serve", "--bind", "0.0.0.0", "--port", "0"],
            "--behind-proxy",
        ),
    ];
    for (what, args, fix) in cases {
        let out = interlock(&j)
            .args(&args)
            .env("STRIPE_WEBHOOK_SECRET", "whsec_reach")
            .output()
            .unwrap();
        let said = text(&out);
        assert!(!out.status.success(), "{what} started: {said}");
        assert!(
            said.contains("reachable from other hosts") && said.contains(fix),
            "{what} did not name the cause and the fix ({fix}): {said}"
        );
        assert!(!said.contains("listening on"), "{what} bound: {said}");
    }
}

#[test]
fn a_page_behind_a_named_tls_proxy_serves_an_address_other_hosts_reach() {
    let dir = tempfile::tempdir().unwrap();
    let j = journal(dir.path());
    let approvers = directory(dir.path());
    let mut child = interlock(&j)
        .args([
            "ops",
            "serve",
            "--approvers",
            &approvers,
            "--listen",
            "0.0.0.0:0",
            "--behind-proxy",
            "192.0.2.10",
        ])
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut said = String::new();
    let mut port = None;
    for line in BufReader::new(stderr).lines() {
        let line = line.unwrap_or_default();
        said.push_str(&line);
        said.push('\n');
        if let Some(at) = line.strip_prefix("interlock ops: listening on http://") {
            port = at
                .trim_end_matches('/')
                .rsplit(':')
                .next()
                .map(str::to_owned);
            break;
        }
        if Instant::now() > deadline {
            break;
        }
    }
    let port = port.unwrap_or_else(|| {
        let _ = child.kill();
        panic!("the page did not start: {said}")
    });
    // Loopback is answered (the proxy on this host, or a person on it).
    let status = get_status(&format!("127.0.0.1:{port}"), "/login");
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(status.as_deref(), Some("HTTP/1.1 200 OK"), "{said}");
}

/// The status line of a plain `GET path` at `at`.
fn get_status(at: &str, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(at).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {at}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut answer = String::new();
    s.read_to_string(&mut answer).ok()?;
    answer.lines().next().map(str::to_owned)
}
