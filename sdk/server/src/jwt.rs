//! Signed tokens: a caller the team's identity provider vouches for (named `jwt:` and its
//! subject), with what it may do in the token's claims, so that adding a worker or narrowing its targets needs no change to the gate
//! server's file. The signature, the issuer, the audience and the lifetime are checked by the
//! `jsonwebtoken` crate against the public key the configuration names; only asymmetric
//! algorithms are accepted (a shared secret would let whoever can check a token mint one).

use std::str::FromStr;

use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::Value;
use tonic::Status;

use crate::callers::{Caller, Role};

/// How a token's claims are read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claims {
    /// The claim naming the caller's role (`worker`, `reader`, `admin`; default `worker`).
    pub role: String,
    /// The claim listing the targets it may use (an array of names, or `"*"` for every one);
    /// a token without it may use none.
    pub targets: String,
}

impl Default for Claims {
    fn default() -> Self {
        Self {
            role: "interlock_role".into(),
            targets: "interlock_targets".into(),
        }
    }
}

/// What the name of a caller a token vouches for begins with: no other caller's name does, so a
/// token's subject can never be a caller configured by another credential, an in-process
/// worker's principal, or one removed from the configuration whose effects are journaled.
pub const PREFIX: &str = "jwt:";

/// The longest a token may live by default (from now to its `exp`): a token cannot be revoked
/// before it lapses.
pub const DEFAULT_MAX_LIFETIME_S: u64 = 86_400;

/// Checks tokens signed by one identity provider's key.
pub struct JwtVerifier {
    key: DecodingKey,
    validation: Validation,
    claims: Claims,
    max_lifetime_s: u64,
}

impl std::fmt::Debug for JwtVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwtVerifier")
            .field("algorithms", &self.validation.algorithms)
            .field("issuer", &self.validation.iss)
            .field("audience", &self.validation.aud)
            .field("claims", &self.claims)
            .finish_non_exhaustive()
    }
}

impl JwtVerifier {
    /// A verifier of tokens signed with `algorithm` (`ES256`, `ES384`, `RS256`, `RS384`,
    /// `RS512`, `PS256`, `PS384`, `PS512` or `EdDSA`) by the key whose public half is
    /// `public_pem`, issued by `issuer` for `audience`, allowing `leeway_s` seconds of clock
    /// difference on their lifetime.
    pub fn new(
        algorithm: &str,
        public_pem: &[u8],
        issuer: &str,
        audience: &str,
        leeway_s: u64,
        claims: Claims,
    ) -> Result<Self, String> {
        let alg = Algorithm::from_str(algorithm)
            .map_err(|_| format!("{algorithm:?} is not a JWT algorithm"))?;
        let key = match alg {
            Algorithm::ES256 | Algorithm::ES384 => DecodingKey::from_ec_pem(public_pem),
            Algorithm::RS256
            | Algorithm::RS384
            | Algorithm::RS512
            | Algorithm::PS256
            | Algorithm::PS384
            | Algorithm::PS512 => DecodingKey::from_rsa_pem(public_pem),
            Algorithm::EdDSA => DecodingKey::from_ed_pem(public_pem),
            Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512 => {
                return Err(format!(
                    "{algorithm} is a shared-secret algorithm: whoever can check such a token \
                     can make one; use a public-key algorithm (ES256, RS256, EdDSA, …)"
                ));
            }
        }
        .map_err(|e| format!("the public key is not a {algorithm} key in PEM: {e}"))?;
        if issuer.is_empty() || audience.is_empty() {
            return Err("the issuer and the audience must be named".into());
        }
        let mut validation = Validation::new(alg);
        validation.set_issuer(&[issuer]);
        validation.set_audience(&[audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        validation.validate_nbf = true;
        validation.leeway = leeway_s;
        Ok(Self {
            key,
            validation,
            claims,
            max_lifetime_s: DEFAULT_MAX_LIFETIME_S,
        })
    }

    /// The same verifier, refusing tokens that live more than `secs` from now to their `exp`.
    pub fn max_lifetime(mut self, secs: u64) -> Self {
        self.max_lifetime_s = secs;
        self
    }

    /// Whether `token` looks like a JWT (three dot-separated parts), so that a wrong static
    /// token is not reported as a bad signature.
    pub fn looks_like(token: &str) -> bool {
        token.split('.').count() == 3
    }

    /// The caller `token` vouches for, or why it vouches for none.
    pub fn caller(&self, token: &str) -> Result<Caller, Status> {
        let refused = |why: String| Status::unauthenticated(format!("the bearer token: {why}"));
        let data = jsonwebtoken::decode::<serde_json::Map<String, Value>>(
            token,
            &self.key,
            &self.validation,
        )
        .map_err(|e| refused(e.to_string()))?;
        let claims = data.claims;
        let sub = claims
            .get("sub")
            .and_then(Value::as_str)
            .filter(|s| crate::callers::valid_name(s))
            .ok_or_else(|| {
                refused(
                    "its subject is not a caller name (1 to 128 letters, digits, - _ . @ :)".into(),
                )
            })?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        match claims.get("exp").and_then(Value::as_u64) {
            Some(exp) if exp.saturating_sub(now) <= self.max_lifetime_s => {}
            _ => {
                return Err(refused(format!(
                    "it lives longer than this server allows ({} s from now to its exp): ask the \
                     identity provider for a shorter-lived one",
                    self.max_lifetime_s
                )));
            }
        }
        let role = match claims.get(&self.claims.role) {
            None => Role::Worker,
            Some(v) => match v.as_str() {
                Some("worker") => Role::Worker,
                Some("reader") => Role::Reader,
                Some("admin") => Role::Admin,
                _ => {
                    return Err(refused(format!(
                        "its {} claim {v} is not worker, reader or admin",
                        self.claims.role
                    )));
                }
            },
        };
        let caller = Caller::new(format!("{PREFIX}{sub}"), role);
        Ok(match claims.get(&self.claims.targets) {
            Some(Value::String(all)) if all == "*" => caller,
            None => caller.only(Vec::<String>::new()),
            Some(Value::Array(names)) => {
                let names: Option<Vec<String>> = names
                    .iter()
                    .map(|n| n.as_str().map(str::to_owned))
                    .collect();
                caller.only(names.ok_or_else(|| {
                    refused(format!(
                        "its {} claim lists a non-name",
                        self.claims.targets
                    ))
                })?)
            }
            Some(v) => {
                return Err(refused(format!(
                    "its {} claim {v} is neither a list of target names nor \"*\"",
                    self.claims.targets
                )));
            }
        })
    }
}
