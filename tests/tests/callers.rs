//! Callers with identities, tried as a hostile caller would against a real gate server on a
//! real socket: each caller is known by a credential the server checked (its own bearer token,
//! or a client certificate the server's client CA signed), uses only its targets, reads and
//! acts on only the effects it proposed, and spends only the leases that name it. The journal
//! records the verified caller, never a name the caller wrote, and `verify` shows it.

#![allow(clippy::panic)] // in tests, a panic is the report

use std::path::Path;

use interlock::core::{Event, RefusalCode};
use interlock::{EffectKey, Journal};
use interlock_server::callers::{Caller, Role};
use interlock_server::pb;
use interlock_tests::grpc::{self, Client, Options};
use tonic::Code;

const ALICE: &str = "alice-token-for-tests";
const BOB: &str = "bob-token-for-tests";
const CAROL: &str = "carol-token-for-tests";
const AUDITOR: &str = "auditor-token-for-tests";

/// Alice and Bob refund; Carol may use only the other target; the auditor reads everything.
fn callers() -> Vec<(String, Caller)> {
    vec![
        (
            ALICE.into(),
            Caller::new("alice", Role::Worker).only(["refunds"]),
        ),
        (
            BOB.into(),
            Caller::new("bob", Role::Worker).only(["refunds"]),
        ),
        (
            CAROL.into(),
            Caller::new("carol", Role::Worker).only(["short_window"]),
        ),
        (AUDITOR.into(), Caller::new("auditor", Role::Reader)),
    ]
}

fn payload(pi: &str, amount: i64) -> String {
    format!(r#"{{"payment_intent":"{pi}","amount":{amount},"currency":"usd"}}"#)
}

async fn decide(
    c: &mut Client,
    key: &str,
    pi: &str,
    lease: &str,
) -> Result<pb::Effect, tonic::Status> {
    c.decide(pb::DecideRequest {
        target: "refunds".into(),
        key: key.into(),
        payload_json: payload(pi, 500),
        lease: lease.into(),
    })
    .await?
    .into_inner()
    .effect
    .ok_or_else(|| tonic::Status::internal("Decide answered no effect"))
}

async fn submit(c: &mut Client, effect: pb::Effect) -> Result<pb::outcome::Kind, tonic::Status> {
    c.submit(pb::SubmitRequest {
        target: "refunds".into(),
        effect: Some(effect),
        attempt: "attempt-named-by-the-caller".into(),
    })
    .await?
    .into_inner()
    .outcome
    .and_then(|o| o.kind)
    .ok_or_else(|| tonic::Status::internal("Submit answered no outcome"))
}

fn denied<T: std::fmt::Debug>(r: Result<T, tonic::Status>, what: &str) {
    match r {
        Err(s) if s.code() == Code::PermissionDenied => {}
        other => panic!("{what}: expected PERMISSION_DENIED, got {other:?}"),
    }
}

fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

fn absent<T: std::fmt::Debug>(r: Result<T, tonic::Status>, what: &str) {
    match r {
        Err(s) if s.code() == Code::NotFound => {}
        other => panic!("{what}: expected NOT_FOUND, got {other:?}"),
    }
}

/// A server with [`callers`], payment `pi_1`, and a standing lease `lease-1` on it granted over
/// gRPC naming `spenders` (none: anyone); the admin's client.
async fn four_callers(spenders: &[&str]) -> anyhow::Result<(grpc::Running, Client)> {
    let server = grpc::start(
        Options {
            callers: callers(),
            ..Options::default()
        },
        None,
    )
    .await?;
    server.sim.add_payment("pi_1", 10_000);
    let mut admin = grpc::client(&server.address, Some(grpc::ADMIN)).await?;
    let mut lease = grpc::lease_for("pi_1");
    if let Some(l) = lease.lease.as_mut() {
        l.unlimited = true;
        l.spenders = spenders.iter().map(|s| (*s).to_owned()).collect();
    }
    admin.grant_lease(lease).await?;
    Ok((server, admin))
}

/// Who the journal says proposed `key`, and the caller of each of its dispatches.
fn journaled_callers(
    journal: &dyn Journal,
    key: &str,
) -> anyhow::Result<(Option<String>, Vec<Option<String>>)> {
    let history = journal.history(&EffectKey::fixed(key)?)?;
    let mut by = None;
    let mut dispatched = Vec::new();
    for r in history {
        match r.event {
            Event::Proposed(p) => by = p.by,
            Event::Dispatched(d) => dispatched.push(d.holder.caller),
            _ => {}
        }
    }
    Ok((by, dispatched))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_uses_only_its_targets_and_reads_recovers_and_submits_only_its_own_effects()
-> anyhow::Result<()> {
    let (server, _admin) = four_callers(&[]).await?;

    let mut alice = grpc::client(&server.address, Some(ALICE)).await?;
    let effect = decide(&mut alice, "alice-refund", "pi_1", "lease-1").await?;
    let kind = submit(&mut alice, effect.clone()).await?;
    assert!(
        matches!(kind, pb::outcome::Kind::Committed(_)),
        "alice's refund: {kind:?}"
    );
    // The verified caller is journaled, not the attempt name the caller wrote.
    let (by, dispatched) = journaled_callers(server.journal.as_ref(), "alice-refund")?;
    assert_eq!(by.as_deref(), Some("alice"));
    assert_eq!(dispatched, vec![Some("alice".to_owned())]);

    // Bob holds a valid token for the same target, and knows alice's key and payload.
    let mut bob = grpc::client(&server.address, Some(BOB)).await?;
    let key = || "alice-refund".to_owned();
    // Reads answer as if there were no such effect: not even its existence shows.
    absent(
        bob.get_effect(pb::GetEffectRequest { key: key() }).await,
        "bob reading alice's effect",
    );
    absent(
        bob.verify(pb::VerifyRequest {
            key: key(),
            ask_target: false,
        })
        .await,
        "bob verifying alice's effect",
    );
    absent(
        bob.recover(pb::RecoverRequest {
            target: "refunds".into(),
            key: key(),
        })
        .await,
        "bob recovering alice's effect",
    );
    denied(
        submit(&mut bob, effect.clone()).await,
        "bob submitting alice's effect (a replay would hand him her answer)",
    );
    // A page at a time, one key per page: no page, and no page token, names alice's key.
    let effect_b = decide(&mut bob, "bob-refund", "pi_1", "lease-1").await?;
    submit(&mut bob, effect_b).await?;
    let (mut token, mut seen) = (String::new(), Vec::new());
    for _ in 0..10 {
        let page = bob
            .list_effects(pb::ListEffectsRequest {
                page_size: 1,
                page_token: token.clone(),
            })
            .await?
            .into_inner();
        seen.extend(page.effects.into_iter().map(|e| e.key));
        assert!(
            !page.next_page_token.contains(&hex("alice-refund")),
            "a page token carries alice's key: {}",
            page.next_page_token
        );
        token = page.next_page_token;
        if token.is_empty() {
            break;
        }
    }
    assert_eq!(seen, ["bob-refund"], "bob lists his own effects only");
    // Nor may he say where a page starts: a token he made himself is refused.
    let made = bob
        .list_effects(pb::ListEffectsRequest {
            page_size: 1,
            page_token: format!("k1.{}", hex("alice-refund")),
        })
        .await;
    assert!(
        matches!(&made, Err(s) if s.code() == Code::InvalidArgument),
        "a page token bob made: {made:?}"
    );

    // Carol's token is valid, for another target only.
    let mut carol = grpc::client(&server.address, Some(CAROL)).await?;
    denied(
        decide(&mut carol, "carol-refund", "pi_1", "lease-1").await,
        "carol deciding on refunds",
    );
    denied(
        submit(&mut carol, effect.clone()).await,
        "carol submitting to refunds",
    );

    // A reader reads every effect; alice reads her own, with the caller in its records.
    let mut auditor = grpc::client(&server.address, Some(AUDITOR)).await?;
    let read = auditor
        .get_effect(pb::GetEffectRequest { key: key() })
        .await?
        .into_inner();
    assert!(
        read.records
            .iter()
            .any(|r| r.event_json.contains("\"by\":\"alice\""))
    );
    let verified = alice
        .verify(pb::VerifyRequest {
            key: key(),
            ask_target: false,
        })
        .await?
        .into_inner();
    let callers_col = verified
        .columns
        .iter()
        .find(|c| c.name == "callers")
        .map(|c| c.detail.clone())
        .unwrap_or_default();
    assert!(
        callers_col.contains("proposed by alice") && callers_col.contains("dispatched by alice"),
        "verify's callers column: {callers_col:?}"
    );
    // One refund each: nothing was sent on anyone else's behalf.
    assert_eq!(server.sim.refunds("pi_1").len(), 2);
    server.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_that_names_its_spenders_refuses_any_other_caller_with_its_own_code()
-> anyhow::Result<()> {
    let (server, mut admin) = four_callers(&["alice"]).await?;
    let listed = admin
        .list_leases(pb::ListLeasesRequest::default())
        .await?
        .into_inner();
    assert_eq!(
        listed.leases.first().map(|l| l.spenders.clone()),
        Some(vec!["alice".to_owned()])
    );

    // Bob learned the lease's id (from a log, a screenshot, a colleague): it is not his.
    let mut bob = grpc::client(&server.address, Some(BOB)).await?;
    let effect = decide(&mut bob, "bob-refund", "pi_1", "lease-1").await?;
    match submit(&mut bob, effect).await? {
        pb::outcome::Kind::Refused(r) => {
            assert_eq!(r.code, pb::RefusalCode::LeaseCaller as i32, "{}", r.reason);
        }
        other => panic!("bob spent alice's lease: {other:?}"),
    }
    assert!(server.sim.refunds("pi_1").is_empty(), "a refund went out");
    let refused = server
        .journal
        .history(&EffectKey::fixed("bob-refund")?)?
        .into_iter()
        .any(|r| matches!(&r.event, Event::Refused(f) if f.code == RefusalCode::LeaseCaller));
    assert!(refused, "the refusal is journaled with its code");

    let mut alice = grpc::client(&server.address, Some(ALICE)).await?;
    let effect = decide(&mut alice, "alice-refund", "pi_1", "lease-1").await?;
    let kind = submit(&mut alice, effect).await?;
    assert!(
        matches!(kind, pb::outcome::Kind::Committed(_)),
        "alice spends her lease: {kind:?}"
    );
    assert_eq!(server.sim.refunds("pi_1").len(), 1);
    server.stop().await
}

/// `openssl` with `args`, failing with what it said.
fn openssl(args: &[&str], dir: &Path) -> anyhow::Result<()> {
    let out = std::process::Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "openssl {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// A CA named `name` in `dir` (`{name}.pem`, `{name}.key`).
fn ca(dir: &Path, name: &str) -> anyhow::Result<()> {
    openssl(
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "1",
            "-subj",
            &format!("/CN={name}"),
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.pem"),
        ],
        dir,
    )
}

/// A certificate `name` with subject `subj` signed by CA `by`, for `usage` (serverAuth or
/// clientAuth).
fn leaf(dir: &Path, name: &str, subj: &str, by: &str, usage: &str) -> anyhow::Result<()> {
    openssl(
        &[
            "req",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-subj",
            subj,
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
        ],
        dir,
    )?;
    let ext = format!(
        "basicConstraints=critical,CA:FALSE\nextendedKeyUsage={usage}\nsubjectAltName=DNS:localhost\n"
    );
    std::fs::write(dir.join(format!("{name}.ext")), ext)?;
    openssl(
        &[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            &format!("{by}.pem"),
            "-CAkey",
            &format!("{by}.key"),
            "-CAcreateserial",
            "-days",
            "1",
            "-extfile",
            &format!("{name}.ext"),
            "-out",
            &format!("{name}.pem"),
        ],
        dir,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_is_its_caller_and_one_another_ca_signed_gets_no_answer()
-> anyhow::Result<()> {
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path();
    ca(dir, "ca")?;
    ca(dir, "rogue")?;
    leaf(dir, "server", "/CN=localhost", "ca", "serverAuth")?;
    leaf(dir, "alice", "/O=Shop/CN=alice-worker", "ca", "clientAuth")?;
    leaf(
        dir,
        "forged",
        "/O=Shop/CN=alice-worker",
        "rogue",
        "clientAuth",
    )?;
    let read = |f: &str| std::fs::read(dir.join(f));
    let server = grpc::start(
        Options {
            tls: Some((read("server.pem")?, read("server.key")?)),
            client_ca: Some(read("ca.pem")?),
            subjects: vec![(
                "CN=alice-worker,O=Shop".into(),
                Caller::new("alice", Role::Worker).only(["refunds"]),
            )],
            ..Options::default()
        },
        None,
    )
    .await?;
    server.sim.add_payment("pi_1", 10_000);
    interlock::LeaseAdmin::grant_lease(
        server.journal.as_ref(),
        &interlock::Grant::new("lease-1", "ana@support", 0)
            .scope("payment_intent", "pi_1")
            .spender("alice"),
    )?;

    let ca_pem = read("ca.pem")?;
    let mut alice = grpc::mtls_client(
        &server.address,
        &ca_pem,
        &read("alice.pem")?,
        &read("alice.key")?,
    )
    .await?;
    let effect = decide(&mut alice, "cert-refund", "pi_1", "lease-1").await?;
    let kind = submit(&mut alice, effect).await?;
    assert!(
        matches!(kind, pb::outcome::Kind::Committed(_)),
        "the certificate's caller spends the lease naming it: {kind:?}"
    );
    let (by, dispatched) = journaled_callers(server.journal.as_ref(), "cert-refund")?;
    assert_eq!(by.as_deref(), Some("alice"));
    assert_eq!(dispatched, vec![Some("alice".to_owned())]);

    // The same subject from a CA the server does not trust, and no certificate at all: the
    // handshake fails, or the call is refused; never answered.
    let forged = async {
        let mut c = grpc::mtls_client(
            &server.address,
            &ca_pem,
            &read("forged.pem")?,
            &read("forged.key")?,
        )
        .await?;
        c.list_effects(pb::ListEffectsRequest::default()).await?;
        anyhow::Ok(())
    };
    assert!(
        forged.await.is_err(),
        "a certificate of another CA was answered"
    );
    let bare = async {
        let mut c = grpc::tls_client(&server.address, &ca_pem).await?;
        c.list_effects(pb::ListEffectsRequest::default()).await?;
        anyhow::Ok(())
    };
    assert!(
        bare.await.is_err(),
        "a call with no certificate was answered"
    );
    assert_eq!(server.sim.refunds("pi_1").len(), 1);
    server.stop().await
}

/// An ES256 key pair in `dir` (`{name}.key` PKCS#8, `{name}.pub`).
fn es256(dir: &Path, name: &str) -> anyhow::Result<(Vec<u8>, Vec<u8>)> {
    openssl(
        &[
            "genpkey",
            "-algorithm",
            "EC",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-out",
            &format!("{name}.key"),
        ],
        dir,
    )?;
    openssl(
        &[
            "pkey",
            "-in",
            &format!("{name}.key"),
            "-pubout",
            "-out",
            &format!("{name}.pub"),
        ],
        dir,
    )?;
    Ok((
        std::fs::read(dir.join(format!("{name}.key")))?,
        std::fs::read(dir.join(format!("{name}.pub")))?,
    ))
}

const ISSUER: &str = "https://idp.test";
const AUDIENCE: &str = "interlock-gate";

/// A token signed with `key` (ES256) carrying `claims` over a live `exp`, `iss` and `aud`.
fn token(key: &[u8], claims: serde_json::Value) -> anyhow::Result<String> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs();
    let mut all = serde_json::json!({"iss": ISSUER, "aud": AUDIENCE, "exp": now + 600});
    if let (Some(all), Some(extra)) = (all.as_object_mut(), claims.as_object()) {
        all.extend(extra.clone());
    }
    Ok(jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256),
        &all,
        &jsonwebtoken::EncodingKey::from_ec_pem(key)?,
    )?)
}

/// Base64url without padding, as a JWT's parts are written.
fn b64url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            let at = usize::try_from((n >> (18 - 6 * i)) & 63).unwrap_or(0);
            out.push(char::from(ALPHABET[at]));
        }
    }
    out
}

/// UNAUTHENTICATED, for a reason whose words hold `why`.
fn unauthenticated<T: std::fmt::Debug>(r: Result<T, tonic::Status>, what: &str, why: &str) {
    match r {
        Err(s) if s.code() == Code::Unauthenticated && s.message().contains(why) => {}
        other => panic!("{what}: expected UNAUTHENTICATED for {why:?}, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_token_is_the_caller_its_claims_name_and_no_other_token_passes()
-> anyhow::Result<()> {
    let tmp = tempfile::tempdir()?;
    let (idp, idp_pub) = es256(tmp.path(), "idp")?;
    let (rogue, _) = es256(tmp.path(), "rogue")?;
    let verifier = interlock_server::jwt::JwtVerifier::new(
        "ES256",
        &idp_pub,
        ISSUER,
        AUDIENCE,
        0,
        interlock_server::jwt::Claims::default(),
    )
    .map_err(anyhow::Error::msg)?;
    let server = grpc::start(
        Options {
            callers: callers(),
            jwt: Some(verifier),
            ..Options::default()
        },
        None,
    )
    .await?;
    server.sim.add_payment("pi_1", 10_000);
    interlock::LeaseAdmin::grant_lease(
        server.journal.as_ref(),
        &interlock::Grant::new("lease-1", "ana@support", 0)
            .scope("payment_intent", "pi_1")
            .unlimited()
            .spender("jwt:refund-bot"),
    )?;

    // The identity provider's token for refund-bot, allowed the refunds target.
    let bot = token(
        &idp,
        serde_json::json!({"sub": "refund-bot", "interlock_targets": ["refunds"]}),
    )?;
    let mut c = grpc::client(&server.address, Some(&bot)).await?;
    let effect = decide(&mut c, "bot-refund", "pi_1", "lease-1").await?;
    let kind = submit(&mut c, effect).await?;
    assert!(
        matches!(kind, pb::outcome::Kind::Committed(_)),
        "the token's caller spends the lease naming it: {kind:?}"
    );
    let (by, dispatched) = journaled_callers(server.journal.as_ref(), "bot-refund")?;
    assert_eq!(by.as_deref(), Some("jwt:refund-bot"));
    assert_eq!(dispatched, vec![Some("jwt:refund-bot".to_owned())]);

    // Its claims bound it: another target is refused.
    let narrow = token(
        &idp,
        serde_json::json!({"sub": "other-bot", "interlock_targets": ["short_window"]}),
    )?;
    let mut c = grpc::client(&server.address, Some(&narrow)).await?;
    denied(
        decide(&mut c, "other-refund", "pi_1", "lease-1").await,
        "a token for another target deciding on refunds",
    );

    // Tokens that must not pass: expired, living longer than the server allows, for another
    // audience, by another issuer, signed by another key, unsigned, signed with the public key
    // as an HMAC secret, claiming a role that is not one.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs();
    let hmac_confusion = jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &serde_json::json!({"sub": "refund-bot", "iss": ISSUER, "aud": AUDIENCE, "exp": now + 600,
            "interlock_targets": "*"}),
        &jsonwebtoken::EncodingKey::from_secret(&idp_pub),
    )?;
    let unsigned = {
        let b64 = |v: serde_json::Value| b64url(v.to_string().as_bytes());
        format!(
            "{}.{}.",
            b64(serde_json::json!({"alg": "none", "typ": "JWT"})),
            b64(
                serde_json::json!({"sub": "refund-bot", "iss": ISSUER, "aud": AUDIENCE,
                "exp": now + 600})
            )
        )
    };
    let claims = |extra: serde_json::Value| {
        let mut c = serde_json::json!({"sub": "refund-bot"});
        if let (Some(c), Some(extra)) = (c.as_object_mut(), extra.as_object()) {
            c.extend(extra.clone());
        }
        c
    };
    let refused = [
        (
            "expired",
            token(&idp, claims(serde_json::json!({"exp": now - 120})))?,
            "Expired",
        ),
        (
            "for another audience",
            token(&idp, claims(serde_json::json!({"aud": "billing"})))?,
            "Audience",
        ),
        (
            "of another issuer",
            token(
                &idp,
                claims(serde_json::json!({"iss": "https://evil.test"})),
            )?,
            "Issuer",
        ),
        (
            "signed by another key",
            token(&rogue, claims(serde_json::json!({})))?,
            "InvalidSignature",
        ),
        ("unsigned", unsigned, "the bearer token:"),
        (
            "HMAC'd with the public key",
            hmac_confusion,
            "InvalidAlgorithm",
        ),
        (
            "living two days",
            token(&idp, claims(serde_json::json!({"exp": now + 2 * 86_400})))?,
            "lives longer",
        ),
        (
            "with no role",
            token(&idp, claims(serde_json::json!({"interlock_role": "root"})))?,
            "not worker, reader or admin",
        ),
    ];
    for (what, t, why) in refused {
        let mut c = grpc::client(&server.address, Some(&t)).await?;
        unauthenticated(
            c.list_effects(pb::ListEffectsRequest::default()).await,
            &format!("a token {what}"),
            why,
        );
    }
    // A token naming a configured caller's name is a caller of its own, `jwt:alice`: alice's
    // effects are not its.
    let mut alice = grpc::client(&server.address, Some(ALICE)).await?;
    interlock::LeaseAdmin::grant_lease(
        server.journal.as_ref(),
        &interlock::Grant::new("lease-a", "ana@support", 0)
            .scope("payment_intent", "pi_1")
            .unlimited(),
    )?;
    let effect = decide(&mut alice, "alice-own", "pi_1", "lease-a").await?;
    submit(&mut alice, effect.clone()).await?;
    let posing = token(
        &idp,
        serde_json::json!({"sub": "alice", "interlock_targets": "*"}),
    )?;
    let mut c = grpc::client(&server.address, Some(&posing)).await?;
    absent(
        c.get_effect(pb::GetEffectRequest {
            key: "alice-own".into(),
        })
        .await,
        "a token whose subject is alice reading alice's effect",
    );
    denied(
        submit(&mut c, effect).await,
        "a token whose subject is alice submitting alice's effect",
    );
    // A token with the admin role administers.
    let admin = token(
        &idp,
        serde_json::json!({"sub": "ops-1", "interlock_role": "admin"}),
    )?;
    let mut c = grpc::client(&server.address, Some(&admin)).await?;
    let leases = c
        .list_leases(pb::ListLeasesRequest::default())
        .await?
        .into_inner();
    assert_eq!(leases.leases.len(), 2);
    assert_eq!(server.sim.refunds("pi_1").len(), 2);
    server.stop().await
}
