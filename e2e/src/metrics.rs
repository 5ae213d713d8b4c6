//! The metrics an operator alerts on, checked against the journal they describe: after the kill
//! matrix, `interlock metrics` is started over the matrix's journal as its own process and
//! scraped over HTTP, and every `interlock_journal_effects` gauge (in flight, ambiguous, applied
//! twice, …) and the landed-late gauge must equal what `interlock journal list --json` counts.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use anyhow::{Context, bail};

use crate::cell::Env;
use crate::stack::{ChildGuard, sibling};

/// What the scrape and the journal's own listing said.
#[derive(Debug)]
pub struct Agreement {
    /// Effects by status, as `journal list --json` counts them (lower-case statuses).
    pub listed: BTreeMap<String, u64>,
    /// Effects that landed late, as listed.
    pub landed_late: u64,
}

fn interlock(env: &Env) -> anyhow::Result<Command> {
    let mut c = Command::new(sibling("interlock")?);
    c.env("INTERLOCK_JOURNAL", &env.journal_name)
        .env("INTERLOCK_JOURNAL_SCHEMA", &env.journal_schema);
    Ok(c)
}

/// Scrape `interlock metrics` over `env`'s journal and compare it with `journal list --json`;
/// an error names every gauge that disagrees.
pub fn check(env: &Env) -> anyhow::Result<Agreement> {
    let mut child = ChildGuard(
        interlock(env)?
            .args(["metrics", "--listen", "127.0.0.1:0", "--refresh-ms", "0"])
            .stderr(Stdio::piped())
            .spawn()
            .context("starting `interlock metrics`")?,
    );
    let stderr = child.0.stderr.take().context("no stderr")?;
    let mut lines = BufReader::new(stderr).lines();
    let url = loop {
        let Some(line) = lines.next().transpose()? else {
            bail!("`interlock metrics` exited before it served");
        };
        if let Some(rest) = line.split("serving http://").nth(1) {
            break format!("http://{}", rest.trim());
        }
    };
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(std::time::Duration::from_secs(60)))
        .build()
        .into();
    let text = agent
        .get(&url)
        .call()
        .with_context(|| format!("scraping {url}"))?
        .body_mut()
        .read_to_string()?;
    drop(child);
    let gauge = |name: &str| -> Option<u64> {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
    };
    let out = interlock(env)?
        .args(["journal", "list", "--json"])
        .output()?;
    if !out.status.success() {
        bail!(
            "`interlock journal list --json` failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout)?;
    let mut listed: BTreeMap<String, u64> = BTreeMap::new();
    let mut landed_late = 0;
    for r in &rows {
        let status = r["outcome"].as_str().unwrap_or("none").to_ascii_lowercase();
        *listed.entry(status).or_default() += 1;
        landed_late += u64::from(r["landed_late"].as_array().is_some_and(|a| !a.is_empty()));
    }
    let mut wrong = Vec::new();
    if gauge("interlock_journal_up ") != Some(1) {
        wrong.push("interlock_journal_up is not 1".to_owned());
    }
    for status in interlock::core::Status::ALL {
        let status = status.label().to_ascii_lowercase();
        let scraped = gauge(&format!(
            "interlock_journal_effects{{status=\"{status}\"}} "
        ));
        let want = listed.get(&status).copied().unwrap_or(0);
        if scraped != Some(want) {
            wrong.push(format!("{status}: scraped {scraped:?}, listed {want}"));
        }
    }
    if gauge("interlock_journal_landed_late ") != Some(landed_late) {
        wrong.push(format!(
            "landed late: scraped {:?}, listed {landed_late}",
            gauge("interlock_journal_landed_late ")
        ));
    }
    if rows.is_empty() {
        wrong.push("the journal holds no effects: nothing was compared".into());
    }
    if !wrong.is_empty() {
        bail!(
            "the metrics disagree with the journal: {}",
            wrong.join("; ")
        );
    }
    Ok(Agreement {
        listed,
        landed_late,
    })
}
