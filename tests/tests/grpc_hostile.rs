//! The gate server under malformed and hostile requests: bad keys, oversized and invalid payloads,
//! unknown targets and keys, a target whose dedupe margin does not hold, a wrong or missing token,
//! truncated and garbage frames, a busy journal. Each gets its status code and a message naming
//! the problem; none changes the journal or sends anything; the server keeps serving.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use interlock::EffectKey;
use interlock::Journal;
use interlock_server::pb;
use interlock_tests::grpc::{self, Client, Options};
use tonic::Code;

const TOKEN: &str = "t0k3n-for-tests";

/// Every key's record hashes: equal snapshots mean nothing was written.
fn snapshot(journal: &dyn Journal) -> anyhow::Result<BTreeMap<String, Vec<String>>> {
    let mut out = BTreeMap::new();
    for k in journal.keys()? {
        let key = EffectKey::fixed(k.clone())?;
        let hashes = journal.history(&key)?.into_iter().map(|r| r.hash).collect();
        out.insert(k, hashes);
    }
    Ok(out)
}

fn payload(amount: i64) -> String {
    format!(r#"{{"payment_intent":"pi_1","amount":{amount},"currency":"usd"}}"#)
}

fn effect(key: &str, payload: String) -> pb::Effect {
    pb::Effect {
        key: key.into(),
        payload_json: payload,
        lease: "lease-1".into(),
        premises: Vec::new(),
        labels: Default::default(),
    }
}

fn submit(target: &str, e: pb::Effect) -> pb::SubmitRequest {
    pb::SubmitRequest {
        target: target.into(),
        effect: Some(e),
        attempt: String::new(),
    }
}

/// The call's status code and message; `Ok` is reported as code OK.
fn code<T>(r: Result<tonic::Response<T>, tonic::Status>) -> (Code, String) {
    match r {
        Ok(_) => (Code::Ok, String::new()),
        Err(s) => (s.code(), s.message().to_owned()),
    }
}

async fn decided(c: &mut Client, key: &str, amount: i64) -> anyhow::Result<pb::Effect> {
    c.decide(pb::DecideRequest {
        target: "refunds".into(),
        key: key.into(),
        payload_json: payload(amount),
        lease: "lease-1".into(),
    })
    .await?
    .into_inner()
    .effect
    .ok_or_else(|| anyhow::anyhow!("Decide answered without an effect"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_requests_get_their_status_codes_and_leave_the_journal_unchanged()
-> anyhow::Result<()> {
    let server = grpc::start(
        Options {
            token: Some(TOKEN.into()),
            ..Options::default()
        },
        None,
    )
    .await?;
    server.sim.add_payment("pi_1", 10_000);
    let mut c = grpc::client(&server.address, Some(TOKEN)).await?;
    let mut admin = grpc::client(&server.address, Some(grpc::ADMIN)).await?;
    admin.grant_lease(grpc::lease_for("pi_1")).await?;
    // One committed effect, so "unchanged" covers an existing key as well as new ones.
    let good = decided(&mut c, "req-good", 2000).await?;
    let first = c
        .submit(submit("refunds", good.clone()))
        .await?
        .into_inner();
    assert!(matches!(
        first.outcome.and_then(|o| o.kind),
        Some(pb::outcome::Kind::Committed(_))
    ));
    let before = snapshot(server.journal.as_ref())?;
    let requests_before = server.sim.requests();

    let huge = format!(
        r#"{{"payment_intent":"pi_1","amount":1,"pad":"{}"}}"#,
        "x".repeat(70_000)
    );
    let nested = format!("{}1{}", "[".repeat(300), "]".repeat(300));
    let mut cases: Vec<(&str, pb::SubmitRequest, Code, &str)> = vec![
        (
            "empty key",
            submit("refunds", effect("", payload(1))),
            Code::InvalidArgument,
            "effect.key",
        ),
        (
            "key with a space",
            submit("refunds", effect("a b", payload(1))),
            Code::InvalidArgument,
            "effect.key",
        ),
        (
            "key over 255 bytes",
            submit("refunds", effect(&"k".repeat(256), payload(1))),
            Code::InvalidArgument,
            "effect.key",
        ),
        (
            "non-ASCII key",
            submit("refunds", effect("ключ", payload(1))),
            Code::InvalidArgument,
            "effect.key",
        ),
        (
            "payload not JSON",
            submit("refunds", effect("req-x", "{\"amount\":".into())),
            Code::InvalidArgument,
            "effect.payload_json",
        ),
        (
            "payload an array",
            submit("refunds", effect("req-x", "[1]".into())),
            Code::InvalidArgument,
            "effect.payload_json",
        ),
        (
            "payload over 64 KiB",
            submit("refunds", effect("req-x", huge)),
            Code::InvalidArgument,
            "at most 65536",
        ),
        (
            "payload nested 300 deep",
            submit("refunds", effect("req-x", nested)),
            Code::InvalidArgument,
            "effect.payload_json",
        ),
        (
            "payload not a refund",
            submit("refunds", effect("req-x", r#"{"amount":"lots"}"#.into())),
            Code::InvalidArgument,
            "not a payload for target",
        ),
        (
            "no effect",
            pb::SubmitRequest {
                target: "refunds".into(),
                effect: None,
                attempt: String::new(),
            },
            Code::InvalidArgument,
            "effect: is missing",
        ),
        (
            "unknown target",
            submit("paypal", effect("req-x", payload(1))),
            Code::NotFound,
            "no target named \"paypal\"",
        ),
        (
            "target whose margin does not hold",
            submit("short_window", effect("req-x", payload(1))),
            Code::FailedPrecondition,
            "dedupe",
        ),
    ];
    let mut partial = decided(&mut c, "req-partial", 1000).await?;
    partial.premises.retain(|p| p.name != "refunded_by_others");
    cases.push((
        "premises left out",
        submit("refunds", partial),
        Code::InvalidArgument,
        "lacks refunded_by_others",
    ));
    let mut bad_premise = effect("req-x", payload(1));
    bad_premise.premises.push(pb::Premise {
        name: "refundable".into(),
        value_json: "NaN".into(),
    });
    cases.push((
        "premise value not JSON",
        submit("refunds", bad_premise),
        Code::InvalidArgument,
        "effect.premises[0].value_json",
    ));
    for (what, request, want, names) in cases {
        let (got, message) = code(c.submit(request).await);
        assert_eq!(got, want, "{what}: {message}");
        assert!(
            message.contains(names),
            "{what}: {message:?} does not name {names:?}"
        );
    }

    // Decide, Recover, GetEffect and Verify on keys and targets that are not there.
    let (got, m) = code(
        c.decide(pb::DecideRequest {
            target: "refunds".into(),
            key: "req-y".into(),
            payload_json: payload(1),
            lease: String::new(),
        })
        .await,
    );
    assert_eq!(
        (got, m.contains("lease")),
        (Code::InvalidArgument, true),
        "{m}"
    );
    let (got, m) = code(
        c.recover(pb::RecoverRequest {
            target: "refunds".into(),
            key: "never-seen".into(),
        })
        .await,
    );
    assert_eq!(
        (got, m.contains("never-seen")),
        (Code::NotFound, true),
        "{m}"
    );
    let (got, _) = code(
        c.get_effect(pb::GetEffectRequest {
            key: "never-seen".into(),
        })
        .await,
    );
    assert_eq!(got, Code::NotFound);
    let (got, _) = code(
        c.verify(pb::VerifyRequest {
            key: "never-seen".into(),
            ask_target: true,
        })
        .await,
    );
    assert_eq!(got, Code::NotFound);
    let (got, _) = code(
        c.list_effects(pb::ListEffectsRequest {
            page_size: 5000,
            page_token: String::new(),
        })
        .await,
    );
    assert_eq!(got, Code::InvalidArgument);
    let (got, _) = code(
        c.list_effects(pb::ListEffectsRequest {
            page_size: 10,
            page_token: "not-a-token".into(),
        })
        .await,
    );
    assert_eq!(got, Code::InvalidArgument);

    // Approving takes the admin token: the token that submits effects cannot grant or revoke.
    let (got, m) = code(
        c.grant_lease(pb::GrantLeaseRequest {
            lease: Some(pb::Lease {
                id: "lease-self-approved".into(),
                approver: "worker".into(),
                ..pb::Lease::default()
            }),
        })
        .await,
    );
    assert_eq!(got, Code::PermissionDenied, "{m}");
    let (got, m) = code(
        c.revoke_lease(pb::RevokeLeaseRequest {
            id: "lease-1".into(),
        })
        .await,
    );
    assert_eq!(got, Code::PermissionDenied, "{m}");
    // Nor read them: a lease's scope and cap are what a caller would need to spend it elsewhere.
    let (got, m) = code(c.list_leases(pb::ListLeasesRequest {}).await);
    assert_eq!(got, Code::PermissionDenied, "{m}");
    // Nor move the limits it is held to, or read where room is left.
    let wide_open = pb::Budget {
        id: "b-1".into(),
        window: Some(pb::budget::Window::RollingMs(1000)),
        limit: Some(pb::budget::Limit::CountMax(1_000_000)),
        ..pb::Budget::default()
    };
    let (got, m) = code(
        c.set_budget(pb::SetBudgetRequest {
            budget: Some(wide_open.clone()),
            by: "worker".into(),
        })
        .await,
    );
    assert_eq!(got, Code::PermissionDenied, "{m}");
    let (got, m) = code(c.list_budgets(pb::ListBudgetsRequest {}).await);
    assert_eq!(got, Code::PermissionDenied, "{m}");
    let (got, m) = code(
        c.remove_budget(pb::RemoveBudgetRequest {
            id: "b-1".into(),
            by: "worker".into(),
        })
        .await,
    );
    assert_eq!(got, Code::PermissionDenied, "{m}");
    // With the admin token, a malformed budget is refused, naming its field.
    for (spoil, field) in [
        (
            pb::Budget {
                window: None,
                ..wide_open.clone()
            },
            "budget.window",
        ),
        (
            pb::Budget {
                limit: Some(pb::budget::Limit::CountMax(-1)),
                ..wide_open.clone()
            },
            "budget.count_max",
        ),
    ] {
        let (got, m) = code(
            admin
                .set_budget(pb::SetBudgetRequest {
                    budget: Some(spoil),
                    by: "ops".into(),
                })
                .await,
        );
        assert_eq!(
            (got, m.contains(field)),
            (Code::InvalidArgument, true),
            "{m}"
        );
    }
    let (got, m) = code(
        admin
            .set_budget(pb::SetBudgetRequest {
                budget: Some(wide_open),
                by: String::new(),
            })
            .await,
    );
    assert_eq!(
        (got, m.contains("by")),
        (Code::InvalidArgument, true),
        "{m}"
    );

    // A second grant of the same lease id.
    let (got, m) = code(
        admin
            .grant_lease(pb::GrantLeaseRequest {
                lease: Some(pb::Lease {
                    id: "lease-1".into(),
                    approver: "mallory".into(),
                    ..pb::Lease::default()
                }),
            })
            .await,
    );
    assert_eq!(
        (got, m.contains("already exists")),
        (Code::AlreadyExists, true),
        "{m}"
    );

    // A wrong token and no token: refused before anything is read.
    for token in [Some("wrong"), None] {
        let mut other = grpc::client(&server.address, token).await?;
        let (got, m) = code(other.submit(submit("refunds", good.clone())).await);
        assert_eq!(got, Code::Unauthenticated, "{token:?}: {m}");
        let (got, _) = code(
            other
                .revoke_lease(pb::RevokeLeaseRequest {
                    id: "lease-1".into(),
                })
                .await,
        );
        assert_eq!(got, Code::Unauthenticated);
    }

    // Frames no client library would send.
    for (what, frame, want) in raw_frames() {
        let got = raw_call(&server.address, "Submit", frame).await?;
        assert!(
            want.contains(&got),
            "{what}: grpc-status {got:?}, wanted one of {want:?}"
        );
    }

    // Nothing was written and nothing was sent; the lease is still live.
    assert_eq!(snapshot(server.journal.as_ref())?, before);
    assert!(server.journal.budget_changes()?.is_empty());
    assert_eq!(server.sim.requests(), requests_before);
    assert_eq!(server.sim.refunded("pi_1"), 2000);
    let leases = admin
        .list_leases(pb::ListLeasesRequest {})
        .await?
        .into_inner()
        .leases;
    assert_eq!(leases.len(), 1);
    assert_eq!(leases[0].revoked_ms, 0);
    let holders: Vec<&str> = leases[0].used.iter().map(|u| u.key.as_str()).collect();
    assert_eq!(holders, ["req-good"]);

    // The worker's own token spends the approval on keys of its own: each is refused, naming
    // the key that spent it, and nothing more is sent.
    for key in ["req-a", "req-b"] {
        let e = decided(&mut c, key, 2000).await?;
        let out = c.submit(submit("refunds", e)).await?.into_inner();
        match out.outcome.and_then(|o| o.kind) {
            Some(pb::outcome::Kind::Refused(r)) => {
                assert_eq!(r.code, pb::RefusalCode::LeaseSpent as i32, "{}", r.reason);
                assert!(r.reason.contains("req-good"), "{}", r.reason);
            }
            other => panic!("{key} under a spent lease answered {other:?}"),
        }
    }
    assert_eq!(server.sim.requests(), requests_before);
    assert_eq!(server.sim.refunded("pi_1"), 2000);

    // And the server still serves: the committed effect replays.
    let again = c.submit(submit("refunds", good)).await?.into_inner();
    match again.outcome.and_then(|o| o.kind) {
        Some(pb::outcome::Kind::Committed(c)) => assert!(c.replayed),
        other => panic!("replay answered {other:?}"),
    }
    server.stop().await
}

/// Frames with a valid gRPC path and headers but a broken body, each with the status codes that
/// are right for it.
fn raw_frames() -> Vec<(&'static str, Vec<u8>, Vec<Code>)> {
    let frame = |flag: u8, len: u32, body: &[u8]| {
        let mut f = vec![flag];
        f.extend_from_slice(&len.to_be_bytes());
        f.extend_from_slice(body);
        f
    };
    vec![
        (
            "a length past the end of the stream",
            frame(0, 100, &[0x0a, 0x03]),
            vec![Code::Internal],
        ),
        (
            "a 5-byte header cut short",
            vec![0, 0, 0],
            vec![Code::Internal],
        ),
        (
            "bytes that are not protobuf",
            frame(0, 6, &[0xff; 6]),
            vec![Code::Internal],
        ),
        (
            "a 2 GiB length claim",
            frame(0, 0x7fff_ffff, &[0; 8]),
            vec![Code::OutOfRange, Code::ResourceExhausted],
        ),
        (
            "compressed without an encoding",
            frame(1, 2, &[0x0a, 0x00]),
            vec![Code::Internal, Code::Unimplemented],
        ),
    ]
}

/// Send `body` as the whole request stream of `method` over a raw HTTP/2 connection and return
/// the grpc-status the server answers with.
async fn raw_call(address: &str, method: &str, body: Vec<u8>) -> anyhow::Result<Code> {
    let tcp = tokio::net::TcpStream::connect(address).await?;
    let (client, connection) = h2::client::handshake(tcp).await?;
    tokio::spawn(connection);
    let mut client = client.ready().await?;
    let request = http::Request::builder()
        .method("POST")
        .uri(format!(
            "http://{address}/interlock.v1.GateService/{method}"
        ))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("authorization", format!("Bearer {TOKEN}"))
        .body(())?;
    let (response, mut send) = client.send_request(request, false)?;
    send.send_data(Bytes::from(body), true)?;
    let response = tokio::time::timeout(Duration::from_secs(10), response).await??;
    let status_of = |h: &http::HeaderMap| {
        h.get("grpc-status")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<i32>().ok())
            .map(Code::from)
    };
    if let Some(code) = status_of(response.headers()) {
        return Ok(code);
    }
    let mut body = response.into_body();
    while let Some(chunk) = body.data().await {
        chunk?;
    }
    let trailers = body.trailers().await?.unwrap_or_default();
    status_of(&trailers).ok_or_else(|| anyhow::anyhow!("no grpc-status in the answer"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_over_the_size_limit_is_refused_before_it_is_read() -> anyhow::Result<()> {
    let server = grpc::start(
        Options {
            max_message_bytes: Some(4096),
            ..Options::default()
        },
        None,
    )
    .await?;
    let before = snapshot(server.journal.as_ref())?;
    let mut c = grpc::client(&server.address, None).await?;
    let big = format!(
        r#"{{"payment_intent":"pi_1","amount":1,"pad":"{}"}}"#,
        "x".repeat(8000)
    );
    let (got, m) = code(c.submit(submit("refunds", effect("req-big", big))).await);
    assert!(
        matches!(got, Code::OutOfRange | Code::ResourceExhausted),
        "{got:?}: {m}"
    );
    assert_eq!(snapshot(server.journal.as_ref())?, before);
    server.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_journal_answers_unavailable_and_sends_nothing() -> anyhow::Result<()> {
    let server = grpc::start(
        Options {
            unix: true,
            ..Options::default()
        },
        None,
    )
    .await?;
    server.sim.add_payment("pi_1", 10_000);
    let mut c = grpc::client(&server.address, None).await?;
    let mut admin = grpc::client(&server.address, Some(grpc::ADMIN)).await?;
    admin
        .grant_lease(pb::GrantLeaseRequest {
            lease: Some(pb::Lease {
                id: "lease-1".into(),
                approver: "ana@support".into(),
                ..pb::Lease::default()
            }),
        })
        .await?;
    let e = decided(&mut c, "req-busy", 2000).await?;
    // Another process's long write: an exclusive lock on the journal file for longer than the
    // journal's busy timeout.
    let path = server.journal.location().to_owned();
    let (locked_tx, locked_rx) = std::sync::mpsc::channel();
    let holder = std::thread::spawn(move || -> anyhow::Result<()> {
        let conn = rusqlite::Connection::open(&path)?;
        conn.execute_batch("BEGIN EXCLUSIVE")?;
        locked_tx.send(())?;
        std::thread::sleep(Duration::from_secs(12));
        conn.execute_batch("ROLLBACK")?;
        Ok(())
    });
    locked_rx.recv()?;
    let (got, m) = code(c.submit(submit("refunds", e.clone())).await);
    assert_eq!(got, Code::Unavailable, "{m}");
    assert!(m.contains("busy"), "{m}");
    assert_eq!(server.sim.requests(), 0);
    holder
        .join()
        .map_err(|_| anyhow::anyhow!("the lock holder panicked"))??;
    // Once the lock is gone the same effect goes through, once.
    let out = c.submit(submit("refunds", e)).await?.into_inner();
    assert!(matches!(
        out.outcome.and_then(|o| o.kind),
        Some(pb::outcome::Kind::Committed(_))
    ));
    assert_eq!(server.sim.refunded("pi_1"), 2000);
    server.stop().await
}
