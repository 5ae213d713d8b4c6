//! Reaching Temporal the way a team already does: the same settings Temporal's own CLI and SDKs
//! read, so one environment (or one profile file) serves the worker, the starter, the approvers'
//! inbox and a Python worker alike, from a local dev server to a cloud namespace with an API key
//! or mutual TLS.
//!
//! The settings are the SDK's environment configuration: `TEMPORAL_ADDRESS` (`host:port`, or a URL
//! with a scheme), `TEMPORAL_NAMESPACE`, `TEMPORAL_API_KEY`, `TEMPORAL_TLS` and
//! `TEMPORAL_TLS_CLIENT_CERT_PATH`, `…_CLIENT_KEY_PATH`, `…_SERVER_CA_CERT_PATH`,
//! `…_SERVER_NAME`, and a profile file in Temporal's format (`TEMPORAL_CONFIG_FILE`, profile
//! `TEMPORAL_PROFILE`). Unset, they mean the local dev server's `localhost:7233`, namespace
//! `default`, no TLS. An API key turns TLS on unless `TEMPORAL_TLS=false` says otherwise.

use temporalio_client::envconfig::LoadClientConfigProfileOptions;
use temporalio_client::{Client, ClientOptions, Connection, ConnectionOptions};
use temporalio_common::protos::temporal::api::workflowservice::v1::DescribeNamespaceRequest;

/// Why a Temporal client could not be had.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The settings themselves are wrong (an unparsable address, a certificate without its key, a
    /// missing profile): nothing was dialled.
    #[error(
        "the Temporal connection settings are not valid: {0} (they come from TEMPORAL_ADDRESS, \
         TEMPORAL_NAMESPACE, TEMPORAL_API_KEY, TEMPORAL_TLS_* and the profile file \
         TEMPORAL_CONFIG_FILE names)"
    )]
    Settings(String),
    /// Nothing answered at the address, or it refused the connection or the credentials.
    #[error(
        "cannot reach Temporal at {endpoint}: {cause}. Is a server running there \
         (`temporal server start-dev` for a local one), and are TEMPORAL_ADDRESS, TEMPORAL_TLS* \
         and TEMPORAL_API_KEY the ones it expects?"
    )]
    Unreachable {
        /// Where and how it was dialled.
        endpoint: String,
        /// What the connection said.
        cause: String,
    },
    /// The server answered that it does not know the namespace.
    #[error(
        "Temporal at {endpoint} has no namespace {namespace:?}: {cause}. Set TEMPORAL_NAMESPACE to an existing one, or create it (`temporal operator \
         namespace create --namespace {namespace}`; a dev server takes `--namespace {namespace}`)"
    )]
    Namespace {
        /// Where and how it was dialled.
        endpoint: String,
        /// The namespace asked for.
        namespace: String,
        /// What the server said.
        cause: String,
    },
}

/// Resolved connection settings, before dialling.
#[derive(Clone)]
pub struct TemporalSettings {
    connection: ConnectionOptions,
    namespace: String,
}

/// Shows where and which namespace, never the API key or a private key.
impl std::fmt::Debug for TemporalSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TemporalSettings")
            .field("endpoint", &self.endpoint())
            .field("namespace", &self.namespace)
            .finish()
    }
}

impl TemporalSettings {
    /// The settings from the environment and the profile file, as Temporal's CLI reads them.
    pub fn from_env() -> Result<Self, ConnectError> {
        Self::load(LoadClientConfigProfileOptions::default())
    }

    /// A server at `address` (`host:port`, or a URL with a scheme), plain text, in `namespace`:
    /// for programs that start their own dev server.
    pub fn plain(address: &str, namespace: &str) -> Result<Self, ConnectError> {
        let url = if address.contains("://") {
            address.to_owned()
        } else {
            format!("http://{address}")
        };
        let target = temporalio_client::Url::parse(&url)
            .map_err(|e| ConnectError::Settings(format!("the address {address:?}: {e}")))?;
        Ok(Self {
            connection: ConnectionOptions::new(target).build(),
            namespace: namespace.to_owned(),
        })
    }

    fn load(options: LoadClientConfigProfileOptions) -> Result<Self, ConnectError> {
        let (connection, client) = ClientOptions::load_from_config(options)
            .map_err(|e| ConnectError::Settings(e.to_string()))?;
        Ok(Self {
            connection,
            namespace: client.namespace,
        })
    }

    /// The namespace the client will work in.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Where and how the server is dialled, for logs and errors: the address, whether TLS is on
    /// and whether an API key is sent (never the key).
    pub fn endpoint(&self) -> String {
        let c = &self.connection;
        let tls = if c.tls_options.is_some() { ", TLS" } else { "" };
        let key = if c.api_key.is_some() { ", API key" } else { "" };
        format!("{}{tls}{key}", c.target)
    }

    /// Connect as `identity` (shown in Temporal's UI beside each poll and each attempt), and
    /// check that the namespace is there, so a wrong one is named now rather than by every poll.
    pub async fn connect(mut self, identity: impl Into<String>) -> Result<Client, ConnectError> {
        self.connection.identity = identity.into();
        let endpoint = self.endpoint();
        let conn =
            Connection::connect(self.connection)
                .await
                .map_err(|e| ConnectError::Unreachable {
                    endpoint: endpoint.clone(),
                    cause: e.to_string(),
                })?;
        let ask = DescribeNamespaceRequest {
            namespace: self.namespace.clone(),
            ..Default::default()
        };
        conn.workflow_service()
            .describe_namespace(temporalio_client::tonic::Request::new(ask))
            .await
            .map_err(|status| match status.code() {
                temporalio_client::tonic::Code::NotFound => ConnectError::Namespace {
                    endpoint: endpoint.clone(),
                    namespace: self.namespace.clone(),
                    cause: status.message().to_owned(),
                },
                _ => ConnectError::Unreachable {
                    endpoint: endpoint.clone(),
                    cause: format!(
                        "asking for the namespace {:?}: {}",
                        self.namespace,
                        status.message()
                    ),
                },
            })?;
        let client = Client::new(conn, ClientOptions::new(self.namespace).build())
            .map_err(|e| ConnectError::Settings(e.to_string()))?;
        Ok(client)
    }
}

/// A client from the environment's settings, as `identity`: what a worker or a starter calls.
pub async fn client(identity: impl Into<String>) -> Result<Client, ConnectError> {
    TemporalSettings::from_env()?.connect(identity).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use temporalio_client::envconfig::DataSource;

    fn from_profile(toml: &str) -> Result<TemporalSettings, ConnectError> {
        TemporalSettings::load(
            LoadClientConfigProfileOptions::builder()
                .config_source(DataSource::Data(toml.as_bytes().to_vec()))
                .disable_env(true)
                .build(),
        )
    }

    #[test]
    fn a_bare_host_and_port_is_an_address_not_a_scheme() {
        let s = from_profile("[profile.default]\naddress = \"localhost:7233\"\n").unwrap();
        assert_eq!(s.endpoint(), "http://localhost:7233/");
        assert_eq!(s.namespace(), "default");
    }

    #[test]
    fn a_plain_address_takes_a_scheme_or_none() {
        let s = TemporalSettings::plain("127.0.0.1:7244", "payments").unwrap();
        assert_eq!(s.endpoint(), "http://127.0.0.1:7244/");
        assert_eq!(s.namespace(), "payments");
        let u = TemporalSettings::plain("http://127.0.0.1:7244", "default").unwrap();
        assert_eq!(u.endpoint(), "http://127.0.0.1:7244/");
    }

    #[test]
    fn an_api_key_turns_tls_on_and_is_never_shown() {
        let s = from_profile(
            "[profile.default]\naddress = \"ns.acct.tmprl.cloud:7233\"\nnamespace = \"ns.acct\"\n\
             api_key = \"secret-key\"\n",
        )
        .unwrap();
        assert_eq!(s.namespace(), "ns.acct");
        assert_eq!(
            s.endpoint(),
            "https://ns.acct.tmprl.cloud:7233/, TLS, API key"
        );
        assert!(!format!("{s:?}").contains("secret-key"), "{s:?}");
    }

    #[test]
    fn a_client_certificate_without_its_key_is_refused_before_dialling() {
        let err = from_profile(
            "[profile.default]\naddress = \"h:7233\"\n[profile.default.tls]\n\
             client_cert_path = \"/nonexistent/cert.pem\"\n",
        )
        .unwrap_err();
        assert!(matches!(err, ConnectError::Settings(_)), "{err}");
        assert!(err.to_string().contains("TEMPORAL_TLS"), "{err}");
    }
}
