//! The configuration table, field by field. The tier is not written down: it follows from what
//! is configured (an idempotency header: 1; a lookup: 2; neither: 3), so a file cannot claim more
//! than the service gives. Unknown fields are refused, and [`HttpTargetConfig::check`] names the
//! field of any mistake before anything is started.

use std::collections::BTreeMap;

use interlock::core::Tier;
use serde::Deserialize;
use serde_json::Value;

use crate::template::Template;

/// One HTTP target, as `[targets.NAME]` with `kind = "http"` in the gate server's file.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HttpTargetConfig {
    /// Headers sent with every request (the send, the lookup, each premise read); `${VAR}` is
    /// taken from the environment (`Authorization = "Bearer ${LEDGER_TOKEN}"`).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// The payload's fields and their types (`"string"`, `"integer"`, `"boolean"`; a trailing
    /// `?` makes one optional). Declared: every other field is refused and an optional field
    /// sent as null is dropped, so a limit sees one spelling. Left out: any JSON object.
    #[serde(default)]
    pub payload: BTreeMap<String, FieldType>,
    /// The request that carries the effect out.
    pub send: SendConfig,
    /// How the service dedupes a resent key: tier 1.
    pub idempotency: Option<Idempotency>,
    /// How to ask whether a key landed: tier 2 (or a tier-1 target's recovery after its window).
    pub lookup: Option<LookupConfig>,
    /// The premises, by name: each read before the decision and again before every send.
    #[serde(default)]
    pub premises: BTreeMap<String, PremiseConfig>,
    /// Where the service lists its own records, for `verify`'s "happened once" against them.
    pub records: Option<RecordsConfig>,
    /// Rules over the premises (`"limit - credited >= payload.amount"`), judged at decide, at
    /// every dispatch and at recovery.
    #[serde(default)]
    pub rules: Vec<String>,
    /// How answers map to outcomes, tried in order before the defaults ([`AnswerRule`]).
    #[serde(default)]
    pub answers: Vec<AnswerRule>,
    /// Where a failure's code and message are in an error body (JSON pointers).
    #[serde(default)]
    pub errors: ErrorFields,
    /// How long a lookup or a premise read may take, in milliseconds (default 10 000). The send's
    /// own limit is the gate's send timeout.
    #[serde(default = "default_read_timeout_ms")]
    pub read_timeout_ms: u64,
}

fn default_read_timeout_ms() -> u64 {
    10_000
}

/// A payload field's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub struct FieldType {
    /// What its value must be.
    pub kind: FieldKind,
    /// Whether it may be left out (or sent as null, which is dropped).
    pub optional: bool,
}

/// What a field's value must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldKind {
    /// A JSON string.
    String,
    /// A whole number that fits in 64 bits (`10.0` and `"10"` are refused).
    Integer,
    /// `true` or `false`.
    Boolean,
}

impl TryFrom<String> for FieldType {
    type Error = String;

    fn try_from(s: String) -> Result<Self, String> {
        let (name, optional) = match s.strip_suffix('?') {
            Some(n) => (n, true),
            None => (s.as_str(), false),
        };
        let kind = match name {
            "string" => FieldKind::String,
            "integer" => FieldKind::Integer,
            "boolean" => FieldKind::Boolean,
            _ => {
                return Err(format!(
                    "{s:?} is not a field type: use \"string\", \"integer\" or \"boolean\", with \
                     a trailing '?' for an optional field"
                ));
            }
        };
        Ok(Self { kind, optional })
    }
}

/// The send.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SendConfig {
    /// `POST` (default), `PUT`, `PATCH` or `DELETE`.
    #[serde(default)]
    pub method: Method,
    /// The URL: `${VAR}` from the environment, `{field}` from the payload, `{key}` the effect's
    /// key, each filled value percent-encoded. The scheme and host are written out.
    pub url: String,
    /// The body: `"json"` (default; the payload as a JSON object), `"form"` (its fields
    /// form-encoded) or `"none"`.
    #[serde(default)]
    pub body: BodyKind,
    /// A body field that carries the effect's key, so the service keeps it where a lookup can
    /// find it (`"request_key"`; for a form, any field name, `"metadata[interlock_key]"`).
    pub key_field: Option<String>,
}

/// An HTTP method that carries an effect.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Method {
    /// POST.
    #[default]
    Post,
    /// PUT.
    Put,
    /// PATCH.
    Patch,
    /// DELETE.
    Delete,
}

impl Method {
    /// As written on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Patch => "PATCH",
            Method::Delete => "DELETE",
        }
    }
}

/// How the send's body is made from the payload.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BodyKind {
    /// The payload as a JSON object (`Content-Type: application/json`).
    #[default]
    Json,
    /// The payload's fields form-encoded (`application/x-www-form-urlencoded`); every field must
    /// be a string, a number or a boolean.
    Form,
    /// No body: the URL carries everything.
    None,
}

/// The service's deduplication of a key.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Idempotency {
    /// The header that carries the effect's key (`"Idempotency-Key"`).
    pub header: String,
    /// How long the service remembers a key, in hours: the gate refuses to start if a resend
    /// could outlive it.
    pub window_hours: u64,
    /// A header whose value `true` marks an answer replayed from the first request under the
    /// key (`"Idempotent-Replayed"`): a replayed 5xx then says resending cannot help.
    pub replayed_header: Option<String>,
}

/// A read that finds the effects carrying a key.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LookupConfig {
    /// The URL of a `GET` listing the effects with the key (`{key}`, `{field}`, `${VAR}` as in
    /// the send). It should filter by key: every record it lists must carry a key.
    pub url: String,
    /// A JSON pointer to the list of records in the answer (default `""`: the answer itself);
    /// an object there is one record.
    #[serde(default)]
    pub records: String,
    /// A JSON pointer, inside a record, to the key it carries (`"/request_key"`). A record
    /// without one makes the lookup unknown: the pointer may be wrong, and a lookup that cannot
    /// see keys would find nothing and resend.
    pub key: String,
    /// A JSON pointer, inside a record, to its id (default `"/id"`): records are counted by id.
    #[serde(default = "default_id")]
    pub id: String,
    /// A JSON pointer to a boolean that is true when the list goes on past this page: the
    /// lookup is then unknown rather than a partial answer.
    pub has_more: Option<String>,
    /// Statuses that mean "no effect has this key" (404 for a service that looks a key up by
    /// path). By default only a list without the key says so: a 404 from a wrong URL must not
    /// be read as "never sent".
    #[serde(default)]
    pub not_found_status: Vec<u16>,
}

fn default_id() -> String {
    "/id".into()
}

/// The service's own records of effects, as `verify` asks for them.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RecordsConfig {
    /// The URL of a `GET` listing every effect that could be a payload's (`{field}` from the
    /// payload: the credits of `{account}`), with or without a key.
    pub url: String,
    /// A JSON pointer to the list in the answer (default `""`: the answer itself).
    #[serde(default)]
    pub records: String,
    /// A JSON pointer, inside a record, to the key it carries; a record without one is listed as
    /// made by other means.
    pub key: String,
    /// A JSON pointer to a boolean that is false when the list is whole: required, since a
    /// partial list could hide a second effect under the key.
    pub has_more: String,
    /// A URL listing every record that carries a key, whatever the journal knows, for audits
    /// (`interlock verify --all`'s strangers); no `{field}` or `{key}`.
    pub tagged_url: Option<String>,
}

/// One premise: a `GET` and where its value is in the answer.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PremiseConfig {
    /// The URL (`{key}` lets the service leave the effect's own result out).
    pub url: String,
    /// A JSON pointer to the value (`"/balance"`).
    pub pointer: String,
}

/// A send's answer mapped to an outcome: the first rule whose status (and body field) matches
/// decides; answers no rule matches take the defaults (2xx done, 5xx and the 4xx that may follow
/// a send that landed unknown, other 4xx failed). A rule may not call an uncertain answer a
/// failure or a success (`docs/targets.md`).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AnswerRule {
    /// `"2xx"`, `"3xx"`, `"4xx"`, `"5xx"` or one status (`"409"`).
    pub status: String,
    /// A JSON pointer into the body that must be present for the rule to match.
    pub pointer: Option<String>,
    /// The value found at `pointer` must equal this.
    pub equals: Option<Value>,
    /// What the answer means.
    pub outcome: AnswerOutcome,
}

/// What an answer means for the gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AnswerOutcome {
    /// Carried out now.
    Done,
    /// Carried out by an earlier request under the key (a service answering 409 "duplicate").
    Replayed,
    /// Definitely not carried out: the effect fails and is never resent.
    Failed,
    /// The key was used before with other parameters.
    Conflict,
    /// It may or may not have been carried out: settled by the tier (a lookup or a resend under
    /// the key), never taken as a failure.
    Unknown,
}

/// Where a failure's code and message are.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ErrorFields {
    /// A JSON pointer to the code (`"/error/code"`); without one the code is `http_STATUS`.
    pub code: Option<String>,
    /// A JSON pointer to the message (`"/error/message"`).
    pub message: Option<String>,
}

/// A mistake in the table: the field and what to do.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[error("{field}: {message}")]
pub struct ConfigMistake {
    /// The field, from the table's root (`send.url`).
    pub field: String,
    /// What is wrong and the fix.
    pub message: String,
}

fn mistake(field: impl Into<String>, message: impl Into<String>) -> ConfigMistake {
    ConfigMistake {
        field: field.into(),
        message: message.into(),
    }
}

fn pointer(field: &str, p: &str) -> Result<(), ConfigMistake> {
    if p.is_empty() || p.starts_with('/') {
        Ok(())
    } else {
        Err(mistake(
            field,
            format!("{p:?} is not a JSON pointer: start it with '/' (\"/data\")"),
        ))
    }
}

impl HttpTargetConfig {
    /// What the configuration lets the target promise.
    pub fn tier(&self) -> Tier {
        match (&self.idempotency, &self.lookup) {
            (Some(_), _) => Tier::One,
            (None, Some(_)) => Tier::Two,
            (None, None) => Tier::Three,
        }
    }

    /// Every mistake that needs no environment to find, naming its field.
    pub fn check(&self) -> Result<(), ConfigMistake> {
        let mut urls: Vec<(String, &str)> = vec![("send.url".into(), &self.send.url)];
        if let Some(l) = &self.lookup {
            urls.push(("lookup.url".into(), &l.url));
            pointer("lookup.records", &l.records)?;
            pointer("lookup.key", &l.key)?;
            pointer("lookup.id", &l.id)?;
            if l.key.is_empty() {
                return Err(mistake(
                    "lookup.key",
                    "name where a record keeps its key (\"/request_key\")",
                ));
            }
            if let Some(h) = &l.has_more {
                pointer("lookup.has_more", h)?;
            }
            if let Some(s) = l.not_found_status.iter().find(|s| !(400..500).contains(*s)) {
                return Err(mistake(
                    "lookup.not_found_status",
                    format!("{s} is not a 4xx status"),
                ));
            }
        }
        if let Some(l) = &self.lookup {
            let filtered = Template::parse(&l.url).is_ok_and(|t| t.has_key());
            if !filtered && l.has_more.is_none() {
                return Err(mistake(
                    "lookup.has_more",
                    "a lookup URL without {key} lists more than one effect: name where the \
                     answer says the list goes on, or filter by {key}",
                ));
            }
            let in_url = Template::parse(&self.send.url).is_ok_and(|t| t.has_key());
            match (&self.send.key_field, self.send.body) {
                (None, _) if !in_url => {
                    return Err(mistake(
                        "send.key_field",
                        "a lookup finds an effect by its key, so the send must carry it: name \
                         the body field that does (or put {key} in send.url)",
                    ));
                }
                (Some(k), _) => {
                    if let Some(at) = self.send.key_pointer()
                        && l.key != at
                    {
                        return Err(mistake(
                            "lookup.key",
                            format!(
                                "the send puts the key at {at:?} (send.key_field = {k:?}), so a \
                                 record keeps it there: set lookup.key = {at:?}"
                            ),
                        ));
                    }
                }
                (None, _) => {}
            }
        }
        if let Some(r) = &self.records {
            if Template::parse(&r.url).is_ok_and(|t| t.has_key()) {
                return Err(mistake(
                    "records.url",
                    "it lists a payload's records, whatever their key: no {key}",
                ));
            }
            urls.push(("records.url".into(), &r.url));
            pointer("records.records", &r.records)?;
            pointer("records.key", &r.key)?;
            pointer("records.has_more", &r.has_more)?;
            if r.key.is_empty() || r.has_more.is_empty() {
                return Err(mistake(
                    "records",
                    "name where a record keeps its key (key) and where the answer says the list \
                     goes on (has_more)",
                ));
            }
            if let Some(at) = self.send.key_pointer()
                && r.key != at
            {
                return Err(mistake(
                    "records.key",
                    format!("the send puts the key at {at:?}: set records.key = {at:?}"),
                ));
            }
            if let Some(t) = &r.tagged_url {
                let parsed = Template::parse(t).map_err(|m| mistake("records.tagged_url", m))?;
                if parsed.is_per_request() {
                    return Err(mistake(
                        "records.tagged_url",
                        "it lists every record, so it takes no {field} or {key}",
                    ));
                }
                parsed
                    .check_url_shape(t)
                    .map_err(|m| mistake("records.tagged_url", m))?;
            }
        }
        for (name, p) in &self.premises {
            urls.push((format!("premises.{name}.url"), &p.url));
            pointer(&format!("premises.{name}.pointer"), &p.pointer)?;
            if p.pointer.is_empty() {
                return Err(mistake(
                    format!("premises.{name}.pointer"),
                    "name the value in the answer (\"/balance\"), not the whole answer",
                ));
            }
        }
        for (field, source) in &urls {
            let t = Template::parse(source).map_err(|m| mistake(field, m))?;
            t.check_url_shape(source).map_err(|m| mistake(field, m))?;
            if !self.payload.is_empty()
                && let Some(f) = t.fields().find(|f| !self.payload.contains_key(*f))
            {
                return Err(mistake(
                    field,
                    format!("{{{f}}} is not a field of [payload]: declare it there"),
                ));
            }
        }
        for (name, value) in &self.headers {
            let t = Template::parse(value).map_err(|m| mistake(format!("headers.{name}"), m))?;
            if t.is_per_request() {
                return Err(mistake(
                    format!("headers.{name}"),
                    "a header takes ${VAR} from the environment only, not {field} or {key}",
                ));
            }
            if !is_token(name) {
                return Err(mistake("headers", format!("{name:?} is not a header name")));
            }
            let reserved = [
                "content-type",
                "content-length",
                "host",
                "transfer-encoding",
            ];
            let idempotency = self
                .idempotency
                .as_ref()
                .map(|i| i.header.to_ascii_lowercase());
            let lower = name.to_ascii_lowercase();
            if reserved.contains(&lower.as_str()) || idempotency.as_deref() == Some(lower.as_str())
            {
                return Err(mistake(
                    format!("headers.{name}"),
                    "the target sets this header itself",
                ));
            }
        }
        if let Some(i) = &self.idempotency {
            if !is_token(&i.header) {
                return Err(mistake(
                    "idempotency.header",
                    format!("{:?} is not a header name", i.header),
                ));
            }
            if i.window_hours > MAX_WINDOW_HOURS {
                return Err(mistake(
                    "idempotency.window_hours",
                    format!(
                        "{} hours is more than a year ({MAX_WINDOW_HOURS}): state how long the \
                         service really remembers a key",
                        i.window_hours
                    ),
                ));
            }
            if i.window_hours == 0 {
                return Err(mistake(
                    "idempotency.window_hours",
                    "a service that forgets a key at once does not dedupe: leave [idempotency] out",
                ));
            }
        }
        if let Some(k) = &self.send.key_field {
            if self.payload.contains_key(k) {
                return Err(mistake(
                    "send.key_field",
                    format!("{k:?} is a payload field too: the key would overwrite it"),
                ));
            }
            if self.send.body == BodyKind::None {
                return Err(mistake(
                    "send.key_field",
                    "body = \"none\" has no field to carry it",
                ));
            }
        }
        for rule in &self.rules {
            rule.parse::<interlock::core::rules::Rule>()
                .map_err(|e| mistake("rules", e.to_string()))?;
        }
        for (i, a) in self.answers.iter().enumerate() {
            let status = crate::answer::StatusMatch::parse(&a.status)
                .map_err(|m| mistake(format!("answers[{i}].status"), m))?;
            crate::answer::allowed(status, a.outcome)
                .map_err(|m| mistake(format!("answers[{i}].outcome"), m))?;
            if let Some(p) = &a.pointer {
                pointer(&format!("answers[{i}].pointer"), p)?;
            } else if a.equals.is_some() {
                return Err(mistake(
                    format!("answers[{i}].equals"),
                    "name the body field it is compared with in pointer",
                ));
            }
        }
        if let Some(p) = &self.errors.code {
            pointer("errors.code", p)?;
        }
        if let Some(p) = &self.errors.message {
            pointer("errors.message", p)?;
        }
        if !(100..=600_000).contains(&self.read_timeout_ms) {
            return Err(mistake(
                "read_timeout_ms",
                format!(
                    "{} is out of range: use 100 to 600000",
                    self.read_timeout_ms
                ),
            ));
        }
        Ok(())
    }
}

/// The longest dedupe window a table may state: a year.
pub(crate) const MAX_WINDOW_HOURS: u64 = 24 * 366;

impl SendConfig {
    /// Where a record keeps the key the send's body carries (`send.key_field` as a JSON
    /// pointer), or none when the body carries no key. A record's key is read there with
    /// confidence, and its absence means a record made without one.
    pub fn key_pointer(&self) -> Option<String> {
        match (&self.key_field, self.body) {
            (Some(k), BodyKind::Json | BodyKind::Form) => Some(key_pointer(k, self.body)),
            _ => None,
        }
    }
}

/// Where a record keeps the key the send put in body field `field`, as a JSON pointer: the field
/// itself for a JSON body, and a form's `a[b]` as `/a/b`.
fn key_pointer(field: &str, body: BodyKind) -> String {
    let escape = |s: &str| s.replace('~', "~0").replace('/', "~1");
    match body {
        BodyKind::Form => field
            .split(['[', ']'])
            .filter(|s| !s.is_empty())
            .map(|s| format!("/{}", escape(s)))
            .collect(),
        _ => format!("/{}", escape(field)),
    }
}

fn is_token(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<HttpTargetConfig, String> {
        let cfg: HttpTargetConfig = toml::from_str(text).map_err(|e| e.to_string())?;
        cfg.check().map_err(|e| e.to_string())?;
        Ok(cfg)
    }

    const LEDGER: &str = "[send]\nurl = \"${LEDGER}/credits\"\nkey_field = \"k\"\n";

    #[test]
    fn the_tier_follows_from_what_is_configured() -> Result<(), String> {
        assert_eq!(parse(LEDGER)?.tier(), Tier::Three);
        let lookup =
            format!("{LEDGER}[lookup]\nurl = \"${{LEDGER}}/credits?k={{key}}\"\nkey = \"/k\"\n");
        assert_eq!(parse(&lookup)?.tier(), Tier::Two);
        let dedupe =
            format!("{lookup}[idempotency]\nheader = \"Idempotency-Key\"\nwindow_hours = 24\n");
        assert_eq!(parse(&dedupe)?.tier(), Tier::One);
        Ok(())
    }

    #[test]
    fn every_mistake_names_its_field() {
        for (text, field) in [
            (
                "[send]\nurl = \"http://x/\"\n[records]\nurl = \"http://x/?k={key}\"\nkey = \"/k\"\nhas_more = \"/m\"\n",
                "records.url",
            ),
            (
                "[send]\nurl = \"http://x/\"\n[records]\nurl = \"http://x/\"\nkey = \"/k\"\nhas_more = \"/m\"\ntagged_url = \"http://x/{a}\"\n",
                "records.tagged_url",
            ),
            (
                "[send]\nurl = \"http://x/\"\n[records]\nurl = \"http://x/\"\nkey = \"/k\"\n",
                "missing field `has_more`",
            ),
            (
                "[send]\nurl = \"http://x/\"\n[lookup]\nurl = \"http://x/?k={key}\"\nkey = \"/k\"\n",
                "send.key_field",
            ),
            (
                "[send]\nurl = \"http://x/\"\nkey_field = \"k\"\n[lookup]\nurl = \"http://x/\"\nkey = \"/k\"\n",
                "lookup.has_more",
            ),
            (
                "[send]\nurl = \"http://x/\"\nbody = \"form\"\nkey_field = \"metadata[k]\"\n\
                 [lookup]\nurl = \"http://x/?k={key}\"\nkey = \"/k\"\n",
                "set lookup.key = \"/metadata/k\"",
            ),
            (
                "[send]\nurl = \"http://x/\"\n[headers]\ncontent-type = \"text/plain\"\n",
                "headers.content-type",
            ),
            (
                "[send]\nurl = \"http://x/\"\n[idempotency]\nheader = \"K\"\nwindow_hours = 100000\n",
                "more than a year",
            ),
            (
                "[send]\nurl = \"http://x/\"\n[[answers]]\nstatus = \"5xx\"\noutcome = \"failed\"\n",
                "answers[0].outcome",
            ),
            (
                "[send]\nurl = \"http://x/\"\n[premises.p]\nurl = \"http://x/\"\npointer = \"\"\n",
                "premises.p.pointer",
            ),
            (
                "[send]\nurl = \"http://x/\"\nretries = 3\n",
                "unknown field",
            ),
            ("[send]\nurl = \"http://x/{a b}\"\n", "send.url"),
            (
                "[send]\nurl = \"http://{host}/x\"\n",
                "the host must be written out",
            ),
            ("[send]\nurl = \"{base}/x\"\n", "send.url"),
            (
                "[send]\nurl = \"http://x/\"\n[premises.p]\nurl = \"ftp://x/\"\npointer = \"/a\"\n",
                "premises.p.url",
            ),
            (
                "[send]\nmethod = \"GET\"\nurl = \"http://x/\"\n",
                "unknown variant",
            ),
            (
                "[payload]\na = \"string\"\n[send]\nurl = \"http://x/{b}\"\n",
                "{b} is not a field of [payload]",
            ),
            (
                "[payload]\na = \"float\"\n[send]\nurl = \"http://x/\"\n",
                "not a field type",
            ),
            (
                "[send]\nurl = \"http://x/\"\n[lookup]\nurl = \"http://x/\"\nkey = \"k\"\n",
                "lookup.key",
            ),
            (
                "[send]\nurl = \"http://x/\"\n[idempotency]\nheader = \"Idem Key\"\nwindow_hours = 1\n",
                "idempotency.header",
            ),
            (
                "[send]\nurl = \"http://x/\"\n[headers]\nX = \"{key}\"\n",
                "headers.X",
            ),
            (
                "[send]\nurl = \"http://x/\"\n[[answers]]\nstatus = \"2yy\"\noutcome = \"done\"\n",
                "answers[0].status",
            ),
            (
                "[send]\nurl = \"http://x/\"\nrules = [\"a >> 1\"]\n",
                "rules",
            ),
            (
                "[payload]\nk = \"string\"\n[send]\nurl = \"http://x/\"\nkey_field = \"k\"\n",
                "send.key_field",
            ),
        ] {
            let e = parse(text).err().unwrap_or_default();
            assert!(e.contains(field), "{text}: {e:?}");
        }
    }
}
