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
/// How long an approval delivered here blocks a second one for the same step: long enough for
/// its workflow to grant it (it then shows as approved) or turn it down (the step reopens).
const DECIDED_MS: i64 = 120_000;
/// Sign-in challenges kept at once, so unauthenticated requests cannot grow memory without bound.
const MAX_CHALLENGES: usize = 4_096;
/// Drafts kept at once.
const MAX_DRAFTS: usize = 4_096;

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
    /// Too many sign-ins or drafts are outstanding.
    #[error("too many sign-ins are under way: try again in a minute")]
    Busy,
}

#[derive(Default)]
struct State {
    challenges: HashMap<String, (String, i64)>,
    sessions: HashMap<String, Session>,
    /// Draft id → the session it is for, the statement, the route step it was drafted from,
    /// and when it lapses.
    drafts: HashMap<String, (String, Statement, u32, i64)>,
    /// Route steps an approval or a refusal was delivered for, by whom, and when.
    decided: HashMap<(String, u32), (String, i64)>,
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

    /// A one-time challenge for `approver` to sign. Unknown approvers get one too (it can never
    /// be answered), so the answer does not tell who is in the directory. Refused when too many
    /// are outstanding.
    pub fn challenge(&self, approver: &str, now_ms: i64) -> Result<String, AuthError> {
        let nonce = token();
        if nonce.is_empty() || approver.len() > 256 {
            return Err(AuthError::BadChallenge);
        }
        let mut s = self.state();
        if s.challenges.len() >= MAX_CHALLENGES {
            s.challenges.retain(|_, (_, exp)| *exp > now_ms);
            if s.challenges.len() >= MAX_CHALLENGES {
                return Err(AuthError::Busy);
            }
        }
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

    /// Keep `statement`, drafted from route step `n` of its request, for the session `token` to
    /// sign; returns the draft's id.
    pub fn draft(
        &self,
        token: &str,
        statement: Statement,
        n: u32,
        now_ms: i64,
    ) -> Result<String, AuthError> {
        let id = self::token();
        if id.is_empty() {
            return Err(AuthError::Busy);
        }
        let mut s = self.state();
        s.drafts.retain(|_, (_, _, _, exp)| *exp > now_ms);
        if s.drafts.len() >= MAX_DRAFTS {
            return Err(AuthError::Busy);
        }
        s.drafts.insert(
            id.clone(),
            (token.to_owned(), statement, n, now_ms + DRAFT_MS),
        );
        Ok(id)
    }

    /// The statement drafted as `draft` for the session `token`, and the route step it was
    /// drafted from, once.
    pub fn take_draft(&self, token: &str, draft: &str, now_ms: i64) -> Option<(Statement, u32)> {
        let mut s = self.state();
        match s.drafts.get(draft) {
            Some((owner, ..)) if same(owner, token) => {}
            _ => return None,
        }
        match s.drafts.remove(draft) {
            Some((_, st, n, exp)) if exp > now_ms => Some((st, n)),
            _ => None,
        }
    }

    /// Who decided route step `n` of `request` through this inbox in the last two minutes, if
    /// anyone did.
    pub fn decided(&self, request: &str, n: u32, now_ms: i64) -> Option<String> {
        self.state()
            .decided
            .get(&(request.to_owned(), n))
            .filter(|(_, at)| now_ms - at < DECIDED_MS)
            .map(|(who, _)| who.clone())
    }

    /// Record that `who` decided step `n` of `request`; false if someone already had.
    pub fn decide(&self, request: &str, n: u32, who: &str, now_ms: i64) -> bool {
        let mut s = self.state();
        s.decided.retain(|_, (_, at)| now_ms - *at < DECIDED_MS);
        let key = (request.to_owned(), n);
        if s.decided.contains_key(&key) {
            return false;
        }
        s.decided.insert(key, (who.to_owned(), now_ms));
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

#[cfg(test)]
mod tests {
    use ed25519_dalek::{Signer as _, SigningKey};
    use serde_json::json;

    use super::*;

    use crate::testing::directory;

    fn sign(seed: [u8; 32], bytes: &[u8]) -> String {
        hex::encode(SigningKey::from_bytes(&seed).sign(bytes).to_bytes())
    }

    #[test]
    fn only_the_approver_s_own_key_answers_their_challenge_and_only_once() {
        let (dir, auth) = (directory(), Auth::default());
        let nonce = auth.challenge("ana", 0).unwrap();
        let wrong = sign([2; 32], &login_bytes(&nonce, "ana"));
        assert_eq!(
            auth.login(&dir, "ana", &nonce, &wrong, 1),
            Err(AuthError::BadSignature("ana".into()))
        );
        // A refused answer used the challenge up.
        let right = sign([1; 32], &login_bytes(&nonce, "ana"));
        assert_eq!(
            auth.login(&dir, "ana", &nonce, &right, 1),
            Err(AuthError::BadChallenge)
        );
        let nonce = auth.challenge("ana", 0).unwrap();
        let right = sign([1; 32], &login_bytes(&nonce, "ana"));
        let (token, session) = auth.login(&dir, "ana", &nonce, &right, 1).unwrap();
        assert_eq!(session.approver, "ana");
        assert!(auth.checked(&token, &session.csrf, 2).is_ok());
        assert_eq!(auth.checked(&token, "forged", 2), Err(AuthError::Csrf));
        assert_eq!(auth.checked(&token, "", 2), Err(AuthError::Csrf));
        // Unknown approvers get a challenge nobody can answer; an expired one is refused.
        let ghost = auth.challenge("ghost", 0).unwrap();
        let any = sign([1; 32], &login_bytes(&ghost, "ghost"));
        assert!(auth.login(&dir, "ghost", &ghost, &any, 1).is_err());
        let late = auth.challenge("ana", 0).unwrap();
        let right = sign([1; 32], &login_bytes(&late, "ana"));
        assert_eq!(
            auth.login(&dir, "ana", &late, &right, CHALLENGE_MS + 1),
            Err(AuthError::BadChallenge)
        );
    }

    #[test]
    fn unanswered_challenges_are_bounded_and_a_draft_belongs_to_its_session() {
        let auth = Auth::default();
        for _ in 0..MAX_CHALLENGES {
            auth.challenge("ana", 0).unwrap();
        }
        assert_eq!(auth.challenge("ana", 0), Err(AuthError::Busy));
        // Once they lapse, there is room again.
        assert!(auth.challenge("ana", CHALLENGE_MS + 1).is_ok());
        let st = interlock::approval::Statement {
            request: "r1".into(),
            group: "support".into(),
            level: 0,
            approver: "ana".into(),
            payload: json!({}),
            premises: interlock::core::Premises::new(),
            issued_ms: 0,
            expires_ms: 1,
            repair_of: None,
        };
        let draft = auth.draft("session-a", st, 0, 0).unwrap();
        assert!(auth.take_draft("session-b", &draft, 0).is_none());
        assert!(
            auth.take_draft("session-a", &draft, 0).is_some(),
            "still there for its owner"
        );
        assert!(auth.take_draft("session-a", &draft, 0).is_none(), "once");
        assert!(auth.decide("r1", 0, "ana", 0));
        assert!(!auth.decide("r1", 0, "ben", 1));
        assert_eq!(
            auth.decided("r1", 0, DECIDED_MS + 1),
            None,
            "a turned-down approval reopens"
        );
        assert!(auth.decide("r1", 0, "ben", DECIDED_MS + 1));
    }
}
