//! Who may approve: approvers with their public keys, the groups they belong to, and the
//! escalation chain — which group holds a request at each level, and for how long. The gate
//! checks every signed approval against the directory it was given, at send and at recovery: a
//! worker started with an approver removed (or their key replaced) sends nothing more under
//! their approvals. A gate given the directory's file reads it again whenever it changes
//! ([`super::DirectoryFile`]); one given a directory in code keeps it, and revoking the
//! approver's leases in the journal stops their approvals there at once.

use std::collections::BTreeMap;

use ed25519_dalek::VerifyingKey;
use serde::{Deserialize, Serialize};

/// The longest SLA a level may have: a year.
pub const MAX_SLA_MS: i64 = 366 * 24 * 3_600_000;

/// One approver.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Approver {
    /// The approver's Ed25519 public key, hex.
    pub public_key: String,
    /// A name to show.
    #[serde(default)]
    pub name: String,
}

/// One level of the escalation chain.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Level {
    /// The group that holds a request at this level.
    pub group: String,
    /// How long the group has before the request escalates to the next level (ms).
    pub sla_ms: i64,
}

/// The approver directory.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(deny_unknown_fields)]
pub struct Approvers {
    /// Approvers by id.
    pub approvers: BTreeMap<String, Approver>,
    /// Groups by name, each with its members' ids.
    pub groups: BTreeMap<String, Vec<String>>,
    /// The escalation chain, level 0 first.
    pub chain: Vec<Level>,
}

/// A directory that cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum DirectoryError {
    /// The file could not be read or parsed.
    #[error("approver directory {place}: {what}")]
    Unreadable {
        /// Where it was read from.
        place: String,
        /// What went wrong.
        what: String,
    },
    /// The directory contradicts itself.
    #[error("approver directory: {0}")]
    Invalid(String),
}

impl Approvers {
    /// A directory from JSON text, checked.
    pub fn from_json(place: &str, text: &str) -> Result<Self, DirectoryError> {
        let dir: Self = serde_json::from_str(text).map_err(|e| DirectoryError::Unreadable {
            place: place.to_owned(),
            what: e.to_string(),
        })?;
        dir.check()?;
        Ok(dir)
    }

    /// Every key parses, every member exists, every level names a group with members and a
    /// positive SLA.
    pub fn check(&self) -> Result<(), DirectoryError> {
        let bad = |s: String| Err(DirectoryError::Invalid(s));
        let mut seen = std::collections::BTreeMap::new();
        for (id, a) in &self.approvers {
            if id.is_empty() {
                return bad("an approver has an empty id".into());
            }
            match parse_key(&a.public_key) {
                Err(e) => return bad(format!("approver {id}: {e}")),
                Ok(k) => {
                    if let Some(other) = seen.insert(k.to_bytes(), id) {
                        return bad(format!(
                            "approvers {other} and {id} share one public key: each approver \
                             signs with their own"
                        ));
                    }
                }
            }
        }
        for (group, members) in &self.groups {
            if members.is_empty() {
                return bad(format!("group {group} has no members"));
            }
            if let Some(m) = members.iter().find(|m| !self.approvers.contains_key(*m)) {
                return bad(format!(
                    "group {group} lists {m}, who is not among the approvers"
                ));
            }
        }
        if self.chain.is_empty() {
            return bad("the escalation chain has no levels".into());
        }
        for (n, level) in self.chain.iter().enumerate() {
            if !self.groups.contains_key(&level.group) {
                return bad(format!(
                    "escalation level {n} names group {}, which is not defined",
                    level.group
                ));
            }
            if level.sla_ms <= 0 || level.sla_ms > MAX_SLA_MS {
                return bad(format!(
                    "escalation level {n} ({}) has SLA {} ms; it must be positive and at most a \
                     year ({MAX_SLA_MS} ms)",
                    level.group, level.sla_ms
                ));
            }
        }
        Ok(())
    }

    /// The public key of `approver`, if they are in the directory with a usable key.
    pub fn key_of(&self, approver: &str) -> Option<VerifyingKey> {
        self.approvers
            .get(approver)
            .and_then(|a| parse_key(&a.public_key).ok())
    }

    /// Whether `approver` is a member of `group`.
    pub fn is_member(&self, group: &str, approver: &str) -> bool {
        self.groups
            .get(group)
            .is_some_and(|m| m.iter().any(|x| x == approver))
    }

    /// The groups `approver` belongs to.
    pub fn groups_of(&self, approver: &str) -> Vec<&str> {
        self.groups
            .iter()
            .filter(|(_, m)| m.iter().any(|x| x == approver))
            .map(|(g, _)| g.as_str())
            .collect()
    }

    /// Level `n` of the chain.
    pub fn level(&self, n: u32) -> Option<&Level> {
        self.chain.get(usize::try_from(n).ok()?)
    }
}

fn parse_key(hex_key: &str) -> Result<VerifyingKey, String> {
    let bytes = hex::decode(hex_key.trim()).map_err(|e| format!("public key is not hex: {e}"))?;
    let key: [u8; 32] = bytes
        .try_into()
        .map_err(|_| "a public key must be 32 bytes (64 hex digits)".to_owned())?;
    let key = VerifyingKey::from_bytes(&key).map_err(|e| format!("not an Ed25519 key: {e}"))?;
    if key.is_weak() {
        return Err("a weak (small-order) Ed25519 key".into());
    }
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(seed: u8) -> String {
        crate::approval::ApproverKey::from_seed("x", [seed; 32]).public_hex()
    }

    fn valid() -> serde_json::Value {
        serde_json::json!({
            "approvers": {"ana": {"public_key": key(1)}, "mia": {"public_key": key(3)}},
            "groups": {"support": ["ana"], "managers": ["mia"]},
            "chain": [{"group": "support", "sla_ms": 1000}, {"group": "managers", "sla_ms": 2000}],
        })
    }

    fn error_for(edit: impl FnOnce(&mut serde_json::Value)) -> String {
        let mut v = valid();
        edit(&mut v);
        Approvers::from_json("t", &v.to_string())
            .map(|_| String::new())
            .unwrap_or_else(|e| e.to_string())
    }

    #[test]
    fn a_directory_that_contradicts_itself_is_refused_with_the_reason() {
        assert_eq!(error_for(|_| {}), "");
        assert!(error_for(|v| v["approvers"]["ana"]["public_key"] = "00".into()).contains("ana"));
        assert!(error_for(|v| v["groups"]["support"] = serde_json::json!(["zed"])).contains("zed"));
        assert!(
            error_for(|v| v["groups"]["support"] = serde_json::json!([])).contains("no members")
        );
        assert!(error_for(|v| v["chain"] = serde_json::json!([])).contains("no levels"));
        assert!(error_for(|v| v["chain"][1]["group"] = "ops".into()).contains("ops"));
        assert!(error_for(|v| v["chain"][0]["sla_ms"] = 0.into()).contains("positive"));
        assert!(error_for(|v| v["chain"][0]["sla_ms"] = i64::MAX.into()).contains("a year"));
        assert!(error_for(|v| v["extra"] = 1.into()).contains("unknown field"));
        assert!(
            error_for(|v| v["approvers"]["mia"]["public_key"] = key(1).into())
                .contains("share one public key")
        );
        let all_zero = "00".repeat(32);
        assert!(
            error_for(|v| v["approvers"]["ana"]["public_key"] = all_zero.into()).contains("ana")
        );
    }

    #[test]
    fn membership_and_levels_are_read_from_the_directory() {
        let dir = Approvers::from_json("t", &valid().to_string()).unwrap();
        assert!(dir.is_member("support", "ana"));
        assert!(!dir.is_member("managers", "ana"));
        assert_eq!(dir.groups_of("mia"), vec!["managers"]);
        assert_eq!(dir.level(1).map(|l| l.group.as_str()), Some("managers"));
        assert!(dir.level(2).is_none());
        assert!(dir.key_of("ana").is_some());
        assert!(dir.key_of("zed").is_none());
    }
}
