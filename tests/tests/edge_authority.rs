//! Authority at the gate server's edge, tried as a hostile worker would: the worker token reads
//! effects, but no read hands it a lease it was not given (an id is what spending a lease takes),
//! a grant's scope and cap, or a budget's room; the admin token reads them whole. And the server
//! will not serve a socket other hosts reach without a token and TLS, however it was bound. A
//! person's signed approval is judged against the approver directory as it is now.

#![allow(clippy::panic)] // in tests, a panic is the report

use interlock_server::pb;
use interlock_server::{GateApi, Listen, Listener, ServeError, Server, Targets};
use interlock_tests::grpc::{self, Options};

const TOKEN: &str = "worker-token-for-tests";

/// Every text of an answer a caller could read a lease id from.
fn texts(r: &pb::GetEffectResponse) -> String {
    r.records
        .iter()
        .map(|r| r.event_json.as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_token_reads_no_lease_id_grant_or_budget_room_and_the_admin_token_reads_them()
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
    let mut admin = grpc::client(&server.address, Some(grpc::ADMIN)).await?;
    admin.grant_lease(grpc::lease_for("pi_1")).await?;
    admin
        .set_budget(pb::SetBudgetRequest {
            budget: Some(pb::Budget {
                id: "refunds-per-hour".into(),
                window: Some(pb::budget::Window::RollingMs(3_600_000)),
                limit: Some(pb::budget::Limit::CountMax(50)),
                ..pb::Budget::default()
            }),
            by: "ops".into(),
        })
        .await?;
    // Someone else's effect, under lease-1.
    let mut other = grpc::client(&server.address, Some(TOKEN)).await?;
    let effect = other
        .decide(pb::DecideRequest {
            target: "refunds".into(),
            key: "their-refund".into(),
            payload_json: r#"{"payment_intent":"pi_1","amount":500,"currency":"usd"}"#.into(),
            lease: "lease-1".into(),
        })
        .await?
        .into_inner()
        .effect;
    let committed = other
        .submit(pb::SubmitRequest {
            target: "refunds".into(),
            effect,
            attempt: String::new(),
        })
        .await?
        .into_inner();
    assert!(
        matches!(
            committed.outcome.and_then(|o| o.kind),
            Some(pb::outcome::Kind::Committed(_))
        ),
        "the effect to read committed"
    );

    // The hostile worker: the same worker token, reading the other's effect.
    let mut worker = grpc::client(&server.address, Some(TOKEN)).await?;
    let read = worker
        .get_effect(pb::GetEffectRequest {
            key: "their-refund".into(),
        })
        .await?
        .into_inner();
    let shown = texts(&read);
    assert!(
        !shown.contains("lease-1"),
        "a lease id reached the worker: {shown}"
    );
    let authorized: serde_json::Value = serde_json::from_str(
        &read
            .records
            .iter()
            .find(|r| r.kind == "AUTHORIZED")
            .map(|r| r.event_json.clone())
            .unwrap_or_default(),
    )?;
    assert_eq!(
        authorized["grant"],
        interlock_server::withheld::WITHHELD,
        "the grant (scope, cap) reached the worker"
    );
    assert!(
        !shown.contains("refunds-per-hour"),
        "a budget reached the worker: {shown}"
    );
    for kind in ["PROPOSED", "AUTHORIZED", "DISPATCHED"] {
        let r = read.records.iter().find(|r| r.kind == kind);
        assert!(
            r.is_some_and(|r| r.withheld),
            "{kind} is not marked withheld"
        );
    }
    // What a worker needs to tell its own effect stays: the payload, the outcome.
    assert!(
        shown.contains("pi_1") && shown.contains("COMMITTED"),
        "{shown}"
    );
    let verdict = worker
        .verify(pb::VerifyRequest {
            key: "their-refund".into(),
            ask_target: false,
        })
        .await?
        .into_inner();
    let details: Vec<&str> = verdict.columns.iter().map(|c| c.detail.as_str()).collect();
    assert!(
        details.iter().all(|d| !d.contains("lease-1")),
        "{details:?}"
    );
    assert!(verdict.holds, "withholding changes no verdict");

    // The admin token reads the whole history, hashes that check included.
    let whole = admin
        .get_effect(pb::GetEffectRequest {
            key: "their-refund".into(),
        })
        .await?
        .into_inner();
    assert!(texts(&whole).contains("lease-1"));
    assert!(whole.records.iter().all(|r| !r.withheld));
    server.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gate_server_serves_no_socket_other_hosts_reach_without_a_token_and_tls()
-> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let clock: std::sync::Arc<dyn interlock::Clock> = std::sync::Arc::new(interlock::SystemClock);
    let journal = std::sync::Arc::new(interlock::SqliteJournal::open(
        dir.path().join("j.db"),
        clock.clone(),
    )?);
    let server = || Server::new(GateApi::new(journal.clone(), Targets::new(), clock.clone()));
    // Bound by a caller of the library, which no configuration file checked.
    let everywhere = Listen::parse("0.0.0.0:0").map_err(anyhow::Error::msg)?;
    let listener = Listener::bind(&everywhere).await?;
    let served = server().token("t").run(listener, async {}).await;
    assert!(
        matches!(&served, Err(ServeError::Exposed(e)) if e.to_string().contains("[tls]")),
        "{served:?}"
    );
    // The same in the path `interlock serve` takes, before any socket is bound.
    let lone = server();
    let refused = tokio::task::spawn_blocking(move || {
        interlock_server::run_until_signalled(lone, &everywhere, |_| {})
    })
    .await?;
    assert!(
        matches!(refused, Err(ServeError::Exposed(_))),
        "{refused:?}"
    );
    // Loopback serves, and stops when told.
    let local = Listener::bind(&Listen::parse("127.0.0.1:0").map_err(anyhow::Error::msg)?).await?;
    server().run(local, async {}).await?;
    Ok(())
}

/// A directory where support is `members`, each signing with its seed, written into place.
fn put_directory(path: &std::path::Path, members: &[(&str, u8)]) -> anyhow::Result<()> {
    use interlock::approval::ApproverKey;
    let approvers: serde_json::Map<String, serde_json::Value> = members
        .iter()
        .map(|(who, seed)| {
            let key = ApproverKey::from_seed(*who, [*seed; 32]).public_hex();
            ((*who).to_owned(), serde_json::json!({ "public_key": key }))
        })
        .collect();
    let names: Vec<&str> = members.iter().map(|(w, _)| *w).collect();
    let body = serde_json::json!({
        "approvers": approvers,
        "groups": {"support": names},
        "chain": [{"group": "support", "sla_ms": 3_600_000}],
    });
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, body.to_string())?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

/// Route `key` to support, have `who` sign the effect `Decide` fixed for it, grant the
/// approval, and return the effect under it.
async fn approved(
    server: &grpc::Running,
    c: &mut grpc::Client,
    key: &str,
    who: &str,
    seed: u8,
) -> anyhow::Result<pb::Effect> {
    use interlock::Clock;
    use interlock::approval::{ApproverKey, RouteKind, RouteStep, Statement};
    let mut effect = c
        .decide(pb::DecideRequest {
            target: "refunds".into(),
            key: key.into(),
            payload_json: r#"{"payment_intent":"pi_1","amount":500,"currency":"usd"}"#.into(),
            lease: "pending".into(),
        })
        .await?
        .into_inner()
        .effect
        .ok_or_else(|| anyhow::anyhow!("Decide answered no effect"))?;
    let mut premises = interlock::core::Premises::new();
    for p in &effect.premises {
        premises.insert(p.name.clone(), serde_json::from_str(&p.value_json)?);
    }
    let now = interlock::SystemClock.now_ms();
    let signed = ApproverKey::from_seed(who, [seed; 32]).sign(Statement {
        request: key.into(),
        group: "support".into(),
        level: 0,
        approver: who.into(),
        payload: serde_json::from_str(&effect.payload_json)?,
        premises,
        issued_ms: now,
        expires_ms: now + 3_600_000,
        repair_of: None,
    })?;
    server.journal.route(
        key,
        &RouteStep {
            kind: RouteKind::Routed,
            level: 0,
            group: "support".into(),
            reason: "needs_judgment".into(),
            repair_of: None,
            detail: serde_json::Value::Null,
        },
    )?;
    let grant = interlock::Grant::approved(signed, now);
    server.journal.grant_lease(&grant)?;
    effect.lease = grant.id;
    Ok(effect)
}

async fn outcome(c: &mut grpc::Client, effect: pb::Effect) -> anyhow::Result<pb::outcome::Kind> {
    c.submit(pb::SubmitRequest {
        target: "refunds".into(),
        effect: Some(effect),
        attempt: String::new(),
    })
    .await?
    .into_inner()
    .outcome
    .and_then(|o| o.kind)
    .ok_or_else(|| anyhow::anyhow!("Submit answered no outcome"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gate_server_judges_signed_approvals_against_the_directory_as_it_is_now()
-> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("approvers.json");
    put_directory(&path, &[("ana", 1), ("ben", 2)])?;
    let server = grpc::start(
        Options {
            approvers: Some(path.clone()),
            ..Options::default()
        },
        None,
    )
    .await?;
    server.sim.add_payment("pi_1", 10_000);
    let mut c = grpc::client(&server.address, None).await?;
    // Ana's approval sends, once.
    let first = approved(&server, &mut c, "case-1", "ana", 1).await?;
    let kind = outcome(&mut c, first).await?;
    assert!(
        matches!(kind, pb::outcome::Kind::Committed(_)),
        "under ana's approval: {kind:?}"
    );
    // Ana leaves; the server, running all along, refuses what she signed before she left.
    let second = approved(&server, &mut c, "case-2", "ana", 1).await?;
    put_directory(&path, &[("ben", 2)])?;
    match outcome(&mut c, second).await? {
        pb::outcome::Kind::Refused(r) => assert!(
            r.reason.contains("not in the approver directory"),
            "{}",
            r.reason
        ),
        other => panic!("a removed approver's approval answered {other:?}"),
    }
    assert_eq!(
        server.sim.refunded("pi_1"),
        500,
        "one refund, under ana's first approval"
    );
    server.stop().await
}
