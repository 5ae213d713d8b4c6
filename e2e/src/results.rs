//! A kill-matrix run's files: the report (`.md`), the plot (`.svg`) and the data (`.json`, every
//! cell with its timeline, and the summaries). The report can be rendered again from the data
//! alone, so a better table never needs the half-hour run again, and the numbers in it are the
//! run's own.

use std::path::Path;

use anyhow::Context;
use e2e_worker::StepTimings;
use serde::Deserialize;
use serde_json::json;

use crate::cell::CellResult;
use crate::report::{markdown, summarize};
use crate::{classes, plot};

/// Write `stem`.md, .json and .svg in `dir` for `cells`, run by `command` with `step`; returns
/// the report.
pub fn write(
    dir: &Path,
    stem: &str,
    command: &str,
    step: StepTimings,
    cells: &[CellResult],
) -> anyhow::Result<String> {
    std::fs::create_dir_all(dir)?;
    // A run from before cells were classed has nothing to colour its dots by: no plot.
    let classed = cells.iter().any(|c| c.class.is_some());
    let svg = plot::svg(cells).filter(|_| classed);
    let plot_name = format!("{stem}.svg");
    if let Some(svg) = &svg {
        std::fs::write(dir.join(&plot_name), svg)?;
    }
    let mut md = markdown(cells, command);
    md.push_str(&classes::markdown(
        cells,
        step,
        svg.as_ref().map(|_| plot_name.as_str()),
    ));
    let data = json!({
        "command": command,
        "step": step,
        "cells": cells,
        "systems": summarize(cells),
        "classes": classes::rows(cells),
    });
    std::fs::write(dir.join(format!("{stem}.md")), &md)?;
    std::fs::write(
        dir.join(format!("{stem}.json")),
        serde_json::to_string_pretty(&data)? + "\n",
    )?;
    Ok(md)
}

/// What [`render_again`] reads of a run's `.json`.
#[derive(Deserialize)]
struct Run {
    /// Absent in runs written before it was kept.
    command: Option<String>,
    #[serde(default)]
    step: StepTimings,
    cells: Vec<CellResult>,
}

/// Render the run at `path` (a `.json` [`write()`] wrote) again beside it: each cell's class
/// judged anew from its timeline, the tables and the plot from its cells. With `check`, write
/// nothing and fail unless the report and the plot beside it are what this code renders.
pub fn render_again(path: &Path, check: bool) -> anyhow::Result<String> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut run: Run = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a kill-matrix run's .json", path.display()))?;
    for cell in &mut run.cells {
        cell.class = classes::class_of_cell(cell).map(Into::into);
    }
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .context("the run's file has no name")?;
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    // A run from before the command was kept: the repetitions are the cells' own.
    let command = run.command.clone().unwrap_or_else(|| {
        let repeat = run.cells.iter().map(|c| c.rep).max().unwrap_or(1);
        let journal = if stem.contains("postgres") {
            " --journal postgres"
        } else {
            ""
        };
        format!("scripts/main-job{journal} (kill-matrix --repeat {repeat})")
    });
    if !check {
        return write(dir, stem, &command, run.step, &run.cells);
    }
    let scratch = tempfile::tempdir()?;
    let md = write(scratch.path(), stem, &command, run.step, &run.cells)?;
    for ext in ["md", "svg"] {
        let name = format!("{stem}.{ext}");
        let fresh = std::fs::read(scratch.path().join(&name)).ok();
        let committed = std::fs::read(dir.join(&name)).ok();
        if fresh != committed {
            anyhow::bail!(
                "{} is not what its run renders to with this code: run `kill-matrix --render {}` \
                 and commit the result",
                dir.join(&name).display(),
                path.display()
            );
        }
    }
    Ok(md)
}
