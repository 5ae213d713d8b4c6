//! What a stage changed, as the database itself reported it: one entry per row a trigger saw
//! change, with the row before and after, and the plan's statement that was running. It is the
//! only thing the checks judge, so a row a forgotten trigger wrote is judged like any other.

use std::collections::BTreeMap;

use interlock::effect::{canonical_json, sha256_hex};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// How a row changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    /// A new row.
    Insert,
    /// A row changed in place.
    Update,
    /// A row removed.
    Delete,
}

impl Op {
    /// The name the triggers write.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "insert" => Some(Op::Insert),
            "update" => Some(Op::Update),
            "delete" => Some(Op::Delete),
            _ => None,
        }
    }
}

/// One row's change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Change {
    /// The plan's statement that was running (`None` outside any stage: an unmediated write).
    pub statement: Option<String>,
    /// The table the row is in.
    pub table: String,
    /// How it changed.
    pub op: Op,
    /// The row before (updates and deletes).
    pub before: Option<Map<String, Value>>,
    /// The row after (inserts and updates).
    pub after: Option<Map<String, Value>>,
}

impl Change {
    /// A change record as a substrate stores it: the operation's name and each image as JSON
    /// text. `Err` names what cannot be read.
    pub(crate) fn from_stored(
        statement: Option<String>,
        table: String,
        op: &str,
        before: Option<String>,
        after: Option<String>,
    ) -> Result<Self, String> {
        let image = |t: Option<String>| -> Result<Option<Map<String, Value>>, String> {
            t.map(|t| serde_json::from_str(&t).map_err(|e| e.to_string()))
                .transpose()
        };
        Ok(Self {
            statement,
            op: Op::parse(op).ok_or_else(|| format!("unknown change `{op}`"))?,
            table,
            before: image(before)?,
            after: image(after)?,
        })
    }

    /// Each image of the row there is: before, after, or both.
    pub fn images(&self) -> impl Iterator<Item = &Map<String, Value>> {
        self.before.iter().chain(self.after.iter())
    }
}

/// Every row a stage changed, in the order the database changed them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Diff {
    /// The changes.
    pub changes: Vec<Change>,
}

impl Diff {
    /// Rows changed per table.
    pub fn rows_per_table(&self) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for c in &self.changes {
            *out.entry(c.table.clone()).or_insert(0) += 1;
        }
        out
    }

    /// The SHA-256 of the diff's canonical JSON: what a receipt names it by.
    pub fn hash(&self) -> String {
        sha256_hex(&canonical_json(
            &serde_json::to_value(self).unwrap_or(Value::Null),
        ))
    }
}
