//! The escalation story, replayed on a real Temporal dev server, real worker processes and the
//! payments API: a refund that needs judgment waits in support's inbox; support approves; the
//! facts move (a hand refund); the send is refused with what changed and a repair that still
//! fits; support accepts the repair. A second request sits past support's SLA while its worker is
//! SIGKILLed and replaced, escalates to the managers, support's late approval is refused, and a
//! manager approves; the worker is SIGKILLed again as her approval arrives, and the approval is
//! delivered twice. A third waits while an operator terminates its workflow and starts it again
//! under the same id: the new run takes over, and one approval refunds once. A routine refund
//! clears with no person and an ineligible one is refused by rule. The target confirms by webhook; `verify` shows who approved, that each approval is
//! genuine, and every escalation. Writes `results/escalation.{md,json}` (`--check`: writes
//! nothing, fails if the story does not hold).

#![allow(clippy::print_stdout)] // the report is printed

use std::path::PathBuf;
use std::time::Duration;

use anyhow::bail;
use clap::Parser;
use e2e_worker::approvals::{AskReport, Ending};
use interlock::Grant;
use interlock::approval::{RouteKind, Scoreboard};
use interlock_e2e::procs::{WorkerProc, now_ms};
use interlock_e2e::stack;
use interlock_e2e::story::{self, Desk, Person};
use serde_json::{Value, json};

/// Replay the escalation story and write its record.
#[derive(Parser)]
struct Args {
    /// The Temporal dev server's port (it takes the next three, and +10 for webhooks).
    #[arg(long, default_value_t = 7280)]
    port: u16,
    /// SLAs run this many times faster in the workflow's timers (support's 4 h becomes 3 s).
    #[arg(long, default_value_t = 4800)]
    sla_divisor: u32,
    /// Write nothing; exit non-zero if the story does not hold.
    #[arg(long)]
    check: bool,
    /// Where to write `escalation.{md,json}`.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/../results"))]
    out: PathBuf,
}

/// What the story records, step by step.
struct Log {
    t0: i64,
    steps: Vec<Value>,
}

impl Log {
    fn step(&mut self, actor: &str, what: impl Into<String>) {
        let what = what.into();
        let at = now_ms() - self.t0;
        eprintln!("[{:>6.1} s] {actor}: {what}", at as f64 / 1000.0);
        self.steps
            .push(json!({ "at_ms": at, "actor": actor, "what": what }));
    }
}

const WAIT: Duration = Duration::from_secs(60);

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let work = tempfile::tempdir()?;
    let (env, _services) = stack::start(&stack::Options {
        work: work.path(),
        port: args.port,
        no_shop: false,
        webhooks: true,
        database: None,
    })?;
    let people: Vec<Person> = ["ana", "ben", "mia"].into_iter().map(Person::new).collect();
    let (ana, ben, mia) = (&people[0], &people[1], &people[2]);
    let directory = story::directory(&people)?;
    let policy = story::policy()?;
    let mut vars = env.worker_vars("approvals");
    vars.extend(story::write_config(work.path(), &directory, &policy)?);
    let pauses = work.path().join("pauses");
    std::fs::create_dir_all(&pauses)?;
    let spawn = |n: u32| {
        WorkerProc::spawn(
            &env.worker_bin,
            &[],
            &vars,
            None,
            &pauses,
            &work.path().join(format!("worker-{n}.log")),
        )
    };
    let mut worker = spawn(1)?;
    let rt = tokio::runtime::Runtime::new()?;
    let client = rt.block_on(e2e_worker::connect::client(
        &format!("http://{}", env.server.address),
        "escalation-story".into(),
    ))?;
    let desk = Desk {
        client,
        journal: env.journal.clone(),
        queue: "approvals".into(),
    };
    for (pi, amount) in [
        ("pi_story_a", 10_000),
        ("pi_story_b", 9_000),
        ("pi_story_c", 3_000),
        ("pi_story_d", 4_000),
        ("pi_story_e", 10_000),
    ] {
        env.sim.add_payment(pi, amount);
    }
    env.sim.set_eligible("pi_story_d", false);
    let mut log = Log {
        t0: now_ms(),
        steps: Vec::new(),
    };
    let divisor = args.sla_divisor;

    // A: approved, the facts move, refused with a repair, the repair accepted.
    rt.block_on(desk.ask(
        "story-a",
        story::refund("req-a", "pi_story_a", 6_000),
        divisor,
    ))?;
    let routed =
        rt.block_on(desk.route_where("req-a", |r| r.step.kind == RouteKind::Routed, WAIT))?;
    log.step(
        "policy",
        format!(
            "routes req-a ($60.00 of $100.00) to {}: {}",
            routed.step.group, routed.step.reason
        ),
    );
    log.step(
        "ana",
        format!("opens req-a and sees {}", routed.step.detail["premises"]),
    );
    env.sim.hand_refund("pi_story_a", 2_000);
    log.step(
        "support",
        "refunds $20.00 on pi_story_a by hand, outside the workflow",
    );
    rt.block_on(desk.send(&routed, ana.approve(&routed, now_ms())?))?;
    log.step("ana", "approves req-a as she saw it (signed with her key)");
    let repair =
        rt.block_on(desk.route_where("req-a-repair1", |r| r.step.kind == RouteKind::Repair, WAIT))?;
    log.step(
        "gate",
        format!(
            "refuses req-a's send: {}; req-a returns to {} as req-a-repair1 ({})",
            changes_of(&repair.step.detail),
            repair.step.group,
            repair.step.detail["repair"]["summary"]
                .as_str()
                .unwrap_or("")
        ),
    );
    rt.block_on(desk.send(&repair, ana.approve(&repair, now_ms())?))?;
    log.step(
        "ana",
        "accepts the repair: a new decision, signed over the facts as they are now",
    );
    let report_a = rt.block_on(desk.report("story-a"))?;
    log.step("workflow", format!("story-a closes: {}", ending(&report_a)));

    // B: past support's SLA while its worker is killed; escalates; support's late approval is
    // refused; a manager approves.
    rt.block_on(desk.ask(
        "story-b",
        story::refund("req-b", "pi_story_b", 7_000),
        divisor,
    ))?;
    let routed_b =
        rt.block_on(desk.route_where("req-b", |r| r.step.kind == RouteKind::Routed, WAIT))?;
    log.step(
        "policy",
        format!(
            "routes req-b ($70.00) to {}: {}",
            routed_b.step.group, routed_b.step.reason
        ),
    );
    worker.kill9()?;
    log.step(
        "harness",
        "SIGKILLs the worker while req-b waits in support's inbox",
    );
    worker = spawn(2)?;
    log.step("harness", "starts a new worker");
    let sla = directory.chain[0].sla_ms;
    let escalated =
        rt.block_on(desk.route_where("req-b", |r| r.step.kind == RouteKind::Escalated, WAIT))?;
    log.step(
        "workflow",
        format!(
            "support's SLA ({} h; {:.1} s on the injected clock) runs out: req-b escalates to {} at level {} ({})",
            sla / story::HOUR_MS,
            (sla / i64::from(divisor)) as f64 / 1000.0,
            escalated.step.group,
            escalated.step.level,
            escalated.step.reason
        ),
    );
    let late = ben.approve(&routed_b, now_ms())?;
    let refused_grant = match env
        .journal
        .grant_lease(&Grant::approved(late.clone(), now_ms()))
    {
        Ok(()) => bail!("the journal recorded support's approval after req-b escalated"),
        Err(e) => e.to_string(),
    };
    rt.block_on(desk.send(&routed_b, late))?;
    log.step(
        "ben",
        format!("approves req-b for support, too late: refused ({refused_grant})"),
    );
    let approval = mia.approve(&escalated, now_ms())?;
    rt.block_on(desk.send(&escalated, approval.clone()))?;
    log.step("mia", "approves req-b for the managers");
    worker.kill9()?;
    log.step(
        "harness",
        "SIGKILLs the worker right after mia's approval arrives",
    );
    worker = spawn(3)?;
    rt.block_on(desk.send(&escalated, approval))?;
    log.step(
        "harness",
        "starts a new worker, and delivers mia's approval a second time",
    );
    let report_b = rt.block_on(desk.report("story-b"))?;
    log.step("workflow", format!("story-b closes: {}", ending(&report_b)));

    // E: an operator terminates the workflow while the request waits, then starts it again
    // under the same id; the new run takes over the route, and one approval refunds once.
    let e = || story::refund("req-e", "pi_story_e", 8_000);
    rt.block_on(desk.ask("story-e", e(), divisor))?;
    let routed_e =
        rt.block_on(desk.route_where("req-e", |r| r.step.kind == RouteKind::Routed, WAIT))?;
    log.step(
        "policy",
        format!(
            "routes req-e ($80.00) to {}: {}",
            routed_e.step.group, routed_e.step.reason
        ),
    );
    rt.block_on(desk.terminate("story-e", "the operator restarts a stuck workflow"))?;
    log.step(
        "operator",
        "terminates story-e's run while req-e waits in support's inbox",
    );
    rt.block_on(desk.ask("story-e", e(), divisor))?;
    rt.block_on(desk.waiting("story-e", WAIT))?;
    log.step(
        "operator",
        "starts story-e again under the same id: the new run takes over req-e's route",
    );
    rt.block_on(desk.send(&routed_e, ana.approve(&routed_e, now_ms())?))?;
    log.step("ana", "approves req-e as its route shows it");
    let report_e = rt.block_on(desk.report("story-e"))?;
    log.step("workflow", format!("story-e closes: {}", ending(&report_e)));

    // C and D: no person needed.
    rt.block_on(desk.ask(
        "story-c",
        story::refund("req-c", "pi_story_c", 2_000),
        divisor,
    ))?;
    let report_c = rt.block_on(desk.report("story-c"))?;
    log.step(
        "workflow",
        format!("story-c ($20.00, routine) closes: {}", ending(&report_c)),
    );
    rt.block_on(desk.ask(
        "story-d",
        story::refund("req-d", "pi_story_d", 1_000),
        divisor,
    ))?;
    let report_d = rt.block_on(desk.report("story-d"))?;
    log.step(
        "workflow",
        format!("story-d (order not eligible) closes: {}", ending(&report_d)),
    );
    drop(worker);

    let reports = [&report_a, &report_b, &report_c, &report_d, &report_e];
    let table = story::verify_keys(
        &env,
        &directory,
        &["req-a", "req-a-repair1", "req-b", "req-c", "req-e"],
    )?;
    // Counted from the journal alone, as `interlock scoreboard --prefix req-` counts it.
    let board = serde_json::to_value(Scoreboard::read(env.journal.as_ref(), "req-")?)?;
    let refunds: Value = [
        "pi_story_a",
        "pi_story_b",
        "pi_story_c",
        "pi_story_d",
        "pi_story_e",
    ]
    .iter()
    .map(|pi| {
        let r: Vec<Value> = env
            .sim
            .refunds(pi)
            .iter()
            .map(
                |r| json!({ "id": r.id, "amount": r.amount, "keyed": r.idempotency_key.is_some() }),
            )
            .collect();
        ((*pi).to_owned(), Value::Array(r))
    })
    .collect::<serde_json::Map<_, _>>()
    .into();
    let problems = expectations(&reports, &table, &refunds, &board);
    let record = json!({
        "sla_divisor": divisor,
        "steps": log.steps,
        "reports": reports,
        "verify": table,
        "scoreboard": board,
        "refunds_at_the_payments_api": refunds,
        "holds": problems.is_empty(),
        "problems": problems,
    });
    let md = render(&record);
    story::publish(&args.out, "escalation", &record, &md, args.check, &problems)
}

fn ending(r: &AskReport) -> String {
    let e = serde_json::to_value(r.ending).unwrap_or(Value::Null);
    let e = e.as_str().unwrap_or("?").to_owned();
    match &r.approved_by {
        Some((who, group, level)) => format!("{e} (approved by {who}, {group}, level {level})"),
        None => e,
    }
}

fn changes_of(detail: &Value) -> String {
    detail["changes"]
        .as_array()
        .map(|cs| {
            cs.iter()
                .map(|c| {
                    format!(
                        "{} {} → {}",
                        c["field"].as_str().unwrap_or("?"),
                        c["was"],
                        c["now"]
                    )
                })
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default()
}

fn column<'a>(row: &'a Value, name: &str) -> Option<&'a Value> {
    row["columns"]
        .as_array()?
        .iter()
        .find(|c| c["name"] == name)
}

fn expectations(
    reports: &[&AskReport],
    table: &[Value],
    refunds: &Value,
    board: &Value,
) -> Vec<String> {
    let mut p = Vec::new();
    // The journal's count agrees with the story: one request each way, one SLA breach.
    for (field, want) in [
        ("requests", 5),
        ("cleared_no_person", 1),
        ("sent_after_person", 2),
        ("closed_by_repair", 1),
        ("refused", 1),
        ("open", 0),
        ("sent_twice", 0),
        ("needs_a_look", 0),
        ("sla_breaches", 1),
        ("stale_approvals_caught", 1),
        ("confirmed_by_target", 4),
    ] {
        if board[field] != want {
            p.push(format!(
                "the journal's scoreboard has {field} {}, not {want}",
                board[field]
            ));
        }
    }
    if board["refused_by"]["rule"] != 1 {
        p.push(format!(
            "the journal's scoreboard refused {} by rule, not 1",
            board["refused_by"]
        ));
    }
    let want = [
        Ending::ClosedByRepair,
        Ending::SentAfterPerson,
        Ending::ClearedNoPerson,
        Ending::RefusedByRule,
        Ending::SentAfterPerson,
    ];
    for (r, w) in reports.iter().zip(want) {
        if r.ending != w {
            p.push(format!("{} ended {:?}, not {w:?}", r.request_id, r.ending));
        }
    }
    if reports[1].escalations.len() != 1 || reports[1].rejected.is_empty() {
        p.push("req-b did not escalate once with support's late approval refused".into());
    }
    let amounts = |pi: &str| -> Vec<i64> {
        refunds[pi]
            .as_array()
            .map(|a| a.iter().filter_map(|r| r["amount"].as_i64()).collect())
            .unwrap_or_default()
    };
    for (pi, want) in [
        ("pi_story_a", vec![2_000, 6_000]),
        ("pi_story_b", vec![7_000]),
        ("pi_story_c", vec![2_000]),
        ("pi_story_d", vec![]),
        ("pi_story_e", vec![8_000]),
    ] {
        let mut got = amounts(pi);
        got.sort_unstable();
        if got != want {
            p.push(format!("{pi} holds refunds {got:?}, not {want:?}"));
        }
    }
    for row in table {
        let holds = row["columns"]
            .as_array()
            .is_some_and(|cs| cs.iter().all(|c| c["holds"] != false));
        if !holds {
            p.push(format!("verify fails for {}", row["key"]));
        }
    }
    for k in [1, 2, 4] {
        if column(&table[k], "approval verified").is_none_or(|c| c["holds"] != true) {
            p.push(format!("{}'s approval did not verify", table[k]["key"]));
        }
    }
    p
}

fn render(r: &Value) -> String {
    let mut md = String::from(
        "# The escalation story\n\nReplayed by `scripts/escalation` on a Temporal dev server, real \
         worker processes and the payments API. SLAs run on an injected workflow clock: each level's \
         SLA is divided by `sla_divisor` in the workflow's timers.\n\n## Steps\n\n| at | who | what |\n|---|---|---|\n",
    );
    for s in r["steps"].as_array().into_iter().flatten() {
        md += &format!(
            "| {:.1} s | {} | {} |\n",
            s["at_ms"].as_f64().unwrap_or(0.0) / 1000.0,
            s["actor"].as_str().unwrap_or(""),
            s["what"].as_str().unwrap_or("").replace('|', "\\|")
        );
    }
    md += "\n## Verify\n\n| key | outcome | approved by | approval verified | escalations | confirmed by target | happened once |\n|---|---|---|---|---|---|---|\n";
    for row in r["verify"].as_array().into_iter().flatten() {
        let cell = |name: &str| {
            column(row, name).map_or_else(String::new, |c| {
                let mark = match c["holds"].as_bool() {
                    Some(true) => "✅ ",
                    Some(false) => "❌ ",
                    None => "",
                };
                format!(
                    "{mark}{}",
                    c["detail"].as_str().unwrap_or("").replace('|', "\\|")
                )
            })
        };
        md += &format!(
            "| {} | {} | {} | {} | {} | {} | {} |\n",
            row["key"].as_str().unwrap_or(""),
            row["outcome"].as_str().unwrap_or(""),
            cell("approved by"),
            cell("approval verified"),
            cell("escalations"),
            cell("confirmed by target"),
            cell("happened once"),
        );
    }
    md += "\n## Scoreboard\n\n| measure | value |\n|---|---|\n";
    let b = &r["scoreboard"];
    let secs = |v: &Value| {
        v.as_f64()
            .map_or("–".to_owned(), |ms| format!("{:.1} s", ms / 1000.0))
    };
    let listed = |v: &Value| {
        v.as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| format!("{k}: {v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "none".into())
    };
    let escalated = listed(&b["escalated_by_reason"]);
    let t = &b["time_to_decision_ms"];
    for (name, value) in [
        ("requests", b["requests"].to_string()),
        ("cleared with no person", b["cleared_no_person"].to_string()),
        ("sent after a person", b["sent_after_person"].to_string()),
        ("closed by repair", b["closed_by_repair"].to_string()),
        (
            "refused",
            format!("{} ({})", b["refused"], listed(&b["refused_by"])),
        ),
        ("escalated, by reason", escalated),
        ("SLA breaches", b["sla_breaches"].to_string()),
        (
            "stale approvals caught",
            b["stale_approvals_caught"].to_string(),
        ),
        (
            "time to a person's decision (median / p90 / max)",
            format!(
                "{} / {} / {}",
                secs(&t["median"]),
                secs(&t["p90"]),
                secs(&t["max"])
            ),
        ),
        (
            "confirmed by the target",
            b["confirmed_by_target"].to_string(),
        ),
    ] {
        md += &format!("| {name} | {value} |\n");
    }
    md += &format!(
        "\nThe story {}.\n",
        if r["holds"] == true {
            "held"
        } else {
            "did NOT hold"
        }
    );
    md
}
