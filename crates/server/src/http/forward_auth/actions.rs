//! Envoy's `rate_limits` actions run over a forwarded request: each entry
//! of the list produces at most one descriptor, its actions appending one
//! entry each, in order, as Envoy's router does
//! (`source/common/router/router_ratelimit.cc`):
//!
//! - an action that cannot produce its entry drops the whole descriptor
//!   (a `header_value_match` that does not match, a `request_headers`
//!   without its header, a `destination_cluster` the URL does not name);
//! - `skip_if_absent: true` (`request_headers`, `query_parameters`) drops
//!   only the entry, and the descriptor is built from the others;
//! - a descriptor left with no entry at all is not sent (decision: the
//!   service would refuse an empty descriptor as OVER_LIMIT, and Envoy's
//!   `skip_if_absent` means "limit without it", never "refuse").

use std::net::IpAddr;

use ipnet::IpNet;

use super::forwarded::Forwarded;
use crate::config::actions::{
    Action, ForwardAuthConfig, HeaderMatcher, HeaderRule, QueryParameterMatcher,
};
use crate::request::Descriptor;

/// What one action gives.
enum Produced {
    Entry(String, String),
    /// `skip_if_absent`: no entry, the descriptor goes on.
    Skip,
    /// No descriptor for this `rate_limits` entry.
    Nothing,
}

/// The descriptors `config` derives from `request`, in `rate_limits` order.
pub fn descriptors(config: &ForwardAuthConfig, request: &Forwarded<'_>) -> Vec<Descriptor> {
    let mut descriptors = Vec::with_capacity(config.rate_limits.len());
    'entries: for entry in &config.rate_limits {
        let mut entries = Vec::with_capacity(entry.actions.len());
        for action in &entry.actions {
            match produce(action, request) {
                Produced::Entry(key, value) => entries.push((key, value)),
                Produced::Skip => {}
                Produced::Nothing => continue 'entries,
            }
        }
        if !entries.is_empty() {
            descriptors.push(Descriptor {
                entries,
                cost: entry.hits_addend,
                limit: None,
            });
        }
    }
    descriptors
}

fn produce(action: &Action, request: &Forwarded<'_>) -> Produced {
    let entry = |key: &str, value: &str| Produced::Entry(key.to_owned(), value.to_owned());
    match action {
        Action::SourceCluster => request.source_cluster.map_or(Produced::Nothing, |cluster| {
            entry("source_cluster", cluster)
        }),
        Action::DestinationCluster => request
            .destination_cluster
            .map_or(Produced::Nothing, |cluster| {
                entry("destination_cluster", cluster)
            }),
        Action::RequestHeaders {
            header_name,
            descriptor_key,
            skip_if_absent,
        } => match request.header(header_name).first() {
            Some(value) => entry(descriptor_key, value),
            None => absent(*skip_if_absent),
        },
        Action::RemoteAddress => entry("remote_address", &request.client.to_string()),
        Action::MaskedRemoteAddress {
            v4_prefix_mask_len,
            v6_prefix_mask_len,
        } => entry(
            "masked_remote_address",
            &masked(request.client, *v4_prefix_mask_len, *v6_prefix_mask_len),
        ),
        Action::GenericKey {
            descriptor_key,
            descriptor_value,
        } => entry(descriptor_key, descriptor_value),
        Action::HeaderValueMatch {
            descriptor_key,
            descriptor_value,
            expect_match,
            headers,
        } => {
            let matched = headers.iter().all(|m| header_matches(m, request));
            if matched == *expect_match {
                entry(descriptor_key, descriptor_value)
            } else {
                Produced::Nothing
            }
        }
        Action::QueryParameters {
            query_parameter_name,
            descriptor_key,
            skip_if_absent,
        } => match request.query(query_parameter_name) {
            Some(value) => entry(descriptor_key, &value),
            None => absent(*skip_if_absent),
        },
        Action::QueryParameterValueMatch {
            descriptor_key,
            descriptor_value,
            expect_match,
            query_parameters,
        } => {
            let matched = query_parameters.iter().all(|m| query_matches(m, request));
            if matched == *expect_match {
                entry(descriptor_key, descriptor_value)
            } else {
                Produced::Nothing
            }
        }
    }
}

fn absent(skip_if_absent: bool) -> Produced {
    if skip_if_absent {
        Produced::Skip
    } else {
        Produced::Nothing
    }
}

/// Envoy's `CidrRange` text: the network address and its length
/// (`192.168.1.0/24`, `2001:abcd:ef01:2345::/64`).
fn masked(client: IpAddr, v4: u8, v6: u8) -> String {
    let len = if client.is_ipv4() { v4 } else { v6 };
    // The lengths were checked at load (≤ 32, ≤ 128).
    IpNet::new(client, len).map_or_else(|_| client.to_string(), |net| net.trunc().to_string())
}

/// Envoy's `HeaderUtility::matchHeaders` for one matcher: the header's
/// values joined by `,`; a missing header matches only a `present_match:
/// false` (or an inverted `present_match: true`), unless
/// `treat_missing_header_as_empty`.
fn header_matches(matcher: &HeaderMatcher, request: &Forwarded<'_>) -> bool {
    let values = request.header(&matcher.name);
    let value = if values.is_empty() {
        if !matcher.treat_missing_header_as_empty {
            // Envoy: only a presence test can match a missing header.
            return match matcher.rule {
                HeaderRule::Present(present) => present == matcher.invert_match,
                _ => false,
            };
        }
        String::new()
    } else {
        values.join(",")
    };
    let matched = match &matcher.rule {
        HeaderRule::Present(present) => *present,
        HeaderRule::String(string) => string.matches(&value),
        HeaderRule::Range { start, end } => value
            .parse::<i64>()
            .is_ok_and(|number| *start <= number && number < *end),
    };
    matched != matcher.invert_match
}

fn query_matches(matcher: &QueryParameterMatcher, request: &Forwarded<'_>) -> bool {
    match (request.query(&matcher.name), &matcher.string_match) {
        (None, _) => false,
        (Some(_), None) => true,
        (Some(value), Some(string)) => string.matches(&value),
    }
}
