//! The shop's database as the workers and the harness reach it: a SQLite file, or a PostgreSQL
//! schema beside the substrate's. Its tables are the orders and the customers' credit; a trigger
//! audits every change of an order's status (the row the workflow never writes itself, which the
//! substrate still measures), `processed` is the keyed baseline's idempotency table, and
//! `shop_outbox` the baselines' own outbox: the refunds their transactions ask for, which a plain
//! relay sends. The gated plan asks for its refund in the substrate's outbox instead.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, bail};
use interlock::target::Target;
use interlock_db::{
    Footprint, Outbox, Outgoing, PgDb, PgDbOptions, Plan, Policy, Premise, SqliteDb, Statement,
};
use interlock_stripe::RefundPayload;
use serde_json::{Value, json};

use super::OrderDecision;

/// The tables the substrate observes.
pub const OBSERVED: [&str; 3] = ["orders", "customers", "audit"];

const SQLITE_TABLES: &str = "
    CREATE TABLE orders (id INTEGER PRIMARY KEY, status TEXT NOT NULL, amount INTEGER NOT NULL);
    CREATE TABLE customers (id INTEGER PRIMARY KEY, credit INTEGER NOT NULL);
    CREATE TABLE audit (id INTEGER PRIMARY KEY, what TEXT NOT NULL);
    CREATE TABLE processed (key TEXT PRIMARY KEY);
    CREATE TABLE shop_outbox (id TEXT PRIMARY KEY, payment_intent TEXT NOT NULL, amount INTEGER NOT NULL, sent INTEGER NOT NULL DEFAULT 0);
    CREATE TRIGGER orders_audit AFTER UPDATE OF status ON orders BEGIN
        INSERT INTO audit (what) VALUES ('order ' || NEW.id || ' ' || NEW.status);
    END;";

fn pg_tables(schema: &str) -> String {
    format!(
        "CREATE SCHEMA {schema}; SET search_path TO {schema};
         CREATE TABLE orders (id BIGINT PRIMARY KEY, status TEXT NOT NULL, amount BIGINT NOT NULL);
         CREATE TABLE customers (id BIGINT PRIMARY KEY, credit BIGINT NOT NULL);
         CREATE TABLE audit (id BIGSERIAL PRIMARY KEY, what TEXT NOT NULL);
         CREATE TABLE processed (key TEXT PRIMARY KEY);
         CREATE TABLE shop_outbox (id TEXT PRIMARY KEY, payment_intent TEXT NOT NULL, amount BIGINT NOT NULL, sent BOOLEAN NOT NULL DEFAULT false);
         CREATE FUNCTION audit_order() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN INSERT INTO audit (what) VALUES ('order ' || NEW.id || ' ' || NEW.status); RETURN NULL; END $$;
         CREATE TRIGGER orders_audit AFTER UPDATE OF status ON orders
             FOR EACH ROW EXECUTE FUNCTION audit_order();"
    )
}

/// The gate target the gated plan's refund goes to, and the lease it runs under: the only call
/// the shop's policy lets a plan ask for.
pub const REFUND_TARGET: &str = "payments";
/// See [`REFUND_TARGET`].
pub const REFUND_LEASE: &str = "shop-refunds";

/// The shop's policy: no rule on the rows (the matrix is about kills, not limits); a plan may
/// ask for a refund at the payments target under the shop's refund lease, and nothing else.
pub fn policy() -> Policy {
    Policy {
        outbox: [(REFUND_TARGET.to_owned(), [REFUND_LEASE.to_owned()].into())].into(),
        ..Policy::default()
    }
}

/// Where the shop is.
#[derive(Clone, Debug)]
pub struct ShopAt {
    /// A SQLite file, or a `postgres://` URL.
    pub url: String,
    /// On PostgreSQL: the substrate's schema.
    pub substrate: String,
    /// On PostgreSQL: the schema of the shop's tables.
    pub tables: String,
    /// On PostgreSQL: the substrate's stage key (hex), which every stager and relay needs.
    pub stage_key: String,
}

impl ShopAt {
    /// A new SQLite shop in `dir`, the substrate installed.
    pub fn create_sqlite(dir: &Path) -> anyhow::Result<Self> {
        let path = dir.join("shop.db");
        let mut conn = rusqlite::Connection::open(&path)?;
        conn.execute_batch("PRAGMA journal_mode = WAL;")?;
        conn.execute_batch(SQLITE_TABLES)?;
        interlock_db::sqlite::install(&mut conn, &OBSERVED)?;
        Ok(Self {
            url: path.display().to_string(),
            substrate: String::new(),
            tables: String::new(),
            stage_key: String::new(),
        })
    }

    /// A new PostgreSQL shop in schema `tables` of the server at `admin` (a URL that may create
    /// schemas and roles), the substrate installed in `substrate`. Everyone else — workers,
    /// baselines, the harness — connects as `role` (at `role_url`), created here with the rights
    /// on the shop's tables a team's service would have and what the substrate's `allow` grants.
    pub fn create_pg(
        admin: &str,
        tables: &str,
        substrate: &str,
        (role, role_url): (&str, &str),
    ) -> anyhow::Result<Self> {
        let mut client = postgres::Client::connect(admin, postgres::NoTls)
            .with_context(|| format!("connecting to {}", interlock_postgres::shown(admin)))?;
        client.batch_execute(&pg_tables(tables))?;
        client.batch_execute(&format!(
            "CREATE ROLE {role} LOGIN PASSWORD 'shop';
             GRANT USAGE ON SCHEMA {tables} TO {role};
             GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {tables} TO {role};
             GRANT USAGE ON ALL SEQUENCES IN SCHEMA {tables} TO {role};"
        ))?;
        let stage_key = interlock_db::postgres::install(&mut client, substrate, &OBSERVED)?;
        interlock_db::postgres::allow(&mut client, substrate, role)?;
        Ok(Self {
            url: role_url.to_owned(),
            substrate: substrate.to_owned(),
            tables: tables.to_owned(),
            stage_key,
        })
    }

    /// Whether the shop is on PostgreSQL.
    pub fn is_pg(&self) -> bool {
        self.url.starts_with("postgres://") || self.url.starts_with("postgresql://")
    }

    /// The gate's target that stages plans in this shop.
    pub fn target(&self) -> anyhow::Result<Arc<dyn Target>> {
        Ok(if self.is_pg() {
            Arc::new(self.pg()?)
        } else {
            Arc::new(SqliteDb::open(&self.url, policy())?)
        })
    }

    /// The substrate's outbox, for a relay.
    pub fn outbox(&self) -> anyhow::Result<Box<dyn Outbox>> {
        Ok(if self.is_pg() {
            Box::new(self.pg()?)
        } else {
            Box::new(SqliteDb::open(&self.url, policy())?)
        })
    }

    fn pg(&self) -> anyhow::Result<PgDb> {
        let options = PgDbOptions {
            schema: self.substrate.clone(),
            search_path: Some(self.tables.clone()),
            plans_are_trusted: false,
            stage_key: Some(self.stage_key.clone()),
        };
        Ok(PgDb::open(&self.url, options, policy())?)
    }

    /// A connection of the shop's own, for the baselines and the harness.
    pub fn connect(&self) -> anyhow::Result<Conn> {
        if self.is_pg() {
            let mut c =
                postgres::Client::connect(&self.url, postgres::NoTls).with_context(|| {
                    format!("connecting to {}", interlock_postgres::shown(&self.url))
                })?;
            c.batch_execute(&format!(
                "SET search_path TO {}; SET lock_timeout = '10s'",
                self.tables
            ))?;
            Ok(Conn::Pg(c))
        } else {
            let c = rusqlite::Connection::open(&self.url)
                .with_context(|| format!("opening the shop {}", self.url))?;
            c.busy_timeout(std::time::Duration::from_secs(10))?;
            Ok(Conn::Lite(c))
        }
    }
}

/// What the shop's own rows say about one order.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Observed {
    /// The order's status.
    pub status: String,
    /// The customer's credit.
    pub credit: i64,
    /// Audit rows recording the order's cancellation.
    pub audited: i64,
}

/// The cancellation's writes, as the baselines make them.
const CANCEL: &str = "UPDATE orders SET status = 'cancelled' WHERE id = $1";
const CANCEL_IF_PAID: &str =
    "UPDATE orders SET status = 'cancelled' WHERE id = $1 AND status = 'paid'";

/// How a baseline writes the cancellation.
#[derive(Clone, Copy, Debug)]
pub enum Baseline<'a> {
    /// Both updates, as decided.
    Plain,
    /// Both updates, skipped when the key is in the idempotency table, which the transaction
    /// writes it to.
    Keyed(&'a str),
    /// The cancellation only if the order is still paid, and the credit only if it cancelled.
    Guarded,
}

/// What a baseline's transaction did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wrote {
    /// It committed the rows.
    Rows,
    /// Its key was in the idempotency table: it wrote nothing.
    KeySeen,
    /// The order was no longer paid: it wrote nothing.
    NotPaid,
}

/// What cancelling `order` changing `rows` rows means for `how`.
fn judge(how: Baseline<'_>, order: i64, rows: usize) -> anyhow::Result<Wrote> {
    match (how, rows) {
        (_, 1) => Ok(Wrote::Rows),
        (Baseline::Guarded, 0) => Ok(Wrote::NotPaid),
        (_, n) => bail!("cancelling order {order} changed {n} rows, not 1: no such order"),
    }
}
const CREDIT: &str = "UPDATE customers SET credit = credit + $1 WHERE id = $2";

/// A connection to the shop.
pub enum Conn {
    /// SQLite.
    Lite(rusqlite::Connection),
    /// PostgreSQL.
    Pg(postgres::Client),
}

impl Conn {
    /// The order's status, if there is such an order.
    pub fn status(&mut self, order: i64) -> anyhow::Result<Option<String>> {
        let sql = "SELECT status FROM orders WHERE id = $1";
        Ok(match self {
            Conn::Lite(c) => {
                use rusqlite::OptionalExtension;
                c.query_row(&sql.replace('$', "?"), [order], |r| r.get(0))
                    .optional()?
            }
            Conn::Pg(c) => c.query_opt(sql, &[&order])?.map(|r| r.get(0)),
        })
    }

    /// Cancel `order` and credit `customer`, in one transaction, as `how` says; with `refund`
    /// (an id and a payment intent), the transaction also asks for a refund of `amount` there in
    /// the shop's own outbox. `at` is called at the kill matrix's points.
    pub fn cancel_and_credit(
        &mut self,
        order: i64,
        customer: i64,
        amount: i64,
        refund: Option<(&str, &str)>,
        how: Baseline<'_>,
        at: &dyn Fn(&str),
    ) -> anyhow::Result<Wrote> {
        at("before_dispatch");
        let cancel = match how {
            Baseline::Guarded => CANCEL_IF_PAID,
            _ => CANCEL,
        };
        let wrote = match self {
            Conn::Lite(c) => {
                let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
                if let Baseline::Keyed(k) = how {
                    let seen: i64 =
                        tx.query_row("SELECT count(*) FROM processed WHERE key = ?1", [k], |r| {
                            r.get(0)
                        })?;
                    if seen > 0 {
                        return Ok(Wrote::KeySeen);
                    }
                    tx.execute("INSERT INTO processed (key) VALUES (?1)", [k])?;
                }
                let cancelled = tx.execute(&cancel.replace('$', "?"), [order])?;
                let wrote = judge(how, order, cancelled)?;
                if wrote == Wrote::Rows {
                    tx.execute(&CREDIT.replace('$', "?"), [amount, customer])?;
                    if let Some((id, intent)) = refund {
                        tx.execute(
                            "INSERT INTO shop_outbox (id, payment_intent, amount) VALUES (?1, ?2, ?3) \
                             ON CONFLICT DO NOTHING",
                            rusqlite::params![id, intent, amount],
                        )?;
                    }
                    at("mid_stage");
                    at("after_verdict");
                    tx.commit()?;
                }
                wrote
            }
            Conn::Pg(c) => {
                let mut tx = c.transaction()?;
                if let Baseline::Keyed(k) = how {
                    // Two attempts at once wait on each other here, not both pass the check.
                    tx.execute("SELECT pg_advisory_xact_lock(hashtext($1))", &[&k])?;
                    if tx
                        .query_opt("SELECT 1 FROM processed WHERE key = $1", &[&k])?
                        .is_some()
                    {
                        return Ok(Wrote::KeySeen);
                    }
                    tx.execute("INSERT INTO processed (key) VALUES ($1)", &[&k])?;
                }
                let cancelled = usize::try_from(tx.execute(cancel, &[&order])?)?;
                let wrote = judge(how, order, cancelled)?;
                if wrote == Wrote::Rows {
                    tx.execute(CREDIT, &[&amount, &customer])?;
                    if let Some((id, intent)) = refund {
                        tx.execute(
                            "INSERT INTO shop_outbox (id, payment_intent, amount) VALUES ($1, $2, $3) \
                             ON CONFLICT DO NOTHING",
                            &[&id, &intent, &amount],
                        )?;
                    }
                    at("mid_stage");
                    at("after_verdict");
                    tx.commit()?;
                }
                wrote
            }
        };
        if wrote == Wrote::Rows {
            at("after_response");
        }
        Ok(wrote)
    }

    /// Add one cell's order (paid, `amount`) and customer (no credit).
    pub fn add_order(&mut self, order: i64, customer: i64, amount: i64) -> anyhow::Result<()> {
        match self {
            Conn::Lite(c) => {
                c.execute(
                    "INSERT INTO orders VALUES (?1, 'paid', ?2)",
                    [order, amount],
                )?;
                c.execute("INSERT INTO customers VALUES (?1, 0)", [customer])?;
            }
            Conn::Pg(c) => {
                c.execute(
                    "INSERT INTO orders VALUES ($1, 'paid', $2)",
                    &[&order, &amount],
                )?;
                c.execute("INSERT INTO customers VALUES ($1, 0)", &[&customer])?;
            }
        }
        Ok(())
    }

    /// The world changes the order's status behind the workflow's back (no audit is skipped:
    /// the trigger records it too).
    pub fn set_status(&mut self, order: i64, status: &str) -> anyhow::Result<()> {
        let n = match self {
            Conn::Lite(c) => c.execute(
                "UPDATE orders SET status = ?1 WHERE id = ?2",
                rusqlite::params![status, order],
            )?,
            Conn::Pg(c) => usize::try_from(c.execute(
                "UPDATE orders SET status = $1 WHERE id = $2",
                &[&status, &order],
            )?)?,
        };
        if n != 1 {
            bail!("order {order} is not in the shop");
        }
        Ok(())
    }

    /// Rewrite the baselines' waiting refund `id` to `amount` on `intent`, as anyone with a
    /// plain connection could: how many rows changed.
    pub fn rewrite_refund(&mut self, id: &str, intent: &str, amount: i64) -> anyhow::Result<u64> {
        Ok(match self {
            Conn::Lite(c) => u64::try_from(c.execute(
                "UPDATE shop_outbox SET payment_intent = ?1, amount = ?2 WHERE id = ?3 AND sent = 0",
                rusqlite::params![intent, amount, id],
            )?)?,
            Conn::Pg(c) => c.execute(
                "UPDATE shop_outbox SET payment_intent = $1, amount = $2 WHERE id = $3 AND NOT sent",
                &[&intent, &amount, &id],
            )?,
        })
    }

    /// The baselines' refunds not yet sent: id, payment intent, amount.
    pub fn unsent_refunds(&mut self) -> anyhow::Result<Vec<(String, String, i64)>> {
        let sql = "SELECT id, payment_intent, amount FROM shop_outbox WHERE sent = $1 ORDER BY id";
        Ok(match self {
            Conn::Lite(c) => c
                .prepare(&sql.replace('$', "?"))?
                .query_map([0], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                .collect::<Result<_, _>>()?,
            Conn::Pg(c) => c
                .query(sql, &[&false])?
                .iter()
                .map(|r| (r.get(0), r.get(1), r.get(2)))
                .collect(),
        })
    }

    /// Mark the baselines' refund `id` sent.
    pub fn mark_refund_sent(&mut self, id: &str) -> anyhow::Result<()> {
        match self {
            Conn::Lite(c) => {
                c.execute("UPDATE shop_outbox SET sent = 1 WHERE id = ?1", [id])?;
            }
            Conn::Pg(c) => {
                c.execute("UPDATE shop_outbox SET sent = true WHERE id = $1", &[&id])?;
            }
        }
        Ok(())
    }

    /// What the shop's rows say about `order` and `customer`.
    pub fn observe(&mut self, order: i64, customer: i64) -> anyhow::Result<Observed> {
        let what = format!("order {order} cancelled");
        Ok(match self {
            Conn::Lite(c) => Observed {
                status: c.query_row("SELECT status FROM orders WHERE id = ?1", [order], |r| {
                    r.get(0)
                })?,
                credit: c.query_row(
                    "SELECT credit FROM customers WHERE id = ?1",
                    [customer],
                    |r| r.get(0),
                )?,
                audited: c.query_row(
                    "SELECT count(*) FROM audit WHERE what = ?1",
                    [&what],
                    |r| r.get(0),
                )?,
            },
            Conn::Pg(c) => Observed {
                status: c
                    .query_one("SELECT status FROM orders WHERE id = $1", &[&order])?
                    .get(0),
                credit: c
                    .query_one("SELECT credit FROM customers WHERE id = $1", &[&customer])?
                    .get(0),
                audited: c
                    .query_one("SELECT count(*) FROM audit WHERE what = $1", &[&what])?
                    .get(0),
            },
        })
    }
}

fn statement(name: &str, sql: &str, params: Value) -> anyhow::Result<Statement> {
    Ok(Statement {
        name: name.into(),
        sql: sql.into(),
        params: serde_json::from_value(params)?,
    })
}

/// The gated system's plan: the same two writes, on the premise that the order's status is
/// still the one decided on, stating the footprint it expects (the audit row included).
pub fn plan(d: &OrderDecision) -> anyhow::Result<Plan> {
    let r = &d.request;
    let premise = Premise {
        name: "order_status".into(),
        sql: "SELECT status FROM orders WHERE id = :order".into(),
        params: serde_json::from_value(json!({ "order": r.order }))?,
        expect: match &d.status {
            Some(s) => vec![serde_json::from_value(json!({ "status": s }))?],
            None => Vec::new(),
        },
    };
    let footprint: Footprint = [("orders", 1), ("customers", 1), ("audit", 1)]
        .into_iter()
        .map(|(t, n)| (t.to_owned(), n))
        .collect();
    let plan = Plan::new(vec![
        statement(
            "cancel_order",
            "UPDATE orders SET status = 'cancelled' WHERE id = :order",
            json!({ "order": r.order }),
        )?,
        statement(
            "credit_customer",
            "UPDATE customers SET credit = credit + :amount WHERE id = :customer",
            json!({ "amount": r.amount, "customer": r.customer }),
        )?,
    ])?
    .premise(premise)?
    .footprint(footprint);
    Ok(match &r.refund {
        None => plan,
        Some(intent) => plan.then_send(refund_call(intent, r.amount)?)?,
    })
}

/// The call the gated plan asks for: refund `amount` cents of payment intent `intent`.
pub fn refund_call(intent: &str, amount: i64) -> anyhow::Result<Outgoing> {
    Ok(Outgoing {
        id: "refund".into(),
        target: REFUND_TARGET.into(),
        lease: REFUND_LEASE.into(),
        payload: serde_json::to_value(RefundPayload::of_payment_intent(intent, amount, "usd"))?,
    })
}
