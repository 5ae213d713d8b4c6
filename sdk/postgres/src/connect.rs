//! How the journal talks to the server: the settings every connection carries, and what each
//! failure means to the gate. A server that is down, restarting or cut off is `Unavailable`
//! (retry); a lock or statement that waited too long is `Busy` (retry); anything else is named
//! with its SQLSTATE and not retried blindly.

use std::time::Duration;

use interlock::JournalError;
use postgres::error::SqlState;

/// The connection settings, read from a URL (`postgres://user@host:port/db`) or a key=value
/// string, with the journal's own settings added.
pub(crate) fn config(url: &str) -> Result<tokio_postgres::Config, JournalError> {
    let mut cfg: tokio_postgres::Config = url.parse().map_err(|e| JournalError::Storage {
        path: redact(url),
        what: format!(
            "not a PostgreSQL connection string ({e}): use postgres://user@host:port/database"
        ),
    })?;
    if cfg.get_connect_timeout().is_none() {
        cfg.connect_timeout(Duration::from_secs(5));
    }
    // A worker cut off from the server finds out within about half a minute, so its calls fail
    // (and are retried) instead of hanging on a dead socket.
    cfg.keepalives(true)
        .keepalives_idle(Duration::from_secs(10))
        .keepalives_interval(Duration::from_secs(5))
        .keepalives_retries(3)
        .tcp_user_timeout(Duration::from_secs(30));
    if cfg.get_application_name().is_none() {
        cfg.application_name("interlock");
    }
    // Never a read-only standby: a stale read there could hide a dispatch.
    cfg.target_session_attrs(tokio_postgres::config::TargetSessionAttrs::ReadWrite);
    Ok(cfg)
}

/// Where a configuration points, for messages: user, hosts, ports and database, never the
/// password.
pub(crate) fn location(cfg: &tokio_postgres::Config) -> String {
    let hosts: Vec<String> = cfg
        .get_hosts()
        .iter()
        .map(|h| match h {
            tokio_postgres::config::Host::Tcp(name) => name.clone(),
            tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
        })
        .collect();
    let ports: Vec<String> = cfg.get_ports().iter().map(u16::to_string).collect();
    format!(
        "postgres://{}@{}:{}/{}",
        cfg.get_user().unwrap_or(""),
        hosts.join(","),
        if ports.is_empty() {
            "5432".to_owned()
        } else {
            ports.join(",")
        },
        cfg.get_dbname().unwrap_or("")
    )
}

/// A connection string with any password cut out, for an error about the string itself: the
/// URL's `user:password@`, a `password=` query parameter, and a `password=` keyword.
pub(crate) fn redact(url: &str) -> String {
    // The authority ends at the path or the query; its last `@` ends the user information. A
    // password holding an unencoded `/` or `?` hides the authority's end: shown as a whole.
    let url = match url.find("://") {
        Some(scheme) => {
            let rest = &url[scheme + 3..];
            let end = rest.find(['/', '?']).unwrap_or(rest.len());
            match rest[..end].rfind('@') {
                Some(at) => {
                    let user = rest[..at].split(':').next().unwrap_or("");
                    format!("{}{user}@{}", &url[..scheme + 3], &rest[at + 1..])
                }
                None if rest[end..].contains('@') && rest[..end].contains(':') => {
                    return "(a connection string with a password)".to_owned();
                }
                None => url.to_owned(),
            }
        }
        None => url.to_owned(),
    };
    // Every `password` parameter or keyword (any case, spaces around `=`, a quoted value) keeps
    // its name, not its value.
    let lower = url.to_ascii_lowercase();
    let mut out = String::with_capacity(url.len());
    let mut from = 0;
    while let Some(i) = lower[from..].find("password").map(|i| from + i) {
        let after = i + "password".len();
        let rest = &url[after..];
        let eq = rest.len() - rest.trim_start().len();
        if !rest.trim_start().starts_with('=') {
            out.push_str(&url[from..after]);
            from = after;
            continue;
        }
        let value = after + eq + 1;
        let value = value + (url[value..].len() - url[value..].trim_start().len());
        let end = if url[value..].starts_with('\'') {
            url[value + 1..]
                .find('\'')
                .map_or(url.len(), |e| value + 1 + e + 1)
        } else {
            url[value..]
                .find(|c: char| c == '&' || c.is_whitespace())
                .map_or(url.len(), |e| value + e)
        };
        out.push_str(&url[from..value]);
        out.push_str("***");
        from = end;
    }
    out.push_str(&url[from..]);
    out
}

/// What a driver error means to the gate.
pub(crate) fn journal_err(location: &str, e: &postgres::Error) -> JournalError {
    if let Some(db) = e.as_db_error() {
        let code = db.code();
        let transient_busy = [
            SqlState::LOCK_NOT_AVAILABLE,
            SqlState::T_R_SERIALIZATION_FAILURE,
            SqlState::T_R_DEADLOCK_DETECTED,
            SqlState::QUERY_CANCELED,
        ];
        let unavailable = [
            SqlState::ADMIN_SHUTDOWN,
            SqlState::CRASH_SHUTDOWN,
            SqlState::CANNOT_CONNECT_NOW,
            SqlState::TOO_MANY_CONNECTIONS,
            SqlState::IDLE_IN_TRANSACTION_SESSION_TIMEOUT,
        ];
        if transient_busy.contains(code) {
            return JournalError::Busy {
                path: location.to_owned(),
                waited_ms: 0,
            };
        }
        if unavailable.contains(code) {
            return JournalError::Unavailable {
                path: location.to_owned(),
                what: format!("{} (SQLSTATE {})", db.message(), code.code()),
            };
        }
        return JournalError::Storage {
            path: location.to_owned(),
            what: format!("{} (SQLSTATE {})", db.message(), code.code()),
        };
    }
    // No answer from the server at all: refused, reset, timed out or closed.
    JournalError::Unavailable {
        path: location.to_owned(),
        what: e.to_string(),
    }
}

/// A pool that could not hand out a connection in time: the server is down or every connection
/// is busy.
pub(crate) fn pool_err(location: &str, e: &r2d2::Error) -> JournalError {
    JournalError::Unavailable {
        path: location.to_owned(),
        what: format!("no connection: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_never_reaches_a_message() {
        assert_eq!(
            redact("postgres://ana:s3cret@db:5432/j"),
            "postgres://ana@db:5432/j"
        );
        assert_eq!(redact("postgres://db/j"), "postgres://db/j");
        assert!(!redact("host=db password=s3cret").contains("s3cret"));
        for url in [
            "postgres://ana@db/j?password=s3cret",
            "postgres://ana:pw@db/j?sslmode=require&PASSWORD=s3cret&x=1",
            "postgres://db/j?password=s3cret",
            "postgresql://db/j?user=a&password=s3cret",
            "postgres://ana:s3cret@db/j?application_name=x@y&password=s3cret",
            "host=db password = s3cret",
            "host=db password='s3 cret' user=a",
            "postgres://ana:ab/s3cret@db/j?password=s3cret",
        ] {
            let shown = redact(url);
            assert!(
                !shown.contains("s3cret") && !shown.contains(":pw"),
                "{url}: {shown}"
            );
            assert!(
                shown.contains("***") || shown.contains("a connection string with a password"),
                "{shown}"
            );
        }
        let cfg = config("postgres://ana:s3cret@db:6543/j").ok();
        let shown = cfg.as_ref().map(location).unwrap_or_default();
        assert_eq!(shown, "postgres://ana@db:6543/j");
    }

    #[test]
    fn a_malformed_url_is_a_storage_error_naming_the_expected_form() {
        let Err(e) = config("postgres://db:notaport/j") else {
            unreachable!("a port that is not a number parsed");
        };
        assert!(e.to_string().contains("postgres://user@host:port/database"));
    }
}
