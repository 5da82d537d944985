//! Rules over xDS, end to end: a control plane the test runs (a tonic ADS
//! server built from `envoy-types`' own generated code, on a loopback
//! port) serves snapshots of Lyft's `RateLimitConfig`; the server
//! subscribes, and its decisions are read through the RLS (gRPC).
//!
//! The ACKs and NACKs are read off the control plane's side of the
//! stream: an ACK is sent once a snapshot is in force, so a decision
//! asked for after it sees the snapshot's rules.

use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::time::Duration;

use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_server::{
    AggregatedDiscoveryService, AggregatedDiscoveryServiceServer,
};
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};
use envoy_types::pb::google::protobuf::Any;
use prost::Message;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tollgate::ManualClock;
use tollgate_server::config::xds::Backoff;
use tollgate_server::grpc::proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor as RequestDescriptor;
use tollgate_server::grpc::proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::rate_limit_response::Code;
use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::{
    RateLimitRequest, RateLimitResponse,
};
use tollgate_server::xds::proto::ratelimit::config::ratelimit::v3::{
    RateLimitConfig, RateLimitDescriptor, RateLimitPolicy, RateLimitUnit,
};
use tollgate_server::xds::{RATE_LIMIT_CONFIG_TYPE, XdsSettings};
use tollgate_server::{BoundServer, Config, Server};

/// Every network wait is bounded by this.
const TIMEOUT: Duration = Duration::from_secs(20);

async fn within<T>(future: impl Future<Output = T>) -> T {
    tokio::time::timeout(TIMEOUT, future)
        .await
        .expect("timed out")
}

// ---- the control plane ----

/// A snapshot: its version and resources.
type Snapshot = Option<(String, Vec<RateLimitConfig>)>;

/// What the control plane saw on a stream: the client's header and a
/// request.
#[derive(Debug)]
struct Seen {
    token: Option<String>,
    request: DiscoveryRequest,
}

#[derive(Clone)]
struct Ads {
    snapshot: watch::Receiver<Snapshot>,
    seen: mpsc::UnboundedSender<Seen>,
    stop: watch::Receiver<bool>,
}

type Responses = Pin<Box<dyn Stream<Item = Result<DiscoveryResponse, tonic::Status>> + Send>>;
type DeltaResponses =
    Pin<Box<dyn Stream<Item = Result<DeltaDiscoveryResponse, tonic::Status>> + Send>>;

#[tonic::async_trait]
impl AggregatedDiscoveryService for Ads {
    type StreamAggregatedResourcesStream = Responses;
    type DeltaAggregatedResourcesStream = DeltaResponses;

    async fn stream_aggregated_resources(
        &self,
        request: tonic::Request<tonic::Streaming<DiscoveryRequest>>,
    ) -> Result<tonic::Response<Responses>, tonic::Status> {
        let token = request
            .metadata()
            .get("x-token")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let mut inbound = request.into_inner();
        let (out, responses) = mpsc::channel(8);
        let mut snapshot = self.snapshot.clone();
        let mut stop = self.stop.clone();
        let seen = self.seen.clone();
        tokio::spawn(async move {
            let mut nonce = 0_u64;
            // The snapshot in force when the stream opens is sent at once.
            snapshot.mark_changed();
            loop {
                tokio::select! {
                    request = inbound.message() => match request {
                        Ok(Some(request)) => {
                            let _ = seen.send(Seen { token: token.clone(), request });
                        }
                        _ => return,
                    },
                    changed = snapshot.changed() => {
                        if changed.is_err() {
                            return;
                        }
                        let current = snapshot.borrow_and_update().clone();
                        if let Some((version, resources)) = current {
                            nonce += 1;
                            let response = DiscoveryResponse {
                                version_info: version,
                                resources: resources.iter().map(any).collect(),
                                type_url: RATE_LIMIT_CONFIG_TYPE.into(),
                                nonce: nonce.to_string(),
                                ..DiscoveryResponse::default()
                            };
                            if out.send(Ok(response)).await.is_err() {
                                return;
                            }
                        }
                    }
                    () = async { let _ = stop.wait_for(|stop| *stop).await; } => {
                        let _ = out.send(Err(tonic::Status::unavailable("restarting"))).await;
                        return;
                    }
                }
            }
        });
        Ok(tonic::Response::new(Box::pin(ReceiverStream::new(
            responses,
        ))))
    }

    async fn delta_aggregated_resources(
        &self,
        _request: tonic::Request<tonic::Streaming<DeltaDiscoveryRequest>>,
    ) -> Result<tonic::Response<DeltaResponses>, tonic::Status> {
        Err(tonic::Status::unimplemented("state of the world only"))
    }
}

fn any(resource: &RateLimitConfig) -> Any {
    Any {
        type_url: RATE_LIMIT_CONFIG_TYPE.into(),
        value: resource.encode_to_vec(),
    }
}

/// A control plane serving on one address; it can be stopped and started
/// again on the same address, keeping its snapshot.
struct ControlPlane {
    addr: SocketAddr,
    snapshot: watch::Sender<Snapshot>,
    seen: mpsc::UnboundedReceiver<Seen>,
    seen_tx: mpsc::UnboundedSender<Seen>,
    stop: Option<watch::Sender<bool>>,
    task: Option<JoinHandle<()>>,
    tls: Option<tonic::transport::ServerTlsConfig>,
}

impl ControlPlane {
    async fn start(snapshot: Snapshot) -> ControlPlane {
        ControlPlane::start_with(snapshot, None).await
    }

    async fn start_with(
        snapshot: Snapshot,
        tls: Option<tonic::transport::ServerTlsConfig>,
    ) -> ControlPlane {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (seen_tx, seen) = mpsc::unbounded_channel();
        let mut plane = ControlPlane {
            addr,
            snapshot: watch::Sender::new(snapshot),
            seen,
            seen_tx,
            stop: None,
            task: None,
            tls,
        };
        plane.serve(listener);
        plane
    }

    fn serve(&mut self, listener: tokio::net::TcpListener) {
        let (stop, stopped) = watch::channel(false);
        let ads = Ads {
            snapshot: self.snapshot.subscribe(),
            seen: self.seen_tx.clone(),
            stop: stopped.clone(),
        };
        let mut shutdown = stopped;
        self.stop = Some(stop);
        let mut builder = tonic::transport::Server::builder();
        if let Some(tls) = &self.tls {
            builder = builder.tls_config(tls.clone()).expect("tls");
        }
        self.task = Some(tokio::spawn(async move {
            builder
                .add_service(AggregatedDiscoveryServiceServer::new(ads))
                .serve_with_incoming_shutdown(
                    tokio_stream::wrappers::TcpListenerStream::new(listener),
                    async move {
                        let _ = shutdown.wait_for(|stop| *stop).await;
                    },
                )
                .await
                .expect("control plane");
        }));
    }

    /// Ends every stream and stops listening.
    async fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(true);
        }
        if let Some(task) = self.task.take() {
            within(task).await.expect("control plane stopped");
        }
    }

    /// Listens again on the same address.
    async fn restart(&mut self) {
        let listener = tokio::net::TcpListener::bind(self.addr)
            .await
            .expect("bind the same port again");
        self.serve(listener);
    }

    fn publish(&self, version: &str, resources: Vec<RateLimitConfig>) {
        self.snapshot
            .send_replace(Some((version.to_owned(), resources)));
    }

    /// The next request the client sent.
    async fn next(&mut self) -> Seen {
        within(self.seen.recv()).await.expect("a request")
    }

    /// Requests until one answers `nonce`.
    async fn answer_to(&mut self, nonce: &str) -> DiscoveryRequest {
        loop {
            let seen = self.next().await;
            if seen.request.response_nonce == nonce {
                return seen.request;
            }
        }
    }
}

fn settings(plane: &ControlPlane) -> XdsSettings {
    let mut settings = XdsSettings::new(&plane.addr.to_string()).expect("url");
    settings.node_id = "tollgate-test".into();
    settings.node_metadata.insert("zone".into(), "a".into());
    settings.headers.insert("x-token".into(), "secret".into());
    settings.connect_retry_interval = Duration::from_millis(20);
    settings.backoff = Backoff {
        initial: Duration::from_millis(20),
        max: Duration::from_millis(200),
        factor: 2.0,
        jitter: false,
    };
    settings
}

// ---- resources ----

fn limit(key: &str, value: &str, unit: RateLimitUnit, n: u32) -> RateLimitDescriptor {
    RateLimitDescriptor {
        key: key.into(),
        value: value.into(),
        rate_limit: Some(RateLimitPolicy {
            unit: unit.into(),
            requests_per_unit: n,
            ..RateLimitPolicy::default()
        }),
        ..RateLimitDescriptor::default()
    }
}

/// Domain `api`: `user` (any value) at `per_user` a minute, `path=/login`
/// at 2 a minute.
fn rules(name: &str, per_user: u32) -> RateLimitConfig {
    RateLimitConfig {
        name: name.into(),
        domain: "api".into(),
        descriptors: vec![
            limit("user", "", RateLimitUnit::Minute, per_user),
            limit("path", "/login", RateLimitUnit::Minute, 2),
        ],
    }
}

// ---- the server ----

struct Running {
    grpc: SocketAddr,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

/// The server's sections; the domain is not used (xDS gives the rules).
fn base() -> Config {
    Config::from_yaml(
        Path::new("xds-test.yaml"),
        "server:\n  grpc_listen: 127.0.0.1:0\n  http_listen: 127.0.0.1:0\n  reload_interval_ms: 0\ndomain: unused\n",
    )
    .expect("config")
}

fn server(settings: XdsSettings) -> Server {
    Server::from_xds(base(), settings).with_clock(ManualClock::new())
}

fn run(bound: BoundServer) -> Running {
    let grpc = bound.grpc_addr();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        bound
            .run(async move {
                let _ = rx.await;
            })
            .await
            .expect("server");
    });
    Running {
        grpc,
        shutdown: Some(tx),
        task,
    }
}

impl Running {
    async fn client(&self) -> RateLimitServiceClient<tonic::transport::Channel> {
        within(RateLimitServiceClient::connect(format!(
            "http://{}",
            self.grpc
        )))
        .await
        .expect("connect")
    }

    async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        within(self.task).await.expect("server task");
    }
}

async fn check(
    client: &mut RateLimitServiceClient<tonic::transport::Channel>,
    key: &str,
    value: &str,
) -> RateLimitResponse {
    let request = RateLimitRequest {
        domain: "api".into(),
        descriptors: vec![RequestDescriptor {
            entries: vec![Entry {
                key: key.into(),
                value: value.into(),
            }],
            ..RequestDescriptor::default()
        }],
        hits_addend: 0,
    };
    within(client.should_rate_limit(request))
        .await
        .expect("rls")
        .into_inner()
}

/// Asks `n + 1` times for `key=value`: the first `n` are OK under a limit
/// of `n`, the last is over it.
async fn admits_exactly(
    client: &mut RateLimitServiceClient<tonic::transport::Channel>,
    key: &str,
    value: &str,
    n: u32,
) {
    for i in 0..n {
        let response = check(client, key, value).await;
        assert_eq!(response.overall_code(), Code::Ok, "{key}={value}, call {i}");
        let limit = response.statuses[0]
            .current_limit
            .as_ref()
            .expect("a limit");
        assert_eq!(limit.requests_per_unit, n, "{key}={value}");
    }
    let response = check(client, key, value).await;
    assert_eq!(
        response.overall_code(),
        Code::OverLimit,
        "{key}={value}, call {n}"
    );
}

// ---- tests ----

#[tokio::test]
async fn snapshots_apply_bad_ones_are_nacked_and_a_restart_keeps_the_rules() {
    let mut plane = ControlPlane::start(Some(("v1".into(), vec![rules("api-rules", 3)]))).await;
    // bind() returns once v1 is in force.
    let bound = within(server(settings(&plane)).bind()).await.expect("bind");
    let subscribe = plane.next().await;
    assert_eq!(subscribe.token.as_deref(), Some("secret"), "the header");
    let request = &subscribe.request;
    assert_eq!(request.type_url, RATE_LIMIT_CONFIG_TYPE);
    assert_eq!(
        (
            request.version_info.as_str(),
            request.response_nonce.as_str()
        ),
        ("", "")
    );
    let node = request.node.as_ref().expect("node");
    assert_eq!(node.id, "tollgate-test");
    assert!(
        node.metadata
            .as_ref()
            .is_some_and(|m| m.fields.contains_key("zone")),
        "{node:?}"
    );
    let ack = plane.answer_to("1").await;
    assert_eq!(ack.version_info, "v1");
    assert!(ack.error_detail.is_none(), "{ack:?}");

    let running = run(bound);
    let mut client = running.client().await;
    admits_exactly(&mut client, "user", "alice", 3).await;
    // One of /login's 2, spent under v1.
    assert_eq!(
        check(&mut client, "path", "/login").await.overall_code(),
        Code::Ok
    );

    // v2 raises the per-user limit; /login is unchanged and keeps its count.
    plane.publish("v2", vec![rules("api-rules", 5)]);
    let ack = plane.answer_to("2").await;
    assert_eq!(ack.version_info, "v2");
    assert!(ack.error_detail.is_none(), "{ack:?}");
    admits_exactly(&mut client, "user", "bob", 5).await;
    admits_exactly_after_one(&mut client).await;

    // v3 has a limit with no unit: NACKed, v2 stays.
    let mut bad = rules("api-rules", 9);
    bad.descriptors[0].rate_limit.as_mut().unwrap().unit = RateLimitUnit::Unknown.into();
    plane.publish("v3", vec![bad]);
    let nack = plane.answer_to("3").await;
    assert_eq!(nack.version_info, "v2", "a NACK names the version in force");
    let detail = nack.error_detail.expect("a NACK carries the error");
    assert_eq!(detail.code, 3, "INVALID_ARGUMENT");
    assert!(detail.message.contains("'api-rules'"), "{}", detail.message);
    assert!(detail.message.contains("unit"), "{}", detail.message);
    admits_exactly(&mut client, "user", "carol", 5).await;

    // The control plane goes away: the rules in force stay.
    plane.stop().await;
    admits_exactly(&mut client, "user", "dave", 5).await;
    // It comes back with v4: the client reconnects, says it runs v2, and
    // takes v4.
    plane.publish("v4", vec![rules("api-rules", 7)]);
    plane.restart().await;
    let resubscribe = loop {
        let seen = plane.next().await;
        if seen.request.response_nonce.is_empty() {
            break seen.request;
        }
    };
    assert_eq!(resubscribe.version_info, "v2");
    let ack = plane.answer_to("1").await;
    assert_eq!(ack.version_info, "v4");
    assert!(ack.error_detail.is_none(), "{ack:?}");
    admits_exactly(&mut client, "user", "erin", 7).await;

    running.stop().await;
    plane.stop().await;
}

/// `path=/login` (2 a minute) had one request under v1: one more is OK,
/// the next over the limit (the count survived the reload).
async fn admits_exactly_after_one(client: &mut RateLimitServiceClient<tonic::transport::Channel>) {
    assert_eq!(
        check(client, "path", "/login").await.overall_code(),
        Code::Ok
    );
    assert_eq!(
        check(client, "path", "/login").await.overall_code(),
        Code::OverLimit,
        "the unchanged rule kept its count across the snapshot"
    );
}

#[tokio::test]
async fn the_server_listens_only_once_a_valid_snapshot_is_in_force() {
    // A control plane whose first snapshot is bad.
    let mut bad = rules("first", 3);
    bad.domain = String::new();
    let mut plane = ControlPlane::start(Some(("v1".into(), vec![bad]))).await;
    let binding = tokio::spawn(server(settings(&plane)).bind());
    let nack = plane.answer_to("1").await;
    assert!(nack.error_detail.is_some(), "{nack:?}");
    assert!(!binding.is_finished(), "bound before any valid snapshot");
    plane.publish("v2", vec![rules("first", 3)]);
    let ack = plane.answer_to("2").await;
    assert_eq!(ack.version_info, "v2");
    let bound = within(binding).await.expect("task").expect("bind");
    let running = run(bound);
    let mut client = running.client().await;
    admits_exactly(&mut client, "user", "alice", 3).await;
    running.stop().await;
    plane.stop().await;
}

#[tokio::test]
async fn force_start_serves_before_the_first_snapshot() {
    // No snapshot yet.
    let mut plane = ControlPlane::start(None).await;
    let mut settings = settings(&plane);
    settings.force_start = true;
    let running = run(within(server(settings).bind()).await.expect("bind"));
    let mut client = running.client().await;
    let response = check(&mut client, "user", "alice").await;
    assert_eq!(response.overall_code(), Code::Ok);
    assert!(response.statuses[0].current_limit.is_none(), "no rule yet");
    plane.publish("v1", vec![rules("late", 2)]);
    let ack = plane.answer_to("1").await;
    assert_eq!(ack.version_info, "v1");
    admits_exactly(&mut client, "user", "bob", 2).await;
    running.stop().await;
    plane.stop().await;
}

#[tokio::test]
async fn a_domain_in_two_resources_needs_merge_domain_config() {
    let first = rules("one", 3);
    let second = RateLimitConfig {
        name: "two".into(),
        domain: "api".into(),
        descriptors: vec![limit("tenant", "", RateLimitUnit::Hour, 4)],
    };
    let mut plane =
        ControlPlane::start(Some(("v1".into(), vec![first.clone(), second.clone()]))).await;
    let mut merged = settings(&plane);
    merged.merge_domains = true;
    // Merged: both resources' rules hold.
    let running = run(within(server(merged).bind()).await.expect("bind"));
    let mut client = running.client().await;
    admits_exactly(&mut client, "user", "alice", 3).await;
    admits_exactly(&mut client, "tenant", "t1", 4).await;
    running.stop().await;
    plane.stop().await;

    // Not merged: the same snapshot is NACKed, naming both resources.
    let mut plane = ControlPlane::start(Some(("v1".into(), vec![first, second]))).await;
    let binding = tokio::spawn(server(settings(&plane)).bind());
    let nack = plane.answer_to("1").await;
    let detail = nack.error_detail.expect("NACK");
    assert!(
        detail.message.contains("duplicate domain 'api'"),
        "{}",
        detail.message
    );
    assert!(
        detail.message.contains("'one'") && detail.message.contains("'two'"),
        "{}",
        detail.message
    );
    binding.abort();
    plane.stop().await;
}

#[tokio::test]
async fn lyfts_variables_reach_a_mutual_tls_control_plane() {
    // The control plane's certificate names xds.test, not the address
    // dialed: CONFIG_GRPC_XDS_SERVER_TLS_SAN says which name to expect.
    let plane_cert =
        rcgen::generate_simple_self_signed(vec!["xds.test".to_owned()]).expect("rcgen");
    let client_cert = rcgen::generate_simple_self_signed(vec!["rls".to_owned()]).expect("rcgen");
    let dir = tempfile::tempdir().expect("tempdir");
    let file = |name: &str, text: String| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).expect("write");
        path.to_str().expect("utf-8").to_owned()
    };
    let ca = file("ca.pem", plane_cert.cert.pem());
    let cert = file("client.pem", client_cert.cert.pem());
    let key = file("client.key", client_cert.signing_key.serialize_pem());
    let tls = tonic::transport::ServerTlsConfig::new()
        .identity(tonic::transport::Identity::from_pem(
            plane_cert.cert.pem(),
            plane_cert.signing_key.serialize_pem(),
        ))
        // Mutual TLS: only the client's certificate is let in.
        .client_ca_root(tonic::transport::Certificate::from_pem(
            client_cert.cert.pem(),
        ));
    let mut plane =
        ControlPlane::start_with(Some(("v1".into(), vec![rules("tls", 2)])), Some(tls)).await;
    let url = plane.addr.to_string();
    let environment: std::collections::HashMap<&str, &str> = [
        ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
        ("CONFIG_GRPC_XDS_SERVER_URL", url.as_str()),
        ("CONFIG_GRPC_XDS_NODE_ID", "rls-pod-1"),
        (
            "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
            "x-token:from-env",
        ),
        ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true"),
        ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", ca.as_str()),
        ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", cert.as_str()),
        ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", key.as_str()),
        ("CONFIG_GRPC_XDS_SERVER_TLS_SAN", "xds.test"),
        ("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "20ms"),
    ]
    .into_iter()
    .collect();
    let settings =
        XdsSettings::when_selected(|name| environment.get(name).map(|v| (*v).to_owned()))
            .expect("valid variables")
            .expect("CONFIG_TYPE selects xDS");
    assert!(
        settings.server_url.starts_with("https://"),
        "{}",
        settings.server_url
    );
    let running = run(within(server(settings).bind()).await.expect("bind"));
    let subscribe = plane.next().await;
    assert_eq!(subscribe.token.as_deref(), Some("from-env"));
    assert_eq!(subscribe.request.node.expect("node").id, "rls-pod-1");
    let ack = plane.answer_to("1").await;
    assert_eq!(ack.version_info, "v1");
    let mut client = running.client().await;
    admits_exactly(&mut client, "user", "alice", 2).await;
    running.stop().await;
    plane.stop().await;
}
