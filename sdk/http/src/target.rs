//! The target built from a configuration table: every `${VAR}` resolved once, at build, so a
//! missing secret stops the target before anything is journaled; each request built from the
//! canonical payload, never followed through a redirect (a 3xx is an answer, unknown), and cut off
//! at the gate's send timeout.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use interlock::core::rules::{Rule, judge_all};
use interlock::core::{Premises, Repair, Tier};
use interlock::effect::EffectKey;
use interlock::gate::{Bound, Gate};
use interlock::premise::{PremiseError, PremiseReader};
use interlock::target::{
    CanonicalError, LookupAnswer, SendAnswer, SendRequest, Target, TargetRecords,
};
use serde_json::{Map, Value};

use crate::answer::{Reply, classify};
use crate::config::{
    AnswerRule, BodyKind, ErrorFields, FieldKind, FieldType, HttpTargetConfig, LookupConfig,
    Method, RecordsConfig,
};
use crate::template::{Resolved, Template, scalar, url_scalar};

/// Why a configuration does not make a target.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HttpTargetError {
    /// A mistake in the table.
    #[error("the HTTP target's configuration is not valid: {0}")]
    Config(#[from] crate::config::ConfigMistake),
    /// A `${VAR}` the environment does not hold.
    #[error("{var} is not set: export it (the HTTP target's {field} names it)")]
    MissingEnv {
        /// The variable.
        var: String,
        /// The field that names it.
        field: String,
    },
    /// The gate refused the binding (a dedupe window shorter than a resend could take).
    #[error(transparent)]
    Gate(#[from] interlock::gate::GateError),
}

/// Any HTTP service as a target, from an [`HttpTargetConfig`].
#[derive(Clone)]
pub struct HttpTarget {
    inner: Arc<Inner>,
}

struct Inner {
    name: String,
    tier: Tier,
    window: Option<Duration>,
    agent: ureq::Agent,
    headers: Vec<(String, String)>,
    fields: BTreeMap<String, FieldType>,
    method: Method,
    send_url: Resolved,
    body: BodyKind,
    key_field: Option<String>,
    /// Where a record keeps the key the body carries.
    key_at: Option<String>,
    idempotency_header: Option<String>,
    replayed_header: Option<String>,
    lookup: Option<(Resolved, LookupConfig)>,
    premises: Vec<(String, Resolved, String)>,
    /// The records' listing, its table and the audit listing.
    records: Option<(Resolved, RecordsConfig, Option<Resolved>)>,
    answers: Vec<AnswerRule>,
    errors: ErrorFields,
    read_timeout: Duration,
    /// Every URL's template fields, so a payload missing one is refused before it is journaled.
    url_fields: Vec<String>,
}

impl std::fmt::Debug for HttpTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Templates only: a resolved header or URL may hold a secret.
        f.debug_struct("HttpTarget")
            .field("name", &self.inner.name)
            .field("tier", &self.inner.tier)
            .field("send", &self.inner.send_url)
            .finish_non_exhaustive()
    }
}

fn resolve(
    field: &str,
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Resolved, HttpTargetError> {
    Template::parse(text)
        .map_err(|message| crate::config::ConfigMistake {
            field: field.to_owned(),
            message,
        })?
        .resolve(text, env)
        .map_err(|var| HttpTargetError::MissingEnv {
            var,
            field: field.to_owned(),
        })
}

fn url(
    field: &str,
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Resolved, HttpTargetError> {
    let r = resolve(field, text, env)?;
    r.check_url()
        .map_err(|message| crate::config::ConfigMistake {
            field: field.to_owned(),
            message,
        })?;
    Ok(r)
}

impl HttpTarget {
    /// The target named `name` (the name the journal records: never change it while effects are
    /// open), its `${VAR}` read from the process's environment.
    pub fn from_config(name: &str, cfg: &HttpTargetConfig) -> Result<Self, HttpTargetError> {
        Self::with_env(name, cfg, &|var| std::env::var(var).ok())
    }

    /// The same, with `${VAR}` read from `env`.
    pub fn with_env(
        name: &str,
        cfg: &HttpTargetConfig,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, HttpTargetError> {
        cfg.check()?;
        let mut headers = Vec::new();
        for (h, v) in &cfg.headers {
            headers.push((h.clone(), resolve(&format!("headers.{h}"), v, env)?.fixed()));
        }
        let send_url = url("send.url", &cfg.send.url, env)?;
        let lookup = match &cfg.lookup {
            Some(l) => Some((url("lookup.url", &l.url, env)?, l.clone())),
            None => None,
        };
        let mut premises = Vec::new();
        for (p, c) in &cfg.premises {
            premises.push((
                p.clone(),
                url(&format!("premises.{p}.url"), &c.url, env)?,
                c.pointer.clone(),
            ));
        }
        let records = match &cfg.records {
            Some(r) => Some((
                url("records.url", &r.url, env)?,
                r.clone(),
                match &r.tagged_url {
                    Some(t) => Some(url("records.tagged_url", t, env)?),
                    None => None,
                },
            )),
            None => None,
        };
        let mut url_fields: Vec<String> = std::iter::once(&send_url)
            .chain(lookup.iter().map(|(l, _)| l))
            .chain(premises.iter().map(|(_, p, _)| p))
            .flat_map(Resolved::fields)
            .map(str::to_owned)
            .collect();
        url_fields.sort();
        url_fields.dedup();
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .build()
            .into();
        let tier = cfg.tier();
        Ok(Self {
            inner: Arc::new(Inner {
                name: name.to_owned(),
                tier,
                window: cfg
                    .idempotency
                    .as_ref()
                    .map(|i| Duration::from_secs(i.window_hours.saturating_mul(3600))),
                agent,
                headers,
                fields: cfg.payload.clone(),
                method: cfg.send.method,
                send_url,
                body: cfg.send.body,
                key_field: cfg.send.key_field.clone(),
                key_at: cfg.send.key_pointer(),
                idempotency_header: cfg.idempotency.as_ref().map(|i| i.header.clone()),
                replayed_header: cfg
                    .idempotency
                    .as_ref()
                    .and_then(|i| i.replayed_header.clone()),
                lookup,
                premises,
                records,
                answers: cfg.answers.clone(),
                errors: cfg.errors.clone(),
                read_timeout: Duration::from_millis(cfg.read_timeout_ms),
                url_fields,
            }),
        })
    }

    /// The premise reader over the same service, with the same headers. It offers no repair;
    /// the reader [`HttpTarget::bind`] gives the gate offers one where the rules still hold.
    pub fn premises(&self) -> HttpPremises {
        HttpPremises(self.clone(), Vec::new())
    }

    /// The names of the premises the reader reads: a decision must carry each.
    pub fn premise_names(&self) -> Vec<String> {
        self.inner
            .premises
            .iter()
            .map(|(n, ..)| n.clone())
            .collect()
    }

    /// The target and its premises bound to `gate`, with the configured rules.
    pub fn bind(&self, gate: &Gate, rules: &[String]) -> Result<Bound, HttpTargetError> {
        let mistake = |e: interlock::core::rules::RuleError| crate::config::ConfigMistake {
            field: "rules".into(),
            message: e.to_string(),
        };
        let parsed = rules
            .iter()
            .map(|r| r.parse().map_err(mistake))
            .collect::<Result<Vec<_>, _>>()?;
        let reader = HttpPremises(self.clone(), parsed);
        let bound = gate.bind(Arc::new(self.clone()), Arc::new(reader))?;
        Ok(bound.with_rules(rules).map_err(mistake)?)
    }

    fn request(
        &self,
        method: &str,
        url: &str,
        body: Option<(&'static str, Vec<u8>)>,
        extra: &[(&str, &str)],
        timeout: Duration,
    ) -> Result<Reply, String> {
        let mut b = ureq::http::Request::builder()
            .method(method)
            .uri(url)
            .header("Accept", "application/json");
        for (h, v) in &self.inner.headers {
            b = b.header(h.as_str(), v.as_str());
        }
        for (h, v) in extra {
            b = b.header(*h, *v);
        }
        let (content_type, bytes) = body.unwrap_or(("", Vec::new()));
        if !content_type.is_empty() {
            b = b.header("Content-Type", content_type);
        }
        let req = b
            .body(bytes)
            .map_err(|e| format!("the request could not be built: {e}"))?;
        let req = self
            .inner
            .agent
            .configure_request(req)
            .timeout_global(Some(timeout))
            .build();
        match self.inner.agent.run(req) {
            Ok(resp) => {
                let status = resp.status().as_u16();
                let replayed = self.inner.replayed_header.as_deref().is_some_and(|h| {
                    resp.headers()
                        .get(h)
                        .and_then(|v| v.to_str().ok())
                        .is_some_and(|v| v.eq_ignore_ascii_case("true"))
                });
                let text = resp
                    .into_body()
                    .read_to_string()
                    .map_err(|e| format!("HTTP {status}, body lost: {e}"))?;
                let body = serde_json::from_str(&text).unwrap_or(Value::Null);
                Ok(Reply {
                    status,
                    body,
                    replayed,
                })
            }
            Err(e) => Err(format!("no answer: {e}")),
        }
    }

    fn body(
        &self,
        key: &EffectKey,
        payload: &Value,
    ) -> Result<Option<(&'static str, Vec<u8>)>, String> {
        let Some(obj) = payload.as_object() else {
            return Err("the payload is not a JSON object".into());
        };
        let key_field = self.inner.key_field.as_deref();
        Ok(match self.inner.body {
            BodyKind::None => None,
            BodyKind::Json => {
                let mut obj = obj.clone();
                if let Some(k) = key_field {
                    obj.insert(k.to_owned(), Value::String(key.as_str().to_owned()));
                }
                Some((
                    "application/json",
                    serde_json::to_vec(&obj).map_err(|e| e.to_string())?,
                ))
            }
            BodyKind::Form => {
                let mut form = form_urlencoded::Serializer::new(String::new());
                for f in obj.keys() {
                    form.append_pair(f, &scalar(payload, f)?);
                }
                if let Some(k) = key_field {
                    form.append_pair(k, key.as_str());
                }
                Some((
                    "application/x-www-form-urlencoded",
                    form.finish().into_bytes(),
                ))
            }
        })
    }

    fn get(&self, url: &Resolved, key: &EffectKey, payload: &Value) -> Result<Reply, String> {
        let url = url.fill(key.as_str(), payload)?;
        self.request("GET", &url, None, &[], self.inner.read_timeout)
    }
}

fn type_name(kind: FieldKind) -> &'static str {
    match kind {
        FieldKind::String => "a string",
        FieldKind::Integer => "a whole number",
        FieldKind::Boolean => "true or false",
    }
}

impl Target for HttpTarget {
    fn name(&self) -> &str {
        &self.inner.name
    }

    fn tier(&self) -> Tier {
        self.inner.tier
    }

    fn dedupe_window(&self) -> Option<Duration> {
        self.inner.window
    }

    fn has_lookup(&self) -> bool {
        self.inner.lookup.is_some()
    }

    fn canonical(&self, payload: &Value) -> Result<Value, CanonicalError> {
        let Some(obj) = payload.as_object() else {
            return Err(CanonicalError::Invalid(
                "the payload must be a JSON object".into(),
            ));
        };
        if let Some(k) = &self.inner.key_field
            && obj.contains_key(k)
        {
            return Err(CanonicalError::Invalid(format!(
                "the payload carries {k:?}, the field the target fills with the effect's key"
            )));
        }
        let out: Map<String, Value> = if self.inner.fields.is_empty() {
            obj.clone()
        } else {
            if let Some(f) = obj.keys().find(|f| !self.inner.fields.contains_key(*f)) {
                return Err(CanonicalError::Invalid(format!(
                    "the payload has a field {f:?} the target does not take; it takes {}",
                    self.inner
                        .fields
                        .keys()
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
            let mut out = Map::new();
            for (f, t) in &self.inner.fields {
                let ok = match (obj.get(f), t.kind) {
                    (None | Some(Value::Null), _) if t.optional => continue,
                    (Some(Value::String(_)), FieldKind::String)
                    | (Some(Value::Bool(_)), FieldKind::Boolean) => true,
                    (Some(Value::Number(n)), FieldKind::Integer) => n.is_i64(),
                    _ => false,
                };
                if !ok {
                    return Err(CanonicalError::Invalid(format!(
                        "payload field {f:?} must be {}",
                        type_name(t.kind)
                    )));
                }
                if let Some(v) = obj.get(f) {
                    out.insert(f.clone(), v.clone());
                }
            }
            out
        };
        let out = Value::Object(out);
        for f in &self.inner.url_fields {
            url_scalar(&out, f).map_err(CanonicalError::Invalid)?;
        }
        if self.inner.body == BodyKind::Form {
            for f in out.as_object().into_iter().flat_map(Map::keys) {
                scalar(&out, f)
                    .map_err(|e| CanonicalError::Invalid(format!("{e} (a form field)")))?;
            }
        }
        Ok(out)
    }

    fn send(&self, req: &SendRequest<'_>) -> SendAnswer {
        // Said of this attempt only: an earlier send under the key may have landed, so the
        // effect stays unknown (settled by the tier) rather than failed.
        let refused = |why: String| {
            SendAnswer::Unknown(format!(
                "not sent: {why} (the configuration changed since the effect was decided?)"
            ))
        };
        let url = match self.inner.send_url.fill(req.key.as_str(), req.payload) {
            Ok(u) => u,
            Err(why) => return refused(why),
        };
        let body = match self.body(req.key, req.payload) {
            Ok(b) => b,
            Err(why) => return refused(why),
        };
        let extra: Vec<(&str, &str)> = self
            .inner
            .idempotency_header
            .as_deref()
            .map(|h| (h, req.key.as_str()))
            .into_iter()
            .collect();
        // A process frozen after the gate's checks must not send after a recoverer was allowed
        // to act: no send begins past the deadline, and none outlives it.
        let mut timeout = req.timeout;
        if let Some(deadline) = &req.deadline {
            let left = deadline.at_ms.saturating_sub(deadline.clock.now_ms());
            if left <= 0 {
                return SendAnswer::Unknown(
                    "not sent: the send's deadline passed before it began".into(),
                );
            }
            timeout = timeout.min(Duration::from_millis(u64::try_from(left).unwrap_or(0)));
        }
        let reply = self.request(self.inner.method.as_str(), &url, body, &extra, timeout);
        classify(reply, &self.inner.answers, &self.inner.errors)
    }

    fn lookup(&self, key: &EffectKey, payload: &Value) -> LookupAnswer {
        let Some((url, cfg)) = &self.inner.lookup else {
            return LookupAnswer::Unknown(format!("target {} offers no lookup", self.inner.name));
        };
        match self.get(url, key, payload) {
            Ok(reply) => found(
                &reply,
                cfg,
                key.as_str(),
                url.has_key(),
                self.keeps_key_at(&cfg.key),
            ),
            Err(why) => LookupAnswer::Unknown(why),
        }
    }
}

/// The key a listed record carries at `pointer`: a string, or none when the field is null, or
/// (`proven`) absent from an object that is there (Stripe's `metadata` of a refund made by hand
/// has no `interlock_key` at all). Anything else — a number, no object to hold the field, or an
/// absent field where the pointer is not proven — is an error: the pointer may not point where
/// the service keeps keys, and every record, the gate's own among them, would look untagged
/// (a lookup's "not found", then a second send at tier 2). `proven`: the send puts the key in
/// its body at `send.key_field`, and the pointer is where that field lands.
fn record_key<'a>(record: &'a Value, pointer: &str, proven: bool) -> Result<Option<&'a str>, ()> {
    match record.pointer(pointer) {
        Some(Value::String(k)) => Ok(Some(k)),
        Some(Value::Null) => Ok(None),
        Some(_) => Err(()),
        None if !proven => Err(()),
        None => {
            let parent = pointer.rsplit_once('/').map_or("", |(p, _)| p);
            match record.pointer(parent) {
                Some(Value::Object(_)) if !parent.is_empty() => Ok(None),
                _ => Err(()),
            }
        }
    }
}

/// What a lookup's answer says of `key` (`filtered`: the lookup asked for that key alone;
/// `proven`: the send puts the key where `cfg.key` points, see [`record_key`]).
fn found(
    reply: &Reply,
    cfg: &LookupConfig,
    key: &str,
    filtered: bool,
    proven: bool,
) -> LookupAnswer {
    if cfg.not_found_status.contains(&reply.status) {
        return LookupAnswer::NotFound;
    }
    if !(200..300).contains(&reply.status) {
        return LookupAnswer::Unknown(format!("the lookup answered HTTP {}", reply.status));
    }
    if let Some(p) = &cfg.has_more
        && reply.body.pointer(p) != Some(&Value::Bool(false))
    {
        return LookupAnswer::Unknown(format!(
            "the lookup's list may go on past one page ({p} is not false): filter it by key"
        ));
    }
    let records: Vec<&Value> = match reply.body.pointer(&cfg.records) {
        Some(Value::Array(items)) => items.iter().collect(),
        Some(obj @ Value::Object(_)) => vec![obj],
        _ => {
            return LookupAnswer::Unknown(format!(
                "the lookup's answer has no list at {:?} (lookup.records)",
                cfg.records
            ));
        }
    };
    let mut mine: Vec<Value> = Vec::new();
    for r in records {
        match record_key(r, &cfg.key, proven) {
            Ok(Some(k)) if k == key => {}
            Ok(_) if filtered => {
                return LookupAnswer::Unknown(format!(
                    "the lookup by key listed a record with another key (or none) at {:?}: the \
                     service does not filter by lookup.url's {{key}} as configured, so a record \
                     missing from the list proves nothing",
                    cfg.key
                ));
            }
            Ok(_) => continue,
            Err(()) => {
                return LookupAnswer::Unknown(format!(
                    "a record has no key at {:?} (lookup.key): a lookup that cannot see keys \
                     would find nothing and resend",
                    cfg.key
                ));
            }
        }
        let Some(id) = r
            .pointer(&cfg.id)
            .filter(|v| v.is_string() || v.is_number())
        else {
            return LookupAnswer::Unknown(format!(
                "a record has no id at {:?} (lookup.id): records cannot be counted",
                cfg.id
            ));
        };
        if !mine.iter().any(|m| m.pointer(&cfg.id) == Some(id)) {
            mine.push(r.clone());
        }
    }
    match mine.len() {
        0 => LookupAnswer::NotFound,
        1 => LookupAnswer::Found(mine.remove(0)),
        _ => LookupAnswer::Several(mine),
    }
}

impl HttpTarget {
    /// Whether the send puts the key in its body where `pointer` points
    /// ([`SendConfig::key_pointer`](crate::SendConfig::key_pointer)).
    fn keeps_key_at(&self, pointer: &str) -> bool {
        self.inner.key_at.as_deref() == Some(pointer)
    }

    /// Whether the configuration names the service's own records (`[records]`).
    pub fn has_records(&self) -> bool {
        self.inner.records.is_some()
    }

    fn listed(&self, url: &str, cfg: &RecordsConfig) -> Result<Vec<Value>, String> {
        let reply = self.request("GET", url, None, &[], self.inner.read_timeout)?;
        if !(200..300).contains(&reply.status) {
            return Err(format!(
                "the records' listing answered HTTP {}",
                reply.status
            ));
        }
        if reply.body.pointer(&cfg.has_more) != Some(&Value::Bool(false)) {
            return Err(format!(
                "the records' listing may go on past one page ({} is not false)",
                cfg.has_more
            ));
        }
        let Some(Value::Array(items)) = reply.body.pointer(&cfg.records) else {
            return Err(format!(
                "the records' listing has no list at {:?} (records.records)",
                cfg.records
            ));
        };
        // A record must say which key it carries (see `record_key`) and name itself: a wrong
        // pointer would make every record look untagged and hide a second effect under the key.
        for r in items {
            if record_key(r, &cfg.key, self.keeps_key_at(&cfg.key)).is_err() {
                return Err(format!(
                    "a record has no key field at {:?} (records.key): it must hold a string, \
                     null, or be absent from an object that is there (a record made without a \
                     key)",
                    cfg.key
                ));
            }
            if !r.get("id").is_some_and(Value::is_string) {
                return Err("a record has no string \"id\": records are told apart by it".into());
            }
        }
        Ok(items.clone())
    }
}

impl TargetRecords for HttpTarget {
    fn records_for(&self, payload: &Value) -> Result<Vec<Value>, String> {
        let (url, cfg, _) = self
            .inner
            .records
            .as_ref()
            .ok_or_else(|| format!("target {} lists no records", self.inner.name))?;
        // The listing takes no key: the URL was checked to hold none.
        let filled = url.fill("", payload)?;
        self.listed(&filled, cfg)
    }

    fn tagged(&self) -> Result<Vec<Value>, String> {
        let (_, cfg, tagged) = self
            .inner
            .records
            .as_ref()
            .ok_or_else(|| format!("target {} lists no records", self.inner.name))?;
        let tagged = tagged.as_ref().ok_or_else(|| {
            format!(
                "target {} names no records.tagged_url to list every keyed record",
                self.inner.name
            )
        })?;
        Ok(self
            .listed(&tagged.fixed(), cfg)?
            .into_iter()
            .filter(|r| self.key_of(r).is_some())
            .collect())
    }

    fn key_of<'a>(&self, record: &'a Value) -> Option<&'a str> {
        let (_, cfg, _) = self.inner.records.as_ref()?;
        record.pointer(&cfg.key).and_then(Value::as_str)
    }
}

/// The premises an [`HttpTarget`]'s configuration names, each read by its own `GET` (one per
/// distinct URL). Bound with the table's rules, it offers the one repair a table can justify: when
/// facts moved but every rule still holds on them, the same payload decided again.
#[derive(Clone, Debug)]
pub struct HttpPremises(HttpTarget, Vec<Rule>);

impl PremiseReader for HttpPremises {
    fn read(&self, key: &EffectKey, payload: &Value) -> Result<Premises, PremiseError> {
        let mut answers: BTreeMap<String, Value> = BTreeMap::new();
        let mut out = Premises::new();
        for (name, url, pointer) in &self.0.inner.premises {
            let filled = url
                .fill(key.as_str(), payload)
                .map_err(|e| PremiseError::Invalid(format!("premise {name}: {e}")))?;
            let body = match answers.get(&filled) {
                Some(b) => b.clone(),
                None => {
                    let reply = self
                        .0
                        .request("GET", &filled, None, &[], self.0.inner.read_timeout)
                        .map_err(|e| PremiseError::Unavailable(format!("premise {name}: {e}")))?;
                    match reply.status {
                        200..=299 => {}
                        400..=499 if !matches!(reply.status, 401 | 403 | 408 | 429) => {
                            return Err(PremiseError::Invalid(format!(
                                "premise {name}: {url:?} answered HTTP {}",
                                reply.status
                            )));
                        }
                        s => {
                            return Err(PremiseError::Unavailable(format!(
                                "premise {name}: {url:?} answered HTTP {s}"
                            )));
                        }
                    }
                    answers.insert(filled, reply.body.clone());
                    reply.body
                }
            };
            let value = body
                .pointer(pointer)
                .filter(|v| !v.is_null())
                .cloned()
                .ok_or_else(|| {
                    PremiseError::Invalid(format!(
                        "premise {name}: the answer of {url:?} has no value at {pointer:?}"
                    ))
                })?;
            out.insert(name.clone(), value);
        }
        Ok(out)
    }

    fn repairs(&self, payload: &Value, now: &Premises) -> Vec<Repair> {
        rules_hold(&self.1, payload, now).into_iter().collect()
    }
}

/// The repair a table can offer from its rules alone: every rule still holds on the facts read
/// now, so deciding the same payload again would pass them. None without rules, or when one breaks.
fn rules_hold(rules: &[Rule], payload: &Value, now: &Premises) -> Option<Repair> {
    let texts: Vec<&str> = rules.iter().map(Rule::text).collect();
    if texts.is_empty() || !judge_all(texts.iter().copied(), now, payload).is_empty() {
        return None;
    }
    Some(Repair {
        kind: "rules_hold".into(),
        summary: format!(
            "the facts moved, but every rule still holds on them ({}): decide the same payload \
             again on the facts read now, if the change was not this effect's own",
            texts.join("; ")
        ),
        payload: payload.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::{Rule, record_key, rules_hold};
    use interlock::core::Premises;
    use serde_json::json;

    #[test]
    fn a_repair_is_offered_only_when_every_rule_still_holds_on_the_facts_now() {
        let rules: Vec<Rule> = ["paid - others >= payload.amount", "open == true"]
            .iter()
            .map(|r| r.parse().unwrap())
            .collect();
        let payload = json!({"amount": 20});
        let now = |others: i64, open: bool| -> Premises {
            [
                ("paid".to_owned(), json!(50)),
                ("others".to_owned(), json!(others)),
                ("open".to_owned(), json!(open)),
            ]
            .into_iter()
            .collect()
        };
        let fits = rules_hold(&rules, &payload, &now(5, true)).expect("both rules hold");
        assert_eq!(
            (fits.kind.as_str(), &fits.payload),
            ("rules_hold", &payload)
        );
        assert!(
            fits.summary
                .contains("paid - others >= payload.amount; open == true")
        );
        assert_eq!(rules_hold(&rules, &payload, &now(40, true)), None);
        assert_eq!(rules_hold(&rules, &payload, &now(5, false)), None);
        // A fact not read at all breaks a rule that names it; no rules, no repair.
        assert_eq!(rules_hold(&rules, &payload, &Premises::new()), None);
        assert_eq!(rules_hold(&[], &payload, &now(5, true)), None);
    }

    #[test]
    fn a_record_made_without_a_key_is_keyless_only_where_the_send_is_known_to_put_keys_there() {
        let p = "/metadata/interlock_key";
        let ours = json!({"id": "re_1", "metadata": {"interlock_key": "k"}});
        assert_eq!(record_key(&ours, p, true), Ok(Some("k")));
        // A refund made by hand: its metadata holds no key at all, or a null one.
        assert_eq!(record_key(&json!({"metadata": {}}), p, true), Ok(None));
        let null = json!({"metadata": {"interlock_key": null}});
        assert_eq!(record_key(&null, p, false), Ok(None));
        // An absent key where the send is not known to put it there: the pointer may be wrong.
        assert_eq!(record_key(&json!({"metadata": {}}), p, false), Err(()));
        // No metadata to read, a key that is not text, or a top-level field that is not there:
        // the pointer does not point where the service keeps keys.
        assert_eq!(record_key(&json!({"id": "re_2"}), p, true), Err(()));
        let seven = json!({"metadata": {"interlock_key": 7}});
        assert_eq!(record_key(&seven, p, true), Err(()));
        assert_eq!(record_key(&json!({"id": "re_3"}), "/key", true), Err(()));
        assert_eq!(record_key(&json!({"key": null}), "/key", false), Ok(None));
    }
}
