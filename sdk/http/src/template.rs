//! URL and header templates. `${VAR}` comes from the environment once, when the target is built,
//! so a secret is named in the file and never written in it; `{field}` comes from the payload and
//! `{key}` from the effect's key at each request, each percent-encoded into one URL component. The
//! scheme and host must be written out (or come from the environment): a payload that could name
//! the host could send the effect, and its headers' secrets, anywhere.

use serde_json::Value;

/// One piece of a template.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    Lit(String),
    Env(String),
    Field(String),
    Key,
}

/// A template as written: checked for syntax, its `${VAR}` not yet resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Template {
    parts: Vec<Part>,
}

/// A template whose `${VAR}` are resolved; `{field}` and `{key}` are filled per request.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Resolved {
    parts: Vec<Part>,
    /// As written, for messages: never the environment's values.
    source: String,
}

impl std::fmt::Debug for Resolved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.source)
    }
}

fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

impl Template {
    /// Parse `text`; `{…}` and `${…}` must each hold a name (letters, digits, `_`, `-`, `.`).
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        let mut parts = Vec::new();
        let mut lit = String::new();
        let mut rest = text;
        while let Some(i) = rest.find(['{', '$']) {
            let (before, at) = rest.split_at(i);
            lit.push_str(before);
            let (env, open) = match at.strip_prefix("${") {
                Some(after) => (true, after),
                None if at.starts_with('$') => {
                    lit.push('$');
                    rest = &at[1..];
                    continue;
                }
                None => (false, &at[1..]),
            };
            let Some(end) = open.find('}') else {
                return Err(format!("{text:?}: a '{{' without its '}}'"));
            };
            let name = &open[..end];
            if !is_name(name) {
                return Err(format!(
                    "{text:?}: {name:?} is not a name (letters, digits, '_', '-', '.')"
                ));
            }
            if !lit.is_empty() {
                parts.push(Part::Lit(std::mem::take(&mut lit)));
            }
            parts.push(match (env, name) {
                (true, _) => Part::Env(name.to_owned()),
                (false, "key") => Part::Key,
                (false, _) => Part::Field(name.to_owned()),
            });
            rest = &open[end + 1..];
        }
        lit.push_str(rest);
        if !lit.is_empty() {
            parts.push(Part::Lit(lit));
        }
        Ok(Self { parts })
    }

    /// What can be checked of a URL before its `${VAR}` are known: it does not begin with
    /// `{field}` or `{key}`, and a written-out beginning passes [`Resolved::check_url`].
    pub(crate) fn check_url_shape(&self, source: &str) -> Result<(), String> {
        match self.parts.first() {
            Some(Part::Env(_)) => Ok(()),
            Some(Part::Lit(_)) => self.resolve(source, &|_| Some(String::new()))?.check_url(),
            _ => Err(format!(
                "{source:?} must start with http:// or https:// or a ${{VAR}} holding them"
            )),
        }
    }

    /// The payload fields the template reads.
    pub(crate) fn fields(&self) -> impl Iterator<Item = &str> {
        fields_of(&self.parts)
    }

    /// Whether it holds `{key}`.
    pub(crate) fn has_key(&self) -> bool {
        self.parts.contains(&Part::Key)
    }

    /// Whether it reads the payload or the key (a header may not).
    pub(crate) fn is_per_request(&self) -> bool {
        self.parts
            .iter()
            .any(|p| matches!(p, Part::Field(_) | Part::Key))
    }

    /// With every `${VAR}` taken from `env`; the first one missing is named.
    pub(crate) fn resolve(
        &self,
        source: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Resolved, String> {
        let mut parts: Vec<Part> = Vec::new();
        for p in &self.parts {
            let piece = match p {
                Part::Env(var) => match env(var) {
                    Some(v) => Part::Lit(v),
                    None => return Err(var.clone()),
                },
                other => other.clone(),
            };
            match (parts.last_mut(), piece) {
                (Some(Part::Lit(prev)), Part::Lit(next)) => prev.push_str(&next),
                (_, piece) => parts.push(piece),
            }
        }
        Ok(Resolved {
            parts,
            source: source.to_owned(),
        })
    }
}

/// The payload fields `parts` read, a template's before and after its `${VAR}`s are resolved.
fn fields_of(parts: &[Part]) -> impl Iterator<Item = &str> {
    parts.iter().filter_map(|p| match p {
        Part::Field(f) => Some(f.as_str()),
        _ => None,
    })
}

impl Resolved {
    /// The payload fields it reads.
    pub(crate) fn fields(&self) -> impl Iterator<Item = &str> {
        fields_of(&self.parts)
    }

    /// Whether it holds `{key}`.
    pub(crate) fn has_key(&self) -> bool {
        self.parts.contains(&Part::Key)
    }

    /// A URL's check: `http://` or `https://`, with the host written out before any `{field}` or
    /// `{key}`.
    pub(crate) fn check_url(&self) -> Result<(), String> {
        let head = match self.parts.first() {
            Some(Part::Lit(s)) => s.as_str(),
            _ => "",
        };
        let after_scheme = head
            .strip_prefix("http://")
            .or_else(|| head.strip_prefix("https://"));
        match after_scheme {
            None => Err(format!(
                "{:?} must start with http:// or https:// (after its ${{VAR}} are filled in)",
                self.source
            )),
            Some(rest) if !rest.contains('/') && self.parts.len() > 1 => Err(format!(
                "{:?}: the host must be written out, ended by '/', before any {{field}} or {{key}}: \
                 a payload that named the host could send the effect anywhere",
                self.source
            )),
            Some(rest) if rest.is_empty() || rest.starts_with('/') => {
                Err(format!("{:?} has no host", self.source))
            }
            Some(_) => Ok(()),
        }
    }

    /// The text with `{field}` and `{key}` filled in, each percent-encoded; a field the payload
    /// lacks, or holds as something other than a string or a number, is named.
    pub(crate) fn fill(&self, key: &str, payload: &Value) -> Result<String, String> {
        let mut out = String::new();
        for p in &self.parts {
            match p {
                Part::Lit(s) => out.push_str(s),
                Part::Key => out.push_str(&interlock::effect::percent_encoded(key)),
                Part::Field(f) => {
                    out.push_str(&interlock::effect::percent_encoded(&url_scalar(
                        payload, f,
                    )?));
                }
                Part::Env(_) => return Err("unresolved ${VAR}".into()),
            }
        }
        Ok(out)
    }

    /// The text of a template that reads neither the payload nor the key.
    pub(crate) fn fixed(&self) -> String {
        self.parts
            .iter()
            .map(|p| match p {
                Part::Lit(s) => s.as_str(),
                _ => "",
            })
            .collect()
    }
}

/// A payload field as text for a URL: never empty, which would make `//` of a path (another
/// route on some servers) or drop a query value.
pub(crate) fn url_scalar(payload: &Value, field: &str) -> Result<String, String> {
    let s = scalar(payload, field)?;
    if s.is_empty() {
        return Err(format!(
            "payload field {field:?} is empty, and it names part of a URL"
        ));
    }
    Ok(s)
}

/// A payload field as text, for a URL or a form.
pub(crate) fn scalar(payload: &Value, field: &str) -> Result<String, String> {
    match payload.get(field) {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Number(n)) => Ok(n.to_string()),
        Some(Value::Bool(b)) => Ok(b.to_string()),
        Some(_) => Err(format!(
            "payload field {field:?} must be a string, a number or a boolean"
        )),
        None => Err(format!("the payload has no field {field:?}")),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn env(var: &str) -> Option<String> {
        (var == "BASE").then(|| "http://ledger.internal:8080".to_owned())
    }

    #[test]
    fn fields_and_the_key_are_encoded_into_one_component() -> Result<(), String> {
        let src = "${BASE}/accounts/{account}/credits?k={key}";
        let t = Template::parse(src)?.resolve(src, &env)?;
        t.check_url()?;
        let url = t.fill("k/1", &json!({"account": "a/../../admin?x=1"}))?;
        assert_eq!(
            url,
            "http://ledger.internal:8080/accounts/a%2F%2E%2E%2F%2E%2E%2Fadmin%3Fx%3D1/credits?k=k%2F1"
        );
        assert_eq!(
            format!("{t:?}"),
            src,
            "debug output shows the template only"
        );
        Ok(())
    }

    #[test]
    fn a_payload_cannot_name_the_host() -> Result<(), String> {
        for src in [
            "http://{host}/x",
            "https://api.{region}.example/x",
            "{base}/x",
        ] {
            let t = Template::parse(src)?.resolve(src, &env)?;
            assert!(t.check_url().is_err(), "{src} must be refused");
        }
        assert!(
            Template::parse("ftp://x/")?
                .resolve("", &env)?
                .check_url()
                .is_err()
        );
        Ok(())
    }

    #[test]
    fn a_missing_variable_is_named_and_bad_syntax_refused() -> Result<(), String> {
        let t = Template::parse("${NOPE}/x")?;
        assert_eq!(t.resolve("", &env), Err("NOPE".to_owned()));
        assert!(Template::parse("http://x/{a b}").is_err());
        assert!(Template::parse("http://x/{open").is_err());
        assert_eq!(
            Template::parse("http://x/$5")?.resolve("", &env)?.fixed(),
            "http://x/$5"
        );
        Ok(())
    }

    #[test]
    fn a_missing_or_structured_field_is_named() -> Result<(), String> {
        let t = Template::parse("http://x/{a}")?.resolve("", &env)?;
        assert_eq!(
            t.fill("k", &json!({})),
            Err("the payload has no field \"a\"".to_owned())
        );
        assert!(t.fill("k", &json!({"a": {"b": 1}})).is_err());
        assert_eq!(t.fill("k", &json!({"a": 7}))?, "http://x/7");
        Ok(())
    }
}
