//! Sign-in without passwords: the inbox issues a one-time challenge, the approver's browser signs
//! it with their own Ed25519 key, and the inbox checks the signature against the public key the
//! approver directory holds for them. A session carries a CSRF token every form must return, and
//! a statement the inbox drafted for signing can be completed only by the session it was drafted
//! for.
//!
//! Challenges go to anyone who asks (nobody is known before signing in), so what they may hold is
//! bounded by who asks, not only in total; otherwise one client could fill the table and lock
//! every approver out until its challenges lapse.
//!
//! * A client (its IP address; for IPv6 its /56, the least a provider hands one subscriber, so
//!   the 2^72 addresses in it count once) holds at most 4 live challenges, and asking for another
//!   replaces its own oldest. The sign-in page answers its challenge within one round trip, so a
//!   person needs one at a time; four leave room for a few tabs, or a few people behind one NAT
//!   signing in at the same instant. Flooding from one address therefore churns only that
//!   address's own challenges (and those of whoever shares it).
//! * The table holds at most 16,384. When it is full the asker is refused and no live challenge
//!   is evicted: evicting would let a flood cancel other people's sign-ins under way. 16,384 is
//!   4,096 clients' full share, so filling it takes that many distinct addresses (or /56s) asking
//!   within two minutes, and even with the longest names it stays under ten megabytes.
//! * There is no bound per approver name. The name is whatever the asker types, so a bound on it
//!   is a lever against that approver: refusing at it would let two addresses that hold her share
//!   lock her out for as long as they renew it, and evicting at it would let a flood naming her
//!   cancel her sign-in under way. Without one, requests naming an approver weigh no more than any
//!   others: she can be locked out only by filling the whole table, which takes 4,096 addresses
//!   and locks out everyone alike.
//!
//! Challenges for names nobody has are kept and counted like any other, so the answers do not
//! tell who is in the directory.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Mutex, PoisonError};

use interlock::approval::{Approvers, Statement};
use interlock::core::settle::Settlement;

/// Prefixed to every sign-in challenge, so a sign-in signature is never an approval.
const LOGIN_DOMAIN: &str = "interlock-inbox-login-v1\n";
const CHALLENGE_MS: i64 = 120_000;
const SESSION_MS: i64 = 8 * 3_600_000;
const DRAFT_MS: i64 = 300_000;
/// How long an approval delivered here blocks a second one for the same step: long enough for
/// its workflow to grant it (it then shows as approved) or turn it down (the step reopens).
const DECIDED_MS: i64 = 120_000;
/// Live sign-in challenges one client may hold (see the module's documentation for why 4).
const CHALLENGES_PER_CLIENT: usize = 4;
/// Live sign-in challenges kept at once: 4,096 clients' full share.
const MAX_CHALLENGES: usize = 4_096 * CHALLENGES_PER_CLIENT;
/// The bits of an IPv6 address that name its client: its /56.
const IPV6_CLIENT_PREFIX: u32 = 56;
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
    /// The public key (hex) the person signed in with: the session is worth nothing once the
    /// directory holds another key for them.
    pub key: String,
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
    /// The approver directory could not be read: nobody is admitted until it can.
    #[error("the approver directory cannot be read, so nobody is admitted: {0}")]
    Directory(String),
    /// The directory holds another key for the person than the one they signed in with.
    #[error(
        "the approver directory holds another key for {0} than the one this session was signed \
         in with: sign in again with the key it holds"
    )]
    KeyReplaced(String),
    /// The person is in the directory, and this page does not admit them.
    #[error("{0}")]
    NotAdmitted(String),
    /// Too many sign-ins or drafts are outstanding.
    #[error(
        "too many sign-ins are under way at once: the inbox keeps a bounded number and refuses more \
         rather than cancel any under way; try again in two minutes, when unanswered ones lapse"
    )]
    Busy,
}

/// A statement drafted by the server for a person to sign in their browser.
#[derive(Clone, Debug, PartialEq)]
pub enum Drafted {
    /// An approval, drafted from route step `step` of its request.
    Approval {
        /// What is signed.
        statement: Statement,
        /// The route step it was drafted from.
        step: u32,
    },
    /// A settlement of an `AMBIGUOUS` effect.
    Settlement(Settlement),
}

/// A sign-in challenge waiting for its answer.
struct Challenge {
    /// Who it is for.
    approver: String,
    /// Who asked for it (see [`client_of`]).
    client: IpAddr,
    expires_ms: i64,
    /// Its place in the order challenges were issued in.
    seq: u64,
}

/// The live sign-in challenges, found by nonce, by when they lapse and by who asked.
#[derive(Default)]
struct Challenges {
    by_nonce: HashMap<String, Challenge>,
    by_expiry: BTreeMap<(i64, u64), String>,
    /// Each client's nonces, oldest first.
    by_client: HashMap<IpAddr, VecDeque<String>>,
    issued: u64,
}

impl Challenges {
    /// Remove the challenge `nonce` and return it.
    fn take(&mut self, nonce: &str) -> Option<Challenge> {
        let c = self.by_nonce.remove(nonce)?;
        self.by_expiry.remove(&(c.expires_ms, c.seq));
        if let Some(theirs) = self.by_client.get_mut(&c.client) {
            theirs.retain(|n| n != nonce);
            if theirs.is_empty() {
                self.by_client.remove(&c.client);
            }
        }
        Some(c)
    }

    /// Drop the challenges that lapsed by `now_ms`.
    fn lapse(&mut self, now_ms: i64) {
        while let Some(first) = self.by_expiry.first_entry() {
            if first.key().0 > now_ms {
                break;
            }
            let nonce = first.remove();
            self.take(&nonce);
        }
    }

    /// Keep `nonce` for `approver`, asked for by `client`: in place of the client's own oldest
    /// if it holds its full share, refused if the table is full.
    fn issue(
        &mut self,
        nonce: String,
        approver: &str,
        client: IpAddr,
        now_ms: i64,
    ) -> Result<(), AuthError> {
        self.lapse(now_ms);
        if self.by_nonce.contains_key(&nonce) {
            return Err(AuthError::BadChallenge);
        }
        let theirs = self.by_client.get(&client);
        if theirs.is_some_and(|t| t.len() >= CHALLENGES_PER_CLIENT) {
            if let Some(oldest) = theirs.and_then(|t| t.front()).cloned() {
                self.take(&oldest);
            }
        } else if self.by_nonce.len() >= MAX_CHALLENGES {
            return Err(AuthError::Busy);
        }
        self.issued += 1;
        let c = Challenge {
            approver: approver.to_owned(),
            client,
            expires_ms: now_ms.saturating_add(CHALLENGE_MS),
            seq: self.issued,
        };
        self.by_expiry.insert((c.expires_ms, c.seq), nonce.clone());
        self.by_client
            .entry(client)
            .or_default()
            .push_back(nonce.clone());
        self.by_nonce.insert(nonce, c);
        Ok(())
    }
}

/// The client a request from `ip` counts against: an IPv4 address (also when carried in an IPv6
/// one), or the /56 an IPv6 address is in.
fn client_of(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from(
                u128::from(v6) & (u128::MAX << (128 - IPV6_CLIENT_PREFIX)),
            )),
        },
    }
}

#[derive(Default)]
struct State {
    challenges: Challenges,
    sessions: HashMap<String, Session>,
    /// Draft id → the session it is for, the statement, and when it lapses.
    drafts: HashMap<String, (String, Drafted, i64)>,
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

    /// A one-time challenge for `approver` to sign, asked for from the address `from`. Unknown
    /// approvers get one too (it can never be answered), so the answer does not tell who is in
    /// the directory. A client already holding its share of live challenges gets this one in
    /// place of its own oldest; refused ([`AuthError::Busy`]) only when the whole table is full,
    /// and then nobody else's challenge is evicted.
    pub fn challenge(
        &self,
        approver: &str,
        from: IpAddr,
        now_ms: i64,
    ) -> Result<String, AuthError> {
        let nonce = token();
        if nonce.is_empty() || approver.len() > 256 {
            return Err(AuthError::BadChallenge);
        }
        self.state()
            .challenges
            .issue(nonce.clone(), approver, client_of(from), now_ms)?;
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
        let issued = self.state().challenges.take(nonce);
        match issued {
            Some(c) if c.approver == approver && c.expires_ms > now_ms => {}
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
            key: hex::encode(key.to_bytes()),
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
    pub fn draft(&self, token: &str, statement: Drafted, now_ms: i64) -> Result<String, AuthError> {
        let id = self::token();
        if id.is_empty() {
            return Err(AuthError::Busy);
        }
        let mut s = self.state();
        s.drafts.retain(|_, (_, _, exp)| *exp > now_ms);
        if s.drafts.len() >= MAX_DRAFTS {
            return Err(AuthError::Busy);
        }
        s.drafts
            .insert(id.clone(), (token.to_owned(), statement, now_ms + DRAFT_MS));
        Ok(id)
    }

    /// The statement drafted as `draft` for the session `token`, once.
    pub fn take_draft(&self, token: &str, draft: &str, now_ms: i64) -> Option<Drafted> {
        let mut s = self.state();
        match s.drafts.get(draft) {
            Some((owner, ..)) if same(owner, token) => {}
            _ => return None,
        }
        match s.drafts.remove(draft) {
            Some((_, st, exp)) if exp > now_ms => Some(st),
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

    /// A challenge for `approver` asked for from `ip`.
    fn ask(auth: &Auth, approver: &str, ip: &str, now_ms: i64) -> Result<String, AuthError> {
        auth.challenge(approver, ip.parse().unwrap(), now_ms)
    }

    /// The `n`th of many distinct IPv4 addresses.
    fn address(n: usize) -> String {
        format!("10.{}.{}.{}", (n >> 16) & 255, (n >> 8) & 255, n & 255)
    }

    /// Ana's answer to `nonce`, and whether it signed her in.
    fn answered(dir: &Approvers, auth: &Auth, nonce: &str, now_ms: i64) -> Result<(), AuthError> {
        let right = sign([1; 32], &login_bytes(nonce, "ana"));
        auth.login(dir, "ana", nonce, &right, now_ms).map(|_| ())
    }

    /// How many challenges are kept, after checking the three ways of finding them agree.
    fn kept(auth: &Auth) -> usize {
        let s = auth.state();
        let c = &s.challenges;
        assert_eq!(c.by_expiry.len(), c.by_nonce.len());
        assert_eq!(
            c.by_client.values().map(VecDeque::len).sum::<usize>(),
            c.by_nonce.len()
        );
        assert!(
            c.by_client
                .values()
                .all(|t| (1..=CHALLENGES_PER_CLIENT).contains(&t.len()))
        );
        c.by_nonce.len()
    }

    #[test]
    fn one_client_flooding_challenges_cannot_lock_out_another_approver() {
        let (dir, auth) = (directory(), Auth::default());
        // One address asks for far more challenges than the whole table holds, naming the
        // approver and names nobody has.
        for i in 0..20_000 {
            let name = if i % 2 == 0 {
                "ana".to_owned()
            } else {
                format!("ghost-{i}")
            };
            let _ = ask(&auth, &name, "203.0.113.7", 0);
        }
        assert_eq!(
            kept(&auth),
            CHALLENGES_PER_CLIENT,
            "the flood kept only its own share"
        );
        let nonce = ask(&auth, "ana", "198.51.100.20", 1);
        assert!(nonce.is_ok(), "ana was locked out: {nonce:?}");
        assert_eq!(answered(&dir, &auth, &nonce.unwrap(), 2), Ok(()));
    }

    #[test]
    fn a_client_at_its_bound_replaces_only_its_own_oldest_challenge() {
        let (dir, auth) = (directory(), Auth::default());
        let other = ask(&auth, "ana", "198.51.100.20", 0).unwrap();
        let mine: Vec<String> = (0..CHALLENGES_PER_CLIENT)
            .map(|_| ask(&auth, "ana", "203.0.113.7", 0).unwrap())
            .collect();
        let newest = ask(&auth, "ana", "203.0.113.7", 0).unwrap();
        assert_eq!(
            answered(&dir, &auth, &mine[0], 1),
            Err(AuthError::BadChallenge),
            "the client's own oldest challenge made way for its newest"
        );
        for nonce in mine[1..].iter().chain([&newest]) {
            assert_eq!(answered(&dir, &auth, nonce, 1), Ok(()));
        }
        assert_eq!(
            answered(&dir, &auth, &other, 1),
            Ok(()),
            "another client's live challenge was left alone"
        );
    }

    #[test]
    fn an_ipv6_subscriber_s_addresses_count_as_one_client() {
        let (dir, auth) = (directory(), Auth::default());
        // Four /64s of one /56, then a fifth address in it.
        let mine: Vec<String> = (1..=CHALLENGES_PER_CLIENT)
            .map(|i| ask(&auth, "ana", &format!("2001:db8:0:{i}::1"), 0).unwrap())
            .collect();
        let neighbour = ask(&auth, "ana", "2001:db8:0:100::1", 0).unwrap();
        ask(&auth, "ana", "2001:db8:0:ff:abcd::7", 0).unwrap();
        assert_eq!(
            answered(&dir, &auth, &mine[0], 1),
            Err(AuthError::BadChallenge)
        );
        assert_eq!(answered(&dir, &auth, &mine[1], 1), Ok(()));
        assert_eq!(
            answered(&dir, &auth, &neighbour, 1),
            Ok(()),
            "the next /56 is another client"
        );
        // An IPv4 address written as IPv6 is that IPv4 client.
        let v4: Vec<String> = (0..CHALLENGES_PER_CLIENT)
            .map(|_| ask(&auth, "ana", "203.0.113.7", 2).unwrap())
            .collect();
        ask(&auth, "ana", "::ffff:203.0.113.7", 2).unwrap();
        assert_eq!(
            answered(&dir, &auth, &v4[0], 3),
            Err(AuthError::BadChallenge)
        );
    }

    #[test]
    fn a_full_table_answers_busy_without_evicting_anyone_s_live_challenge() {
        let (dir, auth) = (directory(), Auth::default());
        let first = ask(&auth, "ana", &address(0), 0).unwrap();
        for i in 1..MAX_CHALLENGES {
            let who = address(i / CHALLENGES_PER_CLIENT);
            assert!(
                ask(&auth, "ana", &who, 0).is_ok(),
                "challenge {i} from {who}"
            );
        }
        assert_eq!(ask(&auth, "ana", "192.0.2.1", 1), Err(AuthError::Busy));
        assert_eq!(ask(&auth, "ghost", "192.0.2.2", 1), Err(AuthError::Busy));
        // A client holding its full share still gets one, in place of its own oldest.
        assert!(ask(&auth, "ana", &address(1), 1).is_ok());
        assert_eq!(kept(&auth), MAX_CHALLENGES);
        assert_eq!(
            answered(&dir, &auth, &first, 2),
            Ok(()),
            "the overflow evicted nobody's live challenge"
        );
        // Once they lapse, there is room again, and they are gone.
        assert!(ask(&auth, "ana", "192.0.2.1", CHALLENGE_MS + 1).is_ok());
        assert_eq!(kept(&auth), 1, "all the others lapsed");
    }

    #[test]
    fn requests_naming_an_approver_from_many_addresses_do_not_lock_her_out() {
        let (dir, auth) = (directory(), Auth::default());
        let early = ask(&auth, "ana", "198.51.100.20", 0).unwrap();
        for i in 0..2_000 {
            for _ in 0..CHALLENGES_PER_CLIENT {
                let _ = ask(&auth, "ana", &address(i), 0);
            }
        }
        let late = ask(&auth, "ana", "198.51.100.20", 1);
        assert!(late.is_ok(), "ana was locked out: {late:?}");
        assert_eq!(
            answered(&dir, &auth, &early, 2),
            Ok(()),
            "her live challenge outlived the flood naming her"
        );
        assert_eq!(answered(&dir, &auth, &late.unwrap(), 2), Ok(()));
    }

    #[test]
    fn only_the_approver_s_own_key_answers_their_challenge_and_only_once() {
        let (dir, auth) = (directory(), Auth::default());
        let nonce = ask(&auth, "ana", "198.51.100.20", 0).unwrap();
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
        let nonce = ask(&auth, "ana", "198.51.100.20", 0).unwrap();
        let right = sign([1; 32], &login_bytes(&nonce, "ana"));
        let (token, session) = auth.login(&dir, "ana", &nonce, &right, 1).unwrap();
        assert_eq!(session.approver, "ana");
        assert!(auth.checked(&token, &session.csrf, 2).is_ok());
        assert_eq!(auth.checked(&token, "forged", 2), Err(AuthError::Csrf));
        assert_eq!(auth.checked(&token, "", 2), Err(AuthError::Csrf));
        // Unknown approvers get a challenge nobody can answer; an expired one is refused.
        let ghost = ask(&auth, "ghost", "198.51.100.20", 0).unwrap();
        let any = sign([1; 32], &login_bytes(&ghost, "ghost"));
        assert!(auth.login(&dir, "ghost", &ghost, &any, 1).is_err());
        let late = ask(&auth, "ana", "198.51.100.20", 0).unwrap();
        let right = sign([1; 32], &login_bytes(&late, "ana"));
        assert_eq!(
            auth.login(&dir, "ana", &late, &right, CHALLENGE_MS + 1),
            Err(AuthError::BadChallenge)
        );
    }

    #[test]
    fn a_draft_belongs_to_its_session_and_a_step_is_decided_once() {
        let auth = Auth::default();
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
        let draft = auth
            .draft(
                "session-a",
                Drafted::Approval {
                    statement: st,
                    step: 0,
                },
                0,
            )
            .unwrap();
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
