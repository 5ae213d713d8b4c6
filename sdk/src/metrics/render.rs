//! Prometheus' text exposition format (version 0.0.4): `# HELP` and `# TYPE` once per metric,
//! label values escaped, histograms as cumulative `_bucket` series with `le`, then `_sum` and
//! `_count`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::journal::JournalCounts;
use super::registry::{BUCKETS, Histogram, Registry, Series};

/// What each metric means, for its `# HELP` line.
fn help(name: &str) -> &'static str {
    match name {
        "interlock_attempts_total" => {
            "Attempts of an effect this process ran, by target, outcome, refusal code and whether \
             the outcome was replayed from the journal."
        }
        "interlock_recoveries_total" => {
            "Recoveries of an in-flight effect this process ran, by target and how the attempt \
             left the effect."
        }
        "interlock_send_duration_seconds" => {
            "Time from a request to the target to its answer (or to giving up on it), by target."
        }
        "interlock_journal_append_duration_seconds" => {
            "Time of one read-decide-append transaction of the journal, its commit included."
        }
        _ => "",
    }
}

fn labels(l: &[(&'static str, String)], extra: Option<(&str, &str)>) -> String {
    let mut parts: Vec<String> = l
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
        .collect();
    if let Some((k, v)) = extra {
        parts.push(format!("{k}=\"{}\"", escape(v)));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", parts.join(","))
    }
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// A metric's series: each one's labels and value.
type Labelled<V> = Vec<(Vec<(&'static str, String)>, V)>;

fn by_name<V>(all: BTreeMap<Series, V>) -> BTreeMap<&'static str, Labelled<V>> {
    let mut out: BTreeMap<&'static str, Vec<_>> = BTreeMap::new();
    for ((name, l), v) in all {
        out.entry(name).or_default().push((l, v));
    }
    out
}

fn histogram(out: &mut String, name: &str, l: &[(&'static str, String)], h: &Histogram) {
    let mut cumulative = 0;
    for (bound, n) in BUCKETS.iter().zip(h.buckets) {
        cumulative += n;
        let le = bound.to_string();
        let _ = writeln!(
            out,
            "{name}_bucket{} {cumulative}",
            labels(l, Some(("le", &le)))
        );
    }
    let _ = writeln!(
        out,
        "{name}_bucket{} {}",
        labels(l, Some(("le", "+Inf"))),
        h.count
    );
    let _ = writeln!(out, "{name}_sum{} {}", labels(l, None), h.sum);
    let _ = writeln!(out, "{name}_count{} {}", labels(l, None), h.count);
}

/// The registry's metrics and, when given, the journal's counts (`None` inside `Some`: the
/// journal could not be read, reported as `interlock_journal_up 0`).
pub fn render(registry: &Registry, journal: Option<Option<&JournalCounts>>) -> String {
    let mut out = String::new();
    for (name, series) in by_name(registry.counters()) {
        header(&mut out, name, "counter", help(name));
        for (l, v) in series {
            let _ = writeln!(out, "{name}{} {v}", labels(&l, None));
        }
    }
    for (name, series) in by_name(registry.histograms()) {
        header(&mut out, name, "histogram", help(name));
        for (l, h) in series {
            histogram(&mut out, name, &l, &h);
        }
    }
    let Some(journal) = journal else {
        return out;
    };
    header(
        &mut out,
        "interlock_journal_up",
        "gauge",
        "1 when the journal could be read for the gauges below at the last refresh, 0 when not.",
    );
    let _ = writeln!(out, "interlock_journal_up {}", u8::from(journal.is_some()));
    if let Some(c) = journal {
        header(
            &mut out,
            "interlock_journal_effects",
            "gauge",
            "Effects in the journal by where they stand (in_flight: a send may be on its way; \
             ambiguous: a person must look; applied_twice: the target holds it more than once).",
        );
        for (status, n) in &c.by_status {
            let _ = writeln!(
                out,
                "interlock_journal_effects{{status=\"{}\"}} {n}",
                status.label().to_ascii_lowercase()
            );
        }
        header(
            &mut out,
            "interlock_journal_landed_late",
            "gauge",
            "Effects closed as refused or failed that the target holds after all: reverse or \
             adopt each.",
        );
        let _ = writeln!(out, "interlock_journal_landed_late {}", c.landed_late);
        budgets(&mut out, &c.budgets);
    }
    out
}

/// A budget gauge: its name, its help and its value.
type BudgetSeries = (&'static str, &'static str, fn(&super::BudgetGauge) -> i64);

/// The budgets in force: each one's limit and its fullest counter in the current window.
fn budgets(out: &mut String, budgets: &[super::BudgetGauge]) {
    if budgets.is_empty() {
        return;
    }
    let series: [BudgetSeries; 4] = [
        (
            "interlock_budget_limit",
            "A budget's limit: the most its counters may hold in one window.",
            |b| b.limit,
        ),
        (
            "interlock_budget_used",
            "What committed effects hold in the budget's fullest counter of the current window.",
            |b| b.used,
        ),
        (
            "interlock_budget_reserved",
            "What effects in flight or ambiguous hold there (counted against the limit until \
             they end).",
            |b| b.reserved,
        ),
        (
            "interlock_budget_counters",
            "The budget's counters with a place in the current window (one per value of its \
             `per` fields).",
            |b| i64::try_from(b.counters).unwrap_or(i64::MAX),
        ),
    ];
    for (name, help, value) in series {
        header(out, name, "gauge", help);
        for b in budgets {
            let _ = writeln!(out, "{name}{{budget=\"{}\"}} {}", escape(&b.id), value(b));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::core::Status;

    #[test]
    fn the_text_follows_the_exposition_format() {
        let r = Registry::default();
        r.inc("interlock_attempts_total", &[("target", "pay\"ments")]);
        r.observe(
            "interlock_journal_append_duration_seconds",
            &[],
            Duration::from_millis(3),
        );
        let counts = JournalCounts {
            by_status: [(Status::Ambiguous, 2)].into(),
            landed_late: 1,
            budgets: vec![super::super::BudgetGauge {
                id: "refunds-daily".into(),
                limit: 50_000,
                used: 20_000,
                reserved: 2_000,
                counters: 2,
            }],
        };
        let text = render(&r, Some(Some(&counts)));
        for line in [
            "# TYPE interlock_attempts_total counter",
            "interlock_attempts_total{target=\"pay\\\"ments\"} 1",
            "interlock_journal_append_duration_seconds_bucket{le=\"0.0025\"} 0",
            "interlock_journal_append_duration_seconds_bucket{le=\"0.005\"} 1",
            "interlock_journal_append_duration_seconds_bucket{le=\"+Inf\"} 1",
            "interlock_journal_append_duration_seconds_count 1",
            "interlock_journal_up 1",
            "interlock_journal_effects{status=\"ambiguous\"} 2",
            "interlock_journal_landed_late 1",
            "# TYPE interlock_budget_limit gauge",
            "interlock_budget_limit{budget=\"refunds-daily\"} 50000",
            "interlock_budget_used{budget=\"refunds-daily\"} 20000",
            "interlock_budget_reserved{budget=\"refunds-daily\"} 2000",
            "interlock_budget_counters{budget=\"refunds-daily\"} 2",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line} missing from\n{text}"
            );
        }
        assert!(render(&r, Some(None)).contains("interlock_journal_up 0"));
    }
}
