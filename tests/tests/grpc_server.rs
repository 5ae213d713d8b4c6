//! The gate server as its users meet it: stock health checks and reflection describe it without
//! the `.proto`; TLS serves and plaintext is refused; a unix socket left by a killed server is
//! replaced; a caller that goes away mid-`Submit` sends nothing (the next call commits once); a
//! graceful shutdown fences what has not been sent; `ListEffects` pages list every effect once,
//! effects submitted while a caller pages included, and a page token the server did not give is
//! refused.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use interlock::Journal;
use interlock::core::EffectState;
use interlock::faults::FaultPoint;
use interlock_server::pb;
use interlock_testkit::faults::{Action, ScriptedFaults, Stall};
use interlock_tests::grpc::{self, Client, HeldPremises, Options};
use prost::Message;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_reflection::pb::v1::ServerReflectionRequest;
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;

async fn decided(c: &mut Client, key: &str) -> anyhow::Result<pb::Effect> {
    c.decide(pb::DecideRequest {
        target: "refunds".into(),
        key: key.into(),
        payload_json: r#"{"payment_intent":"pi_1","amount":2000,"currency":"usd"}"#.into(),
        lease: "lease-1".into(),
    })
    .await?
    .into_inner()
    .effect
    .ok_or_else(|| anyhow::anyhow!("Decide answered without an effect"))
}

/// A server started with `options` over `sim`, a $100 payment with a lease for $20, and a client
/// with the $20 refund decided under `key`.
async fn ready_server(
    options: Options,
    sim: Option<Arc<interlock_testkit::sim::SimPayments>>,
    key: &str,
) -> anyhow::Result<(grpc::Running, Client, pb::Effect)> {
    let server = grpc::start(options, sim).await?;
    server.sim.add_payment("pi_1", 10_000);
    grpc::client(&server.address, Some(grpc::ADMIN))
        .await?
        .grant_lease(grpc::lease_for("pi_1"))
        .await?;
    let mut c = grpc::client(&server.address, None).await?;
    let e = decided(&mut c, key).await?;
    Ok((server, c, e))
}

/// [`ready_server`] whose premise reads can be held.
async fn held_server(
    key: &str,
) -> anyhow::Result<(grpc::Running, Arc<HeldPremises>, Client, pb::Effect)> {
    let sim = interlock_testkit::sim::SimPayments::new(
        interlock::Tier::One,
        Duration::from_secs(24 * 3600),
        Arc::new(interlock::SystemClock),
    );
    let held = HeldPremises::new(sim.clone());
    let options = Options {
        premises: Some(held.clone()),
        ..Options::default()
    };
    let (server, c, e) = ready_server(options, Some(sim), key).await?;
    Ok((server, held, c, e))
}

fn submit(e: &pb::Effect) -> pb::SubmitRequest {
    pb::SubmitRequest {
        target: "refunds".into(),
        effect: Some(e.clone()),
        attempt: String::new(),
    }
}

/// Releases a stall when dropped, so a failing assertion cannot leave a blocking thread held
/// (the runtime would wait for it forever).
struct Released(Arc<Stall>);

impl Drop for Released {
    fn drop(&mut self) {
        self.0.release();
    }
}

fn kind(out: pb::SubmitResponse) -> Option<pb::outcome::Kind> {
    out.outcome.and_then(|o| o.kind)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_reflection_describe_the_gate_without_its_proto() -> anyhow::Result<()> {
    let server = grpc::start(Options::default(), None).await?;
    let channel = grpc::channel(&server.address).await?;
    let health = HealthClient::new(channel.clone())
        .check(HealthCheckRequest {
            service: interlock_server::SERVICE_NAME.into(),
        })
        .await?
        .into_inner();
    assert_eq!(health.status, ServingStatus::Serving as i32);

    let mut reflection = ServerReflectionClient::new(channel);
    let ask = |m| ServerReflectionRequest {
        host: String::new(),
        message_request: Some(m),
    };
    let requests = tokio_stream::iter(vec![
        ask(MessageRequest::ListServices(String::new())),
        ask(MessageRequest::FileContainingSymbol(
            interlock_server::SERVICE_NAME.into(),
        )),
    ]);
    let mut answers = reflection
        .server_reflection_info(requests)
        .await?
        .into_inner();
    let mut services = Vec::new();
    let mut methods = Vec::new();
    while let Some(answer) = answers.message().await? {
        match answer.message_response {
            Some(MessageResponse::ListServicesResponse(l)) => {
                services.extend(l.service.into_iter().map(|s| s.name));
            }
            Some(MessageResponse::FileDescriptorResponse(f)) => {
                for bytes in f.file_descriptor_proto {
                    let file = prost_types::FileDescriptorProto::decode(bytes.as_slice())?;
                    for s in file.service {
                        methods.extend(s.method.into_iter().filter_map(|m| m.name));
                    }
                }
            }
            other => panic!("reflection answered {other:?}"),
        }
    }
    assert!(
        services.contains(&"interlock.v1.GateService".to_owned()),
        "{services:?}"
    );
    assert!(
        services.contains(&"grpc.health.v1.Health".to_owned()),
        "{services:?}"
    );
    for m in [
        "Decide",
        "Submit",
        "Recover",
        "GetEffect",
        "ListEffects",
        "Verify",
        "GrantLease",
        "RevokeLease",
        "ListLeases",
    ] {
        assert!(
            methods.iter().any(|x| x == m),
            "{m} missing from {methods:?}"
        );
    }
    server.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_serves_with_its_certificate_and_refuses_plaintext() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    let made = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
        ])
        .args(["-nodes", "-days", "1", "-subj", "/CN=localhost"])
        .args(["-addext", "subjectAltName=DNS:localhost"])
        .args(["-addext", "basicConstraints=critical,CA:FALSE"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()?;
    anyhow::ensure!(
        made.status.success(),
        "openssl could not make a test certificate: {}",
        String::from_utf8_lossy(&made.stderr)
    );
    let (cert, key) = (std::fs::read(cert)?, std::fs::read(key)?);
    let server = grpc::start(
        Options {
            tls: Some((cert.clone(), key)),
            ..Options::default()
        },
        None,
    )
    .await?;
    let mut c = grpc::tls_client(&server.address, &cert).await?;
    let effects = c
        .list_effects(pb::ListEffectsRequest::default())
        .await?
        .into_inner();
    assert!(effects.effects.is_empty());
    // A plaintext client gets no answer from a TLS server.
    let plain = async {
        let mut p = grpc::client(&server.address, None).await?;
        p.list_effects(pb::ListEffectsRequest::default()).await?;
        anyhow::Ok(())
    };
    let r = tokio::time::timeout(Duration::from_secs(5), plain).await;
    assert!(!matches!(r, Ok(Ok(()))), "a plaintext call was answered");
    server.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_unix_socket_is_replaced_and_a_live_one_is_not() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("gate.sock");
    // A socket file nobody answers on, as a SIGKILLed server leaves it.
    drop(std::os::unix::net::UnixListener::bind(&path)?);
    assert!(path.exists());
    let listen = interlock_server::Listen::Unix(path.clone());
    let live = interlock_server::Listener::bind(&listen).await?;
    // While it listens, a second server is refused, naming the socket.
    let second = interlock_server::Listener::bind(&listen).await;
    assert!(
        matches!(&second, Err(interlock_server::ServeError::InUse(p)) if *p == path),
        "{second:?}"
    );
    drop(live);
    // A file that is not a socket is never removed.
    let plain = dir.path().join("notes.txt");
    std::fs::write(&plain, "keep me")?;
    let r = interlock_server::Listener::bind(&interlock_server::Listen::Unix(plain.clone())).await;
    assert!(
        matches!(r, Err(interlock_server::ServeError::NotASocket(_))),
        "{r:?}"
    );
    assert_eq!(std::fs::read_to_string(&plain)?, "keep me");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_goes_away_mid_submit_sends_nothing_and_the_next_call_commits_once()
-> anyhow::Result<()> {
    // The attempt stalls between its dispatch record and its send.
    let stall = Stall::new();
    let _released = Released(stall.clone());
    let faults = ScriptedFaults::new();
    faults.arm(FaultPoint::AfterDispatch, Action::Stall(stall.clone()));
    let options = Options {
        faults: Some(faults),
        ..Options::default()
    };
    let (server, mut c, e) = ready_server(options, None, "req-gone").await?;
    // The caller gives up (its deadline passes, as when a worker is killed) while the server's
    // attempt is inside the gate; the server drops the call.
    let mut request = tonic::Request::new(submit(&e));
    request.set_timeout(Duration::from_millis(300));
    let gone = c.submit(request).await;
    let code = gone.err().map(|s| s.code());
    assert!(
        matches!(
            code,
            Some(tonic::Code::Cancelled | tonic::Code::DeadlineExceeded)
        ),
        "{code:?}"
    );
    assert!(stall.reached());
    let key = interlock::EffectKey::fixed("req-gone")?;
    assert!(matches!(
        server.journal.state(&key)?,
        EffectState::InFlight { .. }
    ));
    tokio::time::sleep(Duration::from_millis(200)).await;
    stall.release();
    // The attempt is fenced before its send; the next call recovers the effect once the
    // abandoned attempt has let go of its claim.
    let t0 = std::time::Instant::now();
    let committed = loop {
        match kind(c.submit(submit(&e)).await?.into_inner()) {
            Some(pb::outcome::Kind::Committed(done)) => break done,
            Some(pb::outcome::Kind::InFlight(_)) if t0.elapsed() < Duration::from_secs(10) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            other => panic!("the next call answered {other:?}"),
        }
    };
    // The abandoned attempt withdrew its dispatch unsent, so the recovery's send is the first.
    assert_eq!(committed.via, pb::Via::FirstSend as i32);
    // One request reached the payments service: the recovery's, not the abandoned attempt's.
    assert_eq!(server.sim.requests(), 1);
    assert_eq!(server.sim.refunded("pi_1"), 2000);
    server.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_shutdown_fences_an_attempt_that_has_not_sent() -> anyhow::Result<()> {
    let (server, held, mut c, e) = held_server("req-drain").await?;
    let stall = Stall::new();
    let _released = Released(stall.clone());
    held.arm(stall.clone());
    let call = tokio::spawn(async move { c.submit(submit(&e)).await });
    while !stall.reached() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Shut down while the attempt is inside the gate, then let it go on.
    let sim = server.sim.clone();
    let stopping = tokio::spawn(server.stop());
    tokio::time::sleep(Duration::from_millis(200)).await;
    stall.release();
    let answer = call.await??.into_inner();
    assert!(
        matches!(kind(answer.clone()), Some(pb::outcome::Kind::Superseded(_))),
        "{answer:?}"
    );
    assert_eq!(sim.requests(), 0);
    tokio::time::timeout(Duration::from_secs(20), stopping).await???;
    Ok(())
}

/// Every effect's key through `ListEffects`, `size` a page, each call passing the previous
/// page's token; `between(page)` runs after each page that has a next one.
async fn list_all(
    c: &mut Client,
    size: u32,
    mut between: impl FnMut(usize) -> anyhow::Result<()>,
) -> anyhow::Result<Vec<String>> {
    let mut listed = Vec::new();
    let mut token = String::new();
    for page in 0..10_000 {
        let r = c
            .list_effects(pb::ListEffectsRequest {
                page_size: size,
                page_token: token,
            })
            .await?
            .into_inner();
        let most = if size == 0 { 100 } else { size as usize };
        anyhow::ensure!(
            r.effects.len() <= most,
            "a page of {size} held {}",
            r.effects.len()
        );
        for e in &r.effects {
            anyhow::ensure!(e.target == "counting", "{e:?}");
            anyhow::ensure!(e.status == pb::EffectStatus::Committed as i32, "{e:?}");
        }
        listed.extend(r.effects.into_iter().map(|e| e.key));
        if r.next_page_token.is_empty() {
            return Ok(listed);
        }
        token = r.next_page_token;
        between(page)?;
    }
    anyhow::bail!("paging by {size} did not end")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_effects_pages_list_every_effect_once_and_refuse_a_token_the_server_did_not_give()
-> anyhow::Result<()> {
    use interlock::{Clock, Effect, EffectKey, Gate, GateConfig, Grant, SystemClock, Tier};

    let server = grpc::start(Options::default(), None).await?;
    // Effects written beside the server, as another worker on the same journal would.
    server
        .journal
        .grant_lease(&Grant::new("ops", "ops@example", SystemClock.now_ms()).unlimited())?;
    let gate = Gate::new(
        server.journal.clone(),
        server.journal.clone(),
        Arc::new(SystemClock),
        GateConfig::beside(server.journal.location()),
    )?
    .bind(
        interlock_tests::targets::Counting::new(Tier::One, Duration::ZERO),
        Arc::new(interlock::premise::NoPremises),
    )?;
    let add = |key: &str| -> anyhow::Result<String> {
        let e = Effect::new(
            EffectKey::fixed(key)?,
            &serde_json::json!({"amount": 2000, "currency": "usd"}),
            "ops",
        )?;
        let out = gate.submit(&e)?;
        anyhow::ensure!(
            matches!(out, interlock::Outcome::Committed { .. }),
            "{out:?}"
        );
        Ok(key.to_owned())
    };
    let mut all = (0..12)
        .map(|i| add(&format!("listed-{i:02}")))
        .collect::<anyhow::Result<Vec<_>>>()?;
    all.sort();
    let mut c = grpc::client(&server.address, None).await?;
    for size in [1, 2, 5, 11, 12, 13, 0] {
        let listed = list_all(&mut c, size, |_| Ok(())).await?;
        assert_eq!(listed, all, "pages of {size}");
    }

    // Effects submitted between pages: one sorting before the page just read (which this
    // listing has passed), one after every key (which it reaches). Every effect there before the
    // listing began is listed once, no effect twice.
    let (mut behind, mut ahead) = (BTreeSet::new(), BTreeSet::new());
    let listed = list_all(&mut c, 2, |page| {
        if page < 4 {
            behind.insert(add(&format!("a-added-{page}"))?);
            ahead.insert(add(&format!("z-added-{page}"))?);
        }
        Ok(())
    })
    .await?;
    let once: BTreeSet<String> = listed.iter().cloned().collect();
    assert_eq!(
        once.len(),
        listed.len(),
        "an effect listed twice: {listed:?}"
    );
    assert!(all.iter().all(|k| once.contains(k)), "{listed:?}");
    assert!(ahead.is_subset(&once), "{listed:?}");
    assert!(behind.is_disjoint(&once), "{listed:?}");
    assert_eq!(listed.len(), all.len() + ahead.len());

    // A token the server did not give: garbage, an offset (what tokens once were), a key that
    // is not hex-encoded.
    for token in ["not-a-token", "2", "k1.zz", "k1.", "listed-03"] {
        let refused = c
            .list_effects(pb::ListEffectsRequest {
                page_size: 2,
                page_token: token.into(),
            })
            .await
            .err()
            .map(|s| (s.code(), s.message().to_owned()));
        assert!(
            matches!(&refused, Some((tonic::Code::InvalidArgument, m)) if m.contains("page_token")),
            "{token:?}: {refused:?}"
        );
    }
    server.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_whose_deadline_cannot_cover_an_attempt_is_told_the_minimum_and_then_commits()
-> anyhow::Result<()> {
    // Tier 2 (no dedupe: a fenced dispatch's window would have to be waited out) and an order
    // service that takes 250 ms to read: no attempt reaches its send within 120 ms.
    let sim = interlock_testkit::sim::SimPayments::new(
        interlock::Tier::Two,
        Duration::from_secs(24 * 3600),
        Arc::new(interlock::SystemClock),
    );
    let options = Options {
        premise_delay: Some(Duration::from_millis(250)),
        ..Options::default()
    };
    let (server, mut c, e) = ready_server(options, Some(sim), "req-short").await?;
    // A caller that always calls again with the deadline the server last asked for (starting
    // with one too short): the server must tell it what it needs, and the effect must land.
    let mut deadline = Duration::from_millis(120);
    let mut told = Vec::new();
    let mut committed = None;
    for _ in 0..10 {
        let mut request = tonic::Request::new(submit(&e));
        request.set_timeout(deadline);
        match c.submit(request).await {
            Ok(answer) => match kind(answer.into_inner()) {
                Some(pb::outcome::Kind::Committed(done)) => {
                    committed = Some(done);
                    break;
                }
                // The abandoned attempt before it is still winding down.
                Some(pb::outcome::Kind::InFlight(_)) => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                other => panic!("answered {other:?}"),
            },
            Err(s) if s.code() == tonic::Code::FailedPrecondition => {
                let min: u64 = s
                    .metadata()
                    .get("interlock-min-deadline-ms")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| panic!("no minimum in {s:?}"));
                assert!(s.message().contains("deadline"), "{s:?}");
                told.push(min);
                deadline = Duration::from_millis(min);
            }
            // Cut by its own deadline: the server learns from it.
            Err(s) => assert!(
                matches!(
                    s.code(),
                    tonic::Code::DeadlineExceeded | tonic::Code::Cancelled
                ),
                "{s:?}"
            ),
        }
    }
    assert!(
        !told.is_empty(),
        "the server never told the caller its minimum"
    );
    let committed =
        committed.unwrap_or_else(|| panic!("never committed; the server asked for {told:?} ms"));
    assert_eq!(committed.via, pb::Via::FirstSend as i32);
    assert_eq!(server.sim.requests(), 1);
    assert_eq!(server.sim.refunded("pi_1"), 2000);
    // Calls refused for their deadline touched nothing: the history is one attempt's.
    let key = interlock::EffectKey::fixed("req-short")?;
    let records = server.journal.history(&key)?;
    assert!(records.len() <= 6, "{} records", records.len());
    server.stop().await
}

/// A budget set over gRPC with the admin token binds every worker's `Submit` from the moment it
/// returns: the effect that would go over is refused `REFUSAL_CODE_BUDGET` and never sent;
/// `ListBudgets` shows what is used and left and who changed what; a new limit makes room, a
/// change to what the budget counts is refused, and a removed budget no longer limits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_set_over_grpc_refuses_the_effect_that_would_go_over_it() -> anyhow::Result<()> {
    let server = grpc::start(Options::default(), None).await?;
    server.sim.add_payment("pi_1", 100_000);
    let mut admin = grpc::client(&server.address, Some(grpc::ADMIN)).await?;
    let mut standing = grpc::lease_for("pi_1");
    if let Some(l) = standing.lease.as_mut() {
        l.unlimited = true;
    }
    admin.grant_lease(standing).await?;
    let budget = pb::Budget {
        id: "pi-1-hourly".into(),
        scope_json: [("payment_intent".to_owned(), "\"pi_1\"".to_owned())].into(),
        per: Vec::new(),
        window: Some(pb::budget::Window::RollingMs(3_600_000)),
        limit: Some(pb::budget::Limit::Sum(pb::SumLimit {
            field: "amount".into(),
            max: 5000,
        })),
    };
    let set = admin
        .set_budget(pb::SetBudgetRequest {
            budget: Some(budget.clone()),
            by: "ops@example".into(),
        })
        .await?
        .into_inner();
    assert_eq!(set.change.as_ref().map(|c| c.n), Some(0));

    let mut c = grpc::client(&server.address, None).await?;
    let mut run = async |key: &str| -> anyhow::Result<Option<pb::outcome::Kind>> {
        let e = decided(&mut c, key).await?;
        Ok(kind(c.submit(submit(&e)).await?.into_inner()))
    };
    for key in ["req-1", "req-2"] {
        assert!(
            matches!(run(key).await?, Some(pb::outcome::Kind::Committed(_))),
            "{key}"
        );
    }
    match run("req-3").await? {
        Some(pb::outcome::Kind::Refused(r)) => {
            assert_eq!(r.code, pb::RefusalCode::Budget as i32, "{}", r.reason);
            assert!(r.reason.contains("pi-1-hourly"), "{}", r.reason);
        }
        other => panic!("the effect over the budget answered {other:?}"),
    }
    assert_eq!(server.sim.refunded("pi_1"), 4000);

    let listed = admin
        .list_budgets(pb::ListBudgetsRequest {})
        .await?
        .into_inner()
        .budgets;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].budget.as_ref(), Some(&budget));
    let counters: Vec<(i64, i64, i64)> = listed[0]
        .counters
        .iter()
        .map(|c| (c.used, c.reserved, c.left))
        .collect();
    assert_eq!(counters, [(4000, 0, 1000)]);
    // Journaled as made by the verified caller, with the name the request gave beside it.
    assert_eq!(listed[0].changes[0].by, "admin (for ops@example)");

    // Only the window and the limit may change under an id: its places were counted by the rest.
    let mut wider = budget.clone();
    wider.scope_json.clear();
    let refused = admin
        .set_budget(pb::SetBudgetRequest {
            budget: Some(wider),
            by: "ops@example".into(),
        })
        .await
        .expect_err("a new scope under the same id");
    assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused}");
    let mut raised = budget.clone();
    raised.limit = Some(pb::budget::Limit::Sum(pb::SumLimit {
        field: "amount".into(),
        max: 6000,
    }));
    admin
        .set_budget(pb::SetBudgetRequest {
            budget: Some(raised),
            by: "lead@example".into(),
        })
        .await?;
    assert!(matches!(
        run("req-4").await?,
        Some(pb::outcome::Kind::Committed(_))
    ));
    assert!(matches!(
        run("req-5").await?,
        Some(pb::outcome::Kind::Refused(_))
    ));

    let removed = admin
        .remove_budget(pb::RemoveBudgetRequest {
            id: "pi-1-hourly".into(),
            by: "lead@example".into(),
        })
        .await?
        .into_inner();
    let change = removed.change.expect("a budget in force was removed");
    assert_eq!((change.n, change.budget), (2, None));
    assert!(
        admin
            .list_budgets(pb::ListBudgetsRequest {})
            .await?
            .into_inner()
            .budgets
            .is_empty()
    );
    assert!(matches!(
        run("req-6").await?,
        Some(pb::outcome::Kind::Committed(_))
    ));
    assert_eq!(server.sim.refunded("pi_1"), 8000);
    server.stop().await
}
