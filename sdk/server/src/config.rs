//! The configuration file of `interlock serve` (TOML). Secrets never appear in it: the Stripe key
//! and the bearer token are named by the environment variables that hold them, so the file can be
//! checked in and shown in logs. Every mistake is reported with the field and the fix.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

/// Largest request or response message by default: a refund's payload and premises are a few
/// hundred bytes; a megabyte leaves room for big premises and refuses memory-exhausting frames.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 1024 * 1024;

/// What a graceful shutdown waits beyond the gate's send timeout and settle margin by default:
/// room for the answer's journal write and a lookup.
pub const DRAIN_BEYOND_SEND_MS: u64 = 5_000;

/// The server's configuration, as read from its file.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// Where to listen: `host:port` (default `127.0.0.1:50051`, loopback only) or
    /// `unix:/path/to/gate.sock`.
    #[serde(default = "default_listen")]
    pub listen: String,
    /// Where to serve Prometheus metrics at `/metrics` (`host:port`, e.g. `127.0.0.1:9464`).
    /// None: not served.
    pub metrics_listen: Option<String>,
    /// The journal: a file, or a `postgres://` URL. None: the command line's `--journal`.
    pub journal: Option<String>,
    /// The approver directory (JSON: approvers' public keys, groups, the escalation chain):
    /// effects under a person's signed approval are judged against it at every send, read
    /// again whenever the file changes. Left out: such effects are not sent (answered `RETRY`,
    /// with a bounded number of notes) until a server with the directory sends them.
    pub approvers: Option<PathBuf>,
    /// The journal's PostgreSQL schema (for a `postgres://` journal).
    #[serde(default = "default_schema")]
    pub journal_schema: String,
    /// The largest message the server accepts or sends, in bytes.
    #[serde(default = "default_max_message")]
    pub max_message_bytes: usize,
    /// How long a graceful shutdown waits for requests under way, in milliseconds (default: the
    /// gate's send timeout + settle + 5 s; never less than send timeout + settle, so a send under
    /// way always finishes and is journaled).
    pub drain_ms: Option<u64>,
    /// The gate's timings.
    #[serde(default)]
    pub gate: GateTimings,
    /// A bearer token every call must carry (`authorization: Bearer …`).
    pub auth: Option<AuthConfig>,
    /// TLS for TCP listeners.
    pub tls: Option<TlsConfig>,
    /// The targets, by the name callers use.
    #[serde(default)]
    pub targets: BTreeMap<String, TargetConfig>,
}

/// The gate's timings.
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct GateTimings {
    /// A send is cut off after this long (default: the library's).
    pub send_timeout_ms: Option<u64>,
    /// Margin for bytes still in flight after the send timeout (default: the library's).
    pub settle_ms: Option<u64>,
    /// Suggested wait when an effect is in flight elsewhere (default: the library's).
    pub retry_after_ms: Option<u64>,
    /// How old a premise read may be when the dispatch standing on it is written (default: the
    /// settle margin).
    pub premise_max_age_ms: Option<u64>,
    /// The least deadline a `Submit` or `Recover` call must carry before the server has learned
    /// how long its target's attempts take (default 100 ms); shorter calls are answered
    /// `FAILED_PRECONDITION` with the minimum.
    pub min_call_deadline_ms: Option<u64>,
}

impl GateTimings {
    /// The send timeout, if set.
    pub fn send_timeout(&self) -> Option<Duration> {
        self.send_timeout_ms.map(Duration::from_millis)
    }

    /// The settle margin, if set.
    pub fn settle(&self) -> Option<Duration> {
        self.settle_ms.map(Duration::from_millis)
    }

    /// The suggested retry wait, if set.
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after_ms.map(Duration::from_millis)
    }

    /// The premise read's age bound, if set.
    pub fn premise_max_age(&self) -> Option<Duration> {
        self.premise_max_age_ms.map(Duration::from_millis)
    }

    /// The least call deadline, if set.
    pub fn min_call_deadline(&self) -> Option<Duration> {
        self.min_call_deadline_ms.map(Duration::from_millis)
    }
}

/// Who may call, and how each caller proves it.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    /// The environment variable holding one token shared by every worker: its calls are the
    /// caller `worker` (every target, its own effects). Left out: `INTERLOCK_SERVE_TOKEN` when
    /// no `[[auth.callers]]` is configured, else no shared token.
    pub token_env: Option<String>,
    /// The environment variable holding the token every lease and budget call (`GrantLease`,
    /// `RevokeLease`, `ListLeases`, `SetBudget`, `ListBudgets`, `RemoveBudget`) must carry: the
    /// caller `admin`. A lease is an approval and a budget a limit on them: whoever may submit
    /// effects must not thereby be able to approve them or move their limits. Without it (and
    /// with no caller whose role is admin), that administration over gRPC is off (`interlock
    /// lease` and `interlock budget` still work).
    pub admin_token_env: Option<String>,
    /// Callers, each with a credential of its own, its role and its targets.
    #[serde(default)]
    pub callers: Vec<CallerConfig>,
    /// Callers vouched for by signed tokens (JWT) of the team's identity provider.
    pub jwt: Option<JwtConfig>,
}

/// Signed tokens: a bearer token that is a JWT this key signed, for this audience, by this
/// issuer, still live, is the caller its `sub` names, with the role and targets its claims give.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct JwtConfig {
    /// The `iss` every token must carry.
    pub issuer: String,
    /// The `aud` every token must carry.
    pub audience: String,
    /// The signing algorithm (`ES256`, `RS256`, `EdDSA`, …; no shared-secret `HS*`).
    pub algorithm: String,
    /// The identity provider's public key (PEM).
    pub public_key: PathBuf,
    /// Seconds of clock difference allowed on `exp` and `nbf` (default 30).
    #[serde(default = "default_leeway")]
    pub leeway_s: u64,
    /// The longest a token may live, from now to its `exp`, in seconds (default a day): a token
    /// cannot be revoked before it lapses.
    #[serde(default = "default_max_lifetime")]
    pub max_lifetime_s: u64,
    /// The claim naming the role (default `interlock_role`: `worker`, `reader` or `admin`;
    /// absent: `worker`).
    #[serde(default = "default_role_claim")]
    pub role_claim: String,
    /// The claim listing the targets (default `interlock_targets`: an array of names, or `"*"`;
    /// absent: none).
    #[serde(default = "default_targets_claim")]
    pub targets_claim: String,
}

fn default_leeway() -> u64 {
    30
}

fn default_max_lifetime() -> u64 {
    crate::jwt::DEFAULT_MAX_LIFETIME_S
}

fn default_role_claim() -> String {
    "interlock_role".into()
}

fn default_targets_claim() -> String {
    "interlock_targets".into()
}

impl AuthConfig {
    /// The environment variable of the shared worker token, if there is one.
    pub fn shared_token_env(&self) -> Option<&str> {
        match (
            &self.token_env,
            self.callers.is_empty() && self.jwt.is_none(),
        ) {
            (Some(env), _) => Some(env),
            (None, true) => Some("INTERLOCK_SERVE_TOKEN"),
            (None, false) => None,
        }
    }
}

/// One caller: its name (what the journal records as the proposer of its effects and the
/// holder of its claims, and what a lease's spenders name), one credential, and what it may do.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CallerConfig {
    /// Its name.
    pub name: String,
    /// The environment variable holding its bearer token.
    pub token_env: Option<String>,
    /// The subject of its client certificate (RFC 4514, e.g. `CN=refund-worker,O=Shop`), which
    /// `[tls] client_ca` must have signed.
    pub subject: Option<String>,
    /// `worker` (the default: its own effects), `reader` (every effect, withheld) or `admin`.
    #[serde(default = "default_role")]
    pub role: crate::callers::Role,
    /// The targets it may decide, submit to and recover on; left out: every target.
    pub targets: Option<Vec<String>>,
}

/// A certificate and key in PEM files.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// The certificate chain (PEM).
    pub cert: PathBuf,
    /// The private key (PEM).
    pub key: PathBuf,
    /// The CA (PEM) that signs callers' client certificates: a caller named by `subject` in
    /// `[[auth.callers]]` connects with a certificate it signed. Left out: no client
    /// certificates are asked for.
    pub client_ca: Option<PathBuf>,
}

/// One target.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
#[non_exhaustive]
pub enum TargetConfig {
    /// Stripe refunds (`POST /v1/refunds`), or a server that speaks the same API.
    StripeRefunds {
        /// The tier the service is trusted at: 1 (dedupes by key inside 24 h, lookup), 2 (lookup
        /// only) or 3 (neither). Default 1.
        #[serde(default = "default_tier")]
        tier: u8,
        /// The API's base URL (default `STRIPE_API_BASE`, else `https://api.stripe.com`).
        #[serde(default = "default_stripe_base")]
        api_base: String,
        /// The environment variable holding the secret key (default `STRIPE_SECRET_KEY`).
        #[serde(default = "default_stripe_key_env")]
        secret_key_env: String,
        /// The shop's order service, if any (`GET {shop_url}/shop/orders/{id}`).
        shop_url: Option<String>,
        /// Rules over the premises, judged at decide, at every dispatch and at recovery
        /// (`"amount_paid - refunded_by_others >= payload.amount"`): an effect whose facts do
        /// not satisfy one is refused `premise_rule`.
        #[serde(default)]
        rules: Vec<String>,
    },
    /// A service of the team's own over HTTP, described field by field (`docs/targets.md`): the
    /// request, how it dedupes, how to look a key up, its premises and how its answers map. Its
    /// tier follows from what is configured.
    Http(Box<interlock_http::HttpTargetConfig>),
}

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read the server configuration {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML or has unknown or mistyped fields.
    #[error("the server configuration {path} is not valid: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What the parser said (line, column, field).
        message: String,
    },
    /// A value is out of range or inconsistent.
    #[error("the server configuration {path}: {field}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The field.
        field: String,
        /// What is wrong and how to fix it.
        message: String,
    },
}

impl ServerConfig {
    /// Read and check a configuration file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text, path)
    }

    /// Parse and check configuration text; `path` names it in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let cfg: Self = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_owned(),
            message: without_passwords(&e.to_string()),
        })?;
        cfg.check(path)?;
        Ok(cfg)
    }

    fn check(&self, path: &Path) -> Result<(), ConfigError> {
        let invalid = |field: &str, message: String| ConfigError::Invalid {
            path: path.to_owned(),
            field: field.to_owned(),
            message,
        };
        crate::serve::Listen::parse(&self.listen).map_err(|m| invalid("listen", m))?;
        if !(1024..=64 * 1024 * 1024).contains(&self.max_message_bytes) {
            return Err(invalid(
                "max_message_bytes",
                format!(
                    "{} is out of range; use 1024 to 67108864 (default {DEFAULT_MAX_MESSAGE_BYTES})",
                    self.max_message_bytes
                ),
            ));
        }
        if self.targets.is_empty() {
            return Err(invalid(
                "targets",
                "no target is configured; add one, e.g. [targets.refunds] with kind = \
                 \"stripe_refunds\""
                    .into(),
            ));
        }
        for (name, t) in &self.targets {
            crate::targets::check_name(name).map_err(|m| invalid("targets", m))?;
            match t {
                TargetConfig::StripeRefunds {
                    tier,
                    api_base,
                    rules,
                    ..
                } => {
                    for rule in rules {
                        rule.parse::<interlock::core::rules::Rule>().map_err(|e| {
                            invalid(&format!("targets.{name}.rules"), e.to_string())
                        })?;
                    }
                    if !(1..=3).contains(tier) {
                        return Err(invalid(
                            &format!("targets.{name}.tier"),
                            format!("{tier} is not a tier; use 1, 2 or 3"),
                        ));
                    }
                    if !(api_base.starts_with("http://") || api_base.starts_with("https://")) {
                        return Err(invalid(
                            &format!("targets.{name}.api_base"),
                            format!("{api_base:?} must start with http:// or https://"),
                        ));
                    }
                }
                TargetConfig::Http(http) => {
                    http.check()
                        .map_err(|m| invalid(&format!("targets.{name}.{}", m.field), m.message))?;
                }
            }
        }
        if let Some(auth) = &self.auth {
            self.check_callers(auth, path)?;
        }
        if let Ok(crate::serve::Listen::Tcp(addr)) = crate::serve::Listen::parse(&self.listen) {
            // The same rule the server applies where it binds (a --listen flag included).
            let reach = interlock::reach::Reach {
                tls: self.tls.is_some(),
                authenticated: self.auth.is_some(),
                proxies: Vec::new(),
            };
            reach
                .check("the gate server", addr, crate::serve::EXPOSED_FIX)
                .map_err(|e| invalid("listen", e.to_string()))?;
        }
        if self.tls.is_some() && self.listen.starts_with("unix:") {
            return Err(invalid(
                "tls",
                "TLS is for TCP listeners; a unix socket is protected by its file permissions"
                    .into(),
            ));
        }
        Ok(())
    }

    fn check_callers(&self, auth: &AuthConfig, path: &Path) -> Result<(), ConfigError> {
        let invalid = |field: String, message: String| ConfigError::Invalid {
            path: path.to_owned(),
            field,
            message,
        };
        let mut names = std::collections::BTreeSet::new();
        for reserved in [
            crate::callers::SHARED_WORKER,
            crate::callers::ADMIN,
            crate::callers::UNAUTHENTICATED,
        ] {
            names.insert(reserved.to_owned());
        }
        let client_ca = self.tls.as_ref().and_then(|t| t.client_ca.as_ref());
        let mut subjects = std::collections::BTreeSet::new();
        for (i, c) in auth.callers.iter().enumerate() {
            let field = |f: &str| format!("auth.callers[{i}].{f}");
            if c.name.starts_with(crate::jwt::PREFIX) {
                return Err(invalid(
                    field("name"),
                    format!(
                        "{} begins with {}, which names the callers signed tokens vouch for: \
                         name it otherwise",
                        c.name,
                        crate::jwt::PREFIX
                    ),
                ));
            }
            if !crate::callers::valid_name(&c.name) {
                return Err(invalid(
                    field("name"),
                    format!(
                        "{:?} is not a caller name: use 1 to 128 letters, digits and - _ . @ :",
                        c.name
                    ),
                ));
            }
            if !names.insert(c.name.clone()) {
                return Err(invalid(
                    field("name"),
                    format!(
                        "{} is taken (by another caller, or by worker, admin or {} which the \
                         server's own tokens use): give every caller a name of its own",
                        c.name,
                        crate::callers::UNAUTHENTICATED
                    ),
                ));
            }
            match (&c.token_env, &c.subject) {
                (Some(_), Some(_)) | (None, None) => {
                    return Err(invalid(
                        field("token_env"),
                        format!(
                            "caller {} needs exactly one credential: token_env (a bearer \
                             token) or subject (a client certificate)",
                            c.name
                        ),
                    ));
                }
                (None, Some(subject)) if !subjects.insert(subject.clone()) => {
                    return Err(invalid(
                        field("subject"),
                        format!(
                            "caller {} has the subject {subject} of another caller: a \
                             certificate could only be one of them",
                            c.name
                        ),
                    ));
                }
                (None, Some(_)) if client_ca.is_none() => {
                    return Err(invalid(
                        field("subject"),
                        format!(
                            "caller {} is known by its client certificate, but no [tls] \
                             client_ca is configured to verify it: set tls.client_ca",
                            c.name
                        ),
                    ));
                }
                _ => {}
            }
            for t in c.targets.iter().flatten() {
                if !self.targets.contains_key(t) {
                    return Err(invalid(
                        field("targets"),
                        format!(
                            "caller {} is allowed target {t}, which is not configured; the \
                             targets are {}",
                            c.name,
                            self.targets.keys().cloned().collect::<Vec<_>>().join(", ")
                        ),
                    ));
                }
            }
        }
        if let Some(j) = &auth.jwt {
            if j.issuer.is_empty() || j.audience.is_empty() {
                return Err(invalid(
                    "auth.jwt".into(),
                    "name the issuer and the audience every token must carry".into(),
                ));
            }
            if j.algorithm.starts_with("HS") {
                return Err(invalid(
                    "auth.jwt.algorithm".into(),
                    format!(
                        "{} is a shared-secret algorithm: whoever can check such a token can \
                         make one; use a public-key algorithm (ES256, RS256, EdDSA)",
                        j.algorithm
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// `text` with the password of every URL in it hidden: a parse error quotes the offending line,
/// which may be a `postgres://user:password@…` journal.
fn without_passwords(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let (head, tail) = rest.split_at(i + 3);
        out.push_str(head);
        let end = tail
            .find(|c: char| c.is_whitespace() || c == '"' || c == '\'')
            .unwrap_or(tail.len());
        let (authority, after) = tail.split_at(end);
        match (authority.find('@'), authority.find(':')) {
            (Some(at), Some(colon)) if colon < at => {
                out.push_str(&authority[..colon]);
                out.push_str(":***");
                out.push_str(&authority[at..]);
            }
            _ => out.push_str(authority),
        }
        rest = after;
    }
    out.push_str(rest);
    out
}

fn default_listen() -> String {
    "127.0.0.1:50051".into()
}

fn default_schema() -> String {
    "interlock".into()
}

fn default_max_message() -> usize {
    DEFAULT_MAX_MESSAGE_BYTES
}

fn default_role() -> crate::callers::Role {
    crate::callers::Role::Worker
}

fn default_tier() -> u8 {
    1
}

/// Left out of the file: `STRIPE_API_BASE`, as the worker and the command line read it, else
/// Stripe's own.
fn default_stripe_base() -> String {
    std::env::var("STRIPE_API_BASE").unwrap_or_else(|_| "https://api.stripe.com".into())
}

fn default_stripe_key_env() -> String {
    "STRIPE_SECRET_KEY".into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ServerConfig, ConfigError> {
        ServerConfig::parse(text, Path::new("serve.toml"))
    }

    #[test]
    fn the_example_configuration_is_valid() -> Result<(), ConfigError> {
        let cfg = parse(include_str!("../interlock-serve.example.toml"))?;
        assert_eq!(
            cfg.auth.and_then(|a| a.admin_token_env).as_deref(),
            Some("INTERLOCK_ADMIN_TOKEN")
        );
        assert!(cfg.targets.contains_key("refunds"));
        Ok(())
    }

    #[test]
    fn a_parse_error_never_shows_a_journal_password() {
        let text = "journal = \"postgres://ops:hunter2@db:5432/pay\"\nlisten = 5\n";
        let e = parse(text).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("listen"), "{e}");
        assert!(!e.contains("hunter2"), "{e}");
        assert_eq!(
            without_passwords("at postgres://ops:hunter2@db/x and http://h/y"),
            "at postgres://ops:***@db/x and http://h/y"
        );
    }

    #[test]
    fn callers_each_name_one_credential_a_role_and_their_targets() -> Result<(), ConfigError> {
        let cfg = parse(
            "[auth]\nadmin_token_env = \"ADMIN\"\n\
             [[auth.callers]]\nname = \"refund-worker\"\ntoken_env = \"RW\"\ntargets = [\"refunds\"]\n\
             [[auth.callers]]\nname = \"dash\"\nsubject = \"CN=dash,O=Shop\"\nrole = \"reader\"\n\
             [tls]\ncert = \"c.pem\"\nkey = \"k.pem\"\nclient_ca = \"ca.pem\"\n\
             [targets.refunds]\nkind = \"stripe_refunds\"\n",
        )?;
        let auth = cfg
            .auth
            .as_ref()
            .map(|a| (a.shared_token_env(), a.callers.len()));
        // With callers of their own, no shared worker token is asked for.
        assert_eq!(auth, Some((None, 2)));
        let by_jwt = parse(
            "[auth.jwt]\nissuer = \"https://idp\"\naudience = \"gate\"\nalgorithm = \"ES256\"\n\
             public_key = \"idp.pem\"\n[targets.r]\nkind = \"stripe_refunds\"\n",
        )?;
        let jwt = by_jwt.auth.as_ref().and_then(|a| a.jwt.clone());
        assert_eq!(
            jwt.map(|j| (j.leeway_s, j.role_claim, j.targets_claim)),
            Some((30, "interlock_role".into(), "interlock_targets".into()))
        );
        assert_eq!(
            by_jwt.auth.as_ref().and_then(AuthConfig::shared_token_env),
            None
        );
        let only_shared = parse("[auth]\n[targets.r]\nkind = \"stripe_refunds\"\n")?;
        assert_eq!(
            only_shared
                .auth
                .as_ref()
                .and_then(AuthConfig::shared_token_env),
            Some("INTERLOCK_SERVE_TOKEN")
        );
        Ok(())
    }

    #[test]
    fn a_minimal_file_takes_loopback_and_the_defaults() -> Result<(), ConfigError> {
        let cfg = parse("[targets.refunds]\nkind = \"stripe_refunds\"\n")?;
        assert_eq!(cfg.listen, "127.0.0.1:50051");
        assert_eq!(cfg.max_message_bytes, DEFAULT_MAX_MESSAGE_BYTES);
        assert_eq!(
            cfg.targets.get("refunds"),
            Some(&TargetConfig::StripeRefunds {
                tier: 1,
                api_base: "https://api.stripe.com".into(),
                secret_key_env: "STRIPE_SECRET_KEY".into(),
                shop_url: None,
                rules: Vec::new(),
            })
        );
        Ok(())
    }

    #[test]
    fn mistakes_name_the_field_and_the_fix() {
        let cases = [
            (
                "listen = \"0.0.0.0\"\n[targets.r]\nkind = \"stripe_refunds\"",
                "listen",
            ),
            (
                "[targets.r]\nkind = \"stripe_refunds\"\ntier = 4",
                "targets.r.tier",
            ),
            ("[targets.r]\nkind = \"paypal\"", "unknown variant"),
            (
                "[targets.r]\nkind = \"http\"\n[targets.r.send]\nurl = \"http://{host}/x\"",
                "targets.r.send.url",
            ),
            (
                "[targets.r]\nkind = \"http\"\nretries = 3\n[targets.r.send]\nurl = \"http://x/\"",
                "unknown field",
            ),
            (
                "[targets.r]\nkind = \"http\"\nrules = [\"a >> 1\"]\n[targets.r.send]\nurl = \"http://x/\"",
                "targets.r.rules",
            ),
            (
                "[targets.r]\nkind = \"stripe_refunds\"\nrules = [\"amount_paid >> 1\"]",
                "targets.r.rules",
            ),
            (
                "[targets.r]\nkind = \"stripe_refunds\"\nsecret_key = \"sk_live\"",
                "unknown field",
            ),
            ("listen = \"127.0.0.1:1\"", "no target is configured"),
            (
                "max_message_bytes = 10\n[targets.r]\nkind = \"stripe_refunds\"",
                "out of range",
            ),
            (
                "listen = \"unix:/tmp/g.sock\"\n[tls]\ncert = \"c\"\nkey = \"k\"\n[targets.r]\nkind = \"stripe_refunds\"",
                "TLS is for TCP",
            ),
            (
                "[targets.\"a b\"]\nkind = \"stripe_refunds\"",
                "target name",
            ),
            (
                "[auth]\n[[auth.callers]]\nname = \"a\"\nsubject = \"CN=a\"\n[targets.r]\nkind = \"stripe_refunds\"",
                "client_ca",
            ),
            (
                "[auth]\n[[auth.callers]]\nname = \"a\"\n[targets.r]\nkind = \"stripe_refunds\"",
                "exactly one credential",
            ),
            (
                "[auth]\n[[auth.callers]]\nname = \"a\"\ntoken_env = \"T\"\ntargets = [\"x\"]\n[targets.r]\nkind = \"stripe_refunds\"",
                "auth.callers[0].targets",
            ),
            (
                "[auth]\n[[auth.callers]]\nname = \"admin\"\ntoken_env = \"T\"\n[targets.r]\nkind = \"stripe_refunds\"",
                "is taken",
            ),
            (
                "[auth]\n[[auth.callers]]\nname = \"a b\"\ntoken_env = \"T\"\n[targets.r]\nkind = \"stripe_refunds\"",
                "not a caller name",
            ),
            (
                "[auth.jwt]\nissuer = \"i\"\naudience = \"a\"\nalgorithm = \"HS256\"\npublic_key = \"k\"\n[targets.r]\nkind = \"stripe_refunds\"",
                "shared-secret",
            ),
            (
                "[auth.jwt]\nissuer = \"\"\naudience = \"a\"\nalgorithm = \"ES256\"\npublic_key = \"k\"\n[targets.r]\nkind = \"stripe_refunds\"",
                "auth.jwt",
            ),
            (
                "[auth]\n[[auth.callers]]\nname = \"a\"\nsubject = \"CN=x\"\n[[auth.callers]]\nname = \"b\"\nsubject = \"CN=x\"\n\
                 [tls]\ncert = \"c\"\nkey = \"k\"\nclient_ca = \"ca\"\n[targets.r]\nkind = \"stripe_refunds\"",
                "of another caller",
            ),
            (
                "[auth]\n[[auth.callers]]\nname = \"a\"\ntoken_env = \"T\"\nrole = \"root\"\n[targets.r]\nkind = \"stripe_refunds\"",
                "unknown variant",
            ),
        ];
        for (text, wanted) in cases {
            match parse(text) {
                Ok(_) => panic!("{text:?} was accepted"),
                Err(e) => assert!(
                    e.to_string().contains(wanted),
                    "{text:?}: {e} does not name {wanted:?}"
                ),
            }
        }
    }
}
