//! `webhook serve`: Stripe's signed refund events in, `CONFIRMED` records out.

use std::sync::Arc;

use anyhow::Context;
use clap::Subcommand;
use interlock::{Clock, JournalStore, SystemClock};
use interlock_stripe::webhook::{DEFAULT_TOLERANCE_S, Delivery, MAX_BODY_BYTES, handle};
use tiny_http::{Header, Response, Server};

#[derive(Subcommand)]
pub(crate) enum WebhookCmd {
    /// Listen for deliveries (the endpoint secret from STRIPE_WEBHOOK_SECRET).
    Serve {
        /// Loopback port to listen on.
        #[arg(long, default_value_t = 8788)]
        port: u16,
        /// Address to bind: loopback by default; Stripe reaches it through a TLS proxy, named
        /// with --behind-proxy, for any address other hosts reach.
        #[arg(long, default_value = "127.0.0.1")]
        bind: String,
        /// The TLS proxies Stripe's deliveries come through (comma-separated IP addresses): an
        /// address other hosts reach may then be bound, and only they and loopback are answered.
        #[arg(long, env = "INTERLOCK_WEBHOOK_BEHIND_PROXY")]
        behind_proxy: Option<String>,
        /// Seconds a signature's timestamp may be off.
        #[arg(long, default_value_t = DEFAULT_TOLERANCE_S)]
        tolerance: i64,
    },
}

pub(crate) fn run(
    journal: Arc<dyn JournalStore>,
    shown: &str,
    cmd: WebhookCmd,
) -> anyhow::Result<()> {
    let WebhookCmd::Serve {
        port,
        bind,
        tolerance,
        behind_proxy,
    } = cmd;
    // Deliveries are signed (authenticated); the proxy provides TLS.
    let reach = interlock::reach::Reach {
        authenticated: true,
        ..interlock::reach::Reach::behind(crate::behind_proxy(behind_proxy.as_deref())?)
    };
    let fix = "bind loopback (the default) and receive deliveries through a TLS proxy, named by \
               address with --behind-proxy";
    let addrs = std::net::ToSocketAddrs::to_socket_addrs(&(bind.as_str(), port))
        .with_context(|| format!("--bind {bind}: not an address"))?;
    for addr in addrs {
        reach.check("the webhook receiver", addr, fix)?;
    }
    let secret = std::env::var("STRIPE_WEBHOOK_SECRET").context(
        "STRIPE_WEBHOOK_SECRET is not set: export the endpoint's signing secret (whsec_…)",
    )?;
    interlock_stripe::webhook::check_secret(&secret)?;
    let server = Server::http((bind.as_str(), port))
        .map_err(|e| anyhow::anyhow!("cannot listen on {bind}:{port}: {e}"))?;
    eprintln!("listening on http://{bind}:{port} for Stripe webhooks; journal {shown}");
    for mut req in server.incoming_requests() {
        if !req.remote_addr().is_some_and(|p| reach.admits(p.ip())) {
            let _ = req.respond(
                Response::from_string("deliveries come through the TLS proxy only\n")
                    .with_status_code(403),
            );
            continue;
        }
        let signature = req
            .headers()
            .iter()
            .find(|h| {
                h.field
                    .as_str()
                    .as_str()
                    .eq_ignore_ascii_case("Stripe-Signature")
            })
            .map(|h| h.value.as_str().to_owned());
        // One byte past the limit is enough to know the body is too large.
        let mut body = Vec::new();
        let limit = u64::try_from(MAX_BODY_BYTES + 1).unwrap_or(u64::MAX);
        let read =
            std::io::Read::read_to_end(&mut std::io::Read::take(req.as_reader(), limit), &mut body);
        // A journal that cannot be written is the server's trouble: 503, so Stripe retries.
        let (status, delivery) = match read {
            Ok(_) => match handle(
                journal.as_ref(),
                &secret,
                signature.as_deref(),
                &body,
                SystemClock.now_ms() / 1000,
                tolerance,
            ) {
                Ok(d) => (d.status(), d),
                Err(e) => (503, Delivery::Rejected(format!("journal error: {e}"))),
            },
            Err(e) => (400, Delivery::Rejected(format!("unreadable body: {e}"))),
        };
        let status = if body.len() > MAX_BODY_BYTES {
            413
        } else {
            status
        };
        eprintln!("{status} {delivery}");
        let text = serde_json::json!({ "result": delivery.to_string() }).to_string();
        let mut resp = Response::from_string(text).with_status_code(status);
        if let Ok(h) = Header::from_bytes("Content-Type", "application/json") {
            resp = resp.with_header(h);
        }
        let _ = req.respond(resp);
    }
    Ok(())
}
