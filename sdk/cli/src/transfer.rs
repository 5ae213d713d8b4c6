//! Moving a journal between stores (an SQLite file and a PostgreSQL schema, either way) as a JSON
//! Lines file: the leases first, then each key's records exactly as stored. The importing store
//! re-verifies every chain and inserts nothing it cannot verify, so a copy either holds and
//! verifies as the original did, or is refused with the key and record that broke.

use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::Path;

use anyhow::{Context, bail};
use interlock::journal::Record;
use interlock::journal::store::Import;
use interlock::{EffectKey, Grant, JournalStore};
use serde::{Deserialize, Serialize};

/// The format marker on the file's first line.
const FORMAT: &str = "interlock-journal-export/1";

/// One line of the file.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Line {
    Header { format: String, from: String },
    Lease(Grant),
    Record(Record),
}

pub(crate) fn export(j: &dyn JournalStore, out: &Path) -> anyhow::Result<()> {
    let file = std::fs::File::create(out)
        .with_context(|| format!("cannot write {}: check the directory", out.display()))?;
    let mut w = BufWriter::new(file);
    let mut put = |line: &Line| -> anyhow::Result<()> {
        serde_json::to_writer(&mut w, line)?;
        w.write_all(b"\n")?;
        Ok(())
    };
    put(&Line::Header {
        format: FORMAT.into(),
        from: j.location().to_owned(),
    })?;
    let leases = j.leases()?;
    for g in &leases {
        put(&Line::Lease(g.clone()))?;
    }
    let keys = j.keys()?;
    let mut records = 0;
    for k in &keys {
        // Read through the journal: a broken chain stops the export and names the record.
        for r in j.history(&EffectKey::fixed(k.clone())?)? {
            put(&Line::Record(r))?;
            records += 1;
        }
    }
    w.flush()?;
    println!(
        "exported {} lease(s) and {records} record(s) of {} effect(s) from {} to {}",
        leases.len(),
        keys.len(),
        j.location(),
        out.display()
    );
    Ok(())
}

pub(crate) fn import(j: &dyn JournalStore, from: &Path) -> anyhow::Result<()> {
    let file = std::fs::File::open(from).with_context(|| {
        format!(
            "cannot read {}: is it a `journal export` file?",
            from.display()
        )
    })?;
    let mut lines = BufReader::new(file).lines().enumerate();
    let parse = |n: usize, text: &str| -> anyhow::Result<Line> {
        serde_json::from_str(text)
            .with_context(|| format!("{} line {}: not an export line", from.display(), n + 1))
    };
    match lines.next() {
        Some((n, text)) => match parse(n, &text?)? {
            Line::Header { format, .. } if format == FORMAT => {}
            Line::Header { format, .. } => {
                bail!(
                    "{} is a {format} file; this build reads {FORMAT}",
                    from.display()
                )
            }
            _ => bail!("{} does not start with an export header", from.display()),
        },
        None => bail!("{} is empty", from.display()),
    }
    let mut here: std::collections::HashMap<String, Grant> =
        j.leases()?.into_iter().map(|g| (g.id.clone(), g)).collect();
    let (mut leases, mut inserted, mut present) = (0, 0, 0);
    let mut history: Vec<Record> = Vec::new();
    let mut flush = |history: &mut Vec<Record>| -> anyhow::Result<()> {
        if history.is_empty() {
            return Ok(());
        }
        match j.import_history(history)? {
            Import::Insert => inserted += 1,
            Import::AlreadyThere => present += 1,
        }
        history.clear();
        Ok(())
    };
    for (n, text) in lines {
        match parse(n, &text?)? {
            Line::Header { .. } => bail!("{} line {}: a second header", from.display(), n + 1),
            Line::Lease(g) => {
                match here.get(&g.id) {
                    Some(have) if *have == g => {}
                    Some(_) => bail!(
                        "lease {} is already here with other terms: import into a journal \
                         without it",
                        g.id
                    ),
                    None => {
                        j.grant_lease(&g)?;
                        here.insert(g.id.clone(), g);
                    }
                }
                leases += 1;
            }
            Line::Record(r) => {
                if history.first().is_some_and(|h| h.key != r.key) {
                    flush(&mut history)?;
                }
                history.push(r);
            }
        }
    }
    flush(&mut history)?;
    println!(
        "imported {leases} lease(s); {inserted} effect(s) copied, {present} already here, into {}",
        j.location()
    );
    Ok(())
}
