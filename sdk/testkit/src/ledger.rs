//! A team's own credits service, as the HTTP target's tests meet one: no idempotency at all (a
//! request sent twice credits twice), credits listed by the key a caller stored with them, and an
//! account's limit and what was credited to it, leaving one request's credits out on request. It
//! can apply a credit and then hold its answer (the caller times out not knowing), or fail before
//! applying, so the tests judge the gate by the service's own records.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::{Value, json};
use tiny_http::{Header, Method, Request, Response, Server};

/// One credit as the service keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credit {
    /// `cr_N`.
    pub id: String,
    /// The account credited.
    pub account: String,
    /// In cents.
    pub amount: i64,
    /// What the caller stored with it (the effect's key), if anything.
    pub request_key: Option<String>,
}

impl Credit {
    fn as_json(&self) -> Value {
        json!({"id": self.id, "account": self.account, "amount": self.amount,
               "request_key": self.request_key})
    }
}

#[derive(Default)]
struct Books {
    limits: BTreeMap<String, i64>,
    credits: Vec<Credit>,
    /// The next `POST /credits` applies, then holds its answer this long.
    hold_after_apply: Option<Duration>,
    /// The next `POST /credits` answers this status without applying.
    fail_before_apply: Option<u16>,
}

impl Books {
    /// Record a credit (`cr_N`, in order) and return it.
    fn credit(&mut self, account: &str, amount: i64, key: Option<&str>) -> Credit {
        let credit = Credit {
            id: format!("cr_{}", self.credits.len() + 1),
            account: account.to_owned(),
            amount,
            request_key: key.map(str::to_owned),
        };
        self.credits.push(credit.clone());
        credit
    }
}

/// The service, running on a loopback port; stops when dropped.
pub struct Ledger {
    server: Arc<Server>,
    books: Arc<Mutex<Books>>,
    thread: Option<JoinHandle<()>>,
    /// `http://127.0.0.1:PORT`.
    pub base_url: String,
}

impl Drop for Ledger {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn lock(books: &Mutex<Books>) -> MutexGuard<'_, Books> {
    books
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Ledger {
    /// Serve on a free loopback port, accepting `Authorization: Bearer {token}` only.
    pub fn start(token: &str) -> std::io::Result<Self> {
        let server = Arc::new(Server::http("127.0.0.1:0").map_err(std::io::Error::other)?);
        let port = server.server_addr().to_ip().map_or(0, |a| a.port());
        let books: Arc<Mutex<Books>> = Arc::default();
        let (s, b) = (server.clone(), books.clone());
        let auth = format!("Bearer {token}");
        let thread = std::thread::spawn(move || {
            for req in s.incoming_requests() {
                let (b, auth) = (b.clone(), auth.clone());
                // One thread per request: a held answer must not block the others.
                std::thread::spawn(move || handle(&b, &auth, req));
            }
        });
        Ok(Self {
            server,
            books,
            thread: Some(thread),
            base_url: format!("http://127.0.0.1:{port}"),
        })
    }

    /// Open `account` with a credit limit.
    pub fn open(&self, account: &str, limit: i64) {
        lock(&self.books).limits.insert(account.to_owned(), limit);
    }

    /// Every credit made, in order.
    pub fn credits(&self) -> Vec<Credit> {
        lock(&self.books).credits.clone()
    }

    /// A credit made by other means than the gate (a person, another system), under `key`.
    pub fn credit_by_hand(&self, account: &str, amount: i64, key: Option<&str>) {
        lock(&self.books).credit(account, amount, key);
    }

    /// The next credit is applied and its answer held for `hold`.
    pub fn hold_next_answer(&self, hold: Duration) {
        lock(&self.books).hold_after_apply = Some(hold);
    }

    /// The next credit is refused with `status` before it is applied.
    pub fn fail_next(&self, status: u16) {
        lock(&self.books).fail_before_apply = Some(status);
    }
}

fn answer(req: Request, status: u16, body: &Value) {
    let mut r = Response::from_data(body.to_string().into_bytes()).with_status_code(status);
    if let Ok(h) = Header::from_bytes("Content-Type", "application/json") {
        r = r.with_header(h);
    }
    let _ = req.respond(r);
}

fn error(code: &str, message: &str) -> Value {
    json!({"error": {"code": code, "message": message}})
}

fn query<'a>(url: &'a str, name: &str) -> Option<String> {
    let q = url.split_once('?')?.1;
    form_urlencoded::parse(q.as_bytes())
        .find(|(k, _)| k == name)
        .map(|(_, v): (_, std::borrow::Cow<'a, str>)| v.into_owned())
}

fn handle(books: &Mutex<Books>, auth: &str, mut req: Request) {
    let authorized = req
        .headers()
        .iter()
        .any(|h| h.field.equiv("Authorization") && h.value.as_str() == auth);
    if !authorized {
        return answer(req, 401, &error("unauthorized", "a bearer token is needed"));
    }
    let url = req.url().to_owned();
    let path = url.split('?').next().unwrap_or("").to_owned();
    match (req.method().clone(), path.as_str()) {
        (Method::Post, "/credits") => {
            let mut text = String::new();
            if req.as_reader().read_to_string(&mut text).is_err() {
                return answer(req, 400, &error("unreadable", "the body could not be read"));
            }
            let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
            let (Some(account), Some(amount)) = (
                body.get("account").and_then(Value::as_str),
                body.get("amount").and_then(Value::as_i64),
            ) else {
                return answer(
                    req,
                    400,
                    &error("invalid", "account and amount are required"),
                );
            };
            let (credit, hold) = {
                let mut b = lock(books);
                if let Some(status) = b.fail_before_apply.take() {
                    drop(b);
                    return answer(req, status, &error("unavailable", "try again"));
                }
                if !b.limits.contains_key(account) {
                    drop(b);
                    return answer(req, 404, &error("no_such_account", account));
                }
                let key = body.get("request_key").and_then(Value::as_str);
                let credit = b.credit(account, amount, key);
                (credit, b.hold_after_apply.take())
            };
            if let Some(hold) = hold {
                std::thread::sleep(hold);
            }
            answer(req, 201, &credit.as_json());
        }
        (Method::Get, "/credits") => {
            let key = query(&url, "request_key");
            let account = query(&url, "account");
            let data: Vec<Value> = lock(books)
                .credits
                .iter()
                .filter(|c| key.is_none() || c.request_key == key)
                .filter(|c| account.as_ref().is_none_or(|a| &c.account == a))
                .map(Credit::as_json)
                .collect();
            answer(req, 200, &json!({"data": data, "has_more": false}));
        }
        (Method::Get, p) if p.starts_with("/accounts/") => {
            let id = &p["/accounts/".len()..];
            let excluding = query(&url, "excluding");
            let b = lock(books);
            let Some(limit) = b.limits.get(id).copied() else {
                drop(b);
                return answer(req, 404, &error("no_such_account", id));
            };
            let credited: i64 = b
                .credits
                .iter()
                .filter(|c| c.account == id && (excluding.is_none() || c.request_key != excluding))
                .map(|c| c.amount)
                .sum();
            drop(b);
            answer(
                req,
                200,
                &json!({"id": id, "limit": limit, "credited": credited}),
            );
        }
        _ => answer(req, 404, &error("no_route", &path)),
    }
}

/// The gate server's table for the ledger as target `name`, its address and token read from
/// `LEDGER_URL` and `LEDGER_TOKEN`: tier 2 with `lookup` (credits listed by key), tier 3 without.
/// Premises: the account's limit and what was credited to it by other requests; one rule; the
/// credits of an account as the service's own records, for `verify`.
pub fn target_table(name: &str, lookup: bool) -> String {
    let mut t = format!(
        "[targets.{name}]\n\
         kind = \"http\"\n\
         headers = {{ Authorization = \"Bearer ${{LEDGER_TOKEN}}\" }}\n\
         payload = {{ account = \"string\", amount = \"integer\", note = \"string?\" }}\n\
         rules = [\"limit - credited >= payload.amount\"]\n\
         [targets.{name}.send]\n\
         url = \"${{LEDGER_URL}}/credits\"\n\
         key_field = \"request_key\"\n\
         [targets.{name}.errors]\n\
         code = \"/error/code\"\n\
         message = \"/error/message\"\n\
         [targets.{name}.premises.limit]\n\
         url = \"${{LEDGER_URL}}/accounts/{{account}}?excluding={{key}}\"\n\
         pointer = \"/limit\"\n\
         [targets.{name}.premises.credited]\n\
         url = \"${{LEDGER_URL}}/accounts/{{account}}?excluding={{key}}\"\n\
         pointer = \"/credited\"\n"
    );
    t.push_str(&format!(
        "[targets.{name}.records]\n\
         url = \"${{LEDGER_URL}}/credits?account={{account}}\"\n\
         records = \"/data\"\n\
         key = \"/request_key\"\n\
         has_more = \"/has_more\"\n\
         tagged_url = \"${{LEDGER_URL}}/credits\"\n"
    ));
    if lookup {
        t.push_str(&format!(
            "[targets.{name}.lookup]\n\
             url = \"${{LEDGER_URL}}/credits?request_key={{key}}\"\n\
             records = \"/data\"\n\
             key = \"/request_key\"\n\
             has_more = \"/has_more\"\n"
        ));
    }
    t
}
