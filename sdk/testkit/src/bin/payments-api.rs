//! The payments API for the harness and for trying the refund worker by hand (`--help` for
//! options); prints its base URL. With a webhook URL it sends a signed `refund.created` event
//! there for every refund, as Stripe does; `--no-shop` leaves only Stripe's endpoints, the server
//! a Stripe user's worker actually talks to.

#![allow(clippy::print_stdout)] // its one line of output is the URL to use

use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use interlock::{SystemClock, Tier};
use interlock_testkit::payments_api::{PaymentsApi, Routes};
use interlock_testkit::sim::SimPayments;

/// The simulated payments service over Stripe's HTTP API.
#[derive(Parser)]
struct Args {
    /// Loopback port to listen on.
    #[arg(long, default_value_t = 8787)]
    port: u16,
    /// The secret key clients must send as `Authorization: Bearer …`.
    #[arg(long, default_value = "sk_test_local")]
    secret: String,
    /// Hide the shop's order routes: only Stripe's endpoints (and the admin ones).
    #[arg(long)]
    no_shop: bool,
    /// Send a signed `refund.created` event here for every refund.
    #[arg(long, requires = "webhook_secret")]
    webhook_url: Option<String>,
    /// The webhook endpoint's `whsec_…` secret.
    #[arg(long)]
    webhook_secret: Option<String>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let sim = SimPayments::new(
        Tier::One,
        Duration::from_secs(24 * 3600),
        Arc::new(SystemClock),
    );
    let routes = if args.no_shop {
        Routes::StripeOnly
    } else {
        Routes::All
    };
    let api = PaymentsApi::start_on(sim, &args.secret, args.port, routes)?;
    if let (Some(url), Some(hook_secret)) = (&args.webhook_url, &args.webhook_secret) {
        api.send_webhooks(url, hook_secret);
    }
    println!("{}", api.base_url);
    loop {
        std::thread::park();
    }
}
