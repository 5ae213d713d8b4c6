//! The PostgreSQL substrate's outbox, as the relay reads it: through the substrate's functions,
//! like everything else of the substrate's.

use crate::error::DbError;
use crate::outbox::{Outbox, Request};

use super::{PgDb, stage};

impl Outbox for PgDb {
    fn source(&self) -> &str {
        interlock::Target::name(self)
    }

    fn pending(&self, after: i64, limit: usize) -> Result<Vec<Request>, DbError> {
        let limit = i32::try_from(limit).unwrap_or(i32::MAX);
        let source = self.source().to_owned();
        self.read("outbox call", |c, s| {
            stage::pending(c, s, &source, after, limit)
        })
    }

    fn mark_delivered(&self, request: &Request, outcome: &str) -> Result<(), DbError> {
        self.closing_on_error(|c, s| stage::delivered(c, s, request, outcome))?
            .map_err(|what| DbError::Database {
                doing: "mark an outbox call delivered",
                what,
            })
    }

    fn claim(&self, request: &Request, relay: &str) -> Result<Option<String>, DbError> {
        let holder = self
            .closing_on_error(|c, s| stage::claim(c, s, request, relay))?
            .map_err(|what| DbError::Database {
                doing: "claim an outbox call",
                what,
            })?;
        Ok((holder != relay).then_some(holder))
    }
}
