//! One way to reach Temporal for the worker, the starter and the load generator, so each says the
//! same thing when the server is not there.

use anyhow::Context;
use temporalio_client::{Client, ClientOptions, Connection, ConnectionOptions, Url};

/// A client of the `default` namespace at `addr` (`http://host:port`), naming itself `identity`.
pub async fn client(addr: &str, identity: String) -> anyhow::Result<Client> {
    let url = Url::parse(addr).with_context(|| format!("the Temporal address {addr:?}"))?;
    let conn = Connection::connect(ConnectionOptions::new(url).identity(identity).build())
        .await
        .with_context(|| {
            format!("connecting to Temporal at {addr}: is `temporal server start-dev` running?")
        })?;
    Ok(Client::new(conn, ClientOptions::new("default").build())?)
}
