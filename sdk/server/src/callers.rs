//! Who is calling, decided by the server from a credential it checked — a bearer token it was
//! configured with, or a client certificate its client CA signed — never from a name the caller
//! wrote. The caller found is what the journal records as the proposer and the claim holder of
//! every attempt it makes, what a lease that names its spenders is judged against, and what the
//! calls below check: which targets a caller may use, and whether it reads every effect or only
//! its own.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde::Deserialize;
use tonic::Status;

/// What a caller may do beyond using its targets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Decide, submit and recover on its targets; read only the effects it proposed.
    Worker,
    /// A worker that also reads every effect (with lease ids, grants and budgets' room
    /// withheld), as an operators' dashboard does.
    Reader,
    /// Reads every effect whole, and administers leases and budgets.
    Admin,
}

impl Role {
    /// The role's name, as the configuration writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Worker => "worker",
            Self::Reader => "reader",
            Self::Admin => "admin",
        }
    }
}

/// A caller the server has authenticated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    /// Its name, as the configuration gives it: what the journal records.
    pub name: Arc<str>,
    /// What it may do.
    pub role: Role,
    /// The targets it may decide, submit to and recover on; `None`: every one.
    pub targets: Option<BTreeSet<String>>,
}

/// The name of the caller of a server that asks for no credential (loopback or a unix socket
/// with no `[auth]`): whoever can reach the socket.
pub const UNAUTHENTICATED: &str = "unauthenticated";

/// The name of the caller of the one token every worker shares (`[auth] token_env`).
pub const SHARED_WORKER: &str = "worker";

/// The name of the caller of the admin token (`[auth] admin_token_env`).
pub const ADMIN: &str = "admin";

impl Caller {
    /// A caller named `name` with `role`, allowed every target.
    pub fn new(name: impl Into<Arc<str>>, role: Role) -> Self {
        Self {
            name: name.into(),
            role,
            targets: None,
        }
    }

    /// The same caller, allowed only `targets`.
    pub fn only(mut self, targets: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.targets = Some(targets.into_iter().map(Into::into).collect());
        self
    }

    /// Whether it reads every effect (else only those it proposed).
    pub fn reads_all(&self) -> bool {
        self.role >= Role::Reader
    }

    /// Whether it reads effects whole and administers leases and budgets.
    pub fn is_admin(&self) -> bool {
        self.role == Role::Admin
    }

    /// `PERMISSION_DENIED` unless it may use `target`.
    pub fn check_target(&self, rpc: &str, target: &str) -> Result<(), Status> {
        match &self.targets {
            Some(allowed) if !allowed.contains(target) => Err(denied(
                self,
                rpc,
                target,
                format!(
                    "{rpc}: caller {} may not use target {target}; its configuration allows {}",
                    self.name,
                    allowed.iter().cloned().collect::<Vec<_>>().join(", ")
                ),
            )),
            _ => Ok(()),
        }
    }

    /// Whether `proposer` is this caller: named by it, or, for an effect that names none, the
    /// caller that owned such effects before proposers were journaled (the shared worker
    /// token's, or an open server's unauthenticated caller).
    pub fn proposed(&self, proposer: Option<&str>) -> bool {
        match proposer {
            Some(p) => p == &*self.name,
            None => [SHARED_WORKER, UNAUTHENTICATED].contains(&&*self.name),
        }
    }

    /// Whether it may see an effect `proposer` proposed. An effect that names no proposer
    /// (journaled before proposers were, or by an in-process worker given no principal) is
    /// the shared worker token's, as it was before callers had names, and readers'.
    pub fn owns(&self, proposer: Option<&str>) -> bool {
        self.reads_all() || self.proposed(proposer)
    }
}

/// `PERMISSION_DENIED` with `message`, logged with the caller, the call and what it named: a
/// refusal writes nothing to the journal (nothing of the effect happened), so the log is where
/// an operator sees who tried what.
pub(crate) fn denied(caller: &Caller, rpc: &str, what: &str, message: String) -> Status {
    tracing::warn!(caller = %caller.name, role = caller.role.as_str(), rpc, what, "refused: {message}");
    Status::permission_denied(message)
}

/// Whether `name` may name a caller: 1 to 128 letters, digits and `- _ . @ :`.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.@:".contains(c))
}

/// How callers are known: by bearer token, by a signed token (JWT), by client certificate
/// subject, and who a call with no credential is (only where none is required).
#[derive(Clone, Debug, Default)]
pub struct Callers {
    tokens: Vec<(Arc<str>, Caller)>,
    subjects: Vec<(String, Caller)>,
    jwt: Option<Arc<crate::jwt::JwtVerifier>>,
    open: Option<Caller>,
}

impl Callers {
    /// Callers that carry no credential: each is [`UNAUTHENTICATED`], a reader (every effect,
    /// withheld), until a token or a subject is added.
    pub fn new() -> Self {
        Self {
            tokens: Vec::new(),
            subjects: Vec::new(),
            jwt: None,
            open: Some(Caller::new(UNAUTHENTICATED, Role::Reader)),
        }
    }

    /// A call carrying `authorization: Bearer <token>` is `caller`. Once any token or subject is
    /// known, a call with no credential is refused.
    pub fn token(mut self, token: impl Into<Arc<str>>, caller: Caller) -> Self {
        self.tokens.push((token.into(), caller));
        self.open = None;
        self
    }

    /// A call over a client certificate (verified against the server's client CA) whose
    /// subject is `subject` (RFC 4514, as `openssl x509 -subject -nameopt RFC2253` prints it)
    /// is `caller`.
    pub fn subject(mut self, subject: impl Into<String>, caller: Caller) -> Self {
        self.subjects.push((subject.into(), caller));
        self.open = None;
        self
    }

    /// A call carrying a signed token (`authorization: Bearer <JWT>`) that `verifier` accepts is
    /// the caller its claims name. A call with no credential is then refused.
    pub fn jwt(mut self, verifier: crate::jwt::JwtVerifier) -> Self {
        self.jwt = Some(Arc::new(verifier));
        self.open = None;
        self
    }

    /// Add the credentials of `admin`, keeping whether a call with none is let in: the admin
    /// token alone does not close a server that asks workers for nothing.
    pub fn admin_token(mut self, token: impl Into<Arc<str>>) -> Self {
        self.tokens
            .push((token.into(), Caller::new(ADMIN, Role::Admin)));
        self
    }

    /// Whether any caller may administer leases and budgets.
    pub fn has_admin(&self) -> bool {
        self.jwt.is_some()
            || self
                .tokens
                .iter()
                .map(|(_, c)| c)
                .chain(self.subjects.iter().map(|(_, c)| c))
                .any(Caller::is_admin)
    }

    /// Whether every call must carry a credential.
    pub fn required(&self) -> bool {
        self.open.is_none()
    }

    /// Whether any caller is known by a token, so a client may connect without a certificate.
    pub fn by_token(&self) -> bool {
        !self.tokens.is_empty() || self.jwt.is_some()
    }

    /// The caller a call is, from its bearer token and the subject of the client certificate it
    /// presented (if any). Both present must name the same caller. Tokens compare in time that
    /// does not depend on where they differ.
    pub fn identify(&self, bearer: Option<&str>, subject: Option<&str>) -> Result<Caller, Status> {
        let by_token = match bearer {
            None => None,
            Some(given) => {
                let known = self
                    .tokens
                    .iter()
                    .find(|(t, _)| crate::serve::same(given.as_bytes(), t.as_bytes()))
                    .map(|(_, c)| c.clone());
                match (known, &self.jwt) {
                    (Some(c), _) => Some(c),
                    (None, Some(v)) if crate::jwt::JwtVerifier::looks_like(given) => {
                        Some(v.caller(given)?)
                    }
                    // A server that asks for nothing lets a token it does not know in as
                    // nobody's.
                    (None, _) if self.open.is_some() => None,
                    (None, _) => {
                        return Err(Status::unauthenticated(
                            "the bearer token is wrong: use a token the server was configured \
                             with",
                        ));
                    }
                }
            }
        };
        let by_subject = match subject {
            None => None,
            Some(s) => Some(
                self.subjects
                    .iter()
                    .find(|(want, _)| want == s)
                    .map(|(_, c)| c.clone())
                    .ok_or_else(|| {
                        Status::unauthenticated(format!(
                            "the client certificate's subject {s} is no caller of this server: \
                             name it in a [[auth.callers]] entry (subject = \"{s}\")"
                        ))
                    })?,
            ),
        };
        match (by_token, by_subject) {
            (Some(t), Some(c)) if t.name != c.name => Err(Status::unauthenticated(format!(
                "the bearer token is caller {} but the client certificate is caller {}: send \
                 one credential, or both of one caller",
                t.name, c.name
            ))),
            (Some(t), _) => Ok(t),
            (None, Some(c)) => Ok(c),
            (None, None) => self.open.clone().ok_or_else(|| {
                Status::unauthenticated(
                    "this server needs a credential on every call: `authorization: Bearer \
                     <token>`, or a client certificate its client CA signed",
                )
            }),
        }
    }
}

/// The subject of the client certificate `der` (the leaf the TLS handshake verified), in RFC
/// 4514 form; `None` when it cannot be parsed (the call is then treated as carrying none).
pub fn subject_of(der: &[u8]) -> Option<String> {
    use x509_cert::der::Decode;
    let cert = x509_cert::Certificate::from_der(der).ok()?;
    Some(cert.tbs_certificate.subject.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_names_its_caller_and_no_other() {
        let callers = Callers::new()
            .token("t-a", Caller::new("a", Role::Worker).only(["refunds"]))
            .token("t-b", Caller::new("b", Role::Reader));
        let a = callers.identify(Some("t-a"), None).map(|c| c.name);
        assert_eq!(a.ok().as_deref(), Some("a"));
        assert!(callers.identify(Some("t-"), None).is_err());
        assert!(
            callers.identify(None, None).is_err(),
            "a credential is needed"
        );
        assert!(
            callers.identify(None, Some("CN=b")).is_err(),
            "an unknown subject"
        );
    }

    #[test]
    fn a_token_and_a_certificate_of_two_callers_are_refused() {
        let callers = Callers::new()
            .token("t-a", Caller::new("a", Role::Worker))
            .subject("CN=b", Caller::new("b", Role::Worker));
        assert!(callers.identify(Some("t-a"), Some("CN=b")).is_err());
        let b = callers.identify(None, Some("CN=b")).map(|c| c.name);
        assert_eq!(b.ok().as_deref(), Some("b"));
    }

    #[test]
    fn an_open_server_admits_the_unauthenticated_and_the_admin_token() {
        let callers = Callers::new().admin_token("adm");
        assert!(!callers.required());
        let anyone = callers.identify(None, None);
        assert_eq!(
            anyone.map(|c| (c.name, c.role)).ok(),
            Some((UNAUTHENTICATED.into(), Role::Reader))
        );
        assert!(
            callers
                .identify(Some("adm"), None)
                .is_ok_and(|c| c.is_admin())
        );
        let unknown = callers.identify(Some("other"), None);
        assert!(unknown.is_ok_and(|c| &*c.name == UNAUTHENTICATED && !c.is_admin()));
    }

    #[test]
    fn a_worker_uses_its_targets_and_sees_only_its_own_effects_a_reader_reads_all_acts_on_its_own()
    {
        let w = Caller::new("w", Role::Worker).only(["refunds"]);
        assert!(w.check_target("Submit", "refunds").is_ok());
        assert!(w.check_target("Submit", "payouts").is_err());
        assert!(w.owns(Some("w")) && w.proposed(Some("w")));
        assert!(!w.owns(Some("x")));
        assert!(!w.owns(None));
        let shared = Caller::new(SHARED_WORKER, Role::Worker);
        assert!(shared.owns(None), "effects before proposers were journaled");
        assert!(!shared.owns(Some("w")));
        let r = Caller::new("r", Role::Reader);
        assert!(r.owns(Some("x")), "a reader reads every effect");
        assert!(!r.proposed(Some("x")), "but acts only on its own");
        assert!(!r.is_admin());
    }
}
