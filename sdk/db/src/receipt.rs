//! A database effect's receipt: what the marker holds and the gate journals as the target's
//! answer. It names the plan and the measured diff by their hashes, carries the diff itself (the
//! evidence of what the database did), and every check's verdict with the digest of the
//! configuration it judged by, so an auditor can tell which rules a commit passed.

use interlock::effect::{canonical_json, sha256_hex};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::checks::{Finding, Policy, Verdict};
use crate::diff::Diff;
use crate::plan::Plan;

/// What a committed stage leaves behind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Receipt {
    /// The effect key the marker is under.
    pub key: String,
    /// SHA-256 of the plan's canonical JSON.
    pub plan_hash: String,
    /// SHA-256 of the measured diff's canonical JSON.
    pub diff_hash: String,
    /// What the database changed.
    pub diff: Diff,
    /// Each check, its configuration's digest, and its verdict.
    pub checks: Vec<Finding>,
    /// SHA-256 of the whole policy's canonical JSON.
    pub policy: String,
}

impl Receipt {
    pub(crate) fn new(
        key: &str,
        plan_hash: &str,
        diff: Diff,
        verdict: Verdict,
        policy: &Policy,
    ) -> Self {
        Self {
            key: key.to_owned(),
            plan_hash: plan_hash.to_owned(),
            diff_hash: diff.hash(),
            diff,
            checks: verdict.findings,
            policy: digest(policy),
        }
    }

    /// As JSON, the gate's record of the target's answer.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// Whether the diff the receipt carries is the one its hash names.
    pub fn diff_matches(&self) -> bool {
        self.diff.hash() == self.diff_hash
    }
}

/// SHA-256 of the plan's canonical JSON: two plans with one hash say the same.
pub fn plan_hash(plan: &Plan) -> String {
    digest(&plan.to_payload())
}

fn digest(v: &impl Serialize) -> String {
    sha256_hex(&canonical_json(
        &serde_json::to_value(v).unwrap_or(Value::Null),
    ))
}
