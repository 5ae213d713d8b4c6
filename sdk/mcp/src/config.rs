//! The proxy's configuration (TOML): per gated tool, the arguments that name the approved request,
//! the argument that names the approval, the read tool whose answer the call was decided on, and
//! how the server can be asked whether the call already happened. The tier is not written down: it
//! follows from what the server can do, so a file cannot claim more than the server gives. Every
//! mistake names its field and the fix, before anything is started.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use interlock::core::Tier;
use serde::Deserialize;

/// The proxy's configuration, as read from its file.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ProxyConfig {
    /// The journal: a file, or a `postgres://` URL. None: the command line's `--journal`.
    pub journal: Option<String>,
    /// The PostgreSQL schema that holds the journal (for a `postgres://` journal).
    #[serde(default = "default_schema")]
    pub journal_schema: String,
    /// How long one send (the gated `tools/call`) may take before it is cut off as unknown.
    pub send_timeout_ms: Option<u64>,
    /// The largest message the proxy reads from the client; a longer line is refused unread.
    #[serde(default = "default_max_message_bytes")]
    pub max_message_bytes: usize,
    /// The gated tools, by the name the server lists them under. Every other tool passes through.
    #[serde(default)]
    pub tools: BTreeMap<String, GatedTool>,
}

/// One gated tool.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct GatedTool {
    /// The effect's target name in the journal and on receipts (default: `mcp:TOOL`).
    pub target: Option<String>,
    /// The arguments whose values name the approved request: two calls with the same values are
    /// the same action, sent at most once.
    pub key: Vec<String>,
    /// The argument that names the approval (a lease id), checked live in the journal.
    pub lease: String,
    /// The argument the proxy fills with the effect's id, for the server to deduplicate on or to
    /// record where `lookup` can find it.
    pub idempotency_argument: Option<String>,
    /// A field of a tool error's structured content that, when `true`, says the call was
    /// definitely not carried out (Stripe's 4xx). Without it every tool error is unknown: the
    /// call may have acted, so it is settled by the tier, never taken as a failure.
    pub definite_error_field: Option<String>,
    /// Whether a JSON-RPC error -32600 to -32602 (invalid request, unknown method, invalid
    /// parameters: MCP's protocol errors, answered before a tool runs) means the call was not
    /// carried out. MCP says so; set it false for a server whose tools answer such an error
    /// after acting, and every JSON-RPC error is then unknown.
    #[serde(default = "yes")]
    pub protocol_errors_definite: bool,
    /// The server deduplicates calls on `idempotency_argument` (a retry with the same id does
    /// not act twice): tier 1.
    #[serde(default)]
    pub dedupes: bool,
    /// How long the server remembers an id it deduplicates on, in hours (with `dedupes`): the
    /// gate checks at start that a resend can never outlive it.
    pub dedupe_window_hours: Option<u64>,
    /// A read tool answering "did this call already happen?" given the effect's id: tier 2.
    pub lookup: Option<Lookup>,
    /// A read tool whose answer the call was decided on, read again before every send.
    pub premises: Option<PremiseRead>,
    /// An HTTP target table (the gate server's `kind = "http"` table, `docs/targets.md`): the
    /// proxy offers the tool itself and sends its calls to the HTTP service the table
    /// describes, never to the MCP server. The call's arguments, less the lease argument, are
    /// the table's payload; the table says how the service dedupes, is looked up and is read.
    pub http: Option<Box<interlock_http::HttpTargetConfig>>,
    /// What the tool does, for the model (a tool with `http` only; the server describes its own).
    pub description: Option<String>,
}

fn yes() -> bool {
    true
}

fn default_schema() -> String {
    "interlock".into()
}

/// 4 MiB: a tool call's arguments, with room to spare; a longer line is refused unread.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 4 << 20;

fn default_max_message_bytes() -> usize {
    DEFAULT_MAX_MESSAGE_BYTES
}

/// A read tool that finds an effect by its id.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Lookup {
    /// The tool.
    pub tool: String,
    /// Its argument that takes the effect's id.
    pub argument: String,
}

/// A read tool whose answer must not have moved between the decision and the send.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PremiseRead {
    /// The tool.
    pub tool: String,
    /// Its arguments, each filled from the gated call's argument of the given name
    /// (`{ order_id = "order" }`: the read's `order_id` is the call's `order`).
    #[serde(default)]
    pub arguments: BTreeMap<String, String>,
    /// The fields of its answer that must not change (`a.b` reaches into an object).
    pub fields: Vec<String>,
    /// Its argument the proxy fills with the effect's id, so the read leaves the effect's own
    /// result out (a refund must not count itself among the refunds already made, or a resend
    /// after a crash would find its own refund and stop).
    pub effect_id_argument: Option<String>,
    /// The repair offered when they do.
    pub repair: Option<Repair>,
}

/// A repair: the call with one argument lowered to what a premise now allows — the refund of
/// what is left, as `still_fits` offers for refunds.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Repair {
    /// The gated call's argument to lower.
    pub argument: String,
    /// The premise field it may not exceed.
    pub at_most: String,
}

impl GatedTool {
    /// The tier that follows from what the server can do: 1 when it deduplicates on the
    /// effect's id, 2 when a lookup finds it, 3 when neither.
    pub fn tier(&self) -> Tier {
        if let Some(http) = &self.http {
            return http.tier();
        }
        match (&self.idempotency_argument, self.dedupes, &self.lookup) {
            (Some(_), true, _) => Tier::One,
            (Some(_), false, Some(_)) => Tier::Two,
            _ => Tier::Three,
        }
    }

    /// The effect's target name: `target`, or `mcp:TOOL` (`http:TOOL` for a tool sent over
    /// HTTP) — a name no target of `interlock serve` or a worker takes by accident: an effect is
    /// recovered only through a target of the name it was journaled under, so a tool moved from
    /// the MCP server to an HTTP table never recovers the server's calls over HTTP (where its
    /// lookup would not find them, and would resend).
    pub fn target_name(&self, tool: &str) -> String {
        let kind = if self.http.is_some() { "http" } else { "mcp" };
        self.target
            .clone()
            .unwrap_or_else(|| format!("{kind}:{tool}"))
    }
}

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read the MCP proxy configuration {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML or has unknown or mistyped fields.
    #[error("the MCP proxy configuration {path} is not valid: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What the parser said (line, column, field).
        message: String,
    },
    /// A value is missing, out of place or inconsistent.
    #[error("the MCP proxy configuration {path}: {field}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The field, as a path (`tools.create_refund.lookup.tool`).
        field: String,
        /// What is wrong and how to fix it.
        message: String,
    },
}

impl ProxyConfig {
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
        let cfg: Self = toml::from_str(text).map_err(|e| {
            let json = text.trim_start().starts_with('{')
                || path
                    .extension()
                    .is_some_and(|x| x.eq_ignore_ascii_case("json"));
            let hint = if json {
                "\nThis looks like JSON; the proxy reads TOML (interlock.mcp.toml, docs/mcp.md): \
                 each gated tool is a [tools.NAME] table"
            } else {
                ""
            };
            ConfigError::Parse {
                path: path.to_owned(),
                message: format!("{e}{hint}"),
            }
        })?;
        cfg.check(path)?;
        Ok(cfg)
    }

    fn check(&self, path: &Path) -> Result<(), ConfigError> {
        let invalid = |field: String, message: String| ConfigError::Invalid {
            path: path.to_owned(),
            field,
            message,
        };
        if self.journal.as_deref().is_some_and(|j| j.trim().is_empty()) {
            return Err(invalid(
                "journal".into(),
                "is empty: name a journal file or a postgres:// URL, or leave it out for the \
                 command line's --journal"
                    .into(),
            ));
        }
        if self.max_message_bytes < 1024 {
            return Err(invalid(
                "max_message_bytes".into(),
                format!(
                    "{} is too small for a tool call: use at least 1024 (default {})",
                    self.max_message_bytes, DEFAULT_MAX_MESSAGE_BYTES
                ),
            ));
        }
        if self.send_timeout_ms == Some(0) {
            return Err(invalid(
                "send_timeout_ms".into(),
                "is 0: give the send time to answer, or leave it out for the gate's default".into(),
            ));
        }
        if self.tools.is_empty() {
            return Err(invalid(
                "tools".into(),
                "no tool is gated: add a [tools.NAME] table for each tool whose calls go \
                 through the gate"
                    .into(),
            ));
        }
        let mut targets = std::collections::BTreeMap::new();
        for (name, t) in &self.tools {
            if let Some(other) = targets.insert(t.target_name(name), name) {
                return Err(invalid(
                    format!("tools.{name}.target"),
                    format!(
                        "{:?} is also tool {other}'s target: each gated tool needs a target of \
                         its own, or an effect could be recovered through the other tool",
                        t.target_name(name)
                    ),
                ));
            }
        }
        for (name, t) in &self.tools {
            let at = |f: &str| format!("tools.{name}.{f}");
            let blank = |s: &str| s.trim().is_empty();
            if blank(name) {
                return Err(invalid("tools".into(), "a tool's name is empty".into()));
            }
            if t.key.is_empty() {
                return Err(invalid(
                    at("key"),
                    "is empty: name the arguments whose values name the approved request (the \
                     same values are the same action)"
                        .into(),
                ));
            }
            if let Some(k) = t.key.iter().find(|k| blank(k)) {
                return Err(invalid(
                    at("key"),
                    format!("holds an empty argument name ({k:?})"),
                ));
            }
            let mut seen = std::collections::BTreeSet::new();
            if let Some(k) = t.key.iter().find(|k| !seen.insert(k.as_str())) {
                return Err(invalid(at("key"), format!("names {k:?} twice")));
            }
            if blank(&t.lease) {
                return Err(invalid(
                    at("lease"),
                    "is empty: name the argument that carries the approval's lease id".into(),
                ));
            }
            if t.key.contains(&t.lease) {
                return Err(invalid(
                    at("key"),
                    format!(
                        "names the lease argument {:?}: an approval does not name the request \
                         (another approval for the same request is the same request)",
                        t.lease
                    ),
                ));
            }
            if t.target.as_deref().is_some_and(blank) {
                return Err(invalid(
                    at("target"),
                    "is empty: leave it out to use the tool's name".into(),
                ));
            }
            if let Some(http) = &t.http {
                t.check_http(http).map_err(|(f, m)| invalid(at(&f), m))?;
                continue;
            }
            if t.description.is_some() {
                return Err(invalid(
                    at("description"),
                    "is for a tool the proxy offers itself (with http): the MCP server \
                     describes its own tools"
                        .into(),
                ));
            }
            let id_arg = t.idempotency_argument.as_deref();
            if id_arg.is_some_and(blank) {
                return Err(invalid(
                    at("idempotency_argument"),
                    "is empty: name the argument the proxy fills with the effect's id".into(),
                ));
            }
            if let Some(a) = id_arg {
                if t.key.iter().any(|k| k == a) {
                    return Err(invalid(
                        at("idempotency_argument"),
                        format!(
                            "{a:?} is also in key: the proxy fills it with the effect's id, so it \
                             cannot also name the request"
                        ),
                    ));
                }
                if t.lease == a {
                    return Err(invalid(
                        at("idempotency_argument"),
                        format!("{a:?} is also the lease argument"),
                    ));
                }
            }
            match (t.dedupes, t.dedupe_window_hours) {
                (true, None | Some(0)) => {
                    return Err(invalid(
                        at("dedupe_window_hours"),
                        "is missing or 0 but dedupes is true: say how long the server remembers \
                         an id (Stripe: 24), so the gate can check a resend never outlives it"
                            .into(),
                    ));
                }
                (false, Some(_)) => {
                    return Err(invalid(
                        at("dedupe_window_hours"),
                        "is set but dedupes is not: set dedupes = true if the server \
                         deduplicates, or leave the window out"
                            .into(),
                    ));
                }
                _ => {}
            }
            if let Some(f) = t.definite_error_field.as_deref()
                && field_path(f).is_none()
            {
                return Err(invalid(
                    at("definite_error_field"),
                    format!("{f:?} is not a field path (names joined by dots)"),
                ));
            }
            if t.dedupes && id_arg.is_none() {
                return Err(invalid(
                    at("dedupes"),
                    "is true but no idempotency_argument is named: a server can only \
                     deduplicate on an id the proxy gives it"
                        .into(),
                ));
            }
            if let Some(l) = &t.lookup {
                if id_arg.is_none() {
                    return Err(invalid(
                        at("lookup"),
                        "needs idempotency_argument: the call must carry the effect's id for the \
                         lookup to find it"
                            .into(),
                    ));
                }
                for (f, v) in [("lookup.tool", &l.tool), ("lookup.argument", &l.argument)] {
                    if blank(v) {
                        return Err(invalid(at(f), "is empty".into()));
                    }
                }
                if self.tools.contains_key(&l.tool) {
                    return Err(invalid(
                        at("lookup.tool"),
                        format!(
                            "{:?} is itself gated: a lookup must be a read that acts on nothing",
                            l.tool
                        ),
                    ));
                }
            }
            if let Some(p) = &t.premises {
                if blank(&p.tool) {
                    return Err(invalid(at("premises.tool"), "is empty".into()));
                }
                if self.tools.contains_key(&p.tool) {
                    return Err(invalid(
                        at("premises.tool"),
                        format!(
                            "{:?} is itself gated: premises must be read from a tool that acts \
                             on nothing",
                            p.tool
                        ),
                    ));
                }
                if p.fields.is_empty() {
                    return Err(invalid(
                        at("premises.fields"),
                        "is empty: name the fields of the read's answer that must not change"
                            .into(),
                    ));
                }
                if let Some(f) = p.fields.iter().find(|f| field_path(f).is_none()) {
                    return Err(invalid(
                        at("premises.fields"),
                        format!("{f:?} is not a field path (names joined by dots)"),
                    ));
                }
                if let Some(e) = &p.effect_id_argument {
                    if blank(e) {
                        return Err(invalid(
                            at("premises.effect_id_argument"),
                            "is empty".into(),
                        ));
                    }
                    if p.arguments.contains_key(e) {
                        return Err(invalid(
                            at("premises.effect_id_argument"),
                            format!("{e:?} is also filled from the call in premises.arguments"),
                        ));
                    }
                }
                if let Some((read_arg, _)) = p.arguments.iter().find(|(a, c)| blank(a) || blank(c))
                {
                    return Err(invalid(
                        at("premises.arguments"),
                        format!(
                            "the read's argument {read_arg:?} or the call's it comes from is empty"
                        ),
                    ));
                }
                if let Some(r) = &p.repair {
                    if blank(&r.argument) {
                        return Err(invalid(at("premises.repair.argument"), "is empty".into()));
                    }
                    if !p.fields.contains(&r.at_most) {
                        return Err(invalid(
                            at("premises.repair.at_most"),
                            format!(
                                "{:?} is not one of premises.fields: a repair may only rest on \
                                 a field the gate reads again",
                                r.at_most
                            ),
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

impl GatedTool {
    /// A tool sent through an HTTP table: the table says what the MCP fields would, and the
    /// arguments that name the request are fields of its payload.
    fn check_http(&self, http: &interlock_http::HttpTargetConfig) -> Result<(), (String, String)> {
        let server_side = [
            ("idempotency_argument", self.idempotency_argument.is_some()),
            ("definite_error_field", self.definite_error_field.is_some()),
            ("dedupes", self.dedupes),
            ("dedupe_window_hours", self.dedupe_window_hours.is_some()),
            ("lookup", self.lookup.is_some()),
            ("premises", self.premises.is_some()),
        ];
        if let Some((f, _)) = server_side.iter().find(|(_, set)| *set) {
            return Err((
                (*f).to_owned(),
                "is for a tool of the MCP server; this tool is sent through http: say it in the \
                 table (http.idempotency, http.lookup, http.premises, http.answers)"
                    .to_owned(),
            ));
        }
        http.check()
            .map_err(|m| (format!("http.{}", m.field), m.message))?;
        if http.payload.is_empty() {
            return Err((
                "http.payload".into(),
                "is missing: an agent's call is the payload, so declare its fields and types \
                 (they are the tool's schema, and any other argument is refused)"
                    .into(),
            ));
        }
        if http.payload.contains_key(&self.lease) {
            return Err((
                "lease".into(),
                format!(
                    "{:?} is a field of http.payload: the lease argument names the approval and \
                     is not sent, so it needs a name of its own",
                    self.lease
                ),
            ));
        }
        for k in &self.key {
            let why = match http.payload.get(k) {
                None => {
                    "is not a field of http.payload: the arguments that name the request \
                         must be sent with it"
                }
                Some(ty) if ty.optional => {
                    "is optional in http.payload: the arguments that name the request must \
                     always be given"
                }
                Some(_) => continue,
            };
            return Err(("key".into(), format!("{k:?} {why}")));
        }
        Ok(())
    }
}

/// The names a field path (`a.b.c`) walks, if it is one.
pub fn field_path(path: &str) -> Option<Vec<&str>> {
    let parts: Vec<&str> = path.split('.').collect();
    parts
        .iter()
        .all(|p| !p.trim().is_empty() && p.trim() == *p)
        .then_some(parts)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use super::*;

    const FULL: &str = r#"
journal = "interlock.db"

[tools.create_refund]
target = "payments"
key = ["request_id"]
lease = "approval"
idempotency_argument = "idempotency_key"
lookup = { tool = "find_refund", argument = "idempotency_key" }

[tools.create_refund.premises]
tool = "get_order"
arguments = { order_id = "order_id" }
fields = ["status", "refund.remaining"]
repair = { argument = "amount", at_most = "refund.remaining" }
"#;

    fn parse(text: &str) -> Result<ProxyConfig, ConfigError> {
        ProxyConfig::parse(text, Path::new("interlock.mcp.toml"))
    }

    /// The field and message of an invalid configuration.
    fn refused(text: &str) -> (String, String) {
        match parse(text) {
            Err(ConfigError::Invalid { field, message, .. }) => (field, message),
            other => panic!("not refused as invalid: {other:?}"),
        }
    }

    #[test]
    fn a_full_configuration_reads_and_its_tier_follows_from_what_the_server_can_do() {
        let cfg = parse(FULL).unwrap();
        let t = &cfg.tools["create_refund"];
        assert_eq!(t.tier(), Tier::Two);
        assert_eq!(t.target_name("create_refund"), "payments");
        let mut unnamed = t.clone();
        unnamed.target = None;
        assert_eq!(unnamed.target_name("create_refund"), "mcp:create_refund");
        let premises = t.premises.as_ref().unwrap();
        assert_eq!(premises.arguments["order_id"], "order_id");
        let mut one = t.clone();
        one.dedupes = true;
        one.dedupe_window_hours = Some(24);
        assert_eq!(one.tier(), Tier::One);
        let mut three = t.clone();
        three.lookup = None;
        assert_eq!(three.tier(), Tier::Three);
        assert_eq!(u8::from(Tier::Three), 3);
    }

    #[test]
    fn an_unknown_or_mistyped_field_is_refused_naming_it() {
        let typo = FULL.replace("idempotency_argument", "idempotency_arg");
        match parse(&typo) {
            Err(ConfigError::Parse { message, .. }) => {
                assert!(message.contains("idempotency_arg"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        let mistyped = FULL.replace(r#"key = ["request_id"]"#, r#"key = "request_id""#);
        assert!(matches!(parse(&mistyped), Err(ConfigError::Parse { .. })));
    }

    #[test]
    fn a_tier_the_server_cannot_back_is_refused_naming_the_field_and_the_fix() {
        let (field, message) = refused(&FULL.replace(
            r#"idempotency_argument = "idempotency_key""#,
            "dedupes = true\ndedupe_window_hours = 24",
        ));
        assert_eq!(field, "tools.create_refund.dedupes");
        assert!(message.contains("idempotency_argument"), "{message}");
        let no_id = FULL.replace(r#"idempotency_argument = "idempotency_key""#, "");
        let (field, message) = refused(&no_id);
        assert_eq!(field, "tools.create_refund.lookup");
        assert!(message.contains("effect's id"), "{message}");
    }

    #[test]
    fn each_inconsistency_names_its_field() {
        for (from, to, field) in [
            (
                r#"key = ["request_id"]"#,
                "key = []",
                "tools.create_refund.key",
            ),
            (
                r#"key = ["request_id"]"#,
                r#"key = ["request_id", "request_id"]"#,
                "tools.create_refund.key",
            ),
            (
                r#"key = ["request_id"]"#,
                r#"key = ["request_id", "idempotency_key"]"#,
                "tools.create_refund.idempotency_argument",
            ),
            (
                r#"lease = "approval""#,
                r#"lease = " ""#,
                "tools.create_refund.lease",
            ),
            (
                r#"tool = "find_refund""#,
                r#"tool = "create_refund""#,
                "tools.create_refund.lookup.tool",
            ),
            (
                r#"tool = "get_order""#,
                r#"tool = "create_refund""#,
                "tools.create_refund.premises.tool",
            ),
            (
                r#"fields = ["status", "refund.remaining"]"#,
                r#"fields = ["status", "refund..remaining"]"#,
                "tools.create_refund.premises.fields",
            ),
            (
                r#"at_most = "refund.remaining""#,
                r#"at_most = "balance""#,
                "tools.create_refund.premises.repair.at_most",
            ),
            (r#"journal = "interlock.db""#, r#"journal = """#, "journal"),
        ] {
            assert!(FULL.contains(from), "{from}");
            let (got, message) = refused(&FULL.replace(from, to));
            assert_eq!(got, field, "{to}: {message}");
        }
        for (from, to, field) in [
            (
                "lease = \"approval\"",
                "lease = \"approval\"\ndedupes = true",
                "tools.create_refund.dedupe_window_hours",
            ),
            (
                "lease = \"approval\"",
                "lease = \"approval\"\ndedupe_window_hours = 24",
                "tools.create_refund.dedupe_window_hours",
            ),
            (
                "lease = \"approval\"",
                "lease = \"approval\"\ndefinite_error_field = \"a..b\"",
                "tools.create_refund.definite_error_field",
            ),
            (
                "tool = \"get_order\"",
                "tool = \"get_order\"\neffect_id_argument = \"order_id\"",
                "tools.create_refund.premises.effect_id_argument",
            ),
            (
                "journal = \"interlock.db\"",
                "journal = \"interlock.db\"\nmax_message_bytes = 10",
                "max_message_bytes",
            ),
            (
                "journal = \"interlock.db\"",
                "journal = \"interlock.db\"\nsend_timeout_ms = 0",
                "send_timeout_ms",
            ),
        ] {
            assert!(FULL.contains(from), "{from}");
            let (got, message) = refused(&FULL.replacen(from, to, 1));
            assert_eq!(got, field, "{to}: {message}");
        }
        let twice =
            format!("{FULL}\n[tools.other]\ntarget = \"payments\"\nkey = [\"k\"]\nlease = \"l\"\n");
        let (field, _) = refused(&twice);
        assert_eq!(field, "tools.other.target");
        let (field, _) = refused(r#"journal = "j.db""#);
        assert_eq!(field, "tools");
    }

    #[test]
    fn a_tool_sent_over_http_takes_the_table_and_refuses_what_only_a_server_tool_has() {
        const HTTP: &str = r#"
[tools.credit]
key = ["request_id"]
lease = "approval"
description = "Credit an account."
[tools.credit.http]
payload = { request_id = "string", amount = "integer" }
send = { url = "http://ledger.internal/credits", key_field = "key" }
lookup = { url = "http://ledger.internal/credits?key={key}", key = "/key" }
"#;
        let cfg = parse(HTTP).unwrap();
        assert_eq!(cfg.tools["credit"].tier(), Tier::Two);
        assert_eq!(cfg.tools["credit"].target_name("credit"), "http:credit");
        for (from, to, field) in [
            (
                "lease = \"approval\"",
                "lease = \"approval\"\nidempotency_argument = \"id\"",
                "tools.credit.idempotency_argument",
            ),
            (
                "lease = \"approval\"",
                "lease = \"approval\"\nlookup = { tool = \"find\", argument = \"id\" }",
                "tools.credit.lookup",
            ),
            (
                "lease = \"approval\"",
                "lease = \"amount\"",
                "tools.credit.lease",
            ),
            (
                "key = [\"request_id\"]",
                "key = [\"order\"]",
                "tools.credit.key",
            ),
            (
                "http://ledger.internal/credits\"",
                "ledger.internal/credits\"",
                "tools.credit.http.send.url",
            ),
            (
                "request_id = \"string\", ",
                "request_id = \"string?\", ",
                "tools.credit.key",
            ),
            (
                "payload = { request_id = \"string\", amount = \"integer\" }\n",
                "",
                "tools.credit.http.payload",
            ),
            (
                "key = [\"request_id\"]",
                "key = [\"request_id\", \"approval\"]",
                "tools.credit.key",
            ),
        ] {
            let (got, message) = refused(&HTTP.replace(from, to));
            assert_eq!(got, field, "{to}: {message}");
        }
        // The field the gate fills with the effect's key: no call could give it (the table's
        // own check).
        let filled = HTTP
            .replace("key_field = \"key\"", "key_field = \"request_id\"")
            .replace("key = \"/key\"", "key = \"/request_id\"");
        assert_eq!(refused(&filled).0, "tools.credit.http.send.key_field");
        let (field, _) = refused(&FULL.replace(
            "lease = \"approval\"",
            "lease = \"approval\"\ndescription = \"x\"",
        ));
        assert_eq!(field, "tools.create_refund.description");
    }

    #[test]
    fn a_json_configuration_is_refused_with_a_hint_that_the_proxy_reads_toml() {
        let json = r#"{"tools": {"create_refund": {"key": ["request_id"], "lease": "approval"}}}"#;
        for path in ["interlock.mcp.json", "proxy.conf"] {
            match ProxyConfig::parse(json, Path::new(path)) {
                Err(ConfigError::Parse { message, .. }) => {
                    assert!(message.contains("the proxy reads TOML"), "{message}");
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn a_field_path_is_names_joined_by_dots() {
        assert_eq!(field_path("a.b"), Some(vec!["a", "b"]));
        for bad in ["", ".a", "a.", "a..b", " a"] {
            assert_eq!(field_path(bad), None, "{bad:?}");
        }
    }
}
