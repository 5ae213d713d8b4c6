//! What an approver signs, and the signature. The statement names the request, the group and
//! level it was approved at, the exact payload and the facts the approver saw, and when the
//! approval lapses: a signature over all of it cannot be moved to another request, another
//! amount, other facts or another group without failing to verify.

use ed25519_dalek::{Signer as _, SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::core::Premises;
use crate::effect::canonical_json;
use crate::receipt::{KeyError, SignatureAlg};

/// Prefixed to every signed statement, so an approval signature can never be taken for a
/// signature over anything else the same key signs.
const DOMAIN: &[u8] = b"interlock-approval-v1\n";

/// What one approver approved.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Statement {
    /// The request: the key of the effect it lets through.
    pub request: String,
    /// The group the approver approved for.
    pub group: String,
    /// The escalation level the request was at.
    pub level: u32,
    /// Who approved (their id in the approver directory).
    pub approver: String,
    /// Exactly what may be sent.
    pub payload: Value,
    /// The facts the approver saw, as the effect's premises.
    pub premises: Premises,
    /// When the approver signed (ms since the epoch).
    pub issued_ms: i64,
    /// When the approval lapses.
    pub expires_ms: i64,
    /// The request this one repairs, when it accepts a repair of a refused request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repair_of: Option<String>,
}

impl Statement {
    /// The bytes the signature covers.
    pub fn signed_bytes(&self) -> Vec<u8> {
        let mut bytes = DOMAIN.to_vec();
        bytes.extend(canonical_json(
            &serde_json::to_value(self).unwrap_or(Value::Null),
        ));
        bytes
    }

    /// The payload's `amount`, where it has one.
    pub fn amount(&self) -> Option<i64> {
        self.payload.get("amount").and_then(Value::as_i64)
    }
}

/// A statement and its approver's signature: the lease an approved request is sent under.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct SignedApproval {
    /// What was approved.
    pub statement: Statement,
    /// The signature's algorithm.
    pub alg: SignatureAlg,
    /// The signature, hex.
    pub signature: String,
}

impl SignedApproval {
    /// The approval's id and lease id: derived from what was signed alone, so one statement
    /// has one id however it is signed or spelled, and cannot be granted again once revoked.
    pub fn id(&self) -> String {
        let h = Sha256::digest(self.statement.signed_bytes());
        format!("approval-{}", &hex::encode(h)[..32])
    }

    /// Whether the signature verifies with `key` (strict Ed25519: no malleable signatures, no
    /// weak keys; the signature written as lower-case hex, one spelling per signature).
    pub fn verifies_with(&self, key: &VerifyingKey) -> bool {
        self.alg == SignatureAlg::Ed25519
            && strictly_verifies(key, &self.statement.signed_bytes(), &self.signature)
    }
}

/// Whether `signature` (lower-case hex, one spelling per signature) is `key`'s strict Ed25519
/// signature over `bytes`: no malleable signatures, no weak keys.
pub(crate) fn strictly_verifies(key: &VerifyingKey, bytes: &[u8], signature: &str) -> bool {
    if !signature
        .bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return false;
    }
    hex::decode(signature)
        .ok()
        .and_then(|v| <[u8; 64]>::try_from(v).ok())
        .is_some_and(|v| {
            key.verify_strict(bytes, &ed25519_dalek::Signature::from_bytes(&v))
                .is_ok()
        })
}

/// An approver's private key. Each approver holds their own; the directory holds the public
/// halves.
pub struct ApproverKey {
    approver: String,
    key: SigningKey,
}

impl std::fmt::Debug for ApproverKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApproverKey")
            .field("approver", &self.approver)
            .field("public", &self.public_hex())
            .finish_non_exhaustive()
    }
}

impl ApproverKey {
    /// `approver`'s key from a 32-byte seed in hex.
    pub fn from_seed_hex(approver: impl Into<String>, seed_hex: &str) -> Result<Self, KeyError> {
        let bytes = hex::decode(seed_hex.trim())
            .map_err(|e| KeyError(format!("the approver's key is not hex: {e}")))?;
        let seed: [u8; 32] = bytes.try_into().map_err(|_| {
            KeyError("an approver's Ed25519 key must be 32 bytes (64 hex digits)".into())
        })?;
        Ok(Self::from_seed(approver, seed))
    }

    /// `approver`'s key from a 32-byte seed.
    pub fn from_seed(approver: impl Into<String>, seed: [u8; 32]) -> Self {
        Self {
            approver: approver.into(),
            key: SigningKey::from_bytes(&seed),
        }
    }

    /// Whose key this is.
    pub fn approver(&self) -> &str {
        &self.approver
    }

    /// The public half, hex, for the directory.
    pub fn public_hex(&self) -> String {
        hex::encode(self.key.verifying_key().to_bytes())
    }

    /// This key's signature over `bytes`, lower-case hex.
    pub(crate) fn sign_bytes(&self, bytes: &[u8]) -> String {
        hex::encode(self.key.sign(bytes).to_bytes())
    }

    /// Sign `statement`. The statement's `approver` must be this key's owner.
    pub fn sign(&self, statement: Statement) -> Result<SignedApproval, KeyError> {
        if statement.approver != self.approver {
            return Err(KeyError(format!(
                "{}'s key cannot sign an approval in {}'s name",
                self.approver, statement.approver
            )));
        }
        let signature = self.sign_bytes(&statement.signed_bytes());
        Ok(SignedApproval {
            statement,
            alg: SignatureAlg::Ed25519,
            signature,
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn statement() -> Statement {
        Statement {
            request: "req-1".into(),
            group: "support".into(),
            level: 0,
            approver: "ana".into(),
            payload: json!({"payment_intent": "pi_1", "amount": 2000}),
            premises: Premises::new(),
            issued_ms: 0,
            expires_ms: 10,
            repair_of: None,
        }
    }

    #[test]
    fn a_signature_verifies_only_with_its_signer_s_key_and_only_over_what_was_signed() {
        let ana = ApproverKey::from_seed("ana", [1; 32]);
        let ben = ApproverKey::from_seed("ben", [2; 32]);
        let signed = ana.sign(statement()).unwrap();
        let key_of = |k: &ApproverKey| {
            VerifyingKey::from_bytes(&hex::decode(k.public_hex()).unwrap().try_into().unwrap())
                .unwrap()
        };
        assert!(signed.verifies_with(&key_of(&ana)));
        assert!(!signed.verifies_with(&key_of(&ben)));
        let mut raised = signed.clone();
        raised.statement.payload["amount"] = json!(9000);
        assert!(!raised.verifies_with(&key_of(&ana)));
        assert_ne!(raised.id(), signed.id(), "the id covers the statement");
        let mut shouted = signed.clone();
        shouted.signature = shouted.signature.to_uppercase();
        assert!(
            !shouted.verifies_with(&key_of(&ana)),
            "one spelling per signature"
        );
        assert_eq!(shouted.id(), signed.id(), "one id per statement");
        let mut other_alg = signed;
        other_alg.alg = SignatureAlg::HmacSha256;
        assert!(!other_alg.verifies_with(&key_of(&ana)));
    }

    #[test]
    fn a_key_signs_only_in_its_owner_s_name_and_bad_seeds_are_named() {
        let ben = ApproverKey::from_seed("ben", [2; 32]);
        assert!(ben.sign(statement()).is_err());
        assert!(ApproverKey::from_seed_hex("ana", "zz").is_err());
        assert!(ApproverKey::from_seed_hex("ana", "abcd").is_err());
        assert!(ApproverKey::from_seed_hex("ana", &"01".repeat(32)).is_ok());
    }
}
