//! The order matrix's refunds: the payments API the committed cancellations' outbox calls go to,
//! the rewrite of a waiting call by someone with a plain connection to the database, and the two
//! relays — the gate's (`interlock_db::relay`, which sends a call only as its journaled plan
//! asked) and the plain one a team writes beside its own outbox table. Judged by the payments
//! API's own records.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use e2e_worker::baselines::{Posted, post_refund_form};
use e2e_worker::orders::OrderSystem;
use e2e_worker::orders::shop::{Conn, REFUND_LEASE, REFUND_TARGET, ShopAt};
use interlock::premise::NoPremises;
use interlock::{Bound, Gate, GateConfig, Grant, JournalStore, SystemClock, Tier};
use interlock_stripe::{RefundPayload, StripeConfig, StripeRefunds};
use interlock_testkit::payments_api::{PaymentsApi, Routes};
use interlock_testkit::sim::SimPayments;
use serde::{Deserialize, Serialize};

/// What the rewrite turns a waiting refund into: this much, to the attacker's own payment.
pub(crate) const REWRITTEN_AMOUNT: i64 = 50_000;

/// The payments API and the gate's relay to it.
pub struct Payments {
    api: PaymentsApi,
    secret: String,
    relay: Bound,
}

/// What the payments API shows once the cell's outbox was relayed.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Refunds {
    /// Cents refunded on the order's own payment.
    pub to_order: i64,
    /// Cents refunded on the attacker's payment.
    pub to_attacker: i64,
    /// What the relay said of the cell's call.
    pub relay_said: String,
}

impl Refunds {
    /// Whether the relay held the cell's call, saying it was rewritten.
    pub fn held_as_rewritten(&self) -> bool {
        self.relay_said.starts_with("held: ") && self.relay_said.contains("rewritten")
    }
}

impl Payments {
    /// The payments API (Stripe's endpoints) on a free port, and a gate on `journal` (at
    /// `journal_path`) bound to it under the shop's refund target name, the refund lease granted.
    pub fn start(
        journal: &Arc<dyn JournalStore>,
        journal_path: &std::path::Path,
    ) -> anyhow::Result<Self> {
        let clock = Arc::new(SystemClock);
        let sim = SimPayments::new(Tier::One, Duration::from_secs(24 * 3600), clock.clone());
        let secret = "sk_test_orders".to_owned();
        let api = PaymentsApi::start_on(sim, &secret, 0, Routes::StripeOnly)?;
        journal
            .grant_lease(&Grant::new(REFUND_LEASE, "ops@shop", crate::procs::now_ms()).unlimited())
            .context("granting the shop's refund lease")?;
        let gate = Gate::new(
            journal.clone(),
            journal.clone(),
            clock,
            GateConfig::beside(journal_path),
        )?;
        let refunds =
            StripeRefunds::new(StripeConfig::new(&api.base_url, &secret)?).named(REFUND_TARGET);
        let relay = gate.bind(Arc::new(refunds), Arc::new(NoPremises))?;
        Ok(Self { api, secret, relay })
    }

    /// A paid payment of `amount` cents for a cell: its payment intent.
    pub fn payment(&self, amount: i64) -> String {
        self.api.sim.create_payment(amount)
    }

    /// Rewrite the cell's waiting refund (asked for under `request_id`) to
    /// `REWRITTEN_AMOUNT` on `attacker`, as anyone with a plain connection to where it waits
    /// could: the substrate's outbox for the gate (on PostgreSQL, as its owner `admin`, since no
    /// service role may write it), the shop's own table for the baselines.
    pub fn rewrite(
        &self,
        system: OrderSystem,
        shop: &ShopAt,
        conn: &mut Conn,
        admin: Option<&str>,
        request_id: &str,
        attacker: &str,
    ) -> anyhow::Result<()> {
        let changed = if system == OrderSystem::Gated {
            let payload = serde_json::to_string(&RefundPayload::of_payment_intent(
                attacker,
                REWRITTEN_AMOUNT,
                "usd",
            ))?;
            let key = interlock::EffectKey::fixed(request_id.to_owned())?;
            match admin {
                Some(url) => {
                    let mut c = postgres::Client::connect(url, postgres::NoTls)?;
                    c.execute(
                        &format!(
                            "UPDATE {}.outbox SET payload = $1 WHERE key = $2 AND outcome IS NULL",
                            shop.substrate
                        ),
                        &[&payload, &key.as_str()],
                    )?
                }
                None => {
                    let c = rusqlite::Connection::open(&shop.url)?;
                    u64::try_from(c.execute(
                        "UPDATE interlock_outbox SET payload = ?1 WHERE key = ?2 AND outcome IS NULL",
                        rusqlite::params![payload, key.as_str()],
                    )?)?
                }
            }
        } else {
            conn.rewrite_refund(request_id, attacker, REWRITTEN_AMOUNT)?
        };
        anyhow::ensure!(
            changed == 1,
            "the rewrite found {changed} waiting refunds for {request_id}, not 1"
        );
        Ok(())
    }

    /// Relay the waiting refunds as `system` does, and what the payments API then shows; what
    /// the relay said is of the cell's own call (asked for under `request_id`) only, since the
    /// calls earlier cells' rewrites left wait on.
    pub fn relay(
        &self,
        system: OrderSystem,
        shop: &ShopAt,
        conn: &mut Conn,
        request_id: &str,
        (intent, attacker): (&str, &str),
    ) -> anyhow::Result<Refunds> {
        let relay_said = if system == OrderSystem::Gated {
            let outbox = shop.outbox()?;
            let targets = BTreeMap::from([(REFUND_TARGET.to_owned(), &self.relay)]);
            let relayed = interlock_db::relay(&*outbox, &targets, 100)?;
            let own = |r: &interlock_db::Request| r.plan_key == request_id;
            let said: Vec<String> = relayed
                .delivered
                .iter()
                .filter(|(r, _)| own(r))
                .map(|(_, label)| format!("sent: {label}"))
                .chain(
                    relayed
                        .waiting
                        .iter()
                        .filter(|(r, _)| own(r))
                        .map(|(_, why)| format!("held: {why}")),
                )
                .collect();
            said.join("; ")
        } else {
            let mut said = Vec::new();
            for (id, pi, amount) in conn.unsent_refunds()? {
                if id != request_id {
                    continue;
                }
                let posted = post_refund(&self.api.base_url, &self.secret, &id, &pi, amount);
                if posted.is_ok() {
                    conn.mark_refund_sent(&id)?;
                }
                said.push(match posted {
                    Ok(refund) => format!("sent: {refund}"),
                    Err(why) => format!("failed: {why}"),
                });
            }
            said.join("; ")
        };
        Ok(Refunds {
            to_order: self.api.sim.refunded(intent),
            to_attacker: self.api.sim.refunded(attacker),
            relay_said,
        })
    }
}

/// The plain relay's request: `POST /v1/refunds`, keyed by the outbox row's id; the refund's
/// id, or why not.
fn post_refund(
    base: &str,
    secret: &str,
    id: &str,
    intent: &str,
    amount: i64,
) -> Result<String, String> {
    let amount = amount.to_string();
    let form = vec![("payment_intent", intent), ("amount", amount.as_str())];
    match post_refund_form(base, secret, Some(id), form) {
        Posted::Refunded(refund) => Ok(refund),
        Posted::Rejected(why) | Posted::Retry(why) => Err(why),
    }
}
