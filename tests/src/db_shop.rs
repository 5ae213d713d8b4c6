//! The shop database the database-effect tests stage plans in: orders and customers' credit,
//! both observed by the substrate, and the plan that cancels an order and credits its customer.

use std::path::{Path, PathBuf};

use interlock_db::{Plan, Statement};
use rusqlite::Connection;
use serde_json::{Value, json};

/// The order the plan cancels, its amount, and the customer it credits.
pub const ORDER: i64 = 1;
/// What the plan credits.
pub const AMOUNT: i64 = 500;
/// The customer credited.
pub const CUSTOMER: i64 = 10;

/// A new shop database in `dir`, the substrate installed.
pub fn create(dir: &Path) -> anyhow::Result<PathBuf> {
    let path = dir.join("shop.db");
    let mut conn = Connection::open(&path)?;
    conn.execute_batch(&format!(
        "PRAGMA journal_mode = WAL;
         CREATE TABLE orders (id INTEGER PRIMARY KEY, status TEXT NOT NULL, amount INTEGER NOT NULL);
         CREATE TABLE customers (id INTEGER PRIMARY KEY, credit INTEGER NOT NULL);
         INSERT INTO orders VALUES ({ORDER}, 'paid', {AMOUNT});
         INSERT INTO customers VALUES ({CUSTOMER}, 0);"
    ))?;
    interlock_db::sqlite::install(&mut conn, &["orders", "customers"])?;
    Ok(path)
}

fn statement(name: &str, sql: &str, params: Value) -> anyhow::Result<Statement> {
    Ok(Statement {
        name: name.into(),
        sql: sql.into(),
        params: serde_json::from_value(params)?,
    })
}

/// Cancel the order and credit its customer. With `spin` > 0 the credit first counts to `spin`
/// inside the statement, so the stage stays under way long enough to be killed in it. The
/// credit has no guard of its own: run twice, it would credit twice.
pub fn cancel_and_credit(spin: u64) -> anyhow::Result<Plan> {
    let credit = if spin == 0 {
        statement(
            "credit_customer",
            "UPDATE customers SET credit = credit + :amount WHERE id = :customer",
            json!({"amount": AMOUNT, "customer": CUSTOMER}),
        )?
    } else {
        statement(
            "credit_customer",
            "UPDATE customers SET credit = credit + :amount + 0 * (
                 WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < :spin)
                 SELECT count(*) FROM c)
             WHERE id = :customer",
            json!({"amount": AMOUNT, "customer": CUSTOMER, "spin": spin}),
        )?
    };
    Ok(Plan::new(vec![
        statement(
            "cancel_order",
            "UPDATE orders SET status = 'cancelled' WHERE id = :order",
            json!({"order": ORDER}),
        )?,
        credit,
    ])?)
}

/// The customer's credit, read from the shop itself.
pub fn credit(path: &Path) -> anyhow::Result<i64> {
    Ok(Connection::open(path)?.query_row(
        "SELECT credit FROM customers WHERE id = ?1",
        [CUSTOMER],
        |r| r.get(0),
    )?)
}

/// Whether a stage holds the shop's write lock right now.
pub fn stage_under_way(path: &Path) -> anyhow::Result<bool> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(std::time::Duration::ZERO)?;
    match conn.execute_batch("BEGIN IMMEDIATE; ROLLBACK") {
        Ok(()) => Ok(false),
        Err(e) if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy) => Ok(true),
        Err(e) => Err(e.into()),
    }
}
