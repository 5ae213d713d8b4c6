//! The `gated_http` systems: the same Python worker and gate server as `gated_py`, with the refund
//! described to the server by an HTTP target table (`kind = "http"`) instead of the Stripe
//! target's code. What the table cannot say, it does not get: a payment named by its charge is a
//! payload of another shape (the table's canonical form is the payment intent), and the refunds by
//! others are a fact the shop's order service answers (`?excluding={key}`), since a table reads
//! one value per premise and cannot add up a list.

use anyhow::Context;
use interlock_http::{HttpTarget, HttpTargetConfig};

/// Whether `system` is one of the HTTP target's systems.
pub fn is_http(system: &str) -> bool {
    system.starts_with("gated_http")
}

/// The gate server's name for the HTTP target a system's requests go through: the Python
/// worker's own default for the system (`worker-examples/python/refund_activities.py`).
pub fn target_name(tier: u8) -> String {
    format!("refunds_http_t{tier}")
}

/// The table for the payments API at `base` (Stripe's refunds endpoint and its records) with the
/// shop at `shop`, at `tier`: an idempotency header at 1, a lookup at 1 and 2, neither at 3. The
/// secret is `${STRIPE_SECRET_KEY}` from the server's environment.
pub fn table(base: &str, shop: &str, tier: u8) -> anyhow::Result<toml::Table> {
    let mut t = interlock_testkit::payments_api::refunds_table(base, "STRIPE_SECRET_KEY", tier)
        .context("the HTTP target's table")?;
    let shop_premises: toml::Table = toml::from_str(&format!(
        r#"
        [order_eligible]
        url = "{shop}/shop/orders/{{payment_intent}}"
        pointer = "/eligible"

        [refunded_by_others]
        url = "{shop}/shop/orders/{{payment_intent}}?excluding={{key}}"
        pointer = "/refunded_by_others"
        "#
    ))
    .context("the shop's premises")?;
    t.get_mut("premises")
        .and_then(toml::Value::as_table_mut)
        .context("the refunds table's premises")?
        .extend(shop_premises);
    let rules = [
        "amount_paid - refunded_by_others >= payload.amount",
        "order_eligible == true",
    ];
    t.insert("rules".into(), rules.map(toml::Value::from).to_vec().into());
    Ok(t)
}

/// The gate server's configuration lines for the HTTP targets of tiers 1 to 3.
pub fn server_tables(base: &str, shop: &str) -> anyhow::Result<String> {
    let mut targets = toml::Table::new();
    for tier in 1..=3 {
        let mut t = table(base, shop, tier)?;
        t.insert("kind".into(), "http".into());
        targets.insert(target_name(tier), t.into());
    }
    let mut root = toml::Table::new();
    root.insert("targets".into(), targets.into());
    Ok(toml::to_string(&root)?)
}

/// The target the server builds from the table, for `verify` to ask the payments API's records
/// the way the table says (with `secret` for `${STRIPE_SECRET_KEY}`).
pub fn target(base: &str, shop: &str, tier: u8, secret: &str) -> anyhow::Result<HttpTarget> {
    let cfg: HttpTargetConfig = table(base, shop, tier)?.try_into()?;
    let env = |v: &str| (v == "STRIPE_SECRET_KEY").then(|| secret.to_owned());
    Ok(HttpTarget::with_env(&target_name(tier), &cfg, &env)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use interlock::Tier;
    use interlock::target::Target;

    #[test]
    fn each_tier_s_table_gives_the_target_that_tier() {
        for (tier, want) in [(1, Tier::One), (2, Tier::Two), (3, Tier::Three)] {
            let t = target("http://127.0.0.1:1", "http://127.0.0.1:2", tier, "sk").unwrap();
            assert_eq!(t.tier(), want);
            assert!(t.has_records());
        }
        let cfg = server_tables("http://127.0.0.1:1", "http://127.0.0.1:2").unwrap();
        assert!(cfg.contains("[targets.refunds_http_t3]"), "{cfg}");
    }
}
