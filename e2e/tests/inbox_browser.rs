//! The inbox in a real browser (Debian's chromium, driven through chromedriver): two approvers
//! have their browsers make their keys, which an operator enrols in the directory while
//! everything runs; they sign in with them, and no script in the page can read them; support
//! approves a refund whose facts then move, sees the
//! refusal come back with what changed and the repair, and accepts it; support fails to approve a
//! request that escalated away while its page was open; the manager approves it. Behind the
//! pages: a Temporal dev server, real worker processes, the payments API and the journal, judged
//! by the payments API's own records.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)] // in tests, a panic is the report

mod browser;

use std::process::Command;
use std::time::{Duration, Instant};

use browser::{Kill, browser, chromedriver, free_port, wait_for_port};
use e2e_worker::approvals::Ending;
use fantoccini::{Client, Locator};
use interlock::approval::RouteKind;
use interlock_e2e::procs::WorkerProc;
use interlock_e2e::stack;
use interlock_e2e::story::{self, Desk, Person};

/// Reload the inbox until `request` is listed, and open it.
async fn open_from_inbox(c: &Client, base: &str, request: &str) {
    let t0 = Instant::now();
    loop {
        c.goto(&format!("{base}/")).await.unwrap();
        let links = c.find_all(Locator::Css("a.request")).await.unwrap();
        for l in links {
            if l.text().await.unwrap() == request {
                l.click().await.unwrap();
                c.wait().for_element(Locator::Id("facts")).await.unwrap();
                return;
            }
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "{request} never reached the inbox"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Click approve and wait for the inbox to confirm (or for the page's error).
async fn click_approve(c: &Client) -> Result<String, String> {
    c.find(Locator::Id("approve"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let t0 = Instant::now();
    loop {
        // The page navigates when the approval is confirmed: an element found just before may
        // be gone when read, so a failed read is just another look.
        if let Ok(done) = c.find(Locator::Id("done")).await
            && let Ok(text) = done.text().await
        {
            return Ok(text);
        }
        if let Ok(r) = c.find(Locator::Id("result")).await
            && let Ok(Some(class)) = r.attr("class").await
            && class == "error"
            && let Ok(text) = r.text().await
        {
            return Err(text);
        }
        if t0.elapsed() > Duration::from_secs(20) {
            let shown = match c.find(Locator::Id("result")).await {
                Ok(r) => r.text().await.unwrap_or_default(),
                Err(_) => c.source().await.unwrap_or_default(),
            };
            panic!("no answer to the approval; the page shows: {shown}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[test]
fn two_approvers_approve_see_a_refusal_come_back_accept_its_repair_and_cannot_approve_after_an_escalation()
 {
    let work = tempfile::tempdir().unwrap();
    // The dev server takes this port and the next three.
    let port = 7290;
    let (env, _services) = stack::start(&stack::Options {
        work: work.path(),
        port,
        no_shop: false,
        webhooks: false,
        database: None,
    })
    .unwrap();
    let people: Vec<Person> = ["ana", "ben", "mia"].into_iter().map(Person::new).collect();
    let directory = story::directory(&people).unwrap();
    let mut vars = env.worker_vars("inbox-test");
    let config = story::write_config(work.path(), &directory, &story::policy().unwrap()).unwrap();
    vars.extend(config.clone());
    let pauses = work.path().join("pauses");
    std::fs::create_dir_all(&pauses).unwrap();
    let _worker = WorkerProc::spawn(
        &env.worker_bin,
        &[],
        &vars,
        None,
        &pauses,
        &work.path().join("worker.log"),
    )
    .unwrap();
    // The inbox, as a person would start it.
    let inbox_port = free_port();
    let interlock = env.worker_bin.with_file_name("interlock");
    let _inbox = Kill::spawn(
        Command::new(&interlock)
            .args([
                "inbox",
                "serve",
                "--listen",
                &format!("127.0.0.1:{inbox_port}"),
            ])
            .envs(vars.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stderr(std::fs::File::create(work.path().join("inbox.log")).unwrap()),
    );
    wait_for_port(inbox_port, "the inbox");
    let (_driver, driver_port) = chromedriver();
    let base = format!("http://127.0.0.1:{inbox_port}");
    env.sim.add_payment("pi_web_a", 10_000);
    env.sim.add_payment("pi_web_b", 9_000);

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let client = e2e_worker::connect::client(
            &format!("http://{}", env.server.address),
            "inbox-test".into(),
        )
        .await
        .unwrap();
        let desk = Desk {
            client,
            journal: env.journal.clone(),
            queue: "inbox-test".into(),
        };
        let (ana, mia) = (&people[0], &people[2]);
        let ana_web = browser(driver_port).await;
        let mia_web = browser(driver_port).await;
        // Before enrolment, a browser's own key is no key of the directory's.
        let ana_public = browser::make_key(&ana_web, &base, ana.id).await;
        ana_web
            .find(Locator::Id("sign-in"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        let refused = ana_web
            .wait()
            .at_most(Duration::from_secs(10))
            .for_element(Locator::XPath(
                "//p[@id='error' and normalize-space(text()) != '']",
            ))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(refused.contains("does not verify"), "{refused}");
        // An operator enrols each browser's public key: the inbox and the worker, running all
        // along, read the directory's file again.
        let mia_public = browser::make_key(&mia_web, &base, mia.id).await;
        let mut enrolled = directory.clone();
        for (who, public) in [(ana.id, &ana_public), (mia.id, &mia_public)] {
            if let Some(a) = enrolled.approvers.get_mut(who) {
                a.public_key = public.clone();
            }
        }
        let file = config
            .iter()
            .find(|(k, _)| k == "INTERLOCK_APPROVERS")
            .map(|(_, v)| std::path::PathBuf::from(v))
            .unwrap();
        let next = file.with_extension("next");
        std::fs::write(&next, serde_json::to_string_pretty(&enrolled).unwrap()).unwrap();
        std::fs::rename(&next, &file).unwrap();
        browser::sign_in(&ana_web, &base, ana.id).await;
        browser::sign_in(&mia_web, &base, mia.id).await;
        // What any script in the page can learn of ana's key: that the browser holds one, and
        // nothing of it. Export in every format is refused; no storage a script reads holds it;
        // the session cookie is out of script's reach too.
        let seen = browser::what_script_reads_of_the_key(&ana_web, ana.id).await;
        assert_eq!(seen["held"], true, "{seen}");
        assert_eq!(seen["type"], "private", "{seen}");
        assert_eq!(seen["extractable"], false, "{seen}");
        assert_eq!(seen["exported"], serde_json::json!([]), "{seen}");
        assert_eq!(seen["storage"], serde_json::json!([]), "{seen}");
        assert_eq!(seen["cookies"], "", "{seen}");

        // A budget on the first payment, with room for what is asked.
        env.journal
            .set_budget(
                &interlock::budget::Budget {
                    id: "pi-web-a-daily".into(),
                    scope: [("payment_intent".to_owned(), serde_json::json!("pi_web_a"))].into(),
                    per: Vec::new(),
                    window: interlock::budget::Window::Rolling { ms: 86_400_000 },
                    limit: interlock::budget::Limit::Sum {
                        field: "amount".into(),
                        max: 10_000,
                    },
                },
                "ops",
            )
            .unwrap();
        // A refund that needs judgment; ana opens it, support refunds part by hand, ana approves.
        desk.ask("web-a", story::refund("web-a", "pi_web_a", 6_000), 1)
            .await
            .unwrap();
        open_from_inbox(&ana_web, &base, "web-a").await;
        // The page shows the budget the refund would count against, and that it fits.
        let budgets = ana_web
            .find(Locator::Id("budgets"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(
            budgets.contains("pi-web-a-daily") && budgets.contains("fits (counts 6000)"),
            "{budgets}"
        );
        env.sim.hand_refund("pi_web_a", 2_000);
        let done = click_approve(&ana_web).await.expect("ana's approval");
        assert!(done.contains("You approved web-a"), "{done}");
        // The send is refused; the request comes back to support as a repair, with what changed.
        open_from_inbox(&ana_web, &base, "web-a-repair1").await;
        let changes = ana_web
            .find(Locator::Id("changes"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(
            changes.contains("refunded_by_others") && changes.contains("2000"),
            "{changes}"
        );
        let repair = ana_web
            .find(Locator::Id("repair"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(repair.contains("still fits"), "{repair}");
        let done = click_approve(&ana_web)
            .await
            .expect("ana accepts the repair");
        assert!(done.contains("accepted the repair"), "{done}");
        let a = desk.report("web-a").await.unwrap();
        assert_eq!(a.ending, Ending::ClosedByRepair, "{a:?}");

        // A second request: ana has its page open while support's SLA (here 10 s) runs out.
        desk.ask("web-b", story::refund("web-b", "pi_web_b", 7_000), 1_440)
            .await
            .unwrap();
        open_from_inbox(&ana_web, &base, "web-b").await;
        desk.route_where(
            "web-b",
            |r| r.step.kind == RouteKind::Escalated,
            Duration::from_secs(60),
        )
        .await
        .unwrap();
        let refused = click_approve(&ana_web)
            .await
            .expect_err("support approved after the escalation");
        assert!(refused.contains("managers"), "{refused}");
        // The manager approves it.
        open_from_inbox(&mia_web, &base, "web-b").await;
        let done = click_approve(&mia_web).await.expect("mia's approval");
        assert!(done.contains("You approved web-b"), "{done}");
        let b = desk.report("web-b").await.unwrap();
        assert_eq!(b.ending, Ending::SentAfterPerson, "{b:?}");
        assert_eq!(b.approved_by.as_ref().map(|a| a.0.as_str()), Some("mia"));

        // No approving twice: the page offers nothing more, and a replayed form is refused.
        mia_web
            .goto(&format!("{base}/request/web-b"))
            .await
            .unwrap();
        assert!(mia_web.find(Locator::Id("approve")).await.is_err());
        // A form without the session's CSRF token is refused, whatever its cookie.
        let cookie = mia_web.get_named_cookie("interlock_session").await.unwrap();
        let answer = ureq::post(&format!("{base}/request/web-b/deny"))
            .header("Cookie", &format!("interlock_session={}", cookie.value()))
            .config()
            .http_status_as_error(false)
            .build()
            .send_form([("csrf", "forged"), ("n", "1"), ("reason", "x")])
            .unwrap();
        assert_eq!(answer.status().as_u16(), 403);
        ana_web.close().await.unwrap();
        mia_web.close().await.unwrap();
    });
    // The payments API's own records: the hand refund, the repair, the manager's approval.
    let amounts = |pi: &str| {
        let mut a: Vec<i64> = env.sim.refunds(pi).iter().map(|r| r.amount).collect();
        a.sort_unstable();
        a
    };
    assert_eq!(amounts("pi_web_a"), vec![2_000, 6_000]);
    assert_eq!(amounts("pi_web_b"), vec![7_000]);
}
