//! Crash-to-close by what its seconds were spent on. One median over every kill mixes cells that
//! wait for Temporal to notice a dead worker with cells that wait out a claim's deadline and
//! cells whose frozen worker comes back, so a reader cannot tell a slow system from a slow case.
//! Each kill cell is classed by the Temporal server's own history of its refund step, and each
//! system is compared with the keyed baseline over the same cases, class by class.

use serde::Serialize;

use interlock_temporal::IN_FLIGHT;

use crate::cases::{ALL, Kill};
use crate::cell::CellResult;
use crate::report::median;
use e2e_worker::StepTimings;
use e2e_worker::timeline::StepTimeline;

/// A dead worker's attempt was failed by its heartbeat timeout, and the next attempt finished.
pub const HEARTBEAT: &str = "heartbeat";
/// The attempt before the last was told the effect was still in flight elsewhere: the gate was
/// waiting out a claim's deadline (or a held send's settling) before it could act.
pub const CLAIM_DEADLINE: &str = "claim_deadline";
/// The first worker was frozen, not killed, and came back while another attempt ran.
pub const ZOMBIE: &str = "zombie";
/// The attempt before the last lost the gate server it was calling (the server was killed), and
/// the step was retried against the restarted one.
pub const SERVER_LOST: &str = "server_lost";
/// The refund step was scheduled only after the kill: the worker died holding the workflow's own
/// task (or its first step), which the server hands to another worker once the task's timeout
/// (10 s) runs out. The race for a budget's last room kills whichever worker sends first, and the
/// timeline is the first workflow's.
pub const WORKFLOW_TASK: &str = "workflow_task";
/// The step closed on the attempt that was running at the kill or freeze (the stall after the
/// premise read, which the frozen worker outlives).
pub const FIRST_ATTEMPT: &str = "first_attempt";
/// Anything else the history shows before the last attempt.
pub const OTHER: &str = "other";
/// The starter could not read the workflow's history (its error is kept with the cell).
pub const NO_HISTORY: &str = "no_history";

/// The classes, in table order.
pub const CLASSES: [&str; 8] = [
    HEARTBEAT,
    CLAIM_DEADLINE,
    ZOMBIE,
    SERVER_LOST,
    WORKFLOW_TASK,
    FIRST_ATTEMPT,
    OTHER,
    NO_HISTORY,
];

/// The failure type the Python worker's activity answers when its gate server cannot be reached.
const UNAVAILABLE: &str = "InterlockUnavailable";

/// The class of a cell with a kill at `crashed_at_ms`: `zombie` for the zombie case,
/// `workflow_task` when the refund step was scheduled only well after the kill, else by what
/// ended the attempt before the refund step's last.
pub fn class_of(zombie: bool, crashed_at_ms: i64, timeline: Option<&StepTimeline>) -> &'static str {
    if zombie {
        return ZOMBIE;
    }
    let Some(t) = timeline else {
        return NO_HISTORY;
    };
    // A step handed to the worker with the task that scheduled it can be stamped a few ms after
    // that worker was killed inside it; a second is far beyond that and far below a workflow
    // task's 10 s timeout.
    if t.scheduled_ms.is_some_and(|s| s > crashed_at_ms + 1_000) {
        return WORKFLOW_TASK;
    }
    match t.last_failure.as_deref() {
        Some("heartbeat_timeout") => HEARTBEAT,
        Some(IN_FLIGHT) => CLAIM_DEADLINE,
        Some(UNAVAILABLE) => SERVER_LOST,
        None if t.attempts == Some(1) => FIRST_ATTEMPT,
        _ => OTHER,
    }
}

/// The class of a judged cell: `None` for a cell without a kill. The case is found by name, so a
/// run read back from its JSON is classed exactly as it was when it ran.
pub fn class_of_cell(cell: &CellResult) -> Option<&'static str> {
    let zombie = ALL
        .iter()
        .find(|c| c.name == cell.case)
        .is_some_and(|c| c.kill == Kill::Zombie);
    cell.crashed_at_ms
        .map(|k| class_of(zombie, k, cell.timeline.as_ref()))
}

/// One system's cells in one class.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct ClassRow {
    /// The class.
    pub class: String,
    /// The system.
    pub system: String,
    /// Its cells with a kill in this class.
    pub cells: usize,
    /// Of them, held.
    pub held: usize,
    /// Median seconds from the kill to the workflow's close.
    pub crash_to_close_s: Option<f64>,
    /// Median seconds from the kill to the start of the step's last attempt (the server noticing,
    /// and the retries before the one that finished).
    pub to_last_attempt_s: Option<f64>,
    /// Median seconds the last attempt ran.
    pub last_attempt_s: Option<f64>,
    /// Median seconds from the step's end to the workflow's close (both by the server's clock).
    pub step_to_close_s: Option<f64>,
    /// Median attempt number of the last attempt.
    pub attempts: Option<f64>,
    /// Per case where both it and the keyed baseline have held cells, its median crash-to-close ÷
    /// keyed's; the median of those ratios. `None` for keyed itself or with no such case.
    pub vs_keyed: Option<f64>,
}

fn secs(a: Option<i64>, b: Option<i64>) -> Option<f64> {
    a.zip(b).map(|(a, b)| (b - a) as f64 / 1000.0)
}

/// Per class, per system (in the order systems first appear), the medians of where the seconds
/// went.
pub fn rows(cells: &[CellResult]) -> Vec<ClassRow> {
    let mut systems: Vec<&str> = Vec::new();
    for c in cells {
        if !systems.contains(&c.system.as_str()) {
            systems.push(&c.system);
        }
    }
    let mut out = Vec::new();
    for class in CLASSES {
        for system in &systems {
            let mine: Vec<&CellResult> = cells
                .iter()
                .filter(|c| c.system == *system && c.class.as_deref() == Some(class))
                .collect();
            if mine.is_empty() {
                continue;
            }
            let of = |f: &dyn Fn(&CellResult) -> Option<f64>| {
                median(mine.iter().filter_map(|c| f(c)).collect())
            };
            let t = |c: &CellResult| c.timeline.clone().unwrap_or_default();
            out.push(ClassRow {
                class: class.into(),
                system: (*system).into(),
                cells: mine.len(),
                held: mine.iter().filter(|c| c.held).count(),
                crash_to_close_s: of(&|c| c.crash_to_close_s),
                to_last_attempt_s: of(&|c| secs(c.crashed_at_ms, t(c).last_started_ms)),
                last_attempt_s: of(&|c| secs(t(c).last_started_ms, t(c).closed_ms)),
                step_to_close_s: of(&|c| secs(t(c).closed_ms, t(c).workflow_closed_ms)),
                attempts: of(&|c| t(c).attempts.map(f64::from)),
                vs_keyed: (*system != "keyed")
                    .then(|| vs_keyed(cells, &mine))
                    .flatten(),
            });
        }
    }
    out
}

/// Per case that both `mine` and the keyed baseline have held cells of: the median
/// crash-to-close of `mine`'s ÷ keyed's; then the median of those per-case ratios, so a case run
/// more often (or split across classes) weighs no more than another.
fn vs_keyed(cells: &[CellResult], mine: &[&CellResult]) -> Option<f64> {
    let times = |of: &mut dyn Iterator<Item = &CellResult>| -> Option<f64> {
        median(
            of.filter(|c| c.held)
                .filter_map(|c| c.crash_to_close_s)
                .collect(),
        )
    };
    let mut cases: Vec<&str> = mine.iter().map(|c| c.case.as_str()).collect();
    cases.sort_unstable();
    cases.dedup();
    let ratios = cases
        .into_iter()
        .filter_map(|case| {
            let ours = times(&mut mine.iter().copied().filter(|c| c.case == case))?;
            let keyed = times(
                &mut cells
                    .iter()
                    .filter(|c| c.system == "keyed" && c.case == case),
            )?;
            (keyed > 0.0).then(|| ours / keyed)
        })
        .collect();
    median(ratios)
}

fn cell(x: Option<f64>, unit: &str) -> String {
    x.map_or("–".to_owned(), |x| format!("{x:.2}{unit}"))
}

/// The Markdown section: the table, what each class means, and the goal line for `gated_t1`.
pub fn markdown(cells: &[CellResult], step: StepTimings, plot: Option<&str>) -> String {
    let rows = rows(cells);
    if rows.is_empty() {
        return String::new();
    }
    let mut out = format!(
        "\n## Crash-to-close by class\n\nThe refund step ran with a heartbeat timeout of {} ms \
         and a retry policy of one every {} ms (an attempt the gate answers \"in flight\" asks \
         for its own delay instead). Each cell with a kill is classed by its refund step's \
         history on the Temporal server (`temporal workflow show` reads the same): **heartbeat** \
         — the attempt before the last was failed by its heartbeat timeout (the server noticed \
         the dead worker); **claim_deadline** — the gate answered that the effect was still in \
         flight, and the step was retried until the dead attempt's claim ran out; **zombie** — \
         the first worker was frozen past its heartbeat timeout and came back while another \
         attempt ran; **server_lost** — the attempt before the last lost the gate server it was \
         calling (the `server_killed_*` rows); **workflow_task** — the refund step was scheduled \
         only after the kill, because the dead worker held the workflow's own task until its \
         10 s timeout (the race for a budget's last room, timed on the first workflow while the \
         killed send may be the other's); **first_attempt** — the step finished on its \
         first attempt, the one running at the kill or freeze (so its first split is at most \
         zero); **no_history** — the history could not be read (the cell keeps the error). \
         Times from the kill are the harness's clock against the server's, one machine's clock \
         here. A history keeps only the last attempt's start (with its number and the failure before it), so \
         the seconds split into: from the kill to the last attempt's start (noticing, and the \
         retries before the last), the last attempt's run, and from the step's end to the \
         workflow's close. Medians; ÷ keyed is, per case where both have held cells, the \
         median of this class's cells ÷ the keyed baseline's, and then the median over those \
         cases.\n\n| class | system | cells | held | crash-to-close \
         | kill → last attempt starts | last attempt runs | step ends → workflow closes | \
         attempts | ÷ keyed, same cases |\n|---|---|---|---|---|---|---|---|---|---|\n",
        step.heartbeat_ms, step.retry_ms
    );
    for r in &rows {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.class,
            r.system,
            r.cells,
            r.held,
            cell(r.crash_to_close_s, " s"),
            cell(r.to_last_attempt_s, " s"),
            cell(r.last_attempt_s, " s"),
            cell(r.step_to_close_s, " s"),
            r.attempts.map_or("–".to_owned(), |a| format!("{a}")),
            cell(r.vs_keyed, "×"),
        ));
    }
    let goal: Vec<&ClassRow> = rows.iter().filter(|r| r.system == "gated_t1").collect();
    if !goal.is_empty() {
        let parts: Vec<String> = goal
            .iter()
            .map(|r| match r.vs_keyed {
                Some(v) if v <= GOAL_VS_KEYED => format!("{} {v:.2}× met", r.class),
                Some(v) => format!("{} {v:.2}× not met", r.class),
                None => format!("{} – (keyed held none of its cases)", r.class),
            })
            .collect();
        let met = goal
            .iter()
            .all(|r| r.vs_keyed.is_some_and(|v| v <= GOAL_VS_KEYED));
        out.push_str(&format!(
            "\nGoal: gated_t1 within {GOAL_VS_KEYED}× of keyed in every class: {} — {}.\n",
            parts.join(" · "),
            if met { "met" } else { "not met" }
        ));
    }
    if let Some(plot) = plot {
        out.push_str(&format!(
            "\n![Each system's crash-to-close, one dot per cell, coloured by class]({plot})\n"
        ));
    }
    out
}

/// gated_t1's crash-to-close ÷ keyed's, per class, that the issue asks for.
pub const GOAL_VS_KEYED: f64 = 1.05;

#[cfg(test)]
mod tests {
    use super::*;

    fn timeline(attempts: u32, last_failure: Option<&str>) -> StepTimeline {
        StepTimeline {
            scheduled_ms: Some(1_000),
            last_started_ms: Some(5_000),
            attempts: Some(attempts),
            last_failure: last_failure.map(str::to_owned),
            closed_ms: Some(5_400),
            workflow_closed_ms: Some(5_450),
        }
    }

    #[test]
    fn a_cell_is_classed_by_the_failure_before_its_last_attempt() {
        assert_eq!(
            class_of(false, 2_000, Some(&timeline(2, Some("heartbeat_timeout")))),
            HEARTBEAT
        );
        assert_eq!(
            class_of(false, 2_000, Some(&timeline(9, Some("InterlockInFlight")))),
            CLAIM_DEADLINE
        );
        assert_eq!(
            class_of(false, 2_000, Some(&timeline(1, None))),
            FIRST_ATTEMPT
        );
        assert_eq!(
            class_of(
                false,
                2_000,
                Some(&timeline(2, Some("InterlockUnavailable")))
            ),
            SERVER_LOST
        );
        assert_eq!(
            class_of(true, 2_000, Some(&timeline(2, Some("heartbeat_timeout")))),
            ZOMBIE
        );
        assert_eq!(
            class_of(false, 2_000, Some(&timeline(3, Some("InterlockJournal")))),
            OTHER
        );
        assert_eq!(
            class_of(false, 2_000, None),
            NO_HISTORY,
            "no history: not guessed"
        );
        let mut late = timeline(1, None);
        late.scheduled_ms = Some(12_050);
        assert_eq!(
            class_of(false, 2_000, Some(&late)),
            WORKFLOW_TASK,
            "scheduled 10 s after the kill: the dead worker held the workflow's task"
        );
        late.scheduled_ms = Some(2_012);
        assert_eq!(class_of(false, 2_000, Some(&late)), FIRST_ATTEMPT);
    }

    fn cell_of(system: &str, case: &str, held: bool, c2c: f64, class: &str) -> CellResult {
        CellResult {
            held,
            crashed_at_ms: Some(2_000),
            timeline: Some(timeline(2, Some("heartbeat_timeout"))),
            class: Some(class.into()),
            ..CellResult::for_tests(system, case, Some(c2c))
        }
    }

    #[test]
    fn a_class_compares_with_keyed_over_the_cases_both_held_and_splits_the_seconds() {
        let cells = [
            cell_of("keyed", "a", true, 4.0, HEARTBEAT),
            cell_of("keyed", "b", true, 3.0, HEARTBEAT),
            cell_of("keyed", "c", false, 9.0, HEARTBEAT),
            cell_of("keyed", "d", true, 5.0, HEARTBEAT),
            cell_of("keyed", "d", true, 3.0, HEARTBEAT),
            cell_of("keyed", "d", true, 4.0, HEARTBEAT),
            cell_of("gated_t2", "a", true, 10.0, CLAIM_DEADLINE),
            cell_of("gated_t2", "c", true, 10.0, CLAIM_DEADLINE),
            cell_of("gated_t2", "d", true, 12.0, CLAIM_DEADLINE),
            cell_of("gated_t2", "d", true, 12.0, CLAIM_DEADLINE),
            cell_of("gated_t2", "d", true, 12.0, CLAIM_DEADLINE),
            cell_of("gated_t2", "b", true, 3.3, HEARTBEAT),
        ];
        let rows = rows(&cells);
        let find = |class: &str, system: &str| {
            rows.iter()
                .find(|r| r.class == class && r.system == system)
                .unwrap()
                .clone()
        };
        let deadline = find(CLAIM_DEADLINE, "gated_t2");
        // Case c has no held keyed cell. a: 10 ÷ 4; d, three times as many cells: 12 ÷ 4 (its
        // median); each case counts once.
        assert_eq!(deadline.vs_keyed, Some((10.0 / 4.0 + 12.0 / 4.0) / 2.0));
        assert_eq!(deadline.cells, 5);
        let heartbeat = find(HEARTBEAT, "gated_t2");
        assert_eq!(heartbeat.vs_keyed, Some(3.3 / 3.0));
        assert_eq!(heartbeat.to_last_attempt_s, Some(3.0));
        assert_eq!(heartbeat.last_attempt_s, Some(0.4));
        assert_eq!(heartbeat.step_to_close_s, Some(0.05));
        assert_eq!(find(HEARTBEAT, "keyed").vs_keyed, None);
        assert!(
            markdown(&cells, StepTimings::default(), None)
                .contains("| claim_deadline | gated_t2 | 5 | 5 |")
        );
    }
}
