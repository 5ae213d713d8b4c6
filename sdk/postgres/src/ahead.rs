//! A dispatch's decision reads the lease, the key's route and the budgets in force as of its
//! transaction, each under a lock held until the transaction ends. Read one by one as the
//! decision asks for them, they would cost a round trip each, three per first send. Named
//! before the transaction starts ([`ReadsAhead`]), they go out with its start and the key's lock
//! in one round trip, in the journal's lock order (the lease's row share-locked, then the route's
//! shared lock, then the budgets' rules lock, shared, which every transaction takes before a
//! lease's use lock), each lock before the read it guards. Nothing changes a row they read until
//! the transaction ends, so an answer read ahead is the answer the decision would have read later
//! in the same transaction; the one exception, a lease granted after a read ahead found none, is
//! a refusal where the later read would have found it live. A read the decision asks for that was
//! not named (another lease) or that it asks for again goes to the server as before. A read
//! named and never asked for still holds its lock until the transaction ends.

use std::cell::RefCell;

use interlock::journal::ReadsAhead;
use postgres::Row;
use postgres::types::ToSql;

use crate::budgets::BUDGET_LOCK_SPACE;
use crate::journal::PgJournal;
use crate::pool::Step;
use crate::routes::ROUTE_LOCKS;

/// The statements of the reads named ahead (empty for a read not named: an append that names
/// none, as most do, formats none).
pub(crate) struct AheadSql {
    lease: String,
    route_lock: String,
    route_read: String,
    rules_lock: String,
    rules_name: String,
    rules_read: String,
}

/// Their parameters, borrowed from the statements, the key and the reads named.
pub(crate) struct Params<'a> {
    lease: [&'a (dyn ToSql + Sync); 1],
    route_lock: [&'a (dyn ToSql + Sync); 2],
    route_read: [&'a (dyn ToSql + Sync); 1],
    rules_lock: [&'a (dyn ToSql + Sync); 2],
}

/// The parameter of a lease read that was not named (never sent).
const NO_LEASE: &str = "";

impl AheadSql {
    /// The same statements [`PgJournal::lease_on`], [`PgJournal::routes_locked`] and
    /// [`PgJournal::budgets_in`] send, for the reads `ahead` names.
    pub(crate) fn of(journal: &PgJournal, ahead: &ReadsAhead<'_>) -> Self {
        let lease = if ahead.lease.is_some() {
            journal.lease_sql("FOR SHARE")
        } else {
            String::new()
        };
        let (route_lock, route_read) = if ahead.routes {
            journal.routes_locked_sql()
        } else {
            Default::default()
        };
        let ((rules_lock, rules_name), rules_read) = if ahead.budgets {
            (journal.rules_lock_sql(), journal.budgets_sql())
        } else {
            Default::default()
        };
        Self {
            lease,
            route_lock,
            route_read,
            rules_lock,
            rules_name,
            rules_read,
        }
    }

    /// The parameters for the reads `ahead` names on `key`.
    pub(crate) fn params<'a>(&'a self, ahead: &'a ReadsAhead<'a>, key: &'a &'a str) -> Params<'a> {
        let lease: &'a &'a str = ahead.lease.as_ref().unwrap_or(&NO_LEASE);
        Params {
            lease: [lease],
            route_lock: [&ROUTE_LOCKS, key],
            route_read: [key],
            rules_lock: [&BUDGET_LOCK_SPACE, &self.rules_name],
        }
    }

    /// The statements of the reads `ahead` names, pushed onto `steps` in the order
    /// [`Ahead::answered`] takes their rows back.
    pub(crate) fn push_steps<'a>(
        &'a self,
        ahead: &ReadsAhead<'_>,
        params: &'a Params<'a>,
        steps: &mut Vec<Step<'a>>,
    ) {
        if ahead.lease.is_some() {
            steps.push((&self.lease, &params.lease));
        }
        if ahead.routes {
            steps.push((&self.route_lock, &params.route_lock));
            steps.push((&self.route_read, &params.route_read));
        }
        if ahead.budgets {
            steps.push((&self.rules_lock, &params.rules_lock));
            steps.push((&self.rules_read, &[]));
        }
    }
}

/// The rows of the reads sent ahead, each handed out once, to the read it answers.
#[derive(Default)]
pub(crate) struct Ahead {
    grant: RefCell<Option<(String, Vec<Row>)>>,
    routes: RefCell<Option<(String, Vec<Row>)>>,
    budgets: RefCell<Option<Vec<Row>>>,
}

impl Ahead {
    /// The answers to the statements [`AheadSql::push_steps`] sent for `ahead` on `key`, in
    /// order; `None` when there are more or fewer than it sent.
    pub(crate) fn answered(
        ahead: &ReadsAhead<'_>,
        key: &str,
        mut rows: impl Iterator<Item = Vec<Row>>,
    ) -> Option<Self> {
        let grant = match ahead.lease {
            Some(id) => Some((id.to_owned(), rows.next()?)),
            None => None,
        };
        let mut under_lock = |named: bool| -> Option<Option<Vec<Row>>> {
            if !named {
                return Some(None);
            }
            rows.next()?;
            rows.next().map(Some)
        };
        let routes = under_lock(ahead.routes)?.map(|r| (key.to_owned(), r));
        let budgets = under_lock(ahead.budgets)?;
        if rows.next().is_some() {
            return None;
        }
        Some(Self {
            grant: RefCell::new(grant),
            routes: RefCell::new(routes),
            budgets: RefCell::new(budgets),
        })
    }

    /// The rows read ahead for lease `id`, if it was the one named and they are still unused.
    pub(crate) fn grant(&self, id: &str) -> Option<Vec<Row>> {
        take_if(&self.grant, id)
    }

    /// The rows read ahead for `request`'s route, if it was the key's and they are unused.
    pub(crate) fn routes(&self, request: &str) -> Option<Vec<Row>> {
        take_if(&self.routes, request)
    }

    /// The rows read ahead for the budgets in force, if they are unused.
    pub(crate) fn budgets(&self) -> Option<Vec<Row>> {
        self.budgets.borrow_mut().take()
    }
}

/// The rows in `slot` if they were read for `name`, leaving the slot empty.
fn take_if(slot: &RefCell<Option<(String, Vec<Row>)>>, name: &str) -> Option<Vec<Row>> {
    let mut slot = slot.borrow_mut();
    if slot.as_ref().is_some_and(|(n, _)| n == name) {
        slot.take().map(|(_, rows)| rows)
    } else {
        None
    }
}
