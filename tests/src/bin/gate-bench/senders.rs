//! Sender processes: each opens its own handle on the same journal file, as separate workers on
//! one host do, so what they cost each other is SQLite's write lock and nothing shared in memory.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use interlock_tests::bench;
use serde_json::{Value, json};

/// `n` sender processes, each with its own journal handle on the same file, started together.
/// Returns the effects they committed, the wall time, the commits they made and the CPU time
/// they used while sending.
pub(crate) fn processes(
    journal: &Path,
    n: usize,
    each: Duration,
    round: usize,
) -> anyhow::Result<(u64, Duration, u64, Duration)> {
    let exe = std::env::current_exe()?;
    let mut children = Vec::new();
    for i in 0..n {
        let mut child = Command::new(&exe)
            .arg("--sender")
            .arg(journal)
            .args(["--name", &format!("r{round}p{n}-{i}")])
            .args(["--millis", &each.as_millis().to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .context("starting a sender process")?;
        let mut out = BufReader::new(child.stdout.take().context("sender stdout")?);
        let mut ready = String::new();
        out.read_line(&mut ready)?;
        anyhow::ensure!(ready.trim() == "ready", "sender {i} said {ready:?}");
        children.push((child, out));
    }
    let start = Instant::now();
    for (child, _) in &mut children {
        writeln!(child.stdin.as_mut().context("sender stdin")?, "go")?;
    }
    let (mut effects, mut commits, mut cpu_ms) = (0, 0, 0);
    for (mut child, mut out) in children {
        let mut line = String::new();
        out.read_line(&mut line)?;
        let v: Value =
            serde_json::from_str(&line).with_context(|| format!("sender said {line:?}"))?;
        effects += v["effects"].as_u64().unwrap_or(0);
        commits += v["commits"].as_u64().unwrap_or(0);
        cpu_ms += v["cpu_ms"].as_u64().unwrap_or(0);
        anyhow::ensure!(child.wait()?.success(), "a sender process failed");
    }
    Ok((
        effects,
        start.elapsed(),
        commits,
        Duration::from_millis(cpu_ms),
    ))
}

/// One sender process: open the journal, say ready, wait for "go", send for `each`, report.
pub(crate) fn sender_process(journal: &Path, name: &str, each: Duration) -> anyhow::Result<()> {
    let (bound, handle) = bench::bound(journal, false)?;
    let mut stdout = std::io::stdout();
    writeln!(stdout, "ready")?;
    stdout.flush()?;
    let mut go = String::new();
    std::io::stdin().read_line(&mut go)?;
    let cpu = bench::cpu_time();
    let (effects, _) = bench::threads(&bound, 1, name, each)?;
    let cpu_ms = bench::cpu_time().saturating_sub(cpu).as_millis() as u64;
    writeln!(
        stdout,
        "{}",
        json!({"effects": effects, "commits": handle.commits(), "cpu_ms": cpu_ms})
    )?;
    Ok(())
}
