//! The simulated payments service over HTTP, speaking the subset of Stripe's API the refunds
//! target uses (and a confirmed `POST /v1/payment_intents`, for the README's test-mode steps),
//! with Stripe's documented shapes: form-encoded creates, `Idempotency-Key` replay
//! with `Idempotent-Replayed`, `idempotency_error` for reused keys, 409 for a key in progress,
//! refunds listed newest first with `has_more` and `starting_after`, Bearer authentication.
//!
//! Beside Stripe's API it serves the shop's own facts (`GET /shop/orders/{payment_intent}`: is the
//! order eligible for a refund, is the customer flagged; with `?excluding=KEY`, how much others
//! than the request KEY refunded on it) and admin endpoints for the harness, none
//! of which a refund target ever calls: payments, hand refunds without a key, eligibility,
//! flagged customers, disputes, expiring keys,
//! the tier the service acts as, holding a request before or after applying it, a 5xx after
//! applying, and the service's own full records.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::faults::Stall;
use crate::sim::{SimPayments, SimRefund, SimResponse};
use interlock::Tier;
use interlock_stripe::refund::Refunded;
use serde_json::{Value, json};
use tiny_http::{Header, Method, Request, Response, Server};

/// Which of the server's faces it shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Routes {
    /// Stripe's endpoints, the shop's order facts and the harness's admin endpoints.
    All,
    /// Stripe's endpoints and the admin endpoints, no shop: a Stripe-shaped server.
    StripeOnly,
    /// The shop's order facts alone: the shop's own service.
    ShopOnly,
}

/// A running server; stops when dropped.
pub struct PaymentsApi {
    server: Arc<Server>,
    /// The service behind the API.
    pub sim: Arc<SimPayments>,
    thread: Option<JoinHandle<()>>,
    /// `http://127.0.0.1:PORT`.
    pub base_url: String,
}

impl Drop for PaymentsApi {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl PaymentsApi {
    /// Send a signed `refund.created` event to `url` for every refund the service creates, as
    /// Stripe does for a configured webhook endpoint (`Stripe-Signature: t=…,v1=…`).
    pub fn send_webhooks(&self, url: &str, endpoint_secret: &str) {
        let (url, secret) = (url.to_owned(), endpoint_secret.to_owned());
        self.sim.on_refund(move |r| {
            let now_s = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| i64::try_from(d.as_secs()).unwrap_or(0))
                .unwrap_or(0);
            let body = json!({
                "id": format!("evt_{}", r.id), "object": "event", "type": "refund.created", "created": now_s,
                "data": { "object": r.as_json() },
            })
            .to_string();
            let signature = interlock_stripe::webhook::sign(body.as_bytes(), &secret, now_s);
            let url = url.clone();
            // Delivered from its own thread, as Stripe delivers asynchronously; redelivered once
            // if the receiver did not answer 2xx.
            std::thread::spawn(move || {
                for _ in 0..2 {
                    let sent = ureq::post(&url)
                        .header("Stripe-Signature", &signature)
                        .header("Content-Type", "application/json")
                        .send(body.as_bytes());
                    if sent.is_ok() {
                        break;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(200));
                }
            });
        });
    }

    /// Serve `sim` on a free loopback port, accepting `secret` as the Bearer key.
    pub fn start(sim: Arc<SimPayments>, secret: &str) -> std::io::Result<Self> {
        Self::start_on(sim, secret, 0, Routes::All)
    }

    /// Serve on a given loopback port (0 picks a free one), showing `routes`.
    pub fn start_on(
        sim: Arc<SimPayments>,
        secret: &str,
        port: u16,
        routes: Routes,
    ) -> std::io::Result<Self> {
        let server = Arc::new(
            Server::http(("127.0.0.1", port))
                .map_err(|e| std::io::Error::other(format!("port {port}: {e}")))?,
        );
        let port = server.server_addr().to_ip().map(|a| a.port()).unwrap_or(0);
        Self::serve(server, sim, format!("Bearer {secret}"), port, routes)
    }

    fn serve(
        server: Arc<Server>,
        sim: Arc<SimPayments>,
        secret: String,
        port: u16,
        routes: Routes,
    ) -> std::io::Result<Self> {
        let s = server.clone();
        let held: Arc<Held> = Arc::default();
        let service = sim.clone();
        let thread = std::thread::spawn(move || {
            for req in s.incoming_requests() {
                let sim = service.clone();
                let secret = secret.clone();
                let held = held.clone();
                // One thread per request: a request held inside the service must not block others.
                std::thread::spawn(move || handle(&sim, &secret, &held, routes, req));
            }
        });
        Ok(Self {
            server,
            sim,
            thread: Some(thread),
            base_url: format!("http://127.0.0.1:{port}"),
        })
    }
}

fn json_response(status: u16, body: &Value, replayed: bool) -> Response<std::io::Cursor<Vec<u8>>> {
    let mut r = Response::from_data(body.to_string().into_bytes()).with_status_code(status);
    if let Ok(h) = Header::from_bytes("Content-Type", "application/json") {
        r = r.with_header(h);
    }
    if let (true, Ok(h)) = (replayed, Header::from_bytes("Idempotent-Replayed", "true")) {
        r = r.with_header(h);
    }
    r
}

fn error(status: u16, kind: &str, code: Option<&str>, message: &str) -> (u16, Value, bool) {
    let mut e = json!({ "type": kind, "message": message });
    if let Some(c) = code {
        e["code"] = json!(c);
    }
    (status, json!({ "error": e }), false)
}

fn header<'a>(req: &'a Request, name: &str) -> Option<&'a str> {
    req.headers()
        .iter()
        .find(|h| h.field.as_str().as_str().eq_ignore_ascii_case(name))
        .map(|h| h.value.as_str())
}

/// Stripe's API versions are dates, since 2024 with a release name: `2024-06-20`,
/// `2025-03-31.basil`. Anything else is refused as Stripe refuses it.
fn api_version(v: &str) -> bool {
    let (date, name) = v.split_once('.').unwrap_or((v, "a"));
    let parts: Vec<&str> = date.split('-').collect();
    parts.len() == 3
        && [4, 2, 2]
            .iter()
            .zip(&parts)
            .all(|(n, p)| p.len() == *n && p.bytes().all(|b| b.is_ascii_digit()))
        && !name.is_empty()
        && name.bytes().all(|b| b.is_ascii_lowercase())
}

type Held = std::sync::Mutex<Vec<Arc<Stall>>>;

fn handle(sim: &SimPayments, secret: &str, held: &Held, routes: Routes, mut req: Request) {
    let path = req.url().split('?').next().unwrap_or_default().to_owned();
    let shop = path.starts_with("/shop/");
    let shown = match routes {
        Routes::All => true,
        Routes::StripeOnly => !shop,
        Routes::ShopOnly => shop,
    };
    let (status, body, replayed) = if !shown {
        error(
            404,
            "invalid_request_error",
            None,
            &format!("Unrecognized request URL ({}: {path})", req.method()),
        )
    } else if path.starts_with("/admin/") || shop {
        admin(sim, held, &mut req, &path)
    } else if header(&req, "Authorization") != Some(secret) {
        error(
            401,
            "invalid_request_error",
            None,
            "Invalid API Key provided",
        )
    } else if let Some(v) = header(&req, "Stripe-Version").filter(|v| !api_version(v)) {
        error(
            400,
            "invalid_request_error",
            None,
            &format!("Invalid Stripe API version: {v}"),
        )
    } else {
        route(sim, &mut req)
    };
    let _ = req.respond(json_response(status, &body, replayed));
}

fn read_json(req: &mut Request) -> Result<Value, (u16, Value, bool)> {
    let mut raw = String::new();
    std::io::Read::read_to_string(req.as_reader(), &mut raw)
        .map_err(|_| error(400, "invalid_request_error", None, "unreadable body"))?;
    if raw.trim().is_empty() {
        return Ok(json!({}));
    }
    serde_json::from_str(&raw).map_err(|e| {
        error(
            400,
            "invalid_request_error",
            None,
            &format!("body is not JSON: {e}"),
        )
    })
}

/// The value of `name` in `url`'s query, decoded.
fn query_param(url: &str, name: &str) -> Option<String> {
    let query = url.split_once('?').map_or("", |x| x.1);
    form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

/// The harness's side door, and the shop's own order facts.
fn admin(sim: &SimPayments, held: &Held, req: &mut Request, path: &str) -> (u16, Value, bool) {
    if let Some(id) = path.strip_prefix("/shop/orders/") {
        // The shop knows its orders by the payment intent or the charge that paid for them.
        let pi = sim
            .intent_of(&Refunded::PaymentIntent(id.to_owned()))
            .or_else(|| sim.intent_of(&Refunded::Charge(id.to_owned())));
        // `?excluding=KEY`: the order's refunds by everyone but the request KEY, the fact a
        // target configured from a table reads (it cannot add up Stripe's list itself).
        let excluding = query_param(req.url(), "excluding");
        return match pi
            .as_deref()
            .and_then(|pi| sim.read_order(pi).map(|f| (pi, f)))
        {
            Some((pi, (eligible, flagged))) => {
                let mut order = json!({
                    "payment_intent": pi,
                    "eligible": eligible,
                    "customer_flagged": flagged,
                });
                if let Some(key) = &excluding {
                    let others = sim
                        .refund_premises(pi, Some(key))
                        .and_then(|p| p.get("refunded_by_others").cloned());
                    order["refunded_by_others"] = others.unwrap_or(Value::Null);
                }
                (200, order, false)
            }
            None => error(
                404,
                "invalid_request_error",
                Some("resource_missing"),
                &format!("no order for {id}"),
            ),
        };
    }
    if req.method() == &Method::Get && path == "/admin/refunds" {
        let pi = query_param(req.url(), "payment_intent").unwrap_or_default();
        return (
            200,
            json!({ "refunds": sim.refunds(&pi), "requests": sim.requests() }),
            false,
        );
    }
    let body = match read_json(req) {
        Ok(b) => b,
        Err(e) => return e,
    };
    let s = |k: &str| {
        body.get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let n = |k: &str| body.get(k).and_then(Value::as_i64).unwrap_or_default();
    let b = |k: &str| body.get(k).and_then(Value::as_bool).unwrap_or_default();
    match path {
        "/admin/payments" => sim.add_payment(&s("id"), n("amount")),
        "/admin/refunds/hand" => sim.hand_refund(&s("payment_intent"), n("amount")),
        "/admin/orders/eligible" => sim.set_eligible(&s("payment_intent"), b("eligible")),
        "/admin/customers/flagged" => sim.set_flagged(&s("payment_intent"), b("flagged")),
        "/admin/disputed" => sim.set_disputed(&s("payment_intent"), b("disputed")),
        "/admin/keys/expire" => sim.expire_keys(),
        "/admin/error_after_apply" => sim.error_after_apply(u32::try_from(n("count")).unwrap_or(0)),
        "/admin/tier" => match u8::try_from(n("tier"))
            .ok()
            .and_then(|t| Tier::try_from(t).ok())
        {
            Some(t) => sim.set_tier(t),
            None => return error(400, "invalid_request_error", None, "tier must be 1, 2 or 3"),
        },
        "/admin/hold_next_request" | "/admin/hold_next_response" => {
            let stall = Stall::new();
            if path.ends_with("request") {
                sim.hold_next(stall.clone());
            } else {
                sim.hold_next_response(stall.clone());
            }
            if let Ok(mut h) = held.lock() {
                h.push(stall);
            }
        }
        "/admin/release" => {
            if let Ok(mut h) = held.lock() {
                for stall in h.drain(..) {
                    stall.release();
                }
            }
        }
        _ => {
            return error(
                404,
                "invalid_request_error",
                None,
                &format!("no admin endpoint {path}"),
            );
        }
    }
    (200, json!({ "ok": true }), false)
}

/// A payment intent created and confirmed in one call, as Stripe's test mode does with
/// `payment_method=pm_card_visa&confirm=true`. This service keeps paid intents in dollars only,
/// and says so rather than pretend.
fn pay(sim: &SimPayments, form: &BTreeMap<String, String>) -> (u16, Value, bool) {
    let amount = match form.get("amount").map(|a| a.parse::<i64>()) {
        Some(Ok(a)) if a > 0 => a,
        Some(_) => {
            return error(
                400,
                "invalid_request_error",
                Some("parameter_invalid_integer"),
                "Invalid integer: amount",
            );
        }
        None => {
            return error(
                400,
                "invalid_request_error",
                Some("parameter_missing"),
                "Missing required param: amount.",
            );
        }
    };
    match form.get("currency").map(String::as_str) {
        Some("usd") => {}
        Some(other) => {
            return error(
                400,
                "invalid_request_error",
                None,
                &format!("this payments API takes payments in usd only, not {other}"),
            );
        }
        None => {
            return error(
                400,
                "invalid_request_error",
                Some("parameter_missing"),
                "Missing required param: currency.",
            );
        }
    }
    if form.get("confirm").map(String::as_str) != Some("true")
        || !form.contains_key("payment_method")
    {
        return error(
            400,
            "invalid_request_error",
            None,
            "this payments API creates paid payment intents only: pass a payment_method and \
             confirm=true",
        );
    }
    let id = sim.create_payment(amount);
    (
        200,
        json!({
            "id": id, "object": "payment_intent", "amount": amount,
            "amount_received": amount, "currency": "usd", "status": "succeeded",
            "latest_charge": sim.charge_of(&id),
        }),
        false,
    )
}

fn route(sim: &SimPayments, req: &mut Request) -> (u16, Value, bool) {
    let url = req.url().to_owned();
    let (path, query) = url.split_once('?').unwrap_or((url.as_str(), ""));
    let query: BTreeMap<String, String> = form_urlencoded::parse(query.as_bytes())
        .into_owned()
        .collect();
    match (req.method(), path) {
        (Method::Post, "/v1/refunds") => {
            let mut raw = String::new();
            if std::io::Read::read_to_string(req.as_reader(), &mut raw).is_err() {
                return error(400, "invalid_request_error", None, "unreadable body");
            }
            let form: Vec<(String, String)> = form_urlencoded::parse(raw.as_bytes())
                .into_owned()
                .collect();
            let key = header(req, "Idempotency-Key").map(str::to_owned);
            create(sim, &form, key.as_deref())
        }
        (Method::Get, "/v1/refunds") => list(sim, &query),
        (Method::Post, "/v1/payment_intents") => {
            let mut raw = String::new();
            if std::io::Read::read_to_string(req.as_reader(), &mut raw).is_err() {
                return error(400, "invalid_request_error", None, "unreadable body");
            }
            let form: BTreeMap<String, String> = form_urlencoded::parse(raw.as_bytes())
                .into_owned()
                .collect();
            pay(sim, &form)
        }
        (Method::Get, p) if p.starts_with("/v1/charges/") => {
            let id = &p["/v1/charges/".len()..];
            let pi = sim.intent_of(&Refunded::Charge(id.to_owned()));
            match pi
                .as_deref()
                .and_then(|pi| sim.payment(pi).map(|a| (pi, a)))
            {
                Some((pi, amount)) => {
                    let refunded: i64 = sim.refunds(pi).iter().map(|r| r.amount).sum();
                    (
                        200,
                        json!({
                            "id": id, "object": "charge", "amount": amount,
                            "amount_captured": amount, "amount_refunded": refunded,
                            "refunded": refunded >= amount, "payment_intent": pi,
                            "currency": "usd", "status": "succeeded", "captured": true,
                        }),
                        false,
                    )
                }
                None => error(
                    404,
                    "invalid_request_error",
                    Some("resource_missing"),
                    &format!("No such charge: '{id}'"),
                ),
            }
        }
        (Method::Get, p) if p.starts_with("/v1/payment_intents/") => {
            let id = &p["/v1/payment_intents/".len()..];
            match sim.payment(id) {
                Some(amount) => (
                    200,
                    json!({
                        "id": id, "object": "payment_intent", "amount": amount,
                        "amount_received": amount, "currency": "usd", "status": "succeeded",
                        "latest_charge": sim.charge_of(id),
                    }),
                    false,
                ),
                None => error(
                    404,
                    "invalid_request_error",
                    Some("resource_missing"),
                    &format!("No such payment_intent: '{id}'"),
                ),
            }
        }
        _ => error(
            404,
            "invalid_request_error",
            None,
            &format!("Unrecognized request URL ({path})"),
        ),
    }
}

fn create(sim: &SimPayments, form: &[(String, String)], key: Option<&str>) -> (u16, Value, bool) {
    let get = |k: &str| form.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let of = match (get("payment_intent"), get("charge")) {
        (Some(pi), None) => Refunded::PaymentIntent(pi),
        (None, Some(ch)) => Refunded::Charge(ch),
        (Some(_), Some(_)) => {
            return error(
                400,
                "invalid_request_error",
                Some("parameter_invalid"),
                "You may only specify one of these parameters: charge, payment_intent.",
            );
        }
        (None, None) => {
            return error(
                400,
                "invalid_request_error",
                Some("parameter_missing"),
                "One of the following params should be provided for this request: payment_intent or charge.",
            );
        }
    };
    let amount = match get("amount").map(|a| a.parse::<i64>()) {
        Some(Ok(a)) => a,
        _ => {
            return error(
                400,
                "invalid_request_error",
                Some("parameter_invalid_integer"),
                "Invalid integer: amount",
            );
        }
    };
    if let Some(r) =
        get("reason").filter(|r| !interlock_stripe::refund::REASONS.contains(&r.as_str()))
    {
        return error(
            400,
            "invalid_request_error",
            Some("parameter_invalid"),
            &format!(
                "Invalid reason: must be one of duplicate, fraudulent, or requested_by_customer (got {r})"
            ),
        );
    }
    let metadata: BTreeMap<String, String> = form
        .iter()
        .filter_map(|(k, v)| {
            k.strip_prefix("metadata[")
                .and_then(|r| r.strip_suffix(']'))
                .map(|k| (k.to_owned(), v.clone()))
        })
        .collect();
    match sim.create_refund_of(&of, amount, key, metadata) {
        SimResponse::Created(v) => (200, v, false),
        SimResponse::Replayed(v) => (200, v, true),
        SimResponse::Refused {
            status,
            code,
            message,
        } => error(status, "invalid_request_error", Some(&code), &message),
        SimResponse::KeyReused => error(
            400,
            "idempotency_error",
            None,
            "Keys for idempotent requests can only be used with the same parameters they were first used with.",
        ),
        SimResponse::KeyInUse => error(
            409,
            "idempotency_error",
            None,
            "There is currently another in-progress request using this Idempotent Key.",
        ),
        SimResponse::ServerError(s) => error(s, "api_error", None, "An unexpected error occurred."),
        SimResponse::ReplayedServerError(s) => {
            let (status, body, _) = error(s, "api_error", None, "An unexpected error occurred.");
            (status, body, true)
        }
    }
}

fn list(sim: &SimPayments, q: &BTreeMap<String, String>) -> (u16, Value, bool) {
    let limit = q
        .get("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .unwrap_or(10)
        .clamp(1, 100);
    let mut refunds = match (q.get("payment_intent"), q.get("charge")) {
        (Some(pi), _) => sim.refunds(pi),
        (None, Some(ch)) => sim.refunds_of(&Refunded::Charge(ch.clone())),
        (None, None) => sim.all_refunds(),
    };
    refunds.reverse(); // newest first, as Stripe lists
    let start = match q.get("starting_after") {
        Some(after) => match refunds.iter().position(|r| &r.id == after) {
            Some(i) => i + 1,
            None => {
                return error(
                    400,
                    "invalid_request_error",
                    Some("resource_missing"),
                    "No such refund for starting_after",
                );
            }
        },
        None => 0,
    };
    let page: Vec<Value> = refunds
        .iter()
        .skip(start)
        .take(limit)
        .map(SimRefund::as_json)
        .collect();
    let has_more = start + page.len() < refunds.len();
    (
        200,
        json!({ "object": "list", "url": "/v1/refunds", "has_more": has_more, "data": page }),
        false,
    )
}

/// The payments API's refunds as an HTTP target table (`docs/targets.md`), as a team would
/// describe Stripe's refunds with no code: the API at `base` (a URL, or `${VAR}`), the secret
/// from `${secret_var}`, the key in the refund's metadata; at `tier` 1 the idempotency header
/// (with its replay header and reused-key conflict), at 1 and 2 the lookup by the payment's
/// refunds; the same listing as the records `verify` asks; the payment's amount as premise
/// `amount_paid`. No rules: each caller states its own, and adds its own premises.
pub fn refunds_table(
    base: &str,
    secret_var: &str,
    tier: u8,
) -> Result<toml::Table, toml::de::Error> {
    let listing = format!("{base}/v1/refunds?payment_intent={{payment_intent}}&limit=100");
    let mut text = format!(
        r#"
        headers = {{ Authorization = "Bearer ${{{secret_var}}}" }}
        payload = {{ payment_intent = "string", amount = "integer", currency = "string" }}

        [send]
        url = "{base}/v1/refunds"
        body = "form"
        key_field = "metadata[interlock_key]"

        [errors]
        code = "/error/code"
        message = "/error/message"

        [records]
        url = "{listing}"
        records = "/data"
        key = "/metadata/interlock_key"
        has_more = "/has_more"

        [premises.amount_paid]
        url = "{base}/v1/payment_intents/{{payment_intent}}"
        pointer = "/amount"
        "#
    );
    if tier == 1 {
        text.push_str(
            r#"
            [idempotency]
            header = "Idempotency-Key"
            window_hours = 24
            replayed_header = "Idempotent-Replayed"

            [[answers]]
            status = "400"
            pointer = "/error/type"
            equals = "idempotency_error"
            outcome = "conflict"
            "#,
        );
    }
    if tier <= 2 {
        text.push_str(&format!(
            r#"
            [lookup]
            url = "{listing}"
            records = "/data"
            key = "/metadata/interlock_key"
            has_more = "/has_more"
            "#
        ));
    }
    toml::from_str(&text)
}
