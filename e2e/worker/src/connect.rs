//! How the harness's programs reach the dev server they started: its address, plain text, the
//! `default` namespace. A team's worker reads Temporal's own settings instead
//! (`interlock_temporal::connect::client`, as `worker-examples/refund` does).

use interlock_temporal::connect::TemporalSettings;
use temporalio_client::Client;

/// A client of the `default` namespace at `addr` (`host:port` or `http://host:port`), naming
/// itself `identity`.
pub async fn client(addr: &str, identity: String) -> anyhow::Result<Client> {
    Ok(TemporalSettings::plain(addr, "default")?
        .connect(identity)
        .await?)
}
