//! envoyproxy/ratelimit's StatsD sink (`USE_STATSD`, its default, or
//! `USE_DOG_STATSD`): every `STATS_FLUSH_INTERVAL`, each of its stats
//! ([`super::lyft`]) whose count grew is sent as the delta since the last
//! flush, `name:delta|c`, as its `gostats` store does (a counter that did
//! not move is not sent).
//!
//! - The timer `ratelimit_server.ShouldRateLimit.response_time` is sent
//!   as one `name:ms|ms` line per call since the last flush
//!   ([`super::response_time`]).
//! - `USE_STATSD`: over TCP to `STATSD_HOST:STATSD_PORT`, as `gostats`'
//!   TCP sink, `EXTRA_TAGS` serialized into the name as `gostats` does
//!   (`ratelimit.service.rate_limit.d.k.total_hits.__app=rl:1|c`, tags by
//!   name).
//! - `USE_DOG_STATSD`: over UDP, as `datadog-go`, tags after `|#`
//!   (`…total_hits:1|c|#app:rl`), lines packed into datagrams of at most
//!   1432 bytes.
//!
//! # Decisions
//!
//! - The lines are written here rather than through a StatsD crate:
//!   `cadence` (the well-kept one) has no TCP sink and counts each
//!   increment as it happens, where envoyproxy/ratelimit's format is one
//!   delta per counter per flush with `gostats`' tag serialization; the
//!   line is one `format!`.
//! - A flush that cannot be sent (StatsD down, connection refused) is
//!   dropped and logged once per failure streak, as `gostats` drops it;
//!   the next flush reconnects and sends the deltas since that one (the
//!   counts are never lost from `/metrics`).
//! - The server flushes once more when it stops, so that the last
//!   interval's counts are not lost.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpStream, UdpSocket};

use super::Metrics;
use crate::config::telemetry::{StatsdFlavor, StatsdSettings};

/// The largest DogStatsD datagram, as `datadog-go`'s UDP default.
const MAX_DATAGRAM: usize = 1432;

/// The deltas since the last flush, as StatsD lines.
#[derive(Debug)]
pub struct Flusher {
    settings: StatsdSettings,
    /// Each stat's value at the last flush.
    sent: HashMap<String, u64>,
}

impl Flusher {
    /// A flusher that has sent nothing yet.
    pub fn new(settings: StatsdSettings) -> Flusher {
        Flusher {
            settings,
            sent: HashMap::new(),
        }
    }

    /// The lines for `snapshot` (names and totals), one per stat that grew
    /// since the last call, each ending in `\n`.
    pub fn lines(&mut self, snapshot: Vec<(String, u64)>) -> Vec<String> {
        let mut lines = Vec::new();
        for (name, total) in snapshot {
            let sent = self.sent.get(&name).copied().unwrap_or(0);
            let delta = total.saturating_sub(sent);
            if delta == 0 {
                continue;
            }
            lines.push(self.line(&name, delta));
            self.sent.insert(name, total);
        }
        lines
    }

    /// The lines of the timer `name`'s values (milliseconds), one each,
    /// as `gostats` sends a timer: `name:3|ms`.
    pub fn timer_lines(&self, name: &str, values: &[u64]) -> Vec<String> {
        values
            .iter()
            .map(|value| self.typed_line(name, *value, "ms"))
            .collect()
    }

    fn line(&self, name: &str, delta: u64) -> String {
        self.typed_line(name, delta, "c")
    }

    fn typed_line(&self, name: &str, value: u64, kind: &str) -> String {
        let tags = &self.settings.extra_tags;
        match self.settings.flavor {
            StatsdFlavor::Statsd => {
                let mut line = name.to_owned();
                for (tag, value) in tags {
                    line.push_str(&format!(".__{tag}={value}"));
                }
                line.push_str(&format!(":{value}|{kind}\n"));
                line
            }
            StatsdFlavor::DogStatsd if tags.is_empty() => format!("{name}:{value}|{kind}\n"),
            StatsdFlavor::DogStatsd => {
                let tags: Vec<String> = tags.iter().map(|(t, v)| format!("{t}:{v}")).collect();
                format!("{name}:{value}|{kind}|#{}\n", tags.join(","))
            }
        }
    }
}

/// Where the lines go: a TCP connection made on demand, or a UDP socket.
#[derive(Debug, Default)]
struct Connection {
    tcp: Option<TcpStream>,
    udp: Option<UdpSocket>,
}

impl Connection {
    async fn send(&mut self, settings: &StatsdSettings, lines: &[String]) -> std::io::Result<()> {
        let target = (settings.host.as_str(), settings.port);
        match settings.flavor {
            StatsdFlavor::Statsd => {
                if self.tcp.is_none() {
                    self.tcp = Some(TcpStream::connect(target).await?);
                }
                let Some(tcp) = self.tcp.as_mut() else {
                    return Ok(());
                };
                let result = tcp.write_all(lines.concat().as_bytes()).await;
                if result.is_err() {
                    // Reconnect at the next flush.
                    self.tcp = None;
                }
                result
            }
            StatsdFlavor::DogStatsd => {
                if self.udp.is_none() {
                    let socket = UdpSocket::bind(("0.0.0.0", 0)).await?;
                    socket.connect(target).await?;
                    self.udp = Some(socket);
                }
                let Some(udp) = self.udp.as_ref() else {
                    return Ok(());
                };
                let mut datagram = String::new();
                for line in lines {
                    if !datagram.is_empty() && datagram.len() + line.len() > MAX_DATAGRAM {
                        udp.send(datagram.as_bytes()).await?;
                        datagram.clear();
                    }
                    datagram.push_str(line);
                }
                if !datagram.is_empty() {
                    udp.send(datagram.as_bytes()).await?;
                }
                Ok(())
            }
        }
    }
}

/// Flushes `metrics`' envoyproxy/ratelimit stats to StatsD every
/// `interval` until `stop` turns true, then once more.
pub async fn run(
    metrics: Arc<Metrics>,
    settings: StatsdSettings,
    interval: Duration,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut flusher = Flusher::new(settings.clone());
    let mut connection = Connection::default();
    let mut failing = false;
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    loop {
        let stopping = tokio::select! {
            _ = ticks.tick() => false,
            // An error means the sender is gone: stop too.
            _ = stop.wait_for(|stop| *stop) => true,
        };
        let mut lines = flusher.lines(metrics.lyft_snapshot());
        lines.extend(
            flusher.timer_lines(super::response_time::STAT, &metrics.take_response_times()),
        );
        if !lines.is_empty() {
            match connection.send(&settings, &lines).await {
                Ok(()) => failing = false,
                Err(error) => {
                    if !failing {
                        tracing::warn!(host = %settings.host, port = settings.port, %error, "cannot send stats to StatsD; dropping them until it answers");
                    }
                    failing = true;
                }
            }
        }
        if stopping {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flusher(flavor: StatsdFlavor, tags: &[(&str, &str)]) -> Flusher {
        Flusher::new(StatsdSettings {
            host: "localhost".to_owned(),
            port: 8125,
            flavor,
            extra_tags: tags
                .iter()
                .map(|&(t, v)| (t.to_owned(), v.to_owned()))
                .collect(),
        })
    }

    #[test]
    fn sends_deltas_of_counters_that_moved() {
        let mut f = flusher(StatsdFlavor::Statsd, &[]);
        let stat = "ratelimit.service.rate_limit.d.k.total_hits".to_owned();
        assert_eq!(
            f.lines(vec![(stat.clone(), 3), ("idle".to_owned(), 0)]),
            vec!["ratelimit.service.rate_limit.d.k.total_hits:3|c\n"]
        );
        assert!(f.lines(vec![(stat.clone(), 3)]).is_empty());
        assert_eq!(
            f.lines(vec![(stat, 5)]),
            vec!["ratelimit.service.rate_limit.d.k.total_hits:2|c\n"]
        );
    }

    #[test]
    fn tags_as_gostats_and_datadog() {
        let tags = [("app", "rl"), ("zone", "eu")];
        assert_eq!(
            flusher(StatsdFlavor::Statsd, &tags).lines(vec![("a.b".to_owned(), 1)]),
            vec!["a.b.__app=rl.__zone=eu:1|c\n"]
        );
        assert_eq!(
            flusher(StatsdFlavor::DogStatsd, &tags).lines(vec![("a.b".to_owned(), 1)]),
            vec!["a.b:1|c|#app:rl,zone:eu\n"]
        );
    }
}
