//! The durable record of every effect's life. Each key's records form a hash chain, so an edited,
//! dropped or reordered record is detected on read and named, never silently skipped. Appends go
//! through [`Journal::append_with`], which reads the key's state and writes in one transaction:
//! that is what makes "dispatch unless in flight, resolved or bound to another payload" atomic
//! across worker processes.

mod chain;
mod sqlite;
mod sqlite_budget_totals;
mod sqlite_budgets;
mod sqlite_group;
mod sqlite_leases;
mod sqlite_readers;
pub mod store;
mod tx_memo;

use serde::{Deserialize, Serialize};

pub use chain::{record_hash, verify_chain};
pub use sqlite::{SCHEMA_VERSION, SqliteJournal};
pub use store::Verified;

use serde_json::Value;

use crate::core::budget::{Budget, Hold};
use crate::core::limits::Use;
use crate::core::{EffectState, Event, HistoryError, LeaseVerdict};
use crate::effect::EffectKey;
use crate::lease::{Grant, LeaseError};

/// One stored record.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Record {
    /// Global append order.
    pub seq: i64,
    /// The effect's key.
    pub key: String,
    /// Position in the key's chain, from 0.
    pub n: u32,
    /// When it was appended (ms since the epoch).
    pub at_ms: i64,
    /// Hash of the key's previous record (`None` for the first).
    pub prev: Option<String>,
    /// SHA-256 over key, n, at_ms, prev and the event's canonical JSON.
    pub hash: String,
    /// What happened.
    pub event: Event,
}

/// What an atomic read-decide-append did.
#[derive(Clone, Debug)]
pub struct AppendOutcome {
    /// The key's state before the append.
    pub before: EffectState,
    /// The records appended (possibly none).
    pub appended: Vec<Record>,
    /// The key's records and state after, verified: where the same attempt's next read starts
    /// ([`Journal::read_after`], [`Journal::append_after`]).
    pub history: store::Verified,
}

/// Errors from a journal. Every one names where it happened.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JournalError {
    /// The file is not an SQLite database.
    #[error(
        "{path} is not an Interlock journal (not an SQLite database): point the journal at a new \
         path or at the journal file itself"
    )]
    NotADatabase {
        /// The file.
        path: String,
    },
    /// An SQLite database that some other program owns.
    #[error(
        "{path} is an SQLite database but not an Interlock journal ({why}): use a separate file \
         for the journal"
    )]
    Foreign {
        /// The file.
        path: String,
        /// What gave it away.
        why: String,
    },
    /// A journal written by a newer or older schema.
    #[error(
        "{path} has journal schema version {found}; this build reads version {supported} (and \
         upgrades version 1 when it opens the journal for writing): use the Interlock version \
         that wrote it"
    )]
    SchemaVersion {
        /// The file.
        path: String,
        /// Version found.
        found: String,
        /// Version this build supports.
        supported: u32,
    },
    /// Damaged storage or a broken chain.
    #[error(
        "journal {path} is damaged at {place}: {what}. Nothing was skipped; restore the file from a backup or inspect it with `sqlite3`"
    )]
    Corrupt {
        /// The file.
        path: String,
        /// Where: a record (`key … record n (seq s)`) or a storage page.
        place: String,
        /// What is wrong.
        what: String,
    },
    /// A history that breaks the journal's own grammar.
    #[error("journal {path}, key {key}: {source}")]
    History {
        /// The file.
        path: String,
        /// The key.
        key: String,
        /// The grammar error.
        source: HistoryError,
    },
    /// The journal is locked by others for longer than the busy timeout.
    #[error(
        "journal {path} stayed busy for {waited_ms} ms: another process holds a long write; retry"
    )]
    Busy {
        /// The file.
        path: String,
        /// How long this call waited.
        waited_ms: u64,
    },
    /// The store cannot be reached (a database server down, restarting or cut off). A commit
    /// whose answer was lost may have landed: the next attempt reads the journal again before
    /// it acts, so nothing is decided on a guess.
    #[error("journal {path} cannot be reached: {what}; retry once the server is up")]
    Unavailable {
        /// Where the store is.
        path: String,
        /// What failed.
        what: String,
    },
    /// Any other storage failure (disk full, read-only file, permissions).
    #[error("journal {path}: {what}")]
    Storage {
        /// The file.
        path: String,
        /// What failed.
        what: String,
    },
}

impl JournalError {
    /// True when trying again later may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Busy { .. } | Self::Unavailable { .. })
    }
}

/// What a decision inside the journal's write transaction can see: the key's state and verified
/// records, and — where the journal's store also keeps the leases — the leases as of that same
/// transaction, so a revocation is either committed before the decision or ordered after it.
pub struct TxView<'a> {
    /// The key's folded state.
    pub state: &'a EffectState,
    /// The key's records, oldest first, chain verified.
    pub records: &'a [Record],
    /// The leases kept in this journal's store, read inside the transaction.
    pub leases: Option<&'a dyn TxLeases>,
    /// The journal's clock as read for this transaction: the time its records are written at.
    pub now_ms: i64,
}

/// What an append's decision will read as of its transaction, named before the transaction
/// starts, so a store that pays a round trip for each read (PostgreSQL) can send them with the
/// transaction's start. A hint only: a read named here that the decision never asks for costs
/// its statement and holds its lock until the transaction ends, and one the decision asks for
/// that is not named is read as it would be anyway. Either way every read is as of the
/// transaction and under the same locks.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReadsAhead<'a> {
    /// The lease [`TxLeases::grant`] will be asked for.
    pub lease: Option<&'a str>,
    /// Whether [`TxLeases::routes`] will be asked for the key's own route.
    pub routes: bool,
    /// Whether [`TxLeases::budgets`] will be asked for.
    pub budgets: bool,
}

/// Leases read — and their uses kept — inside a journal's write transaction.
pub trait TxLeases {
    /// Lease `id` as recorded, as of this transaction.
    fn grant(&self, id: &str) -> Result<Option<Grant>, LeaseError>;

    /// Request `request`'s route as of this transaction, first step first; a step appended
    /// after it waits for the transaction or is ordered after it.
    fn routes(&self, request: &str) -> Result<Vec<crate::approval::Route>, LeaseError>;

    /// The uses lease `id`'s keys hold as of this transaction ([`crate::core::limits`]). Until the
    /// transaction ends, no other transaction takes or gives back a use of the lease: what this
    /// read saw is what the dispatch it decides is counted against.
    fn uses(&self, id: &str) -> Result<Vec<Use>, LeaseError>;

    /// Record that `key` holds a use of lease `id` counting `amount` (`held`), or that it gave
    /// it back; called by [`store::keep_use`] in the transaction that changed the key's history.
    fn set_use(&self, id: &str, key: &str, amount: i64, held: bool) -> Result<(), LeaseError>;

    /// The budgets in force as of this transaction, by id; none is set or removed until it ends.
    fn budgets(&self) -> Result<Vec<Budget>, LeaseError>;

    /// The places budget `id`'s counter `bucket` holds from `since_ms` on. Until the transaction
    /// ends, no other transaction takes or gives back a place in that counter.
    fn budget_holds(&self, id: &str, bucket: &str, since_ms: i64) -> Result<Vec<Hold>, LeaseError>;

    /// The tally of budget `id`'s counter `bucket` from `since_ms` on, for `key`: what
    /// [`crate::budget::Tally::of`] makes of [`TxLeases::budget_holds`], under the same lock. A
    /// store may keep a running total per counter (and move it here), so that a dispatch that
    /// fits reads a few rows instead of every place in its window.
    fn budget_tally(
        &self,
        id: &str,
        bucket: &str,
        since_ms: i64,
        key: &str,
    ) -> Result<crate::budget::Tally, LeaseError> {
        Ok(crate::budget::Tally::of(
            &self.budget_holds(id, bucket, since_ms)?,
            key,
            since_ms,
        ))
    }

    /// Record that `hold.key` holds a place in budget `id`'s counter `bucket`.
    fn hold_budget(&self, id: &str, bucket: &str, hold: &Hold) -> Result<(), LeaseError>;

    /// Give back every place `key` holds in any budget.
    fn release_budgets(&self, key: &str) -> Result<(), LeaseError>;

    /// The verdict on lease `id` for `payload` at `now_ms`, as of this transaction.
    fn check(&self, id: &str, payload: &Value, now_ms: i64) -> Result<LeaseVerdict, LeaseError> {
        Ok(crate::lease::verdict_of(
            self.grant(id)?.as_ref(),
            id,
            payload,
            now_ms,
        ))
    }
}

/// A decision made inside the journal's transaction: what to append, given what it can see.
pub type Decide<'a> = dyn FnMut(&TxView<'_>) -> Vec<Event> + 'a;

/// A durable, append-only store of effect histories shared by every worker on a host (SQLite) or
/// across hosts (PostgreSQL).
pub trait Journal: Send + Sync {
    /// Where this journal lives, for messages.
    fn location(&self) -> &str;

    /// Names the store this journal writes to; a lease store whose [`LeaseStore::kept_in`]
    /// gives the same name is read inside the journal's write transactions.
    ///
    /// [`LeaseStore::kept_in`]: crate::lease::LeaseStore::kept_in
    fn store_id(&self) -> &str;

    /// A name no other journal takes, kept in the journal itself: the same from wherever the
    /// journal is reached (another path, host alias or role), unlike [`Journal::store_id`].
    /// What a journal claims outside itself (an outbox call in a team's database) it claims by
    /// this. A copy of the journal's file or schema is the same journal. The default is the
    /// store id, for journals that keep no name of their own.
    fn instance(&self) -> Result<String, JournalError> {
        Ok(self.store_id().to_owned())
    }

    /// Liveness locks every worker of this journal can see, when the journal brings its own
    /// (a database shared by several hosts). `None`: the gate uses a lock file on this host.
    fn liveness(&self) -> Option<std::sync::Arc<dyn crate::liveness::Liveness>> {
        None
    }

    /// The key's records, oldest first, with the chain verified.
    fn history(&self, key: &EffectKey) -> Result<Vec<Record>, JournalError>;

    /// In one transaction: read the key's state, ask `decide` what to append, append it. A record
    /// is on stable storage when this returns.
    fn append_with(
        &self,
        key: &EffectKey,
        decide: &mut Decide<'_>,
    ) -> Result<AppendOutcome, JournalError> {
        self.append_after(key, &Verified::default(), decide)
    }

    /// The key's records, chain verified, and the state they fold to: an attempt's first read.
    fn read(&self, key: &EffectKey) -> Result<Verified, JournalError> {
        Verified::new(self.location(), key.as_str(), self.history(key)?)
    }

    /// [`Journal::read`] again, verifying only the records appended after `seen` (which this
    /// attempt read from this journal): the last of them must still be in place as seen, or the
    /// whole key is read and verified again.
    fn read_after(&self, key: &EffectKey, seen: &Verified) -> Result<Verified, JournalError> {
        let _ = seen;
        self.read(key)
    }

    /// [`Journal::append_with`], where the transaction's read of the key continues `seen` as
    /// [`Journal::read_after`] does (an empty `seen` reads and verifies the whole key).
    fn append_after(
        &self,
        key: &EffectKey,
        seen: &Verified,
        decide: &mut Decide<'_>,
    ) -> Result<AppendOutcome, JournalError>;

    /// [`Journal::append_after`], told what the decision will read as of the transaction
    /// ([`ReadsAhead`]); a store that gains nothing from knowing ignores it.
    fn append_reading(
        &self,
        key: &EffectKey,
        seen: &Verified,
        ahead: ReadsAhead<'_>,
        decide: &mut Decide<'_>,
    ) -> Result<AppendOutcome, JournalError> {
        let _ = ahead;
        self.append_after(key, seen, decide)
    }

    /// [`Journal::append_after`] for a decision that reads nothing but the key's records and
    /// state (never `tx.leases`; `tx.now_ms` may be read before the transaction, earlier than it
    /// by the wait for the key's lock, so it is no clock to judge a deadline by, only the time
    /// the records are stamped with), so that a store that pays a round trip for each
    /// statement (PostgreSQL) may decide on `seen` before its transaction and send the append
    /// with the transaction's start and its COMMIT, kept only if the key's last record is still
    /// the one seen. Where the key moved on, or the store must read more to append what was
    /// decided (a lease's use or a budget's place that changes), it decides again inside the
    /// transaction, as `append_after` does. `decide` may therefore run twice, the first time on
    /// `seen`: only the events of the run that was appended are kept, so a decision that hands
    /// anything out of the closure must set it on every run.
    fn append_on_records(
        &self,
        key: &EffectKey,
        seen: &Verified,
        decide: &mut Decide<'_>,
    ) -> Result<AppendOutcome, JournalError> {
        self.append_after(key, seen, decide)
    }

    /// Copy one key's records in as they were exported from another journal — same positions,
    /// times and hashes, so the chain still verifies — if the key is new here. A key that already
    /// holds the same records is left as it is; one that holds others is an error.
    fn import_history(&self, records: &[Record]) -> Result<store::Import, JournalError>;

    /// Every key with at least one record, in first-append order.
    fn keys(&self) -> Result<Vec<String>, JournalError>;

    /// One page of the keys with at least one record: up to `limit` of them, in the store's key
    /// order, each strictly after `after` (from the first key when `None`). Paging on with the
    /// last key of each page lists every key once, and a key appended between pages shifts no
    /// page: it is listed if it sorts after the page already read, and never twice.
    ///
    /// The order is the store's index on the key (byte order on SQLite, the key column's collation
    /// on PostgreSQL), so a page costs `limit` index steps however many keys the journal holds.
    /// This default reads every key and is only for stores too small to care (test doubles);
    /// a store that holds a real journal answers with a bounded query of its own.
    fn keys_page(&self, after: Option<&str>, limit: usize) -> Result<Vec<String>, JournalError> {
        let mut keys = self.keys()?;
        keys.sort_unstable();
        Ok(keys
            .into_iter()
            .filter(|k| after.is_none_or(|a| k.as_str() > a))
            .take(limit)
            .collect())
    }

    /// Every key with a record of `kind` (e.g. `APPLIED_TWICE`).
    fn keys_with(&self, kind: &str) -> Result<Vec<String>, JournalError> {
        let mut out = Vec::new();
        for k in self.keys()? {
            let key = EffectKey::fixed(k.clone()).map_err(|e| JournalError::Corrupt {
                path: self.location().to_owned(),
                place: format!("key {k}"),
                what: e.to_string(),
            })?;
            if self.history(&key)?.iter().any(|r| r.event.kind() == kind) {
                out.push(k);
            }
        }
        Ok(out)
    }

    /// The key's folded state.
    fn state(&self, key: &EffectKey) -> Result<EffectState, JournalError> {
        self.read(key).map(Verified::into_state)
    }
}

/// A journal that keeps its own leases: what a worker, the command line and the harness open,
/// whether the store is SQLite or a database server.
pub trait JournalStore: Journal + crate::lease::LeaseAdmin {}

/// Keys read per page by [`for_each_key`].
const KEYS_PAGE: usize = 1_000;

/// Call `each` with every effect key of `journal`, in key order, a page of keys at a time (so a
/// large journal's keys are never all held at once). A stored key that is not an effect key is
/// reported as damage, naming it.
pub fn for_each_key(
    journal: &dyn Journal,
    each: &mut dyn FnMut(EffectKey) -> Result<(), JournalError>,
) -> Result<(), JournalError> {
    let mut after: Option<String> = None;
    loop {
        let page = journal.keys_page(after.as_deref(), KEYS_PAGE)?;
        for k in &page {
            each(
                EffectKey::fixed(k.clone()).map_err(|e| JournalError::Corrupt {
                    path: journal.location().to_owned(),
                    place: format!("key {k}"),
                    what: e.to_string(),
                })?,
            )?;
        }
        match page.last() {
            Some(last) if page.len() == KEYS_PAGE => after = Some(last.clone()),
            _ => return Ok(()),
        }
    }
}

impl<T: Journal + crate::lease::LeaseAdmin> JournalStore for T {}
