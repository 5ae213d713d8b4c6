//! Regenerate `results/fault_matrix.md` and `results/fault_matrix.json`.
//!
//! `--check` compares instead of writing and exits 1 on drift.

use std::path::PathBuf;

use clap::Parser;
use interlock_tests::matrix::{render_markdown, run_all};

/// The simulated fault matrix: every fault at every tier, for the gate and the baselines.
#[derive(Parser)]
struct Args {
    /// Compare with the committed results instead of writing them; exit 1 on drift.
    #[arg(long)]
    check: bool,
}

fn main() -> anyhow::Result<()> {
    let check = Args::parse().check;
    let cells = run_all()?;
    let md = render_markdown(&cells);
    let json = serde_json::to_string_pretty(&serde_json::json!({ "cells": cells }))? + "\n";
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../results");
    let files = [
        (dir.join("fault_matrix.md"), md),
        (dir.join("fault_matrix.json"), json),
    ];
    if check {
        let mut drift = false;
        for (path, want) in &files {
            let have = std::fs::read_to_string(path).unwrap_or_default();
            if &have != want {
                eprintln!(
                    "{} drifted from the code: run `cargo run -p interlock-tests --bin fault-matrix`",
                    path.display()
                );
                drift = true;
            }
        }
        if drift {
            std::process::exit(1);
        }
        eprintln!("fault matrix: {} cells, no drift", cells.len());
    } else {
        std::fs::create_dir_all(&dir)?;
        for (path, text) in &files {
            std::fs::write(path, text)?;
            eprintln!("wrote {}", path.display());
        }
    }
    Ok(())
}
