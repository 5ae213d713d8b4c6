//! The identity provider the kill matrix's gate server trusts: it vouches for the Python worker
//! with a signed token (a JWT, EdDSA) whose claims name the worker and the targets it may use,
//! as a team's provider would. Its key is made for each run and kept in memory; the server is
//! given only the public half.

use base64::Engine as _;
use ring::rand::SystemRandom;
use ring::signature::{Ed25519KeyPair, KeyPair as _};

/// The `iss` its tokens carry.
pub const ISSUER: &str = "https://idp.kill-matrix.test";
/// The `aud` its tokens carry: the gate server.
pub const AUDIENCE: &str = "interlock-gate";

/// A signing key and what the gate server needs to check its tokens.
pub struct Idp {
    pkcs8: Vec<u8>,
    public_pem: String,
}

impl Idp {
    /// A provider with a key of its own.
    pub fn new() -> anyhow::Result<Self> {
        let pkcs8 = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new())
            .map_err(|_| anyhow::anyhow!("no Ed25519 key could be made"))?;
        let pair = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref())
            .map_err(|_| anyhow::anyhow!("the Ed25519 key made cannot be read"))?;
        // SubjectPublicKeyInfo for Ed25519: a fixed header, then the 32-byte key.
        let mut spki = hex::decode("302a300506032b6570032100")?;
        spki.extend_from_slice(pair.public_key().as_ref());
        let body = base64::engine::general_purpose::STANDARD.encode(&spki);
        Ok(Self {
            pkcs8: pkcs8.as_ref().to_vec(),
            public_pem: format!("-----BEGIN PUBLIC KEY-----\n{body}\n-----END PUBLIC KEY-----\n"),
        })
    }

    /// The public key, in PEM, for the gate server's `[auth.jwt] public_key`.
    pub fn public_pem(&self) -> &str {
        &self.public_pem
    }

    /// A token for `sub`, allowed `targets`, live for `lifetime_s` seconds.
    pub fn token(&self, sub: &str, targets: &[&str], lifetime_s: u64) -> anyhow::Result<String> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_secs();
        let claims = serde_json::json!({
            "iss": ISSUER,
            "aud": AUDIENCE,
            "sub": sub,
            "iat": now,
            "exp": now + lifetime_s,
            "interlock_targets": targets,
        });
        Ok(jsonwebtoken::encode(
            &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::EdDSA),
            &claims,
            &jsonwebtoken::EncodingKey::from_ed_der(&self.pkcs8),
        )?)
    }
}
