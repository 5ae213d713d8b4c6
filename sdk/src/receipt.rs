//! Receipts: what an auditor holds. A receipt summarises one effect — its key, payload, the facts
//! and the lease it stood on, who approved it, how it ended and the target's reference — and lists
//! the hash of every journal record behind it. Signed (HMAC-SHA256 with a shared key, or Ed25519
//! so third parties can check it with a public key), it anchors the journal: a record changed,
//! dropped, reordered or rebuilt without the key no longer matches a signed receipt. An unsigned
//! receipt says plainly that it proves internal consistency only.

use ed25519_dalek::{Signer as _, SigningKey, Verifier as _, VerifyingKey};
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::Sha256;

use crate::core::{
    Confirmed, EffectState, Event, Premises, RefusalCode, Resolution, Status, Tier, Via,
};
use crate::effect::canonical_json;
use crate::journal::Record;

/// The receipt format version.
pub const RECEIPT_VERSION: u32 = 1;
/// What an unsigned receipt proves.
pub const UNSIGNED_NOTE: &str =
    "unsigned: proves internal consistency only — anyone can rebuild a consistent chain";

/// How a receipt is signed.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SignatureAlg {
    /// HMAC-SHA256 with a shared secret.
    #[serde(rename = "hmac-sha256")]
    HmacSha256,
    /// Ed25519: anyone with the public key can check it.
    #[serde(rename = "ed25519")]
    Ed25519,
}

impl SignatureAlg {
    /// The label, as written in receipts.
    pub fn label(self) -> &'static str {
        match self {
            Self::HmacSha256 => "hmac-sha256",
            Self::Ed25519 => "ed25519",
        }
    }
}

impl std::fmt::Display for SignatureAlg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}

/// A signature over a receipt's canonical JSON (with `signature` set to null).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Signature {
    /// The algorithm.
    pub alg: SignatureAlg,
    /// Hex.
    pub value: String,
}

/// One effect's receipt.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Receipt {
    /// Format version.
    pub version: u32,
    /// The effect's key.
    pub key: String,
    /// SHA-256 of the payload's canonical JSON.
    pub payload_hash: String,
    /// The payload.
    pub payload: Value,
    /// Target name and its tier when proposed.
    pub target: String,
    /// The tier journaled when it was proposed.
    pub tier: Tier,
    /// The lease it ran under.
    pub lease: String,
    /// Who approved the lease (from the grant snapshot taken at submit).
    pub approver: Option<String>,
    /// The grant as it was when the effect was authorized.
    pub grant: Value,
    /// Premises as decided.
    pub premises_decided: Premises,
    /// Premises as last re-checked before a send (none if nothing was dispatched).
    pub premises_rechecked: Option<Premises>,
    /// The rules over the premises it was proposed under, judged at every send
    /// ([`crate::core::rules`]); an effect one forbade ends `premise_rule` (in `how`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<String>,
    /// Where it stands: how it ended, or `IN_FLIGHT` / `PROPOSED` if unresolved.
    pub outcome: Status,
    /// How: the commit's via, the refusal code, the target's error code (see [`Receipt::via`]
    /// and [`Receipt::refusal`] for the typed values).
    pub how: Option<String>,
    /// The target's reference (e.g. the refund id; for `APPLIED_TWICE`, every id, comma-separated).
    pub target_ref: Option<String>,
    /// The request's escalations up the approver chain before it was authorized (level, group,
    /// reason, when), from the route the `AUTHORIZED` record journaled.
    pub escalations: Vec<Value>,
    /// Confirmations by the target journaled when the receipt was built. One journaled after the
    /// receipt was exported is not in it, and its signature does not vouch for it: `verify`
    /// reads it from the journal alone and says so.
    pub confirmations: Vec<Confirmed>,
    /// Answers that arrived after the effect was resolved or its claim taken (a holder's
    /// withdrawal of a dispatch it never sent is not one).
    pub late_results: usize,
    /// Effects the target holds under the key although the effect ended refused or failed: a
    /// late success, or the target's own confirmation, came after the refusal. The refund was
    /// paid after all; a person must reverse it or adopt it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub landed_late: Vec<String>,
    /// Hash of every record, in chain order.
    pub records: Vec<String>,
    /// Hash of the last record.
    pub head: String,
    /// The signature, if signed.
    pub signature: Option<Signature>,
    /// What the receipt proves.
    pub note: String,
}

/// Build the receipt of a key's history (verified chain, oldest first).
pub fn build(records: &[Record]) -> Option<Receipt> {
    let first = records.iter().find_map(|r| match &r.event {
        Event::Proposed(p) => Some(p.clone()),
        _ => None,
    })?;
    let state = crate::core::state::fold(records.iter().map(|r| (r.at_ms, &r.event))).ok()?;
    let grant = records
        .iter()
        .find_map(|r| match &r.event {
            Event::Authorized(a) => Some(a.grant.clone()),
            _ => None,
        })
        .unwrap_or(Value::Null);
    let escalations = grant
        .get("routes")
        .and_then(Value::as_array)
        .map(|routes| {
            routes
                .iter()
                .filter(|r| r.get("kind").and_then(Value::as_str) == Some("ESCALATED"))
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    let premises_rechecked = records.iter().rev().find_map(|r| match &r.event {
        Event::Dispatched(d) => Some(d.recheck.premises_now.clone()),
        _ => None,
    });
    let outcome = state.status()?;
    let (how, target_ref) = match &state {
        EffectState::Resolved { resolution, .. } => match resolution {
            Resolution::Committed(c) => (
                Some(c.via.as_str().to_owned()),
                c.result
                    .get("id")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            ),
            Resolution::Refused(r) => (Some(r.code.as_str().to_owned()), None),
            Resolution::Failed(f) => (Some(f.code.clone()), None),
            Resolution::Ambiguous(_) => (None, None),
            Resolution::AppliedTwice(t) => (
                None,
                Some(
                    t.found
                        .iter()
                        .filter_map(|v| v.get("id").and_then(Value::as_str))
                        .collect::<Vec<_>>()
                        .join(","),
                ),
            ),
        },
        _ => (None, None),
    };
    Some(Receipt {
        version: RECEIPT_VERSION,
        key: records[0].key.clone(),
        payload_hash: first.payload_hash.clone(),
        payload: first.payload.clone(),
        target: first.target.clone(),
        tier: Tier::try_from(first.tier).ok()?,
        lease: first.lease.clone(),
        approver: grant
            .get("approver")
            .and_then(Value::as_str)
            .map(str::to_owned),
        grant,
        premises_decided: first.premises.clone(),
        premises_rechecked,
        rules: first.rules.clone(),
        outcome,
        how,
        target_ref,
        escalations,
        confirmations: records
            .iter()
            .filter_map(|r| match &r.event {
                Event::Confirmed(c) => Some(c.clone()),
                _ => None,
            })
            .collect(),
        late_results: records
            .iter()
            .filter(|r| {
                matches!(&r.event, Event::LateResult(l) if !crate::core::state::is_withdrawal(&l.answer))
            })
            .count(),
        landed_late: crate::core::state::landed_late(&state, records.iter().map(|r| &r.event))
            .iter()
            .map(|v| {
                v.get("id")
                    .and_then(Value::as_str)
                    .map_or_else(|| v.to_string(), str::to_owned)
            })
            .collect(),
        records: records.iter().map(|r| r.hash.clone()).collect(),
        head: records.last().map(|r| r.hash.clone()).unwrap_or_default(),
        signature: None,
        note: UNSIGNED_NOTE.to_owned(),
    })
}

impl Receipt {
    /// How a committed effect is known to have landed.
    pub fn via(&self) -> Option<Via> {
        let how = self.how.as_deref()?;
        (self.outcome == Status::Committed)
            .then(|| serde_json::from_value(Value::String(how.to_owned())).ok())
            .flatten()
    }

    /// Why a refused effect was refused.
    pub fn refusal(&self) -> Option<RefusalCode> {
        let how = self.how.as_deref()?;
        (self.outcome == Status::Refused)
            .then(|| serde_json::from_value(Value::String(how.to_owned())).ok())
            .flatten()
    }
}

/// A key that signs receipts.
pub enum SigningKeyKind {
    /// A shared secret (verifiers need the same secret).
    Hmac(Vec<u8>),
    /// An Ed25519 key (verifiers need only the public key).
    Ed25519(SigningKey),
}

/// A key that checks receipts.
pub enum VerifyingKeyKind {
    /// The shared secret.
    Hmac(Vec<u8>),
    /// The signer's public key.
    Ed25519(VerifyingKey),
}

/// A key file that cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{0}")]
pub struct KeyError(pub String);

fn unsigned_bytes(r: &Receipt) -> Vec<u8> {
    let mut copy = r.clone();
    copy.signature = None;
    copy.note = String::new();
    canonical_json(&serde_json::to_value(&copy).unwrap_or(Value::Null))
}

fn hmac_hex(secret: &[u8], bytes: &[u8]) -> Option<String> {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).ok()?;
    mac.update(bytes);
    Some(hex::encode(mac.finalize().into_bytes()))
}

impl SigningKeyKind {
    /// An Ed25519 key from 32 bytes of hex (a seed).
    pub fn ed25519_from_hex(hex_seed: &str) -> Result<Self, KeyError> {
        let bytes = hex::decode(hex_seed.trim())
            .map_err(|e| KeyError(format!("the Ed25519 key is not hex: {e}")))?;
        let seed: [u8; 32] = bytes
            .try_into()
            .map_err(|_| KeyError("an Ed25519 key must be 32 bytes (64 hex digits)".into()))?;
        Ok(Self::Ed25519(SigningKey::from_bytes(&seed)))
    }

    /// Sign `r` in place.
    pub fn sign(&self, r: &mut Receipt) {
        let bytes = unsigned_bytes(r);
        let (alg, value) = match self {
            Self::Hmac(k) => (
                SignatureAlg::HmacSha256,
                hmac_hex(k, &bytes).unwrap_or_default(),
            ),
            Self::Ed25519(k) => (
                SignatureAlg::Ed25519,
                hex::encode(k.sign(&bytes).to_bytes()),
            ),
        };
        r.signature = Some(Signature { alg, value });
        r.note = match self {
            Self::Hmac(_) => "signed with HMAC-SHA256: anyone holding the shared key can check it",
            Self::Ed25519(_) => "signed with Ed25519: anyone holding the public key can check it",
        }
        .into();
    }

    /// The public half, for Ed25519 (hex).
    pub fn public_hex(&self) -> Option<String> {
        match self {
            Self::Ed25519(k) => Some(hex::encode(k.verifying_key().to_bytes())),
            Self::Hmac(_) => None,
        }
    }
}

impl VerifyingKeyKind {
    /// An Ed25519 public key from hex.
    pub fn ed25519_from_hex(hex_key: &str) -> Result<Self, KeyError> {
        let bytes = hex::decode(hex_key.trim())
            .map_err(|e| KeyError(format!("the Ed25519 public key is not hex: {e}")))?;
        let key: [u8; 32] = bytes.try_into().map_err(|_| {
            KeyError("an Ed25519 public key must be 32 bytes (64 hex digits)".into())
        })?;
        VerifyingKey::from_bytes(&key)
            .map(Self::Ed25519)
            .map_err(|e| KeyError(format!("not an Ed25519 public key: {e}")))
    }

    /// Whether `r` carries a valid signature by this key.
    pub fn check(&self, r: &Receipt) -> Result<(), String> {
        let Some(sig) = &r.signature else {
            return Err("the receipt is unsigned, but a key was given: it proves nothing".into());
        };
        let bytes = unsigned_bytes(r);
        let ok = match (self, sig.alg) {
            (Self::Hmac(k), SignatureAlg::HmacSha256) => {
                let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(k) else {
                    return Err("unusable HMAC key".into());
                };
                mac.update(&bytes);
                hex::decode(&sig.value).is_ok_and(|v| mac.verify_slice(&v).is_ok())
            }
            (Self::Ed25519(k), SignatureAlg::Ed25519) => hex::decode(&sig.value)
                .ok()
                .and_then(|v| <[u8; 64]>::try_from(v).ok())
                .is_some_and(|v| {
                    k.verify(&bytes, &ed25519_dalek::Signature::from_bytes(&v))
                        .is_ok()
                }),
            (_, alg) => {
                return Err(format!(
                    "the receipt is signed with {alg}, not with the given key's algorithm"
                ));
            }
        };
        if ok {
            Ok(())
        } else {
            Err("the signature does not match the receipt".into())
        }
    }
}
