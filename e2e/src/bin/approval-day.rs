//! The approval day: a day's refund requests — routine ones, ones over the limit, flagged
//! customers, ineligible orders, duplicate deliveries, crashes mid-send, hand refunds before the
//! send, facts that move after a person approved — played through real approval workflows on a
//! Temporal dev server, real worker processes (SIGKILLed mid-send) and the payments API, by a
//! scripted population of approvers, three ways: everyone approves by hand, rules alone, and rules
//! with the gate. Each way is judged by the payments API's own records against what a careful
//! reviewer would have paid on the facts as they stood when the money went out. Writes
//! `results/approval_day.{json,md}` (`--check`: writes nothing, fails unless rules with the gate
//! meet the goal).

#![allow(clippy::print_stdout)] // the report is printed

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use e2e_worker::approvals::{AskInput, AskReport, CLEARED_BY_RULES, OVER_BUDGET_SUFFIX, Way};
use interlock::approval::{Approvers, Route, RouteKind, Scoreboard};
use interlock::budget::{Budget, Limit, Window};
use interlock_e2e::cell::Env;
use interlock_e2e::day::{self, Kind, Mix, Plan};
use interlock_e2e::procs::{WorkerProc, now_ms};
use interlock_e2e::stack;
use interlock_e2e::story::{self, Desk, Person};
use interlock_testkit::faults::Stall;
use interlock_testkit::sim::SimRefund;
use serde_json::{Value, json};
use tokio::task::JoinSet;

/// Play the approval day three ways and write its record.
#[derive(Parser)]
struct Args {
    /// The Temporal dev server's port (it takes the next three, and +10 for webhooks).
    #[arg(long, default_value_t = 7300)]
    port: u16,
    /// The day's deliveries by kind (`kind=count,…`; kinds left out count 0).
    #[arg(long, default_value_t = Mix::default())]
    mix: Mix,
    /// The day's order and amounts follow from this seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// SLAs run this many times faster in the workflows' timers (support's 4 h becomes 12 s).
    #[arg(long, default_value_t = 1200)]
    sla_divisor: u32,
    /// Ben is away for the requests first delivered in this range of positions (`from..to`):
    /// those of his that reach a person wait out support's SLA and escalate to the managers.
    #[arg(long, default_value = "40..60", value_parser = positions)]
    ben_away: std::ops::Range<usize>,
    /// Deliveries arrive this many ms apart.
    #[arg(long, default_value_t = 40)]
    arrival_ms: u64,
    /// The ways to play (comma-separated names; all three by default). A day played only some
    /// ways is printed and not written.
    #[arg(long, value_delimiter = ',', default_values_t = Way::ALL.map(|w| w.name().to_owned()))]
    ways: Vec<String>,
    /// With the gate, the rules may send at most this many refunds alone in any hour: a budget
    /// on the refunds labelled `cleared_by=rules`, checked by the gate in the dispatch
    /// transaction; a refund over it goes to a person. Set below what the rules send alone on
    /// the day (54 on the default day), so that some go over; 0 sets no budget.
    #[arg(long, default_value_t = 53)]
    rules_budget: i64,
    /// Give up on a way after this many seconds.
    #[arg(long, default_value_t = 600)]
    timeout_s: u64,
    /// Write nothing; exit non-zero unless rules with the gate meet the goal.
    #[arg(long)]
    check: bool,
    /// Where to write `approval_day.{json,md}`.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/../results"))]
    out: PathBuf,
}

/// The worker process, replaced after each SIGKILL.
struct Workers<'a> {
    env: &'a Env,
    vars: Vec<(String, String)>,
    work: &'a Path,
    current: Option<WorkerProc>,
    started: u32,
}

impl Workers<'_> {
    fn start(&mut self) -> anyhow::Result<()> {
        self.started += 1;
        let pauses = self.work.join("pauses");
        std::fs::create_dir_all(&pauses)?;
        self.current = Some(WorkerProc::spawn(
            &self.env.worker_bin,
            &[],
            &self.vars,
            None,
            &pauses,
            &self.work.join(format!("worker-{}.log", self.started)),
        )?);
        Ok(())
    }

    fn kill_and_replace(&mut self) -> anyhow::Result<()> {
        if let Some(w) = self.current.as_mut() {
            w.kill9()?;
        }
        self.start()
    }
}

fn positions(s: &str) -> Result<std::ops::Range<usize>, String> {
    let (a, b) = s
        .split_once("..")
        .ok_or_else(|| format!("{s:?} is not from..to"))?;
    let n = |x: &str| {
        x.trim()
            .parse::<usize>()
            .map_err(|_| format!("{x:?} in {s:?} is not a position"))
    };
    Ok(n(a)?..n(b)?)
}

/// Who reviews what: support splits its requests between ana (even) and ben (odd), ben is away
/// for a stretch of the day, and the managers' requests go to mia.
struct Population {
    ana: Person,
    ben: Person,
    mia: Person,
    /// When ben is away: the first-delivery positions of the requests he does not answer.
    ben_away: std::ops::Range<usize>,
    /// Each request's first delivery's position.
    first_delivered: Vec<usize>,
}

impl Population {
    fn reviewer(&self, route: &Route, request: usize) -> Option<&Person> {
        let away = self
            .first_delivered
            .get(request)
            .is_some_and(|d| self.ben_away.contains(d));
        match route.step.group.as_str() {
            "support" if request.is_multiple_of(2) => Some(&self.ana),
            "support" if away => None,
            "support" => Some(&self.ben),
            "managers" => Some(&self.mia),
            _ => None,
        }
    }
}

/// Everything one way needs.
struct Day<'a> {
    env: &'a Env,
    desk: Arc<Desk>,
    plan: &'a Plan,
    people: &'a Population,
    directory: &'a Approvers,
    args: &'a Args,
}

/// What the harness saw while a way played.
#[derive(Default)]
struct Seen {
    reviews: BTreeMap<String, u32>,
    reviewed: HashSet<usize>,
    /// Requests the rules' budget sent to a person (their routes, as the inbox shows them).
    over_budget: HashSet<usize>,
    kills: u32,
}

fn prefix(way: Way) -> &'static str {
    match way {
        Way::EveryoneByHand => "hand",
        Way::RulesAlone => "rules",
        Way::RulesAndGate => "gate",
    }
}

fn payment(way: Way, n: usize) -> String {
    format!("pi_{}_{n:03}", prefix(way))
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let chosen: Vec<Way> = args
        .ways
        .iter()
        .map(|name| {
            Way::ALL
                .into_iter()
                .find(|w| w.name() == name)
                .with_context(|| {
                    format!(
                        "unknown way {name:?}; the ways are {}",
                        Way::ALL.map(Way::name).join(", ")
                    )
                })
        })
        .collect::<anyhow::Result<_>>()?;
    // A day played only some ways is printed, never written over the whole day's record.
    let partial = chosen.len() < Way::ALL.len();
    let plan = day::plan(&args.mix, args.seed);
    let work = tempfile::tempdir()?;
    let (env, _services) = stack::start(&stack::Options {
        work: work.path(),
        port: args.port,
        no_shop: false,
        webhooks: true,
        database: None,
    })?;
    let people = Population {
        ana: Person::new("ana"),
        ben: Person::new("ben"),
        mia: Person::new("mia"),
        ben_away: args.ben_away.clone(),
        first_delivered: (0..plan.requests.len())
            .map(|n| {
                plan.deliveries
                    .iter()
                    .position(|d| d.request == n)
                    .unwrap_or(usize::MAX)
            })
            .collect(),
    };
    let directory =
        story::directory(&[Person::new("ana"), Person::new("ben"), Person::new("mia")])?;
    let mut vars = env.worker_vars("approval-day");
    vars.extend(story::write_config(
        work.path(),
        &directory,
        &story::policy()?,
    )?);
    let mut workers = Workers {
        env: &env,
        vars,
        work: work.path(),
        current: None,
        started: 0,
    };
    workers.start()?;
    let rt = tokio::runtime::Runtime::new()?;
    let client = rt.block_on(e2e_worker::connect::client(
        &format!("http://{}", env.server.address),
        "approval-day".into(),
    ))?;
    let day = Day {
        env: &env,
        desk: Arc::new(Desk {
            client,
            journal: env.journal.clone(),
            queue: "approval-day".into(),
        }),
        plan: &plan,
        people: &people,
        directory: &directory,
        args: &args,
    };
    if args.rules_budget > 0 {
        env.journal
            .set_budget(&rules_budget(args.rules_budget), "approval-day")?;
    }
    let mut ways = serde_json::Map::new();
    for way in chosen {
        eprintln!(
            "[approval-day] {}: {} deliveries",
            way.name(),
            plan.deliveries.len()
        );
        let t0 = Instant::now();
        let (reports, seen) = rt.block_on(play(&day, way, &mut workers))?;
        let mut tally = tally(&day, way, &reports, &seen)?;
        tally["seconds"] = json!((t0.elapsed().as_secs_f64() * 10.0).round() / 10.0);
        eprintln!("[approval-day] {}: {tally}", way.name());
        ways.insert(way.name().to_owned(), tally);
    }
    drop(workers);
    let problems = goal(&ways, args.rules_budget);
    let record = json!({
        "mix": args.mix.0.iter().map(|(k, n)| (k.name(), n)).collect::<BTreeMap<_, _>>(),
        "seed": args.seed,
        "rules_budget": (args.rules_budget > 0).then(|| rules_budget(args.rules_budget)),
        "deliveries": plan.deliveries.len(),
        "unique_requests": plan.requests.len(),
        "sla_divisor": args.sla_divisor,
        "population": {
            "support": ["ana", "ben"], "managers": ["mia"],
            "ben_away_for_deliveries": format!("{}..{}", args.ben_away.start, args.ben_away.end),
            "judgment": "pay unless the order is ineligible, others already refunded as much, \
                         or a flagged customer asks more than the limit",
        },
        "ways": ways,
        "goal_met": problems.is_empty(),
        "problems": problems,
    });
    let md = render(&record);
    story::publish(
        &args.out,
        "approval_day",
        &record,
        &md,
        args.check || partial,
        &problems,
    )
}

/// The budget on what the rules send alone: at most `max` refunds labelled as the rules' in any
/// hour (the day plays in under a minute, so no window boundary falls inside it).
fn rules_budget(max: i64) -> Budget {
    let (name, value) = CLEARED_BY_RULES;
    Budget {
        id: "rules-alone".into(),
        scope: [(format!("label.{name}"), json!(value))].into(),
        per: Vec::new(),
        window: Window::Rolling { ms: 3_600_000 },
        limit: Limit::Count { max },
    }
}

/// Play the day `way`: start every delivery, review what reaches the inbox, kill the worker
/// whenever a crash-mid-send refund is made, and collect every workflow's report.
async fn play(
    day: &Day<'_>,
    way: Way,
    workers: &mut Workers<'_>,
) -> anyhow::Result<(Vec<(usize, Option<AskReport>)>, Seen)> {
    let (sim, p) = (&day.env.sim, prefix(way));
    let mut crashes: Vec<(Arc<Stall>, bool)> = Vec::new();
    for r in &day.plan.requests {
        let pi = payment(way, r.n);
        sim.add_payment(&pi, r.paid);
        sim.set_flagged(&pi, r.flagged);
        sim.set_eligible(&pi, r.eligible);
        if let Some(c) = r.after_decision {
            sim.after_order_read(&pi, c.fact());
        }
        if r.crash_mid_send {
            let stall = Stall::new();
            sim.hold_response_on(&pi, stall.clone());
            crashes.push((stall, false));
        }
    }
    // Every delivery of a request is started under the request's id as its workflow id, the
    // way Temporal deduplicates starts: a second start while the first runs is refused, one
    // after it closed is a new run.
    let mut running = JoinSet::new();
    for d in &day.plan.deliveries {
        let r = &day.plan.requests[d.request];
        let request = format!("{p}-r{:03}", r.n);
        let input = AskInput {
            request: story::refund(&request, &payment(way, r.n), r.amount),
            sla_divisor: day.args.sla_divisor,
            max_repairs: 1,
            way,
        };
        let desk = day.desk.clone();
        let (at, n, late) = (
            Duration::from_millis(day.args.arrival_ms * d.d as u64),
            d.d,
            d.late,
        );
        running.spawn(async move {
            tokio::time::sleep(at).await;
            if late {
                closed(&desk, &request).await?;
            }
            let report = if desk.deliver(&request, input).await? {
                Some(desk.report(&request).await?)
            } else {
                None
            };
            anyhow::Ok((n, report))
        });
    }
    let mut seen = Seen::default();
    let mut handled: HashSet<(String, u32)> = HashSet::new();
    let mut moved: HashSet<usize> = HashSet::new();
    let mut reports = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(day.args.timeout_s);
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    while !running.is_empty() {
        tokio::select! {
            done = running.join_next() => {
                if let Some(done) = done {
                    reports.push(done.context("a delivery's task")??);
                }
                continue;
            }
            _ = tick.tick() => {}
        }
        if Instant::now() > deadline {
            bail!(
                "{}: {} workflows still open after {} s",
                way.name(),
                running.len(),
                day.args.timeout_s
            );
        }
        let reached: Vec<usize> = (0..crashes.len())
            .filter(|i| !crashes[*i].1 && crashes[*i].0.reached())
            .collect();
        if !reached.is_empty() {
            workers.kill_and_replace()?;
            seen.kills += 1;
            for i in reached {
                crashes[i].0.release();
                crashes[i].1 = true;
            }
        }
        for head in day.desk.journal.route_heads()? {
            let Some(n) = request_of(p, &head.request) else {
                continue;
            };
            let open = matches!(
                head.step.kind,
                RouteKind::Routed | RouteKind::Escalated | RouteKind::Repair
            );
            // A request the rules' budget sent to a person: its over-budget request was routed
            // to one as a repair of the request (not refused by a rule on being assessed again,
            // which brings it to no one), as the scoreboard counts it.
            if head.request.ends_with(&format!("-{OVER_BUDGET_SUFFIX}"))
                && day.desk.journal.routes(&head.request)?.iter().any(|r| {
                    r.step.kind == RouteKind::Repair
                        && interlock::approval::reason::class(&r.step.reason)
                            == interlock::approval::reason::OVER_BUDGET
                })
            {
                seen.over_budget.insert(n);
            }
            if !open || !handled.insert((head.request.clone(), head.n)) {
                continue;
            }
            review(day, way, &head, n, &mut moved, &mut seen).await?;
        }
    }
    for (stall, _) in &crashes {
        stall.release();
    }
    reports.sort_by_key(|(d, _)| *d);
    Ok((reports, seen))
}

/// The request an inbox entry is for: `<way>-r<nnn>`, with a repair's or a run's suffix.
fn request_of(prefix: &str, id: &str) -> Option<usize> {
    id.strip_prefix(prefix)?
        .strip_prefix("-r")?
        .get(..3)?
        .parse()
        .ok()
}

/// Wait until the first delivery of `workflow` has closed.
async fn closed(desk: &Desk, workflow: &str) -> anyhow::Result<()> {
    let mut tries = 0;
    loop {
        match desk.report(workflow).await {
            Ok(_) => return Ok(()),
            // Its start may not have reached the server yet.
            Err(_) if tries < 100 => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// A person looks at `route` (request `n`) and approves or declines it by the day's judgment.
async fn review(
    day: &Day<'_>,
    way: Way,
    route: &Route,
    n: usize,
    moved: &mut HashSet<usize>,
    seen: &mut Seen,
) -> anyhow::Result<()> {
    let Some(person) = day.people.reviewer(route, n) else {
        return Ok(());
    };
    *seen.reviews.entry(person.id.to_owned()).or_default() += 1;
    seen.reviewed.insert(n);
    let detail = &route.step.detail;
    let amount = detail["amount"].as_i64().unwrap_or(0);
    match day::judge(amount, &detail["premises"]) {
        Ok(()) => {
            let approval = person.approve(route, now_ms())?;
            let r = &day.plan.requests[n];
            if let Some(c) = r.after_approval.filter(|_| moved.insert(n)) {
                day.env.sim.change(&payment(way, n), &c.fact());
            }
            day.desk.send(route, approval).await
        }
        Err(why) => day.desk.deny(route, person.id, &why).await,
    }
}

/// Refunds the workflows made (a hand refund has no key and no metadata).
fn by_workflows(r: &SimRefund) -> bool {
    r.idempotency_key.is_some() || !r.metadata.is_empty()
}

/// The way's record: reviews, who was needed, and every payout judged against the payments
/// API's records and the facts when the money went out.
fn tally(
    day: &Day<'_>,
    way: Way,
    reports: &[(usize, Option<AskReport>)],
    seen: &Seen,
) -> anyhow::Result<Value> {
    let sim = &day.env.sim;
    let (mut payouts, mut wrong, mut wrong_cents, mut missed) = (0, 0, 0, 0);
    let (mut sent_alone, mut refused_alone) = (0, 0);
    let mut wrong_by_kind: BTreeMap<&str, usize> = BTreeMap::new();
    for r in &day.plan.requests {
        let pi = payment(way, r.n);
        let refunds = sim.refunds(&pi);
        let (ours, hand): (Vec<&SimRefund>, Vec<&SimRefund>) =
            refunds.iter().partition(|x| by_workflows(x));
        let facts = json!({
            "order_eligible": sim.eligible(&pi),
            "customer_flagged": sim.flagged(&pi),
            "refunded_by_others": hand.iter().map(|x| x.amount).sum::<i64>(),
        });
        let due = usize::from(day::judge(r.amount, &facts).is_ok());
        payouts += ours.len();
        let extra = ours.len().saturating_sub(due);
        if extra > 0 {
            wrong += extra;
            wrong_cents += ours.iter().skip(due).map(|x| x.amount).sum::<i64>();
            let deliveries = day.plan.deliveries.iter().filter(|d| d.request == r.n);
            let kind = if deliveries.count() > 1 {
                Kind::Duplicate
            } else {
                r.kind
            };
            *wrong_by_kind.entry(kind.name()).or_default() += extra;
        }
        missed += usize::from(due == 1 && ours.is_empty());
        if !seen.reviewed.contains(&r.n) {
            if ours.is_empty() {
                refused_alone += 1;
            } else {
                sent_alone += 1;
            }
        }
    }
    let mut endings: BTreeMap<String, usize> = BTreeMap::new();
    for (_, rep) in reports {
        let e = match rep {
            Some(rep) => serde_json::to_value(rep.ending)?
                .as_str()
                .unwrap_or("?")
                .to_owned(),
            None => "deduplicated_at_start".to_owned(),
        };
        *endings.entry(e).or_default() += 1;
    }
    // With the gate the journal keeps its own count, which must agree with the harness's.
    let journal_board = if way == Way::RulesAndGate {
        serde_json::to_value(Scoreboard::read(
            day.env.journal.as_ref(),
            &format!("{}-r", prefix(way)),
        )?)?
    } else {
        Value::Null
    };
    let (receipts, verified) = if way == Way::RulesAndGate {
        let p = format!("{}-r", prefix(way));
        let keys: Vec<String> = day
            .env
            .journal
            .keys()?
            .into_iter()
            .filter(|k| k.starts_with(&p))
            .collect();
        let rows = story::verify_keys(day.env, day.directory, &keys)?;
        let holds = rows
            .iter()
            .filter(|row| {
                row["columns"]
                    .as_array()
                    .is_some_and(|cs| cs.iter().all(|c| c["holds"] != false))
            })
            .count();
        (rows.len(), holds)
    } else {
        (0, 0)
    };
    let unique = day.plan.requests.len();
    let cleared = sent_alone + refused_alone;
    Ok(json!({
        "deliveries": reports.len(),
        "unique_requests": unique,
        "reviews": seen.reviews.values().sum::<u32>(),
        "reviews_by": seen.reviews,
        "cleared_no_person": cleared,
        "cleared_no_person_share": (cleared as f64 / unique.max(1) as f64 * 1000.0).round() / 1000.0,
        "sent_no_person": sent_alone,
        "refused_no_person": refused_alone,
        "payouts": payouts,
        "wrong_payouts": wrong,
        "wrong_payout_cents": wrong_cents,
        "wrong_by_kind": wrong_by_kind,
        "missed_payouts": missed,
        "escalations": reports
            .iter()
            .filter_map(|(_, r)| r.as_ref())
            .map(|r| r.escalations.len())
            .sum::<usize>(),
        "workers_killed": seen.kills,
        "over_rules_budget": seen.over_budget.len(),
        "receipts": receipts,
        "receipts_verified": verified,
        "endings": endings,
        "journal_scoreboard": journal_board,
    }))
}

/// Rules with the gate: no wrong payout, none missed, at least 70% of the unique requests
/// settled with no person, every receipt verifying, and with a rules' budget, the rules sending
/// no more than it allows alone and at least one request going to a person over it; and every
/// workflow of every way reported an ending it knows.
fn goal(ways: &serde_json::Map<String, Value>, rules_budget: i64) -> Vec<String> {
    let mut p = Vec::new();
    for (name, w) in ways {
        if w["endings"]["other"].as_u64().unwrap_or(0) > 0 {
            p.push(format!(
                "{name}: some workflows ended otherwise: {}",
                w["endings"]
            ));
        }
    }
    let Some(g) = ways.get(Way::RulesAndGate.name()) else {
        return p;
    };
    let n = |k: &str| g[k].as_u64().unwrap_or(u64::MAX);
    if n("wrong_payouts") != 0 {
        p.push(format!(
            "rules_and_gate paid {} wrongly",
            g["wrong_payouts"]
        ));
    }
    if n("missed_payouts") != 0 {
        p.push(format!(
            "rules_and_gate missed {} payouts",
            g["missed_payouts"]
        ));
    }
    if n("cleared_no_person") * 10 < n("unique_requests") * 7 {
        p.push(format!(
            "rules_and_gate settled {} of {} requests with no person, under 70%",
            g["cleared_no_person"], g["unique_requests"]
        ));
    }
    let board = &g["journal_scoreboard"];
    for (field, want) in [
        ("requests", "unique_requests"),
        ("cleared_no_person", "sent_no_person"),
    ] {
        if board[field] != g[want] {
            p.push(format!(
                "rules_and_gate: the journal's scoreboard has {field} {}, the payments API's \
                 records {}",
                board[field], g[want]
            ));
        }
    }
    for field in ["sent_twice", "needs_a_look", "open"] {
        if board[field] != 0 {
            p.push(format!(
                "rules_and_gate: the journal's scoreboard has {field} {}",
                board[field]
            ));
        }
    }
    if rules_budget > 0 {
        // The budget held by the payments API's records, and it did send some to a person.
        if n("sent_no_person") > rules_budget as u64 {
            p.push(format!(
                "rules_and_gate: the rules sent {} refunds alone, over their budget of {rules_budget}",
                g["sent_no_person"]
            ));
        }
        if n("over_rules_budget") == 0 {
            p.push(format!(
                "rules_and_gate: the rules' budget of {rules_budget} sent no request to a person \
                 (set it below what the rules send alone, or 0 for none)"
            ));
        }
        if board["over_budget"] != g["over_rules_budget"] {
            p.push(format!(
                "rules_and_gate: the journal's scoreboard has over_budget {}, the inbox showed {}",
                board["over_budget"], g["over_rules_budget"]
            ));
        }
    }
    if n("receipts") == 0 || n("receipts_verified") != n("receipts") {
        p.push(format!(
            "rules_and_gate: {} of {} receipts verify",
            g["receipts_verified"], g["receipts"]
        ));
    }
    p
}

fn render(r: &Value) -> String {
    let mut md = format!(
        "# The approval day\n\nPlayed by `scripts/approval-day` on a Temporal dev server, real worker \
         processes (SIGKILLed mid-send) and the payments API: {} deliveries of {} unique refund \
         requests (seed {}), reviewed by a scripted population (support: ana and ben, ben away \
         for the requests first delivered at positions {}; managers: mia), three ways. A payout is wrong when a careful \
         reviewer, on the facts as they stood when the money went out, would not have paid it, \
         or had paid it already (every scripted change happens before any send, so those are \
         the day's final facts). Every delivery starts the workflow under the request's id: a \
         duplicate arriving while the first runs is refused by Temporal at the start; one \
         arriving after the first closed is a new run.\n\n**Mix:** {}\n\n",
        r["deliveries"],
        r["unique_requests"],
        r["seed"],
        r["population"]["ben_away_for_deliveries"]
            .as_str()
            .unwrap_or(""),
        r["mix"]
            .as_object()
            .map(|m| m
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", "))
            .unwrap_or_default(),
    );
    if let Some(max) = r["rules_budget"]["limit"]["max"].as_i64() {
        md += &format!(
            "**The rules' budget:** with the gate, the rules send at most {max} refunds alone in \
             any hour (budget `{}` on the label `cleared_by=rules`, checked in the transaction \
             that writes `DISPATCHED`); a refund the rules cleared over it goes to a person as the \
             request it was. The other two ways have nothing that could hold such a limit.\n\n",
            r["rules_budget"]["id"].as_str().unwrap_or("")
        );
    }
    md += "| way | reviews | cleared with no person | payouts | wrong payouts | wrong, by kind | missed | escalations | over the rules' budget | workers killed | receipts verified | seconds |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n";
    for (name, w) in r["ways"].as_object().into_iter().flatten() {
        let kinds = w["wrong_by_kind"]
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| format!("{k} {v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "–".into());
        md += &format!(
            "| {name} | {} | {} of {} ({:.0}%): {} sent, {} refused | {} | {} (${:.2}) | {kinds} | {} | {} | {} | {} | {} of {} | {} |\n",
            w["reviews"],
            w["cleared_no_person"],
            w["unique_requests"],
            w["cleared_no_person_share"].as_f64().unwrap_or(0.0) * 100.0,
            w["sent_no_person"],
            w["refused_no_person"],
            w["payouts"],
            w["wrong_payouts"],
            w["wrong_payout_cents"].as_f64().unwrap_or(0.0) / 100.0,
            w["missed_payouts"],
            w["escalations"],
            if name == Way::RulesAndGate.name() && r["rules_budget"].is_object() {
                format!("{} to a person", w["over_rules_budget"])
            } else {
                "–".to_owned()
            },
            w["workers_killed"],
            w["receipts_verified"],
            w["receipts"],
            w["seconds"],
        );
    }
    md += &format!(
        "\nGoal (rules and the gate: no wrong payout, at least 70% of the unique requests with no \
         person, every receipt verifying, and the rules' budget held and sending some to a person): {}.\n",
        if r["goal_met"] == true {
            "met".to_owned()
        } else {
            format!("NOT met — {}", r["problems"])
        }
    );
    md
}
