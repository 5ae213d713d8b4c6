//! Regenerate `results/fault_matrix.md` and `results/fault_matrix.json`.
//!
//! `--check` compares instead of writing and exits 1 on drift.

use std::path::PathBuf;

use interlock_tests::matrix::{render_markdown, run_all};

fn main() -> anyhow::Result<()> {
    let check = std::env::args().any(|a| a == "--check");
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
