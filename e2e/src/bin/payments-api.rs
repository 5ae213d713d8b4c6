//! The payments API for the harness and for trying the worker examples by hand.
//!
//! Usage: `payments-api [--port 8787] [--secret sk_test_local] [--webhook-url URL
//! --webhook-secret whsec_…]`; prints its base URL. With a webhook URL it sends a signed
//! `refund.created` event there for every refund, as Stripe does.

#![allow(clippy::print_stdout)] // its one line of output is the URL to use

use std::sync::Arc;
use std::time::Duration;

use interlock::target::sim::SimPayments;
use interlock::{SystemClock, Tier};
use interlock_e2e::payments_api::PaymentsApi;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let port: u16 = flag("--port")
        .map(|p| p.parse())
        .transpose()?
        .unwrap_or(8787);
    let secret = flag("--secret").unwrap_or_else(|| "sk_test_local".into());
    let sim = SimPayments::new(
        Tier::One,
        Duration::from_secs(24 * 3600),
        Arc::new(SystemClock),
    );
    let api = PaymentsApi::start_on(sim, &secret, port)?;
    if let Some(url) = flag("--webhook-url") {
        let hook_secret = flag("--webhook-secret").ok_or_else(|| {
            anyhow::anyhow!("--webhook-url needs --webhook-secret (the endpoint's whsec_… secret)")
        })?;
        api.send_webhooks(&url, &hook_secret);
    }
    println!("{}", api.base_url);
    loop {
        std::thread::park();
    }
}
