//! Syscalls counted by `strace -c` around runs of this binary: counts that do not depend on how
//! fast the machine is (syncs, requests to a server), for figures that name what they count.

use std::process::Command;

/// The calls of the syscalls `names` one effect costs: `strace -f -c` around this binary run for
/// `effects` effects and for none (so what opening costs is not counted), each run's arguments
/// and environment set by `run(n, command)`.
pub(crate) fn per_effect(
    names: &[&str],
    effects: u64,
    run: impl Fn(u64, &mut Command) -> anyhow::Result<()>,
) -> anyhow::Result<f64> {
    let count = |n: u64| -> anyhow::Result<u64> {
        let dir = tempfile::tempdir()?;
        let out = dir.path().join("strace.txt");
        let mut command = Command::new("strace");
        command
            .args(["-f", "-c", "-e"])
            .arg(format!("trace={}", names.join(",")))
            .arg("-o")
            .arg(&out)
            .arg(std::env::current_exe()?)
            .stdout(std::process::Stdio::null());
        run(n, &mut command)?;
        let status = command.status()?;
        anyhow::ensure!(status.success(), "strace exited with {status}");
        Ok(calls(&std::fs::read_to_string(&out)?, names))
    };
    let (all, opening) = (count(effects)?, count(0)?);
    Ok(all.saturating_sub(opening) as f64 / effects.max(1) as f64)
}

/// The calls of the syscalls `names` in `strace -c`'s summary table.
fn calls(summary: &str, names: &[&str]) -> u64 {
    summary
        .lines()
        .filter_map(|line| {
            let cols: Vec<&str> = line.split_whitespace().collect();
            match cols.last() {
                Some(name) if names.contains(name) && cols.len() >= 5 => {
                    cols[3].parse::<u64>().ok()
                }
                _ => None,
            }
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::calls;

    #[test]
    fn strace_summary_sync_calls_are_summed_without_the_total_row() {
        let s = "% time     seconds  usecs/call     calls    errors syscall\n\
                 ------ ----------- ----------- --------- --------- ----------------\n\
                  60.00    0.000300           5        60           fdatasync\n\
                  40.00    0.000200          10        20         1 fsync\n\
                 ------ ----------- ----------- --------- --------- ----------------\n\
                 100.00    0.000500           6        80         1 total\n";
        assert_eq!(calls(s, &["fsync", "fdatasync"]), 80);
    }
}
