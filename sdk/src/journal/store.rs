//! What every journal store does the same way, whatever it stores in: turning stored columns back
//! into verified records, and the read-decide-append step inside a store's write transaction. A
//! store only supplies the transaction, the rows and the insert; the grammar, the chain and the
//! decision are checked here once, so SQLite and PostgreSQL cannot drift apart.

use crate::core::limits::holds_use;
use crate::core::{EffectState, Event, state::fold};

use super::chain::{canonical_event, record_hash_of, verify_chain, verify_links};
use super::{AppendOutcome, Decide, JournalError, Record, TxLeases, TxView};

/// A record as a store keeps it: one row, columns as written.
#[derive(Clone, Debug)]
pub struct StoredRecord {
    /// Global append order.
    pub seq: i64,
    /// The effect's key.
    pub key: String,
    /// Position in the key's chain.
    pub n: i64,
    /// The event's kind, kept beside its body for queries.
    pub kind: String,
    /// When it was appended (ms since the epoch).
    pub at_ms: i64,
    /// The previous record's hash.
    pub prev: Option<String>,
    /// This record's hash.
    pub hash: String,
    /// The event as JSON.
    pub body: String,
}

/// A record ready to be inserted: every column but `seq`, which the store assigns.
#[derive(Clone, Debug)]
pub struct NewRecord<'a> {
    /// The effect's key.
    pub key: &'a str,
    /// Position in the key's chain.
    pub n: u32,
    /// The event's kind.
    pub kind: &'a str,
    /// When it is appended.
    pub at_ms: i64,
    /// The previous record's hash.
    pub prev: Option<&'a str>,
    /// This record's hash.
    pub hash: &'a str,
    /// The event as JSON.
    pub body: &'a str,
}

/// An event's `body` column: its canonical JSON, the very bytes its record's hash covers, so a
/// new record's event is encoded once for both.
fn body_of(location: &str, event: &Event) -> Result<String, JournalError> {
    let cannot = |e: &dyn std::fmt::Display| JournalError::Storage {
        path: location.to_owned(),
        what: format!("cannot encode a {} record: {e}", event.kind()),
    };
    let bytes = canonical_event(event).map_err(|e| cannot(&e))?;
    String::from_utf8(bytes).map_err(|e| cannot(&e))
}

/// Hand each record of an imported history to `insert` exactly as it was exported (its `seq`
/// is the store's to assign), after [`check_import`] said [`Import::Insert`]; then, in the same
/// transaction, the use of its lease the history holds ([`keep_use`]), so an imported key counts
/// against its lease as it did where it was written.
pub fn insert_imported(
    location: &str,
    records: &[Record],
    leases: &dyn TxLeases,
    mut insert: impl FnMut(&NewRecord<'_>) -> Result<i64, JournalError>,
) -> Result<(), JournalError> {
    for r in records {
        let body = body_of(location, &r.event)?;
        insert(&NewRecord {
            key: &r.key,
            n: r.n,
            kind: r.event.kind(),
            at_ms: r.at_ms,
            prev: r.prev.as_deref(),
            hash: &r.hash,
            body: &body,
        })?;
    }
    if let Some(first) = records.first() {
        let history = Verified::new(location, &first.key, records.to_vec())?;
        keep_use(location, &first.key, leases, false, false, &history)?;
    }
    Ok(())
}

/// A key's stored rows, in chain order, as verified records. Anything unreadable, mislabelled or
/// out of chain is named with its place; nothing is skipped.
pub fn decode(location: &str, rows: Vec<StoredRecord>) -> Result<Vec<Record>, JournalError> {
    let out = parse(location, rows)?;
    verify_chain(&out).map_err(|(i, what)| broken_link(location, &out[i], i, what))?;
    Ok(out)
}

/// Rows as records, each body read and its kind checked; the chain is the caller's to verify.
fn parse(location: &str, rows: Vec<StoredRecord>) -> Result<Vec<Record>, JournalError> {
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        let place = format!("key {} record {} (seq {})", row.key, row.n, row.seq);
        let corrupt = |what: String| JournalError::Corrupt {
            path: location.to_owned(),
            place: place.clone(),
            what,
        };
        let event: Event = serde_json::from_str(&row.body)
            .map_err(|e| corrupt(format!("its body is not a valid record: {e}")))?;
        if event.kind() != row.kind {
            return Err(corrupt(format!(
                "its kind column says {} but its body is {}",
                row.kind,
                event.kind()
            )));
        }
        let n = u32::try_from(row.n)
            .map_err(|_| corrupt(format!("position {} is out of range", row.n)))?;
        out.push(Record {
            seq: row.seq,
            key: row.key,
            n,
            at_ms: row.at_ms,
            prev: row.prev,
            hash: row.hash,
            event,
        });
    }
    Ok(out)
}

/// The chain broken at position `at`, where `r` was found.
fn broken_link(location: &str, r: &Record, at: usize, what: String) -> JournalError {
    JournalError::Corrupt {
        path: location.to_owned(),
        place: format!("key {} record {at} (seq {})", r.key, r.seq),
        what,
    }
}

/// A key's records as one attempt read them, the chain verified and the state folded. Every way
/// to make one checks the chain (or starts empty), so a later read that starts from it
/// ([`Journal::read_after`], [`Journal::append_after`]) needs to verify only the records appended
/// since: the chain is verified once per attempt, however often the attempt reads the key again.
///
/// [`Journal::read_after`]: super::Journal::read_after
/// [`Journal::append_after`]: super::Journal::append_after
#[derive(Clone, Debug, Default)]
pub struct Verified {
    records: Vec<Record>,
    state: EffectState,
}

impl Verified {
    /// Records that were verified (by [`decode`] or as they were appended) and the state they
    /// fold to.
    pub(crate) fn new(
        location: &str,
        key: &str,
        records: Vec<Record>,
    ) -> Result<Self, JournalError> {
        let state = state_of(location, key, &records)?;
        Ok(Self { records, state })
    }

    /// The key's records, oldest first.
    pub fn records(&self) -> &[Record] {
        &self.records
    }

    /// The state they fold to.
    pub fn state(&self) -> &EffectState {
        &self.state
    }

    /// The state they fold to, the records dropped.
    pub fn into_state(self) -> EffectState {
        self.state
    }

    /// The position a read that continues these records starts at: the last one seen, read again
    /// to prove it is still in place, then whatever came after it.
    pub fn resume_at(&self) -> i64 {
        i64::try_from(self.records.len().saturating_sub(1)).unwrap_or(i64::MAX)
    }
}

/// A key's rows decoded and verified from the first, its state folded.
pub fn verified(
    location: &str,
    key: &str,
    rows: Vec<StoredRecord>,
) -> Result<Verified, JournalError> {
    Verified::new(location, key, decode(location, rows)?)
}

/// `seen` continued by `rows`: the key's stored rows from [`Verified::resume_at`] on, in chain
/// order. Only the rows after the last seen record are verified; that record must come back first
/// with the same position, `seq` and hash. `None` when it does not (the caller reads the whole key
/// again and verifies all of it, which names whatever changed).
pub fn extend(
    location: &str,
    key: &str,
    seen: &Verified,
    rows: Vec<StoredRecord>,
) -> Result<Option<Verified>, JournalError> {
    let Some(last) = seen.records.last() else {
        return verified(location, key, rows).map(Some);
    };
    let mut rows = rows.into_iter();
    let still_there = rows.next().is_some_and(|r| {
        r.key == last.key && r.n == i64::from(last.n) && r.seq == last.seq && r.hash == last.hash
    });
    if !still_there {
        return Ok(None);
    }
    let new = parse(location, rows.collect())?;
    if new.is_empty() {
        return Ok(Some(seen.clone()));
    }
    verify_links(&new, seen.records.len(), Some(&last.hash))
        .map_err(|(i, what)| broken_link(location, &new[i], seen.records.len() + i, what))?;
    let mut records = seen.records.clone();
    records.extend(new);
    Verified::new(location, key, records).map(Some)
}

/// The state a key's records fold to, or the grammar error that stops them.
pub fn state_of(
    location: &str,
    key: &str,
    records: &[Record],
) -> Result<EffectState, JournalError> {
    fold(records.iter().map(|r| (r.at_ms, &r.event))).map_err(|source| JournalError::History {
        path: location.to_owned(),
        key: key.to_owned(),
        source,
    })
}

/// Inside a store's write transaction, with the key's records read and verified in it: ask
/// `decide` what to append, chain the events, refuse a history the grammar would reject, keep
/// the lease's use and the budgets' places, and insert the events with `insert` (which returns
/// the rows' `seq`s, in order). `insert` is called at most once, for the transaction's last
/// statement: a store may send its COMMIT with it. Otherwise the caller commits when records
/// were appended and rolls back when none were, or on any error.
pub fn decide_and_append(
    location: &str,
    key: &str,
    seen: Verified,
    leases: Option<&dyn TxLeases>,
    decide: &mut Decide<'_>,
    now_ms: i64,
    insert: impl FnOnce(&[NewRecord<'_>]) -> Result<Vec<i64>, JournalError>,
) -> Result<AppendOutcome, JournalError> {
    let Verified {
        mut records,
        state: before,
    } = seen;
    let held_before = holds_use(&before, records.iter().map(|r| &r.event));
    let memo = leases.map(super::tx_memo::TxMemo::new);
    let leases = memo.as_ref().map(|m| m as &dyn TxLeases);
    let events = decide(&TxView {
        state: &before,
        records: &records,
        leases,
        now_ms,
    });
    // Chained first, then inserted in one call: a store that can (PostgreSQL) writes them in
    // one statement, one round trip.
    let mut bodies = Vec::with_capacity(events.len());
    let first_new = records.len();
    for event in events {
        let n = u32::try_from(records.len()).map_err(|_| JournalError::Storage {
            path: location.to_owned(),
            what: format!("key {key} has too many records"),
        })?;
        let prev = records.last().map(|r| r.hash.clone());
        let body = body_of(location, &event)?;
        let hash = record_hash_of(key, n, now_ms, prev.as_deref(), body.as_bytes());
        bodies.push(body);
        records.push(Record {
            seq: 0,
            key: key.to_owned(),
            n,
            at_ms: now_ms,
            prev,
            hash,
            event,
        });
    }
    // Refuse to commit anything that would make the history unreadable.
    let mut history = Verified::new(location, key, records)?;
    if let Some(leases) = leases {
        let dispatched_now = history.records[first_new..]
            .iter()
            .any(|r| matches!(r.event, Event::Dispatched(_)));
        keep_use(location, key, leases, held_before, dispatched_now, &history)?;
    }
    // The insert is the transaction's last statement, so a store that can (PostgreSQL) sends
    // its COMMIT with it, in the same round trip.
    if !bodies.is_empty() {
        let rows: Vec<NewRecord<'_>> = history.records[first_new..]
            .iter()
            .zip(&bodies)
            .map(|(r, body)| NewRecord {
                key,
                n: r.n,
                kind: r.event.kind(),
                at_ms: r.at_ms,
                prev: r.prev.as_deref(),
                hash: &r.hash,
                body,
            })
            .collect();
        let seqs = insert(&rows)?;
        if seqs.len() != rows.len() {
            return Err(JournalError::Storage {
                path: location.to_owned(),
                what: format!(
                    "key {key}: {} records inserted, {} rows came back",
                    rows.len(),
                    seqs.len()
                ),
            });
        }
        for (r, seq) in history.records[first_new..].iter_mut().zip(seqs) {
            r.seq = seq;
        }
    }
    let appended = history.records[first_new..].to_vec();
    Ok(AppendOutcome {
        before,
        appended,
        history,
    })
}

/// Take or give back the use `key` holds of its lease, and its places in the budgets, inside the
/// transaction that appended to it, when its history now says otherwise than `held_before`
/// ([`holds_use`]): a first `DISPATCHED` takes them, an end that proves the effect never applied
/// gives them back, and evidence that it landed after all takes them again. Only a lease that
/// limits its uses keeps them; the amount is what the payload counts against its total. A place
/// in a budget is taken in every budget in force that the effect matches, spanning the time the
/// effect can land in (its first `DISPATCHED` to its sends' latest deadline), and stretched by
/// every resend (`dispatched_now`).
pub fn keep_use(
    location: &str,
    key: &str,
    leases: &dyn TxLeases,
    held_before: bool,
    dispatched_now: bool,
    history: &Verified,
) -> Result<(), JournalError> {
    let held = holds_use(history.state(), history.records().iter().map(|r| &r.event));
    let changed = held != held_before;
    let Some(first) = history
        .state()
        .first()
        .filter(|_| changed || dispatched_now)
    else {
        return Ok(());
    };
    // The journal's own failure keeps its kind: a connection cut here is retried like any other.
    let failed = |e: crate::lease::LeaseError| match e {
        crate::lease::LeaseError::Journal(j) => j,
        other => JournalError::Storage {
            path: location.to_owned(),
            what: format!(
                "key {key}: keeping its use of lease {} and its budgets: {other}",
                first.lease
            ),
        },
    };
    if let Some(grant) = leases
        .grant(&first.lease)
        .map_err(failed)?
        .filter(|_| changed)
    {
        let limit = grant.limit();
        if limit.limits() {
            // A payload without the total's field was refused at dispatch; one that landed
            // anyway (evidence after a refusal) counts as the whole total.
            let amount = limit
                .amount(&first.payload)
                .unwrap_or_else(|| limit.total.as_ref().map_or(0, |(_, max)| *max));
            leases
                .set_use(&first.lease, key, amount, held)
                .map_err(failed)?;
        }
    }
    if !held {
        return leases.release_budgets(key).map_err(failed);
    }
    let mut sends = history.records().iter().filter_map(|r| match &r.event {
        Event::Dispatched(d) => Some((r.at_ms, d.deadline_ms)),
        _ => None,
    });
    let Some((at_ms, first_deadline)) = sends.next() else {
        return Ok(());
    };
    let until_ms = sends.fold(first_deadline, |latest, (_, d)| latest.max(d));
    let subject = crate::core::budget::Subject {
        payload: &first.payload,
        target: &first.target,
        labels: &first.labels,
    };
    for b in leases.budgets().map_err(failed)? {
        if !b.matches(&subject) {
            continue;
        }
        // An amount refused at dispatch that landed anyway counts as the whole limit.
        let amount = b.amount(&first.payload).unwrap_or_else(|| b.max());
        let hold = crate::core::budget::Hold {
            key: key.to_owned(),
            amount,
            at_ms,
            until_ms,
        };
        leases
            .hold_budget(&b.id, &b.bucket(&subject), &hold)
            .map_err(failed)?;
    }
    Ok(())
}

/// What importing one key's history into a store would do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Import {
    /// The key is new here: insert every record as it is.
    Insert,
    /// The store already holds exactly this history.
    AlreadyThere,
}

/// Whether `incoming` (one key's records, as exported) may be imported where the store holds
/// `existing` for that key: the chain must verify and fold, and a key already present must hold
/// the very same records. Nothing is ever merged or rewritten.
pub fn check_import(
    location: &str,
    incoming: &[Record],
    existing: &[Record],
) -> Result<Import, JournalError> {
    let Some(first) = incoming.first() else {
        return Ok(Import::AlreadyThere);
    };
    let key = first.key.as_str();
    if let Some(other) = incoming.iter().find(|r| r.key != key) {
        return Err(JournalError::Storage {
            path: location.to_owned(),
            what: format!("one history holds two keys ({key} and {})", other.key),
        });
    }
    verify_chain(incoming).map_err(|(i, what)| JournalError::Corrupt {
        path: format!("{location} (import)"),
        place: format!("key {key} record {i}"),
        what,
    })?;
    state_of(location, key, incoming)?;
    if existing.is_empty() {
        return Ok(Import::Insert);
    }
    let hashes = |rs: &[Record]| rs.iter().map(|r| r.hash.clone()).collect::<Vec<_>>();
    if hashes(existing) == hashes(incoming) {
        return Ok(Import::AlreadyThere);
    }
    Err(JournalError::Storage {
        path: location.to_owned(),
        what: format!(
            "key {key} already holds {} record(s) that differ from the {} imported: import into \
             an empty journal, or leave this key out",
            existing.len(),
            incoming.len()
        ),
    })
}
