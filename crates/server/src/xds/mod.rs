//! Rules over xDS: envoyproxy/ratelimit's `CONFIG_TYPE=GRPC_XDS_SOTW`, as
//! Envoy Gateway runs it.
//!
//! [`XdsClient`] subscribes to the `RateLimitConfig` resources
//! ([`RATE_LIMIT_CONFIG_TYPE`]) of a control plane over the Aggregated
//! Discovery Service (`StreamAggregatedResources`), state of the world:
//! every response holds every resource, and is one snapshot. The settings
//! are [`XdsSettings`] (Lyft's variables, [`crate::config::xds`]); a
//! server takes its rules this way through [`crate::Server::from_xds`].
//!
//! # Guarantees
//!
//! - A snapshot becomes the same checked domains a YAML file does
//!   ([`snapshot_domains`]: each resource read by the file's own reader),
//!   validated whole, then put in force at once as a reload is
//!   ([`crate::reload`]): a request is decided wholly under the old rules or
//!   wholly under the new, and a rule that did not change keeps its counts.
//! - An applied snapshot is ACKed; a refused one (a resource that does not
//!   decode or that the file's checks refuse, a domain given twice, a rule the
//!   backend cannot run) is NACKed with `error_detail` naming the resource,
//!   and the rules in force stay. Both are counted as file loads are.
//! - A broken stream or an unreachable control plane changes nothing in
//!   force; the first request on a new stream carries the last version
//!   applied.
//! - The server listens only once a first snapshot is applied (as Lyft),
//!   unless `force_start`: then every descriptor is answered OK with no
//!   limit until the first snapshot, the operator's choice.
//! - An xDS rule carries no algorithm: it is a fixed window aligned to its
//!   unit, as Lyft counts.
//!
//! # Parameters (defaults from [`XdsSettings`], Lyft's own)
//!
//! - `server_url`: `http://localhost:18000`; node id `default`; no TLS.
//! - `connect_retry_interval`: 3 s between failed dials; after a stream
//!   ends, [`crate::config::xds::Backoff`]: 10 s initial, 60 s at most.
//! - Largest response: 4 MiB (gRPC's default).
//! - `merge_domains` (`MERGE_DOMAIN_CONFIG`): off, a domain named twice is
//!   refused.
//! - A dial waits at most 10 s; HTTP/2 pings every 30 s (10 s to answer) find
//!   a control plane that vanished without closing the connection.
//!
//! Every decision in full (before the first snapshot and health, merged
//! domains, empty snapshots, unknown keys, type URLs, the back-off's reset):
//! `crates/server/docs/replacing-envoyproxy-ratelimit.md`, "Inside the
//! server".

mod snapshot;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use crate::config::Config;
pub use crate::config::xds::{XdsSettings, XdsSettingsError};
use crate::rules::RuleSet;
use crate::service::Service;
pub use snapshot::{RATE_LIMIT_CONFIG_TYPE, SnapshotError, snapshot_domains};

use proto::envoy::config::core::v3::Node;
use proto::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use proto::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};

/// The generated xDS types: ADS (state of the world) and Lyft's
/// `RateLimitConfig` (see `proto/README.md`).
pub mod proto {
    /// `envoy.*` packages.
    pub mod envoy {
        pub use crate::grpc::proto::envoy::config;
        /// `envoy.service`.
        pub mod service {
            /// `envoy.service.discovery`.
            pub mod discovery {
                /// `envoy.service.discovery.v3`: ADS.
                pub mod v3 {
                    tonic::include_proto!("envoy.service.discovery.v3");
                }
            }
        }
    }
    /// `google.*` packages.
    pub mod google {
        /// `google.rpc`: a NACK's error detail.
        pub mod rpc {
            tonic::include_proto!("google.rpc");
        }
    }
    /// `ratelimit.*`: envoyproxy/ratelimit's own packages.
    pub mod ratelimit {
        /// `ratelimit.config`.
        pub mod config {
            /// `ratelimit.config.ratelimit`.
            pub mod ratelimit {
                /// `ratelimit.config.ratelimit.v3`: `RateLimitConfig`.
                pub mod v3 {
                    tonic::include_proto!("ratelimit.config.ratelimit.v3");
                }
            }
        }
    }
}

/// How long a dial may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// HTTP/2 pings on the stream, and how long an answer may take.
const KEEPALIVE: (Duration, Duration) = (Duration::from_secs(30), Duration::from_secs(10));
/// `google.rpc.Code.INVALID_ARGUMENT`, a NACK's code.
const INVALID_ARGUMENT: i32 = 3;

/// The client: subscribes, applies, answers, reconnects (module docs).
#[derive(Debug)]
pub struct XdsClient {
    settings: XdsSettings,
    service: Arc<Service>,
    /// The server, backend and admin sections every snapshot's config is
    /// built with.
    base: Config,
    /// The version of the snapshot in force, once one is.
    applied: watch::Sender<Option<String>>,
}

impl XdsClient {
    /// A client putting snapshots into `service`, the sections of `base`
    /// (its domains are not used) kept.
    pub fn new(settings: XdsSettings, service: Arc<Service>, base: &Config) -> XdsClient {
        XdsClient {
            settings,
            service,
            base: Config {
                domains: Vec::new(),
                ..base.clone()
            },
            applied: watch::Sender::new(None),
        }
    }

    /// The version of the snapshot in force (`None` before the first).
    pub fn applied(&self) -> watch::Receiver<Option<String>> {
        self.applied.subscribe()
    }

    /// Subscribes and applies snapshots forever (abort the task to stop).
    pub async fn run(self: Arc<Self>) {
        // The version last applied: sent on a new stream, and in NACKs.
        let mut version = String::new();
        let mut attempt = 0;
        loop {
            let channel = self.connect().await;
            let (received, result) = self.subscribe(channel, &mut version).await;
            match result {
                Ok(()) => {
                    tracing::warn!(url = %self.settings.server_url, "the xDS control plane closed the stream")
                }
                Err(status) => {
                    tracing::warn!(url = %self.settings.server_url, %status, "the xDS stream failed")
                }
            }
            if received {
                attempt = 0;
            }
            let wait = self.settings.backoff.wait(attempt, fastrand::f64());
            attempt = attempt.saturating_add(1);
            tracing::info!(
                ?wait,
                "reconnecting to the xDS control plane; the rules in force stay"
            );
            tokio::time::sleep(wait).await;
        }
    }

    /// Dials until the control plane answers.
    async fn connect(&self) -> Channel {
        loop {
            let dialed = match self.endpoint() {
                Ok(endpoint) => endpoint.connect().await,
                Err(error) => Err(error),
            };
            match dialed {
                Ok(channel) => {
                    tracing::info!(url = %self.settings.server_url, "connected to the xDS control plane");
                    return channel;
                }
                Err(error) => {
                    tracing::warn!(
                        url = %self.settings.server_url,
                        error = %error,
                        "cannot reach the xDS control plane; the rules in force stay"
                    );
                    tokio::time::sleep(self.settings.connect_retry_interval).await;
                }
            }
        }
    }

    fn endpoint(&self) -> Result<Endpoint, tonic::transport::Error> {
        let mut endpoint = Endpoint::from_shared(self.settings.server_url.clone())?
            .connect_timeout(CONNECT_TIMEOUT)
            .http2_keep_alive_interval(KEEPALIVE.0)
            .keep_alive_timeout(KEEPALIVE.1)
            .keep_alive_while_idle(true);
        if let Some(tls) = &self.settings.tls {
            let mut config = ClientTlsConfig::new();
            config = match &tls.ca {
                Some(ca) => config.ca_certificate(Certificate::from_pem(ca)),
                None => config.with_native_roots(),
            };
            if let Some((cert, key)) = &tls.identity {
                config = config.identity(Identity::from_pem(cert, key));
            }
            if let Some(name) = &tls.server_name {
                config = config.domain_name(name.clone());
            }
            endpoint = endpoint.tls_config(config)?;
        }
        Ok(endpoint)
    }

    /// One stream: subscribes, then applies and answers each response
    /// until the stream ends. Returns whether a response came.
    async fn subscribe(
        self: &Arc<Self>,
        channel: Channel,
        version: &mut String,
    ) -> (bool, Result<(), tonic::Status>) {
        let (requests, outgoing) = mpsc::channel(4);
        // The receiver is held below: this cannot fail.
        let _ = requests.send(self.request(version, "", None)).await;
        let mut request = tonic::Request::new(ReceiverStream::new(outgoing));
        for (key, value) in &self.settings.headers {
            // Checked when the settings were read.
            if let (Ok(key), Ok(value)) = (
                tonic::metadata::AsciiMetadataKey::from_bytes(key.as_bytes()),
                value.parse(),
            ) {
                request.metadata_mut().insert(key, value);
            }
        }
        let mut client = AggregatedDiscoveryServiceClient::new(channel)
            .max_decoding_message_size(self.settings.max_message_bytes);
        let mut responses = match client.stream_aggregated_resources(request).await {
            Ok(responses) => responses.into_inner(),
            Err(status) => return (false, Err(status)),
        };
        let mut received = false;
        loop {
            let response = match responses.message().await {
                Ok(Some(response)) => response,
                Ok(None) => return (received, Ok(())),
                Err(status) => return (received, Err(status)),
            };
            received = true;
            let (new_version, nonce) = (response.version_info.clone(), response.nonce.clone());
            // Reading and installing rules is blocking work, as a reload's.
            let client = Arc::clone(self);
            let applied = tokio::task::spawn_blocking(move || client.apply(&response))
                .await
                .unwrap_or_else(|error| Err(format!("the snapshot's check failed: {error}")));
            let answer = match applied {
                Ok(()) => {
                    *version = new_version;
                    self.request(version, &nonce, None)
                }
                Err(error) => self.request(version, &nonce, Some(error)),
            };
            if requests.send(answer).await.is_err() {
                return (received, Ok(()));
            }
        }
    }

    /// Checks a response whole and puts it in force.
    fn apply(&self, response: &DiscoveryResponse) -> Result<(), String> {
        let version = &response.version_info;
        let result = (|| {
            if response.type_url != RATE_LIMIT_CONFIG_TYPE {
                return Err(format!(
                    "type '{}' was not asked for (only '{RATE_LIMIT_CONFIG_TYPE}')",
                    response.type_url
                ));
            }
            let domains = snapshot_domains(&response.resources, self.settings.merge_domains)
                .map_err(|error| error.to_string())?;
            let config = Config {
                domains,
                ..self.base.clone()
            };
            let rules = RuleSet::new(&config);
            let count = rules.rules().len();
            self.service
                .replace_rules(rules)
                .map_err(|error| error.to_string())?;
            Ok((config.domains.len(), count))
        })();
        match result {
            Ok((domains, rules)) => {
                self.service.metrics().config_loaded(true);
                if domains == 0 {
                    tracing::warn!(%version, "the xDS snapshot holds no RateLimitConfig: no rule is in force");
                }
                tracing::info!(%version, domains, rules, "xDS snapshot applied");
                self.applied.send_replace(Some(version.clone()));
                Ok(())
            }
            Err(error) => {
                self.service.metrics().config_loaded(false);
                tracing::error!(%version, %error, "xDS snapshot refused (NACK); the previous rules stay in force");
                Err(error)
            }
        }
    }

    /// A request: the subscription, an ACK, or a NACK with `error`.
    fn request(&self, version: &str, nonce: &str, error: Option<String>) -> DiscoveryRequest {
        let metadata = prost_types::Struct {
            fields: self
                .settings
                .node_metadata
                .iter()
                .map(|(key, value)| {
                    let value = prost_types::Value {
                        kind: Some(prost_types::value::Kind::StringValue(value.clone())),
                    };
                    (key.clone(), value)
                })
                .collect(),
        };
        DiscoveryRequest {
            version_info: version.to_owned(),
            node: Some(Node {
                id: self.settings.node_id.clone(),
                cluster: String::new(),
                metadata: Some(metadata),
                user_agent_name: "tollgate".into(),
            }),
            resource_names: Vec::new(),
            type_url: RATE_LIMIT_CONFIG_TYPE.into(),
            response_nonce: nonce.to_owned(),
            error_detail: error.map(|message| proto::google::rpc::Status {
                code: INVALID_ARGUMENT,
                message,
                details: Vec::new(),
            }),
        }
    }
}

/// Starts `client` and, unless its settings force the start, waits for
/// its first snapshot to be in force. Returns the client's task.
pub(crate) async fn start(client: XdsClient) -> tokio::task::JoinHandle<()> {
    let force = client.settings.force_start;
    let client = Arc::new(client);
    let mut applied = client.applied();
    let url = client.settings.server_url.clone();
    let task = tokio::spawn(Arc::clone(&client).run());
    if force {
        tracing::warn!(%url, "FORCE_START_WITHOUT_INITIAL_CONFIG: serving with no rules until the first xDS snapshot");
    } else {
        tracing::info!(%url, "waiting for the first xDS snapshot before listening");
        // The sender lives in `client`, held here: never closed.
        let _ = applied.wait_for(Option::is_some).await;
    }
    task
}
