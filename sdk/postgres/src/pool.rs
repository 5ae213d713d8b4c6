//! The journal's connections. A connection the network cut does not always know it is dead until
//! it is used, and the driver may not mark it closed afterwards; so every call that fails marks
//! its connection broken, and the pool drops it instead of handing it out again.

use postgres::{Client, NoTls};

/// A pooled connection and whether a call on it failed.
pub(crate) struct Conn {
    client: Client,
    broken: bool,
}

impl Conn {
    /// Run `f` on the connection; any failure retires the connection.
    pub(crate) fn run<T, E>(
        &mut self,
        f: impl FnOnce(&mut Client) -> Result<T, E>,
    ) -> Result<T, E> {
        let out = f(&mut self.client);
        if out.is_err() {
            self.broken = true;
        }
        out
    }
}

/// Opens connections with the journal's settings.
#[derive(Debug)]
pub(crate) struct Manager {
    pub(crate) config: postgres::Config,
}

impl r2d2::ManageConnection for Manager {
    type Connection = Conn;
    type Error = postgres::Error;

    fn connect(&self) -> Result<Conn, postgres::Error> {
        Ok(Conn {
            client: self.config.connect(NoTls)?,
            broken: false,
        })
    }

    fn is_valid(&self, conn: &mut Conn) -> Result<(), postgres::Error> {
        conn.client.simple_query("").map(drop)
    }

    fn has_broken(&self, conn: &mut Conn) -> bool {
        conn.broken || conn.client.is_closed()
    }
}

/// The pool.
pub(crate) type Pool = r2d2::Pool<Manager>;
