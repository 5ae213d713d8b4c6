//! The journal the worker opens from `INTERLOCK_JOURNAL`: a file the workers of one host share,
//! or, in a worker built with `--features postgres`, a `postgres://` URL that workers on every
//! host share. A worker built without the feature does not link PostgreSQL at all, and refuses a
//! URL with the fix rather than taking it for a file name.

use std::sync::Arc;

use anyhow::Context;
use interlock::gate::GateConfigBuilder;
use interlock::{Clock, GateConfig, JournalStore, SqliteJournal};

/// The variable naming the journal.
pub const JOURNAL_VAR: &str = "INTERLOCK_JOURNAL";
/// The journal when the variable is not set: a file in the working directory.
pub const DEFAULT_JOURNAL: &str = "interlock-journal.db";
/// The variable naming the principal the gate acts for (the same one `interlock` reads).
pub const PRINCIPAL_VAR: &str = "INTERLOCK_PRINCIPAL";

/// An open journal and the gate configuration that goes with it.
pub struct Opened {
    /// The journal and lease store.
    pub store: Arc<dyn JournalStore>,
    /// The gate's configuration for this journal (its liveness lock beside a file).
    pub config: GateConfigBuilder,
}

fn is_url(name: &str) -> bool {
    name.starts_with("postgres://") || name.starts_with("postgresql://")
}

/// Open the journal `name`, creating it if missing, for a gate acting for `principal`.
pub fn open(name: &str, principal: Option<&str>, clock: Arc<dyn Clock>) -> anyhow::Result<Opened> {
    let opened = if is_url(name) {
        open_server(name, clock)?
    } else {
        let store = SqliteJournal::open(name, clock)
            .with_context(|| format!("opening the journal {name} ({JOURNAL_VAR})"))?;
        Opened {
            store: Arc::new(store),
            config: GateConfig::builder(name),
        }
    };
    Ok(match principal.map(str::trim).filter(|p| !p.is_empty()) {
        Some(p) => Opened {
            config: opened.config.principal(p),
            ..opened
        },
        None => opened,
    })
}

#[cfg(feature = "postgres")]
fn open_server(url: &str, clock: Arc<dyn Clock>) -> anyhow::Result<Opened> {
    let opts = interlock_postgres::PgOptions::default();
    let store = interlock_postgres::PgJournal::open(url, clock, &opts).with_context(|| {
        format!(
            "opening the journal {} ({JOURNAL_VAR})",
            interlock_postgres::shown(url)
        )
    })?;
    Ok(Opened {
        store: Arc::new(store),
        config: GateConfig::shared_builder(),
    })
}

#[cfg(not(feature = "postgres"))]
fn open_server(_url: &str, _clock: Arc<dyn Clock>) -> anyhow::Result<Opened> {
    anyhow::bail!(
        "{JOURNAL_VAR} names a PostgreSQL server, and this worker was built without PostgreSQL: \
         build it with `cargo build --features postgres`, or name a journal file"
    )
}

#[cfg(test)]
mod tests {
    use interlock::SystemClock;

    use super::*;

    #[test]
    fn a_file_journal_opens_and_a_server_needs_the_feature() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("journal.db");
        let name = path.to_str().context("a UTF-8 path")?;
        let opened = open(name, Some(" support-team "), Arc::new(SystemClock))?;
        assert!(opened.store.keys()?.is_empty());
        opened.config.build()?;
        if cfg!(not(feature = "postgres")) {
            let refused = open("postgres://u@127.0.0.1:1/db", None, Arc::new(SystemClock))
                .err()
                .map(|e| format!("{e:#}"))
                .unwrap_or_default();
            assert!(refused.contains("--features postgres"), "{refused}");
        }
        Ok(())
    }
}
