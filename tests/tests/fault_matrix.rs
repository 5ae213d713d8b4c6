//! The simulated fault matrix: every cell asserted, the baselines' failures included, and the
//! committed tables checked against the code.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)] // in tests, a panic is the report

use interlock_tests::cases::Case;
use interlock_tests::matrix::{Cell, Column, render_markdown, run_all};

/// H held, S held but short (honestly ambiguous or refused with a repair), X violated.
/// Columns: naive, key_only, replay, gate_t1, gate_t2, gate_t3.
const EXPECTED: [(&str, &str); 18] = [
    ("happy_path", "HHHHHH"),
    ("crash_before_send", "HHHHHS"),
    ("crash_before_ack", "XHHHHH"),
    ("duplicate_submit", "XHHHHH"),
    ("model_redecides_30", "XHHHHH"),
    ("same_request_different_amount", "XHHHHH"),
    ("lease_revoked_before_send", "XXXHHH"),
    ("order_ineligible", "XXXHHH"),
    ("hand_refund_during_outage", "XXXHHH"),
    ("lease_revoked_during_outage", "XXXHHH"),
    ("unrelated_5_refund_during_outage", "HHHSSS"),
    ("recovery_after_dedupe_window", "XXXHHH"),
    ("zombie_attempt", "XHHHHH"),
    ("slow_sender_past_deadline", "XHHHHS"),
    ("stall_after_premise_read_hand_refund", "XXXHHH"),
    ("recovery_killed_mid_resend", "XHHHHS"),
    ("5xx_after_apply", "XXXHHH"),
    ("definite_4xx", "HHHHHH"),
];

fn cells() -> Vec<Cell> {
    match run_all() {
        Ok(c) => c,
        Err(e) => panic!("matrix failed to run: {e:#}"),
    }
}

fn mark(c: &Cell) -> char {
    match (c.held, c.short) {
        (false, _) => 'X',
        (true, true) => 'S',
        (true, false) => 'H',
    }
}

#[test]
fn every_cell_holds_or_fails_exactly_as_expected() {
    let cells = cells();
    assert_eq!(cells.len(), Case::ALL.len() * Column::ALL.len());
    for (case, want) in EXPECTED {
        let got: String = Column::ALL
            .iter()
            .map(|col| {
                cells
                    .iter()
                    .find(|c| c.case == case && c.system == col.name())
                    .map_or('?', mark)
            })
            .collect();
        assert_eq!(got, want, "row {case}");
    }
}

#[test]
fn the_gate_holds_every_row_at_every_tier_and_ambiguity_only_at_tier_3() {
    for c in cells().iter().filter(|c| c.system.starts_with("gate")) {
        assert!(c.held, "{} / {}: {}", c.case, c.system, c.outcome);
        assert!(c.answer_agrees, "{} / {}", c.case, c.system);
        if c.outcome.contains("AMBIGUOUS") {
            assert_eq!(c.system, "gate_t3", "{}: AMBIGUOUS below tier 3", c.case);
        }
    }
}

#[test]
fn naive_fails_nine_of_the_original_ten_and_key_only_and_replay_fail_five() {
    let cells = cells();
    let failed = |system: &str| {
        Case::ORIGINAL_TEN
            .iter()
            .filter(|case| {
                cells
                    .iter()
                    .any(|c| c.system == system && c.case == case.name() && !c.held)
            })
            .count()
    };
    assert_eq!(failed("naive"), 9);
    assert_eq!(failed("key_only"), 5);
    assert_eq!(failed("replay"), 5);
}

#[test]
fn the_unrelated_refund_is_refused_with_a_still_fits_repair_and_moves_no_money() {
    for c in cells()
        .iter()
        .filter(|c| c.case == "unrelated_5_refund_during_outage")
    {
        if c.system == "gate_t1" || c.system == "gate_t2" {
            assert_eq!(c.outcome, "REFUSED:stale_premise_at_recovery");
            assert_eq!(c.refunded_cents, 500);
        }
    }
}

#[test]
fn a_stall_between_the_premise_read_and_the_dispatch_is_refused_and_the_baselines_pay_twice() {
    for c in cells()
        .iter()
        .filter(|c| c.case == "stall_after_premise_read_hand_refund")
    {
        if c.system.starts_with("gate") {
            // The read aged past the bound: read again, the hand refund seen, nothing of ours sent.
            assert_eq!(c.outcome, "REFUSED:stale_premise", "{}", c.system);
            assert_eq!((c.refunded_cents, c.attempts), (2000, 1), "{}", c.system);
        } else {
            assert_eq!(c.refunded_cents, 4000, "{}", c.system);
        }
    }
}

#[test]
fn the_committed_tables_match_the_code() {
    let cells = cells();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../results");
    let md = std::fs::read_to_string(dir.join("fault_matrix.md")).unwrap_or_default();
    let json = std::fs::read_to_string(dir.join("fault_matrix.json")).unwrap_or_default();
    let want_json = serde_json::to_string_pretty(&serde_json::json!({ "cells": cells }))
        .unwrap_or_default()
        + "\n";
    assert!(
        md == render_markdown(&cells) && json == want_json,
        "results/fault_matrix.* drifted: run `cargo run -p interlock-tests --bin fault-matrix`"
    );
}
