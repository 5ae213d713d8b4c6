//! One append transaction reads the same lease and the same budgets twice: once to decide (the
//! gate's checks) and once to keep the key's use of them (`store::keep_use`). Both reads are
//! answered "as of this transaction", and nothing sets a lease or a budget inside an append's
//! transaction while another transaction waits on the row's or the budgets' lock until it ends,
//! so the second read can only repeat the first: it is answered from memory (on PostgreSQL a read
//! is a round trip, unless the dispatch sent it with the transaction's start); everything else
//! goes to the store as before.
//! `check` is the trait's own, over the remembered grant.

use std::cell::RefCell;
use std::collections::BTreeMap;

use super::TxLeases;
use crate::core::budget::{Budget, Hold};
use crate::core::limits::Use;
use crate::lease::{Grant, LeaseError};

/// [`TxLeases`] over a store's own, for one transaction: leases and budgets read at most once.
pub(super) struct TxMemo<'a> {
    inner: &'a dyn TxLeases,
    grants: RefCell<BTreeMap<String, Option<Grant>>>,
    budgets: RefCell<Option<Vec<Budget>>>,
}

impl<'a> TxMemo<'a> {
    pub(super) fn new(inner: &'a dyn TxLeases) -> Self {
        Self {
            inner,
            grants: RefCell::default(),
            budgets: RefCell::default(),
        }
    }
}

impl TxLeases for TxMemo<'_> {
    fn grant(&self, id: &str) -> Result<Option<Grant>, LeaseError> {
        if let Some(g) = self.grants.borrow().get(id) {
            return Ok(g.clone());
        }
        // An error is not remembered: the transaction fails with it.
        let g = self.inner.grant(id)?;
        self.grants.borrow_mut().insert(id.to_owned(), g.clone());
        Ok(g)
    }

    fn routes(&self, request: &str) -> Result<Vec<crate::approval::Route>, LeaseError> {
        self.inner.routes(request)
    }

    fn uses(&self, id: &str) -> Result<Vec<Use>, LeaseError> {
        self.inner.uses(id)
    }

    fn set_use(&self, id: &str, key: &str, amount: i64, held: bool) -> Result<(), LeaseError> {
        self.inner.set_use(id, key, amount, held)
    }

    fn budgets(&self) -> Result<Vec<Budget>, LeaseError> {
        if let Some(b) = self.budgets.borrow().as_ref() {
            return Ok(b.clone());
        }
        let b = self.inner.budgets()?;
        *self.budgets.borrow_mut() = Some(b.clone());
        Ok(b)
    }

    fn budget_holds(&self, id: &str, bucket: &str, since_ms: i64) -> Result<Vec<Hold>, LeaseError> {
        self.inner.budget_holds(id, bucket, since_ms)
    }

    fn budget_tally(
        &self,
        id: &str,
        bucket: &str,
        since_ms: i64,
        key: &str,
    ) -> Result<crate::budget::Tally, LeaseError> {
        self.inner.budget_tally(id, bucket, since_ms, key)
    }

    fn hold_budget(&self, id: &str, bucket: &str, hold: &Hold) -> Result<(), LeaseError> {
        self.inner.hold_budget(id, bucket, hold)
    }

    fn release_budgets(&self, key: &str) -> Result<(), LeaseError> {
        self.inner.release_budgets(key)
    }
}
