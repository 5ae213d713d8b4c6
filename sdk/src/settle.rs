//! A person settles an `AMBIGUOUS` effect: they look at the target, and sign — with their own
//! Ed25519 key, as an approver signs an approval — what they found there. The signature is what
//! lets `verify` name who settled the effect long after, and what keeps anyone else (or a
//! statement for another effect, or one replayed) from closing it. The statement is checked
//! against the directory (the person's key, and membership of the group allowed to settle), then
//! the core decides inside the journal's write transaction whether it may end the effect: only
//! once no send of it can still land, and only on a look taken after that ([`crate::core::settle`]).

use ed25519_dalek::VerifyingKey;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::approval::{ApproverKey, Approvers, strictly_verifies};
use crate::core::Event;
use crate::core::settle::{self as rules, Finding, SettleRefusal, Settled, Settlement};
use crate::core::state::landed_evidence;
use crate::effect::{EffectKey, canonical_json};
use crate::journal::{Journal, JournalError, Record};
use crate::receipt::{KeyError, SignatureAlg};

/// Prefixed to every signed settlement, so it can never be taken for an approval, a sign-in or
/// anything else the same key signs.
const DOMAIN: &[u8] = b"interlock-settlement-v1\n";

/// The directory group whose members may settle, unless told otherwise.
pub const DEFAULT_GROUP: &str = "operators";

/// The bytes a settlement's signature covers.
pub fn signed_bytes(statement: &Settlement) -> Vec<u8> {
    let mut bytes = DOMAIN.to_vec();
    bytes.extend(canonical_json(
        &serde_json::to_value(statement).unwrap_or(Value::Null),
    ));
    bytes
}

/// A settlement and its signature, as a person's tool hands it over.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SignedSettlement {
    /// What was signed.
    pub statement: Settlement,
    /// The signature's algorithm.
    pub alg: SignatureAlg,
    /// The signature, lower-case hex.
    pub signature: String,
}

impl SignedSettlement {
    /// Sign `statement` with `key`, whose owner must be the statement's person.
    pub fn sign(key: &ApproverKey, statement: Settlement) -> Result<Self, KeyError> {
        if statement.person != key.approver() {
            return Err(KeyError(format!(
                "{}'s key cannot sign a settlement in {}'s name",
                key.approver(),
                statement.person
            )));
        }
        Ok(Self {
            signature: key.sign_bytes(&signed_bytes(&statement)),
            statement,
            alg: SignatureAlg::Ed25519,
        })
    }

    /// Whether the signature verifies with `key`.
    pub fn verifies_with(&self, key: &VerifyingKey) -> bool {
        self.alg == SignatureAlg::Ed25519
            && strictly_verifies(key, &signed_bytes(&self.statement), &self.signature)
    }
}

/// Why a settlement was not recorded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SettleError {
    /// The person is not in the directory.
    #[error("{person} is not in the approver directory: add them with their public key")]
    UnknownPerson {
        /// Who the statement names.
        person: String,
    },
    /// The person may not settle.
    #[error(
        "{person} is not a member of group {group}, whose members settle ambiguous effects: add \
         them to it in the directory"
    )]
    NotPermitted {
        /// Who the statement names.
        person: String,
        /// The group that may settle.
        group: String,
    },
    /// The signature does not verify with the person's key.
    #[error(
        "the settlement's signature does not verify with {person}'s public key in the directory: \
         it was not signed by them, or not over this statement"
    )]
    BadSignature {
        /// Who the statement names.
        person: String,
    },
    /// The core refused the statement.
    #[error("effect {key} is not settled: {refusal}")]
    Refused {
        /// The effect.
        key: String,
        /// Why.
        refusal: SettleRefusal,
    },
    /// The key is not an effect key.
    #[error("{0}")]
    Key(#[from] crate::effect::EffectError),
    /// The journal failed.
    #[error(transparent)]
    Journal(#[from] JournalError),
}

/// Who may settle: the directory, and the group of it whose members may.
#[derive(Clone, Copy, Debug)]
pub struct Settlers<'a> {
    /// The directory that holds their keys.
    pub directory: &'a Approvers,
    /// The group whose members may settle.
    pub group: &'a str,
}

impl Settlers<'_> {
    /// Whether `signed` is its person's own signature, and they may settle.
    pub fn check(&self, signed: &SignedSettlement) -> Result<(), SettleError> {
        let person = &signed.statement.person;
        let key = self
            .directory
            .key_of(person)
            .ok_or_else(|| SettleError::UnknownPerson {
                person: person.clone(),
            })?;
        if !self.directory.is_member(self.group, person) {
            return Err(SettleError::NotPermitted {
                person: person.clone(),
                group: self.group.to_owned(),
            });
        }
        if !signed.verifies_with(&key) {
            return Err(SettleError::BadSignature {
                person: person.clone(),
            });
        }
        Ok(())
    }

    /// [`Settlers::check`] for a settlement as the journal holds it.
    pub fn check_record(&self, s: &Settled) -> Result<(), SettleError> {
        let alg = match s.alg.as_str() {
            "ed25519" => SignatureAlg::Ed25519,
            _ => {
                return Err(SettleError::BadSignature {
                    person: s.statement.person.clone(),
                });
            }
        };
        self.check(&SignedSettlement {
            statement: s.statement.clone(),
            alg,
            signature: s.signature.clone(),
        })
    }
}

/// What a person is asked to sign for `key`, found as they say at `looked_ms`: the statement
/// names the key's `AMBIGUOUS` record as the journal holds it now.
pub fn draft(
    journal: &dyn Journal,
    key: &str,
    finding: Finding,
    person: &str,
    note: &str,
    looked_ms: i64,
) -> Result<Settlement, SettleError> {
    let effect = EffectKey::fixed(key.to_owned())?;
    let records = journal.history(&effect)?;
    let window = rules::window(records.iter().map(|r| (r.at_ms, &r.event))).map_err(|refusal| {
        SettleError::Refused {
            key: key.to_owned(),
            refusal,
        }
    })?;
    Ok(Settlement {
        effect: key.to_owned(),
        ambiguous: records[window.index].hash.clone(),
        finding,
        person: person.to_owned(),
        note: note.to_owned(),
        looked_ms,
    })
}

/// Whether the core lets `statement` end the effect `key`, whose records are `records`, at the
/// journal's time `now_ms`: the window of its `AMBIGUOUS` record if it does.
fn admits(
    key: &str,
    records: &[Record],
    statement: &Settlement,
    now_ms: i64,
) -> Result<rules::Window, SettleRefusal> {
    let w = rules::window(records.iter().map(|r| (r.at_ms, &r.event)))?;
    let landed = landed_evidence(records.iter().map(|r| &r.event));
    rules::check(
        key,
        &w,
        &records[w.index].hash,
        statement,
        &landed,
        (now_ms, rules::MAX_SKEW_MS),
    )?;
    Ok(w)
}

/// Whether [`settle`] would record `statement` if it were signed now (at `now_ms`): the same rules,
/// read outside the journal's write transaction, so that a person is not asked to sign what would
/// be refused. Its signature and its person are not checked here, and [`settle`] checks all of it
/// again where it counts.
pub fn precheck(
    journal: &dyn Journal,
    statement: &Settlement,
    now_ms: i64,
) -> Result<(), SettleError> {
    let key = statement.effect.clone();
    let records = journal.history(&EffectKey::fixed(key.clone())?)?;
    admits(&key, &records, statement, now_ms)
        .map(|_| ())
        .map_err(|refusal| SettleError::Refused { key, refusal })
}

/// Record `signed`, once its person is checked against `settlers`, if the core lets it end the
/// effect at the journal's clock as read in the write transaction. Returns the `SETTLED` record.
pub fn settle(
    journal: &dyn Journal,
    settlers: Settlers<'_>,
    signed: &SignedSettlement,
) -> Result<Record, SettleError> {
    settlers.check(signed)?;
    let key = signed.statement.effect.clone();
    let effect = EffectKey::fixed(key.clone())?;
    let mut refused = None;
    let out = journal.append_with(&effect, &mut |tx| {
        let decided = admits(&key, tx.records, &signed.statement, tx.now_ms).map(|w| {
            rules::settled(
                &w,
                signed.statement.clone(),
                signed.alg.label(),
                &signed.signature,
            )
        });
        match decided {
            Ok(event) => vec![event],
            Err(refusal) => {
                refused = Some(refusal);
                Vec::new()
            }
        }
    })?;
    if let Some(refusal) = refused {
        return Err(SettleError::Refused { key, refusal });
    }
    out.appended
        .into_iter()
        .find(|r| matches!(r.event, Event::Settled(_)))
        .ok_or_else(|| {
            SettleError::Journal(JournalError::Storage {
                path: journal.location().to_owned(),
                what: format!("the settlement of {key} was not appended"),
            })
        })
}

#[cfg(test)]
#[path = "settle_tests.rs"]
mod tests;
