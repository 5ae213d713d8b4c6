//! Sign-in without passwords: the inbox issues a one-time challenge, the approver's browser signs
//! it with their own Ed25519 key, and the inbox checks the signature against the public key the
//! approver directory holds for them. A session carries a CSRF token every form must return, and
//! a statement the inbox drafted for signing can be completed only by the session it was drafted
//! for.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, PoisonError};

use interlock::approval::{Approvers, Statement};

/// Prefixed to every sign-in challenge, so a sign-in signature is never an approval.
const LOGIN_DOMAIN: &str = "interlock-inbox-login-v1\n";
const CHALLENGE_MS: i64 = 120_000;
const SESSION_MS: i64 = 8 * 3_600_000;
const DRAFT_MS: i64 = 300_000;

/// The bytes an approver signs to sign in.
pub fn login_bytes(nonce: &str, approver: &str) -> Vec<u8> {
    format!("{LOGIN_DOMAIN}{nonce}\n{approver}").into_bytes()
}

/// A signed-in approver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Session {
    /// Who.
    pub approver: String,
    /// The token every form of this session must carry.
    pub csrf: String,
    /// When it lapses.
    pub expires_ms: i64,
}

/// Why a sign-in or a form was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum AuthError {
    /// No such approver.
    #[error("no approver named {0:?} is in the approver directory")]
    UnknownApprover(String),
    /// The challenge is unknown, used, expired, or for someone else.
    #[error("the sign-in challenge is unknown, used or expired: reload the page and sign in again")]
    BadChallenge,
    /// The signature does not verify.
    #[error("the signature does not verify with {0}'s public key in the directory: wrong key")]
    BadSignature(String),
    /// Not signed in, or the session lapsed.
    #[error("not signed in (or the session lapsed): sign in again")]
    NoSession,
    /// The form did not carry the session's CSRF token.
    #[error("the form's CSRF token does not match this session: reload the page and try again")]
    Csrf,
}

#[derive(Default)]
struct State {
    challenges: HashMap<String, (String, i64)>,
    sessions: HashMap<String, Session>,
    drafts: HashMap<String, (String, Statement, i64)>,
    /// Route steps an approval or a refusal was delivered for, and by whom.
    decided: HashMap<(String, u32), String>,
    denied: HashSet<String>,
}

/// Sign-ins, sessions, drafts and what this inbox has delivered.
#[derive(Default)]
pub struct Auth {
    state: Mutex<State>,
}

/// 32 random bytes, hex.
pub fn token() -> String {
    let mut b = [0u8; 32];
    // An operating system without a random source cannot run an inbox safely at all.
    if getrandom::fill(&mut b).is_err() {
        tracing::error!("no random source: refusing to issue predictable tokens");
        return String::new();
    }
    hex::encode(b)
}

/// Equal in constant time (for tokens).
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && !a.is_empty()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

impl Auth {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A one-time challenge for `approver` to sign.
    pub fn challenge(
        &self,
        dir: &Approvers,
        approver: &str,
        now_ms: i64,
    ) -> Result<String, AuthError> {
        if dir.key_of(approver).is_none() {
            return Err(AuthError::UnknownApprover(approver.to_owned()));
        }
        let nonce = token();
        if nonce.is_empty() {
            return Err(AuthError::BadChallenge);
        }
        let mut s = self.state();
        s.challenges.retain(|_, (_, exp)| *exp > now_ms);
        s.challenges
            .insert(nonce.clone(), (approver.to_owned(), now_ms + CHALLENGE_MS));
        Ok(nonce)
    }

    /// Sign `approver` in if `signature` (hex) signs the challenge `nonce` with their key.
    /// Returns the session's token.
    pub fn login(
        &self,
        dir: &Approvers,
        approver: &str,
        nonce: &str,
        signature: &str,
        now_ms: i64,
    ) -> Result<(String, Session), AuthError> {
        let issued = self.state().challenges.remove(nonce);
        match issued {
            Some((who, exp)) if who == approver && exp > now_ms => {}
            _ => return Err(AuthError::BadChallenge),
        }
        let key = dir
            .key_of(approver)
            .ok_or_else(|| AuthError::UnknownApprover(approver.to_owned()))?;
        let sig = hex::decode(signature)
            .ok()
            .and_then(|v| <[u8; 64]>::try_from(v).ok())
            .map(|b| ed25519_dalek::Signature::from_bytes(&b));
        let ok = sig.is_some_and(|s| key.verify_strict(&login_bytes(nonce, approver), &s).is_ok());
        if !ok {
            return Err(AuthError::BadSignature(approver.to_owned()));
        }
        let (id, csrf) = (token(), token());
        if id.is_empty() || csrf.is_empty() {
            return Err(AuthError::BadChallenge);
        }
        let session = Session {
            approver: approver.to_owned(),
            csrf,
            expires_ms: now_ms + SESSION_MS,
        };
        let mut s = self.state();
        s.sessions.retain(|_, x| x.expires_ms > now_ms);
        s.sessions.insert(id.clone(), session.clone());
        Ok((id, session))
    }

    /// The live session `token` names.
    pub fn session(&self, token: &str, now_ms: i64) -> Result<Session, AuthError> {
        self.state()
            .sessions
            .get(token)
            .filter(|s| s.expires_ms > now_ms)
            .cloned()
            .ok_or(AuthError::NoSession)
    }

    /// The session `token` names, if `csrf` is its form token.
    pub fn checked(&self, token: &str, csrf: &str, now_ms: i64) -> Result<Session, AuthError> {
        let s = self.session(token, now_ms)?;
        if same(&s.csrf, csrf) {
            Ok(s)
        } else {
            Err(AuthError::Csrf)
        }
    }

    /// End the session.
    pub fn logout(&self, token: &str) {
        self.state().sessions.remove(token);
    }

    /// Keep `statement` for the session `token` to sign; returns the draft's id.
    pub fn draft(&self, token: &str, statement: Statement, now_ms: i64) -> String {
        let id = self::token();
        let mut s = self.state();
        s.drafts.retain(|_, (_, _, exp)| *exp > now_ms);
        s.drafts
            .insert(id.clone(), (token.to_owned(), statement, now_ms + DRAFT_MS));
        id
    }

    /// The statement drafted as `draft` for the session `token`, once.
    pub fn take_draft(&self, token: &str, draft: &str, now_ms: i64) -> Option<Statement> {
        let mut s = self.state();
        match s.drafts.remove(draft) {
            Some((owner, st, exp)) if owner == token && exp > now_ms => Some(st),
            _ => None,
        }
    }

    /// Who decided route step `n` of `request` through this inbox, if anyone did.
    pub fn decided(&self, request: &str, n: u32) -> Option<String> {
        self.state().decided.get(&(request.to_owned(), n)).cloned()
    }

    /// Record that `who` decided step `n` of `request`; false if someone already had.
    pub fn decide(&self, request: &str, n: u32, who: &str) -> bool {
        let mut s = self.state();
        let key = (request.to_owned(), n);
        if s.decided.contains_key(&key) {
            return false;
        }
        s.decided.insert(key, who.to_owned());
        true
    }

    /// Forget a decision whose delivery failed, so it can be made again.
    pub fn undecide(&self, request: &str, n: u32) {
        self.state().decided.remove(&(request.to_owned(), n));
    }

    /// Record that `request` was declined.
    pub fn deny(&self, request: &str) {
        self.state().denied.insert(request.to_owned());
    }

    /// Whether `request` was declined here.
    pub fn was_denied(&self, request: &str) -> bool {
        self.state().denied.contains(request)
    }
}
