//! Starting, running and stopping the server.
//!
//! [`Server::from_config_file`] reads and validates the file;
//! [`Server::bind`] binds both listeners (so that the addresses, port 0
//! resolved, are known before traffic); [`BoundServer::run`] serves until
//! the shutdown future resolves, then stops accepting, lets requests in
//! flight finish, and returns. [`Server::run`] does both.
//!
//! The gRPC listener also serves `grpc.health.v1.Health` (no token
//! needed, as `/healthz`): `SERVING` for `""` until shutdown, and for
//! `ratelimit` (envoyproxy/ratelimit's name) and
//! `envoy.service.ratelimit.v3.RateLimitService` while the server is
//! healthy, the state `/healthcheck` answers ([`crate::health`],
//! [`crate::grpc::health`]); `NOT_SERVING` from the first moment of
//! shutdown.
//!
//! On shutdown `/readyz` answers 503 from the first moment (to requests on
//! connections still open while the others drain), both listeners stop
//! accepting, requests in flight are answered, and `run` returns when both
//! servers are done. The reload and sweep tasks are stopped with them, and
//! the backend is told last ([`Backend::shutdown`]: the Redis backend gives
//! its leases back).
//!
//! Either listener serves TLS when the file gives it a certificate
//! ([`crate::tls`]). Both accept through [`crate::listen`]: accept errors
//! (out of descriptors) are waited out with a back-off and logged, and a
//! connection that sends nothing for `idle_timeout_ms` is closed.
//!
//! [`Server::from_xds`] takes the rules from an xDS control plane instead
//! of a file ([`crate::xds`]): [`Server::bind`] then binds the listeners
//! once the first snapshot is in force (unless the settings force the
//! start), and the file watcher does not run.

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::net::TcpListener;
use tollgate::ClockSource;

use crate::backend::{Backend, BackendError, MemoryBackend, SWEEP_EVERY};
use crate::concurrency::Leases;
use crate::config::compact_keys::CompactKeys;
use crate::config::lyft_env::{Env, LyftSettings, RuntimeDir, Snapshot};
use crate::config::telemetry::TelemetrySettings;
use crate::config::{BackendSettings, Config, ConfigError};
use crate::grpc::{self, RlsService};
use crate::listen::Acceptor;
use crate::metrics::Metrics;
use crate::redis_backend::RedisBackend;
use crate::reload::Reloader;
use crate::rules::RuleSet;
use crate::service::{RequestLimits, Service};
use crate::tls::{Identity, TlsListener};

/// Why the server could not start or stopped with an error.
#[derive(Debug)]
#[non_exhaustive]
pub enum ServeError {
    /// The configuration is invalid.
    Config(ConfigError),
    /// The bearer token file cannot be read.
    Token(std::io::Error),
    /// A listener cannot be bound.
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        error: std::io::Error,
    },
    /// The gRPC server failed.
    Grpc(tonic::transport::Error),
    /// The HTTP server failed.
    Http(std::io::Error),
    /// The backend cannot start (Redis unreachable) or refused the rules.
    Backend(crate::backend::BackendError),
    /// The TLS certificate or key cannot be loaded (they were checked when
    /// the file was read: they changed since).
    Tls(String),
    /// The OTLP exporter cannot start (`OTEL_EXPORTER_OTLP_ENDPOINT`).
    Tracing(String),
    /// The Prometheus listener (`PROMETHEUS_ADDR`) cannot be bound.
    Prometheus {
        /// The address.
        addr: String,
        /// Why.
        error: std::io::Error,
    },
    /// An envoyproxy/ratelimit variable is refused
    /// ([`crate::config::lyft_env`]).
    Env(crate::config::lyft_env::EnvError),
}

impl std::fmt::Display for ServeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServeError::Config(error) => write!(f, "{error}"),
            ServeError::Token(error) => write!(f, "bearer token: {error}"),
            ServeError::Bind { addr, error } => write!(f, "cannot listen on {addr}: {error}"),
            ServeError::Grpc(error) => write!(f, "grpc server: {error}"),
            ServeError::Http(error) => write!(f, "http server: {error}"),
            ServeError::Backend(error) => write!(f, "{error}"),
            ServeError::Tls(error) => write!(f, "tls: {error}"),
            ServeError::Tracing(error) => write!(f, "TRACING_ENABLED: OTLP exporter: {error}"),
            ServeError::Prometheus { addr, error } => {
                write!(f, "PROMETHEUS_ADDR: cannot listen on {addr}: {error}")
            }
            ServeError::Env(error) => write!(f, "{error}"),
        }
    }
}

impl std::error::Error for ServeError {}

impl From<ConfigError> for ServeError {
    fn from(error: ConfigError) -> ServeError {
        ServeError::Config(error)
    }
}

/// A configured server, not yet listening.
pub struct Server {
    config: Config,
    path: PathBuf,
    /// Set when the rules are envoyproxy/ratelimit's config directory, with
    /// the files they were read from.
    directory: Option<(RuntimeDir, Snapshot)>,
    clock: ClockSource,
    backend: Option<Arc<dyn Backend>>,
    /// Rules from a control plane instead of the file.
    xds: Option<crate::xds::XdsSettings>,
    telemetry: TelemetrySettings,
    /// In memory, count as envoyproxy/ratelimit counts (refused hits
    /// too): run from its environment.
    lyft_counts: bool,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("path", &self.path)
            .field("server", &self.config.server)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// Reads and validates the configuration at `path`.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the file, the line and the field.
    pub fn from_config_file(path: impl AsRef<Path>) -> Result<Server, ConfigError> {
        let path = path.as_ref().to_owned();
        let config = Config::from_file(&path)?;
        Ok(Server {
            config,
            path,
            directory: None,
            clock: ClockSource::default(),
            backend: None,
            xds: None,
            telemetry: TelemetrySettings::default(),
            lyft_counts: false,
        })
    }

    /// A server with `config`'s `server`, `backend` and `admin` sections
    /// whose rules come from the xDS control plane of `xds` (see
    /// [`crate::xds`]); `config`'s domains are not used.
    pub fn from_xds(config: Config, xds: crate::xds::XdsSettings) -> Server {
        Server {
            config: Config {
                domains: Vec::new(),
                ..config
            },
            path: PathBuf::new(),
            clock: ClockSource::default(),
            backend: None,
            xds: Some(xds),
            telemetry: TelemetrySettings::default(),
            directory: None,
            lyft_counts: false,
        }
    }

    /// Reads envoyproxy/ratelimit's environment and config directory
    /// ([`crate::config::lyft_env`]). In memory, windows are counted on the
    /// wall clock (UNIX time), so that a fixed window is aligned to its
    /// unit as envoyproxy/ratelimit aligns it, and refused hits are counted
    /// as it counts them ([`MemoryBackend::with_lyft_counts`]).
    ///
    /// # Errors
    ///
    /// [`ServeError::Env`] naming a refused variable, or
    /// [`ServeError::Config`] for the config directory.
    pub fn from_lyft_env(env: &Env) -> Result<Server, ServeError> {
        let settings = LyftSettings::read(env).map_err(ServeError::Env)?;
        Server::from_lyft_settings(&settings)
    }

    /// As [`from_lyft_env`](Server::from_lyft_env), from settings already
    /// read.
    ///
    /// # Errors
    ///
    /// As [`from_lyft_env`](Server::from_lyft_env).
    pub fn from_lyft_settings(settings: &LyftSettings) -> Result<Server, ServeError> {
        // Once, at start: no variable is ignored without a word (the Redis
        // settings' own notices are logged when Redis is connected).
        for notice in &settings.notices {
            tracing::warn!("{notice}");
        }
        if let Some(xds) = &settings.xds {
            // The rules come from the control plane; the directory is not read.
            return Ok(Server {
                lyft_counts: true,
                ..Server::from_xds(settings.config.clone(), xds.clone())
                    .with_clock(tollgate::SystemClock::new())
                    .with_telemetry(settings.telemetry.clone())
            });
        }
        let (config, snapshot) = settings.load()?;
        Ok(Server {
            path: settings.runtime.dir.clone(),
            directory: Some((settings.runtime.clone(), snapshot)),
            config,
            clock: tollgate::SystemClock::new().into(),
            backend: None,
            xds: None,
            telemetry: settings.telemetry.clone(),
            lyft_counts: true,
        })
    }

    /// The configuration read.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The clock the in-memory limiters read (tests pass a
    /// `tollgate::ManualClock`). By default, the monotonic clock.
    pub fn with_clock(mut self, clock: impl Into<ClockSource>) -> Server {
        self.clock = clock.into();
        self
    }

    /// How often the rules are read for changes; zero turns hot reload
    /// off (tests then poll [`BoundServer::reloader`] themselves). By
    /// default, the file's `reload_interval_ms` (1 s; from
    /// envoyproxy/ratelimit's environment, 1 s).
    pub fn with_reload_interval(mut self, interval: Duration) -> Server {
        self.config.server.reload_interval_ms =
            u64::try_from(interval.as_millis()).unwrap_or(u64::MAX);
        self
    }

    /// The capacity of the in-memory backend's compact tables (see
    /// [`crate::config::compact_keys`]), over the configuration's
    /// `server.compact_keys`: `tollgate serve --compact-keys`. Refused at
    /// [`bind`](Server::bind) under a Redis backend.
    pub fn with_compact_keys(mut self, keys: CompactKeys) -> Server {
        self.config.server.compact_keys = Some(keys);
        self
    }

    /// Where the counts live. By default, the file's `backend:` (Redis),
    /// or a [`MemoryBackend`] on the clock.
    pub fn with_backend(mut self, backend: Arc<dyn Backend>) -> Server {
        self.backend = Some(backend);
        self
    }

    /// Where envoyproxy/ratelimit's stats go (StatsD, a Prometheus
    /// listener of their own) and the near-limit ratio: see
    /// [`crate::config::telemetry`]. By default, no StatsD, no listener
    /// beyond the HTTP one's `/metrics`, a ratio of 0.8.
    pub fn with_telemetry(mut self, telemetry: TelemetrySettings) -> Server {
        self.telemetry = telemetry;
        self
    }

    /// Binds both listeners (with xDS, once the first snapshot is in
    /// force, unless the settings force the start: this waits as long as
    /// the control plane sends no valid snapshot).
    ///
    /// # Errors
    ///
    /// [`ServeError::Bind`], [`ServeError::Token`], [`ServeError::Tls`], or
    /// [`ServeError::Backend`] (Redis unreachable, a rule it cannot run).
    pub async fn bind(self) -> Result<BoundServer, ServeError> {
        let settings = self.config.server.clone();
        let token = crate::auth::load_token(
            settings.bearer_token.as_deref(),
            settings.bearer_token_file.as_deref(),
        )
        .map_err(ServeError::Token)?;
        // The file's check makes this unreachable; never run the admin API open.
        let admin = self.config.admin.enabled.then(|| token.clone());
        if admin == Some(None) {
            return Err(ServeError::Token(std::io::Error::other(
                "the admin API needs a bearer token",
            )));
        }
        let load_tls = |tls: &Option<crate::config::TlsSettings>| {
            tls.as_ref()
                .map(Identity::load)
                .transpose()
                .map_err(ServeError::Tls)
        };
        let grpc_tls = load_tls(&settings.grpc_tls)?;
        let http_tls = load_tls(&settings.http_tls)?;

        let backend: Arc<dyn Backend> = match (self.backend, &self.config.backend) {
            (Some(backend), _) => backend,
            (None, BackendSettings::Memory) => Arc::new(
                MemoryBackend::new(self.clock.clone())
                    .with_lyft_counts(self.lyft_counts)
                    .with_compact_keys(settings.compact_keys.map(CompactKeys::get)),
            ),
            (None, BackendSettings::Redis(_)) if settings.compact_keys.is_some() => {
                // The file's check refuses it; a flag or a caller may not have.
                return Err(ServeError::Config(ConfigError::rules(
                    &self.path,
                    &crate::config::compact_keys::NOT_ON_REDIS,
                )));
            }
            (None, BackendSettings::Redis(redis)) => Arc::new(
                RedisBackend::connect(redis)
                    .await
                    .map_err(ServeError::Backend)?
                    .with_clock(&self.clock),
            ),
        };
        let leases = Arc::new(match &self.config.backend {
            BackendSettings::Memory => Leases::memory(self.clock.clone()),
            BackendSettings::Redis(redis) => Leases::connect(redis, self.clock.clone())
                .await
                .map_err(|error| ServeError::Backend(BackendError::new(error)))?,
        });
        let prometheus = match &self.telemetry.prometheus {
            None => None,
            Some(prometheus) => {
                let listener =
                    TcpListener::bind(prometheus.addr.as_str())
                        .await
                        .map_err(|error| ServeError::Prometheus {
                            addr: prometheus.addr.clone(),
                            error,
                        })?;
                Some((listener, prometheus.path.clone()))
            }
        };
        let mut metrics = Metrics::new()
            .with_concurrency(leases.stats().clone())
            .with_near_limit_ratio(self.telemetry.near_limit_ratio)
            .with_mapping(self.telemetry.mapping.clone());
        backend.register_metrics(metrics.registry_mut());
        let traces = self
            .telemetry
            .tracing
            .as_ref()
            .map(crate::traces::Traces::start)
            .transpose()
            .map_err(|error| ServeError::Tracing(error.to_string()))?;
        let mut service = Service::new(
            RuleSet::new(&self.config),
            backend,
            Arc::new(metrics),
            RequestLimits::of(&settings),
            settings.max_concurrent_requests,
        )
        .map_err(ServeError::Backend)?
        .with_leases(leases);
        if let Some(traces) = traces {
            service = service.with_traces(Arc::new(traces));
        }
        let service = Arc::new(service);
        // Rules from a control plane: listen once they are in force.
        let xds = match self.xds {
            Some(xds) => {
                let client = crate::xds::XdsClient::new(xds, Arc::clone(&service), &self.config);
                Some(crate::xds::start(client).await)
            }
            None => {
                service.metrics().config_loaded(true);
                None
            }
        };
        let listeners = async {
            let grpc_listener = bind(settings.grpc_listen).await?;
            let http_listener = bind(settings.http_listen).await?;
            let grpc_addr = local_addr(&grpc_listener, settings.grpc_listen)?;
            let http_addr = local_addr(&http_listener, settings.http_listen)?;
            let debug_listener = match settings.debug_listen {
                Some(addr) => {
                    let listener = bind(addr).await?;
                    let local = local_addr(&listener, addr)?;
                    Some((listener, local))
                }
                None => None,
            };
            Ok((
                grpc_listener,
                http_listener,
                grpc_addr,
                http_addr,
                debug_listener,
            ))
        };
        let (grpc_listener, http_listener, grpc_addr, http_addr, debug_listener) =
            match listeners.await {
                Ok(listeners) => listeners,
                Err(error) => {
                    // Not serving: the client stops too.
                    if let Some(xds) = &xds {
                        xds.abort();
                    }
                    return Err(error);
                }
            };
        let reloader = Arc::new(match self.directory {
            // The files just validated: a change since is the first poll's.
            Some((dir, snapshot)) => {
                Reloader::for_directory(dir, Arc::clone(&service), &self.config, snapshot)
            }
            None => {
                // The bytes just validated; if the file changed since, the
                // first poll picks it up.
                let loaded = std::fs::read(&self.path).unwrap_or_default();
                Reloader::new(
                    self.path.clone(),
                    Arc::clone(&service),
                    &self.config,
                    loaded,
                )
            }
        });
        Ok(BoundServer {
            grpc_listener,
            http_listener,
            debug_listener,
            grpc_addr,
            http_addr,
            service,
            reloader,
            token,
            admin: admin.flatten(),
            settings,
            grpc_tls,
            http_tls,
            ready: Arc::new(AtomicBool::new(true)),
            xds,
            prometheus,
            telemetry: self.telemetry,
        })
    }

    /// Binds, logs the addresses, and serves until `shutdown` resolves.
    ///
    /// # Errors
    ///
    /// As [`bind`](Server::bind) and [`BoundServer::run`].
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServeError> {
        let bound = self.bind().await?;
        tracing::info!(grpc = %bound.grpc_addr, http = %bound.http_addr, "tollgate server listening");
        bound.run(shutdown).await
    }
}

async fn bind(addr: SocketAddr) -> Result<TcpListener, ServeError> {
    TcpListener::bind(addr)
        .await
        .map_err(|error| ServeError::Bind { addr, error })
}

fn local_addr(listener: &TcpListener, addr: SocketAddr) -> Result<SocketAddr, ServeError> {
    listener
        .local_addr()
        .map_err(|error| ServeError::Bind { addr, error })
}

/// The rate limit service's gRPC name, as health checks ask for it.
pub use crate::grpc::health::RLS_SERVICE;

/// A server with both listeners bound.
pub struct BoundServer {
    grpc_listener: TcpListener,
    http_listener: TcpListener,
    /// The debug listener and its address, when there is one.
    debug_listener: Option<(TcpListener, SocketAddr)>,
    grpc_addr: SocketAddr,
    http_addr: SocketAddr,
    service: Arc<Service>,
    reloader: Arc<Reloader>,
    token: Option<Arc<str>>,
    /// The admin API's token, when it is enabled ([`crate::http::admin`]).
    admin: Option<Arc<str>>,
    settings: crate::config::ServerSettings,
    grpc_tls: Option<Identity>,
    http_tls: Option<Identity>,
    ready: Arc<AtomicBool>,
    /// The xDS client's task, when the rules come from a control plane.
    xds: Option<tokio::task::JoinHandle<()>>,
    /// `USE_PROMETHEUS`: its listener and path.
    prometheus: Option<(TcpListener, String)>,
    telemetry: TelemetrySettings,
}

impl std::fmt::Debug for BoundServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BoundServer")
            .field("grpc_addr", &self.grpc_addr)
            .field("http_addr", &self.http_addr)
            .finish_non_exhaustive()
    }
}

impl BoundServer {
    /// The gRPC (Envoy RLS) address.
    pub fn grpc_addr(&self) -> SocketAddr {
        self.grpc_addr
    }

    /// The HTTP JSON API address.
    pub fn http_addr(&self) -> SocketAddr {
        self.http_addr
    }

    /// The Prometheus listener's address (`USE_PROMETHEUS`), if any.
    pub fn prometheus_addr(&self) -> Option<SocketAddr> {
        self.prometheus
            .as_ref()
            .and_then(|(listener, _)| listener.local_addr().ok())
    }

    /// The debug listener's address (`/rlconfig`, `/stats`), when there is
    /// one (envoyproxy/ratelimit's `DEBUG_PORT`).
    pub fn debug_addr(&self) -> Option<SocketAddr> {
        self.debug_listener.as_ref().map(|(_, addr)| *addr)
    }

    /// The reloader, to reload now rather than at the next poll (a server
    /// taking its rules over xDS has no file: its reloader only fails).
    pub fn reloader(&self) -> Arc<Reloader> {
        Arc::clone(&self.reloader)
    }

    /// The service both APIs call.
    pub fn service(&self) -> Arc<Service> {
        Arc::clone(&self.service)
    }

    /// Serves until `shutdown` resolves, then drains and returns.
    ///
    /// # Errors
    ///
    /// [`ServeError::Grpc`] or [`ServeError::Http`] if a server fails.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServeError> {
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let stop_rx_for_stats = stop_rx.clone();
        let stopped = move || {
            let mut rx = stop_rx.clone();
            async move {
                // An error means the sender is gone: stop too.
                let _ = rx.wait_for(|stop| *stop).await;
            }
        };

        let idle = Duration::from_millis(self.settings.idle_timeout_ms);
        // Pings keep a live peer's connection read-active (crate::listen).
        let mut grpc = tonic::transport::Server::builder()
            .http2_keepalive_interval(Some(idle / 2))
            .http2_keepalive_timeout(Some(idle / 2));
        if let Some(age) = self.settings.grpc_max_connection_age {
            grpc = grpc.max_connection_age(age);
        }
        let rls = RlsService::new(Arc::clone(&self.service), self.settings.response_headers)
            .with_header_names(self.settings.response_header_names.clone())
            .with_dynamic_metadata(self.settings.response_dynamic_metadata);
        if let Some(identity) = &self.grpc_tls {
            grpc = grpc
                .tls_config(identity.tonic_config())
                .map_err(ServeError::Grpc)?;
        }
        // grpc.health.v1 (Kubernetes' and Envoy's gRPC health checks) and
        // /healthcheck answer from one state.
        let health = crate::health::Health::new(
            Arc::clone(&self.ready),
            Arc::clone(&self.service),
            self.settings.healthy_only_with_rules,
        );
        // Redis, when the settings ask the checks to follow it
        // (`health_check`, REDIS_HEALTH_CHECK_ACTIVE_CONNECTION).
        let backend = Arc::clone(self.service.backend());
        health.add("redis", move || backend.health().health_check());
        let health_service = grpc::health::server(health.clone());
        let grpc = grpc
            .add_service(health_service)
            .add_service(grpc::server(
                rls.clone(),
                self.token.clone(),
                self.settings.max_request_bytes,
            ))
            // Kuadrant Limitador's check and report calls (grpc::kuadrant).
            .add_service(grpc::kuadrant::server(
                rls.clone(),
                self.token.clone(),
                self.settings.max_request_bytes,
            ))
            .serve_with_incoming_shutdown(
                Acceptor::new(self.grpc_listener, idle).into_stream(),
                stopped(),
            );
        let router = crate::http::router::listener(crate::http::router::Doors {
            service: Arc::clone(&self.service),
            token: self.token.clone(),
            ready: Arc::clone(&self.ready),
            max_request_bytes: self.settings.max_request_bytes,
            rls,
            health,
            admin_token: self.admin.clone(),
        });
        let http_stopped = stopped();
        let http = async move {
            match &self.http_tls {
                None => {
                    crate::http::serve::serve(
                        Acceptor::new(self.http_listener, idle),
                        router,
                        idle,
                        http_stopped,
                    )
                    .await
                }
                Some(identity) => {
                    let acceptor = identity.acceptor().map_err(std::io::Error::other)?;
                    let listener = TlsListener::new(
                        Acceptor::new(self.http_listener, idle),
                        acceptor,
                        self.http_addr,
                    );
                    crate::http::serve::serve(listener, router, idle, http_stopped).await
                }
            }
        };

        let statsd = self.telemetry.statsd.clone().map(|statsd| {
            tokio::spawn(crate::metrics::statsd::run(
                Arc::clone(self.service.metrics_arc()),
                statsd,
                self.telemetry.flush_interval,
                stop_rx_for_stats.clone(),
            ))
        });
        let prometheus = self.prometheus.map(|(listener, path)| {
            let router = crate::http::router::prometheus(Arc::clone(&self.service), &path);
            let stopped = stopped();
            tokio::spawn(async move {
                crate::http::serve::serve(Acceptor::new(listener, idle), router, idle, stopped)
                    .await
            })
        });
        let reload = (self.xds.is_none() && self.settings.reload_interval_ms > 0).then(|| {
            tokio::spawn(
                Arc::clone(&self.reloader)
                    .watch(Duration::from_millis(self.settings.reload_interval_ms)),
            )
        });
        let backend = Arc::clone(self.service.backend());
        let leases = Arc::clone(self.service.leases());
        let sweeper = tokio::spawn(async move {
            let mut ticks = tokio::time::interval(SWEEP_EVERY);
            loop {
                ticks.tick().await;
                let backend = Arc::clone(&backend);
                let leases = Arc::clone(&leases);
                let _ = tokio::task::spawn_blocking(move || {
                    backend.sweep();
                    leases.sweep();
                })
                .await;
            }
        });
        let status = Arc::clone(&self.service);
        let sampler = tokio::spawn(async move {
            let mut ticks = tokio::time::interval(crate::status::SAMPLE_EVERY);
            loop {
                ticks.tick().await;
                status.sample_status();
            }
        });
        let ready = Arc::clone(&self.ready);
        tokio::spawn(async move {
            shutdown.await;
            // Relaxed: the flag is read on its own by /readyz.
            ready.store(false, Ordering::Relaxed);
            tracing::info!("shutting down: draining requests in flight");
            let _ = stop_tx.send(true);
        });

        let debug_stopped = stopped();
        let debug_service = Arc::clone(&self.service);
        let debug = async move {
            match self.debug_listener {
                Some((listener, _)) => {
                    crate::http::serve::serve(
                        Acceptor::new(listener, idle),
                        crate::http::router::debug(debug_service),
                        idle,
                        debug_stopped,
                    )
                    .await
                }
                None => Ok(()),
            }
        };

        let (grpc, http, debug) = tokio::join!(grpc, http, debug);
        if let Some(prometheus) = prometheus {
            let _ = prometheus.await;
        }
        if let Some(statsd) = statsd {
            // It flushes once more on the stop signal, then returns.
            let _ = statsd.await;
        }
        if let Some(reload) = reload {
            reload.abort();
        }
        if let Some(xds) = &self.xds {
            xds.abort();
        }
        sweeper.abort();
        sampler.abort();
        if let Some(traces) = self.service.traces() {
            traces.shutdown().await;
        }
        // After the last answer: give back what the backend holds (leases).
        self.service.backend().shutdown().await;
        grpc.map_err(ServeError::Grpc)?;
        http.map_err(ServeError::Http)?;
        debug.map_err(ServeError::Http)?;
        tracing::info!("tollgate server stopped");
        Ok(())
    }
}

/// Resolves on SIGTERM or Ctrl-C: the shutdown future the CLI passes to
/// [`Server::run`].
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::warn!(%error, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = terminate => {}
    }
}
