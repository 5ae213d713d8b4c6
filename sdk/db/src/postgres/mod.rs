//! The PostgreSQL substrate: a team's own PostgreSQL database as a gate target, with the same
//! promise as SQLite's — a send stages the plan and commits it with its marker or not at all,
//! before the send's deadline; a lookup reads the marker holding the key's lock, a definitive
//! answer (tier 2). One session per target; a session that fails in a way that could leave a
//! key's lock or a transaction behind is closed, which releases both, and the next call opens
//! another.

mod bind;
mod confine;
mod install;
mod outbox;
mod session;
mod stage;

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use interlock::EffectKey;
use interlock::target::{LookupAnswer, SendAnswer, SendRequest, Target, Tier};
use postgres::NoTls;
use serde_json::Value;

pub use install::{allow, install, stage_key};

use crate::checks::Policy;
use crate::diff::Change;
use crate::error::DbError;
use crate::plan::is_plain_name;
use crate::receipt::Receipt;
use crate::stage_end::{self, Asked, Ended};
use session::Session;

/// How long a lookup waits for a stage under way by default.
const LOOKUP_WAIT: Duration = Duration::from_secs(10);

/// Where the substrate lives on a server.
#[derive(Debug, Clone)]
pub struct PgDbOptions {
    /// The substrate's own schema (default `interlock_db`).
    pub schema: String,
    /// The `search_path` plans' table names are resolved on (default: the server's).
    pub search_path: Option<String>,
    /// That every plan this target stages is written by the team's own code, not by an agent
    /// (default `false`). Unless it is set, the target's role must be confined — no way to the
    /// substrate's tables but its functions — and each session checks that it is, refusing to
    /// stage otherwise; set, any role that may use the substrate is accepted, a superuser too.
    pub plans_are_trusted: bool,
    /// The substrate's stage key (hex), as [`install`] returned it (default: the environment
    /// variable `INTERLOCK_DB_STAGE_KEY`). No stage opens without it, so a role's credentials
    /// alone cannot write a marker, an outbox call or a window's use.
    pub stage_key: Option<String>,
}

/// The environment variable a target's stage key is read from when its options give none.
pub const STAGE_KEY_ENV: &str = "INTERLOCK_DB_STAGE_KEY";

impl Default for PgDbOptions {
    fn default() -> Self {
        Self {
            schema: "interlock_db".into(),
            search_path: None,
            plans_are_trusted: false,
            stage_key: None,
        }
    }
}

/// The stage key `given`, else the one in [`STAGE_KEY_ENV`], as bytes.
fn stage_key_of(given: Option<&str>, schema: &str) -> Result<std::sync::Arc<[u8]>, DbError> {
    let text = match given {
        Some(k) => k.to_owned(),
        None => std::env::var(STAGE_KEY_ENV).map_err(|_| DbError::NoStageKey {
            schema: schema.to_owned(),
            why: format!("PgDbOptions::stage_key is not set and neither is {STAGE_KEY_ENV}"),
        })?,
    };
    match hex::decode(text.trim()) {
        Ok(bytes) if bytes.len() == 32 => Ok(bytes.into()),
        _ => Err(DbError::NoStageKey {
            schema: schema.to_owned(),
            why: "the stage key given is not 64 hex digits".into(),
        }),
    }
}

/// The substrate's schema name: a plain name with `interlock` in it, so that no plan can name it
/// ([`crate::sql_shape`] refuses every name with `interlock` in it).
pub(crate) fn check_schema(schema: &str) -> Result<(), DbError> {
    if is_plain_name(schema)
        && schema == schema.to_ascii_lowercase()
        && schema.contains("interlock")
    {
        Ok(())
    } else {
        Err(DbError::BadTable {
            table: schema.to_owned(),
            why: "the substrate's schema must be a plain lower-case name (letters, digits, `_`) with `interlock` in it",
        })
    }
}

/// A team's PostgreSQL database, with the substrate installed, as a gate target.
pub struct PgDb {
    name: String,
    config: postgres::Config,
    options: PgDbOptions,
    stage_key: std::sync::Arc<[u8]>,
    session: Mutex<Option<Session>>,
    policy: Policy,
    lookup_wait: Duration,
}

impl std::fmt::Debug for PgDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgDb")
            .field("name", &self.name)
            .field("schema", &self.options.schema)
            .finish_non_exhaustive()
    }
}

impl PgDb {
    /// The database at `url` (`postgres://user@host:port/db`), judged by `policy`. The
    /// substrate must be installed in `options.schema` ([`install`]) and the URL's role let in
    /// ([`allow`]); unless `options.plans_are_trusted`, that role must also be confined, or
    /// [`DbError::Unconfined`] names each way it could reach the substrate.
    pub fn open(url: &str, options: PgDbOptions, policy: Policy) -> Result<Self, DbError> {
        check_schema(&options.schema)?;
        if options
            .search_path
            .as_deref()
            .is_some_and(|p| p.contains('\\'))
        {
            return Err(DbError::Database {
                doing: "open",
                what: "a search_path with a backslash in it: name schemas without one".into(),
            });
        }
        let config: postgres::Config = url.parse().map_err(|e| DbError::Database {
            doing: "open",
            what: format!(
                "not a PostgreSQL connection string ({e}): use postgres://user@host:port/database"
            ),
        })?;
        let stage_key = stage_key_of(options.stage_key.as_deref(), &options.schema)?;
        let db = Self {
            name: "postgres-db".into(),
            config,
            stage_key,
            options,
            session: Mutex::new(None),
            policy,
            lookup_wait: LOOKUP_WAIT,
        };
        // A session is checked as it opens.
        let session = db.session()?;
        drop(session);
        Ok(db)
    }

    /// The same target under another name (the journal records effects by target name).
    #[must_use]
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// How long a lookup waits for a stage under way to end (default 10 s); past it, the lookup
    /// answers unknown rather than absent.
    #[must_use]
    pub fn lookup_wait(mut self, wait: Duration) -> Self {
        self.lookup_wait = wait;
        self
    }

    /// The session, opened if there is none.
    fn session(&self) -> Result<MutexGuard<'_, Option<Session>>, DbError> {
        // A session whose holder panicked may be inside a stage's transaction, holding its key.
        let (mut session, poisoned) = match self.session.lock() {
            Ok(s) => (s, false),
            Err(p) => (p.into_inner(), true),
        };
        if poisoned {
            self.session.clear_poison();
            *session = None;
        }
        if session.as_ref().is_some_and(Session::is_closed) {
            *session = None;
        }
        if session.is_none() {
            let client = self
                .config
                .connect(NoTls)
                .map_err(|e| DbError::postgres("connect", e))?;
            let mut opened = Session::new(
                client,
                self.options.search_path.clone(),
                self.stage_key.clone(),
            )
            .map_err(|e| DbError::postgres("connect", e))?;
            self.check(&mut opened)?;
            *session = Some(opened);
        }
        Ok(session)
    }

    /// That a new session may stage: the substrate is installed, its role let in, and — unless
    /// the team vouches for its plans — confined.
    fn check(&self, session: &mut Session) -> Result<(), DbError> {
        let schema = &self.options.schema;
        let (installed, allowed) =
            confine::reachable(session, schema).map_err(|e| DbError::postgres("connect", e))?;
        if !installed {
            return Err(DbError::NotInstalled {
                where_: format!(" in schema {schema} (or it predates the stage functions)"),
            });
        }
        if !allowed {
            let role: String = session
                .query_one("SELECT session_user::text", &[])
                .map_err(|e| DbError::postgres("connect", e))?
                .get(0);
            return Err(DbError::NotAllowed {
                role,
                schema: schema.clone(),
            });
        }
        if !self.options.plans_are_trusted {
            let findings =
                confine::findings(session, schema).map_err(|e| DbError::postgres("connect", e))?;
            if !findings.is_empty() {
                return Err(DbError::Unconfined { findings });
            }
        }
        Ok(())
    }

    /// Run `f` on the session; close the session when `f` says it must be.
    fn with<T>(&self, f: impl FnOnce(&mut Session, &str) -> (T, bool)) -> Result<T, DbError> {
        let mut session = self.session()?;
        let Some(client) = session.as_mut() else {
            return Err(DbError::Database {
                doing: "connect",
                what: "no session".into(),
            });
        };
        let (out, close) = f(client, &self.options.schema);
        if close {
            *session = None;
        }
        Ok(out)
    }

    /// `f` on the session, closing it if `f` fails (a reading's transaction or lock may be left).
    fn closing_on_error<T>(
        &self,
        f: impl FnOnce(&mut Session, &str) -> Result<T, String>,
    ) -> Result<Result<T, String>, DbError> {
        self.with(|c, s| {
            let r = f(c, s);
            let close = r.is_err();
            (r, close)
        })
    }

    /// A reading of the substrate's `what` rows by `f` ([`Self::closing_on_error`]).
    fn read<T>(
        &self,
        what: &'static str,
        f: impl FnOnce(&mut Session, &str) -> Result<T, String>,
    ) -> Result<T, DbError> {
        self.closing_on_error(f)?
            .map_err(|detail| DbError::Stored { what, detail })
    }

    /// The receipt of the plan committed under `key`, if one was.
    pub fn receipt(&self, key: &EffectKey) -> Result<Option<Receipt>, DbError> {
        self.read("marker", |c, s| {
            stage::read_marker_locked(c, s, key.as_str(), self.lookup_wait)
        })
    }

    /// The key of every marker: every plan this database committed.
    pub fn marker_keys(&self) -> Result<Vec<String>, DbError> {
        self.read("marker", stage::marker_keys)
    }

    /// Rows of observed tables changed outside any stage: writes nobody mediated, oldest first.
    pub fn unmediated(&self) -> Result<Vec<Change>, DbError> {
        self.read("change record", stage::unmediated)
    }
}

impl Target for PgDb {
    fn name(&self) -> &str {
        &self.name
    }

    fn tier(&self) -> Tier {
        Tier::Two
    }

    fn has_lookup(&self) -> bool {
        true
    }

    fn send(&self, req: &SendRequest<'_>) -> SendAnswer {
        let plan = match stage_end::plan_of(req) {
            Ok(p) => p,
            Err(refused) => return refused,
        };
        let plan_hash = crate::receipt::plan_hash(&plan);
        let asked = Asked::of(req, &plan, &plan_hash, &self.policy);
        let ended = self.with(|c, s| {
            let (ended, close) = stage::stage(c, s, asked);
            if let Some(why) = &close {
                tracing::warn!(error = %why, "closing the database session");
            }
            let close = close.is_some() || matches!(ended, Ended::Unknown(_));
            (ended, close)
        });
        match ended {
            Ok(ended) => ended.into(),
            // Never connected: nothing was staged.
            Err(e) => SendAnswer::Unknown(e.to_string()),
        }
    }

    fn lookup(&self, key: &EffectKey, payload: &Value) -> LookupAnswer {
        match stage_end::looked_for(payload) {
            Ok(plan_hash) => {
                stage_end::lookup_answer(self.receipt(key).map_err(|e| e.to_string()), &plan_hash)
            }
            Err(unknown) => unknown,
        }
    }
}
