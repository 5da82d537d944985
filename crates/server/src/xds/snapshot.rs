//! One xDS snapshot (every `RateLimitConfig` of a response) into the
//! checked domains the YAML file produces.
//!
//! Each resource is written as the one-domain YAML document
//! envoyproxy/ratelimit would read (its `ConfigXdsProtoToYaml` does the
//! same) and read by [`Config::from_yaml`]: the same keys, the same checks,
//! the same errors as a file, so that the service never learns which door
//! a rule came through. The domains are then put together as
//! envoyproxy/ratelimit's loader does (see the [module docs](super),
//! "Decisions").

use std::path::Path;

use prost::Message;
use serde_yaml_ng::{Mapping, Value};

use super::proto::ratelimit::config::ratelimit::v3::{
    RateLimitConfig, RateLimitDescriptor, RateLimitPolicy, RateLimitUnit,
};
use crate::config::{Config, DomainConfig};

/// The type URL of envoyproxy/ratelimit's resource.
pub const RATE_LIMIT_CONFIG_TYPE: &str =
    "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";

/// Why a snapshot was refused (sent back in the NACK's `error_detail`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SnapshotError(String);

/// The domains of a snapshot's resources, checked whole.
///
/// # Errors
///
/// A resource of another type, one that does not decode, one the YAML
/// file's checks refuse (named by its resource name), or a domain named by
/// two resources without `merge`.
pub fn snapshot_domains(
    resources: &[prost_types::Any],
    merge: bool,
) -> Result<Vec<DomainConfig>, SnapshotError> {
    let mut domains: Vec<(String, DomainConfig)> = Vec::new();
    for (i, any) in resources.iter().enumerate() {
        if any.type_url != RATE_LIMIT_CONFIG_TYPE {
            return Err(SnapshotError(format!(
                "resources[{i}]: type '{}', expected '{RATE_LIMIT_CONFIG_TYPE}'",
                any.type_url
            )));
        }
        let resource = RateLimitConfig::decode(any.value.as_slice())
            .map_err(|error| SnapshotError(format!("resources[{i}]: {error}")))?;
        let name = if resource.name.is_empty() {
            format!("resources[{i}]")
        } else {
            format!("'{}'", resource.name)
        };
        let domain = resource_domain(&resource)
            .map_err(|error| SnapshotError(format!("resource {name}: {error}")))?;
        match domains.iter_mut().find(|(_, d)| d.domain == domain.domain) {
            None => domains.push((name, domain)),
            Some((first, _)) if !merge => {
                return Err(SnapshotError(format!(
                    "resource {name}: duplicate domain '{}' (also in resource {first}; MERGE_DOMAIN_CONFIG merges them)",
                    domain.domain
                )));
            }
            Some((first, merged)) => {
                for descriptor in domain.descriptors {
                    if merged
                        .descriptors
                        .iter()
                        .any(|d| d.key == descriptor.key && d.value == descriptor.value)
                    {
                        return Err(SnapshotError(format!(
                            "resource {name}: duplicate descriptor key '{}'{} in domain '{}' (also in resource {first})",
                            descriptor.key,
                            descriptor
                                .value
                                .as_ref()
                                .map(|v| format!(" value '{v}'"))
                                .unwrap_or_default(),
                            merged.domain
                        )));
                    }
                    merged.descriptors.push(descriptor);
                }
            }
        }
    }
    Ok(domains.into_iter().map(|(_, domain)| domain).collect())
}

/// One resource's domain, read as the YAML file would be.
fn resource_domain(resource: &RateLimitConfig) -> Result<DomainConfig, String> {
    let mut root = Mapping::new();
    root.insert("domain".into(), resource.domain.clone().into());
    root.insert("descriptors".into(), descriptors(&resource.descriptors));
    let text = serde_yaml_ng::to_string(&Value::Mapping(root)).map_err(|e| e.to_string())?;
    // The message only: the lines are those of a document nobody wrote.
    let config = Config::from_yaml(Path::new("xds"), &text).map_err(|e| e.message().to_owned())?;
    config
        .domains
        .into_iter()
        .next()
        .ok_or_else(|| "no domain".to_owned())
}

fn descriptors(list: &[RateLimitDescriptor]) -> Value {
    Value::Sequence(list.iter().map(descriptor).collect())
}

fn descriptor(d: &RateLimitDescriptor) -> Value {
    let mut map = Mapping::new();
    map.insert("key".into(), d.key.clone().into());
    if !d.value.is_empty() {
        map.insert("value".into(), d.value.clone().into());
    }
    if let Some(policy) = &d.rate_limit {
        map.insert("rate_limit".into(), rate_limit(policy));
    }
    if !d.descriptors.is_empty() {
        map.insert("descriptors".into(), descriptors(&d.descriptors));
    }
    for (key, on) in [
        ("shadow_mode", d.shadow_mode),
        ("detailed_metric", d.detailed_metric),
        // Passed on, never dropped: the YAML door gives it its meaning or
        // refuses it.
        ("quota_mode", d.quota_mode),
    ] {
        if on {
            map.insert(key.into(), true.into());
        }
    }
    if let Some(metadata) = d.metadata.as_ref().filter(|m| !m.fields.is_empty()) {
        map.insert("metadata".into(), structure(metadata));
    }
    Value::Mapping(map)
}

fn rate_limit(policy: &RateLimitPolicy) -> Value {
    let mut map = Mapping::new();
    let unit = match RateLimitUnit::try_from(policy.unit) {
        Ok(RateLimitUnit::Unknown) => None,
        Ok(unit) => Some(unit.as_str_name().to_owned()),
        // An enum number this proto does not know: refused by the unit
        // check, with the number shown.
        Err(_) => Some(format!("unit number {}", policy.unit)),
    };
    if policy.unlimited {
        map.insert("unlimited".into(), true.into());
        // envoyproxy/ratelimit refuses a unit with `unlimited` and ignores
        // `requests_per_unit` there.
        if let Some(unit) = unit {
            map.insert("unit".into(), unit.into());
        }
    } else {
        // Absent: refused by the YAML check (`unit: missing`), as
        // envoyproxy/ratelimit refuses an unknown unit.
        if let Some(unit) = unit {
            map.insert("unit".into(), unit.into());
        }
        map.insert(
            "requests_per_unit".into(),
            u64::from(policy.requests_per_unit).into(),
        );
        // Counted as envoyproxy/ratelimit counts (module docs).
        map.insert("algorithm".into(), "fixed_window".into());
    }
    if !policy.name.is_empty() {
        map.insert("name".into(), policy.name.clone().into());
    }
    if !policy.replaces.is_empty() {
        let replaces = policy
            .replaces
            .iter()
            .map(|r| {
                let mut entry = Mapping::new();
                entry.insert("name".into(), r.name.clone().into());
                Value::Mapping(entry)
            })
            .collect();
        map.insert("replaces".into(), Value::Sequence(replaces));
    }
    Value::Mapping(map)
}

fn structure(s: &prost_types::Struct) -> Value {
    Value::Mapping(
        s.fields
            .iter()
            .map(|(key, value)| (Value::from(key.clone()), protobuf_value(value)))
            .collect(),
    )
}

fn protobuf_value(value: &prost_types::Value) -> Value {
    use prost_types::value::Kind;
    match &value.kind {
        None | Some(Kind::NullValue(_)) => Value::Null,
        Some(Kind::NumberValue(n)) => (*n).into(),
        Some(Kind::StringValue(s)) => s.clone().into(),
        Some(Kind::BoolValue(b)) => (*b).into(),
        Some(Kind::StructValue(s)) => structure(s),
        Some(Kind::ListValue(list)) => {
            Value::Sequence(list.values.iter().map(protobuf_value).collect())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{AlgorithmKind, LimitConfig};
    use crate::xds::proto::ratelimit::config::ratelimit::v3::RateLimitReplace;

    fn any(resource: &RateLimitConfig) -> prost_types::Any {
        prost_types::Any {
            type_url: RATE_LIMIT_CONFIG_TYPE.into(),
            value: resource.encode_to_vec(),
        }
    }

    fn limited(key: &str, value: &str, unit: RateLimitUnit, n: u32) -> RateLimitDescriptor {
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

    fn resource(
        name: &str,
        domain: &str,
        descriptors: Vec<RateLimitDescriptor>,
    ) -> RateLimitConfig {
        RateLimitConfig {
            name: name.into(),
            domain: domain.into(),
            descriptors,
        }
    }

    #[test]
    fn a_resource_reads_as_the_same_yaml_would() {
        let mut nested = limited("user", "", RateLimitUnit::Minute, 5);
        nested.rate_limit.as_mut().unwrap().name = "per-user".into();
        nested.rate_limit.as_mut().unwrap().replaces = vec![RateLimitReplace {
            name: "global".into(),
        }];
        let mut top = limited("path", "/login", RateLimitUnit::Second, 10);
        top.descriptors = vec![nested];
        top.shadow_mode = true;
        let unlimited = RateLimitDescriptor {
            key: "plan".into(),
            value: "internal".into(),
            rate_limit: Some(RateLimitPolicy {
                unlimited: true,
                requests_per_unit: 7,
                ..RateLimitPolicy::default()
            }),
            ..RateLimitDescriptor::default()
        };
        let domains =
            snapshot_domains(&[any(&resource("a", "api", vec![top, unlimited]))], false).unwrap();
        let yaml = Config::from_yaml(
            Path::new("same.yaml"),
            "domain: api
descriptors:
  - key: path
    value: /login
    shadow_mode: true
    rate_limit: {unit: SECOND, requests_per_unit: 10, algorithm: fixed_window}
    descriptors:
      - key: user
        rate_limit:
          unit: minute
          requests_per_unit: 5
          algorithm: fixed_window
          name: per-user
          replaces: [{name: global}]
  - key: plan
    value: internal
    rate_limit: {unlimited: true}
",
        )
        .unwrap();
        assert_eq!(domains, yaml.domains);
        match &domains[0].descriptors[0].limit {
            Some(LimitConfig::Limited { limits, .. }) => {
                assert_eq!(limits.algorithm.kinds(), [AlgorithmKind::FixedWindow]);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_bad_resource_is_refused_by_name() {
        let bad = resource(
            "bad",
            "api",
            vec![limited("k", "", RateLimitUnit::Unknown, 3)],
        );
        let error = snapshot_domains(&[any(&bad)], false).unwrap_err();
        assert!(error.to_string().starts_with("resource 'bad': "), "{error}");
        assert!(error.to_string().contains("unit"), "{error}");

        let mut unlimited_with_unit = limited("k", "", RateLimitUnit::Second, 0);
        unlimited_with_unit.rate_limit.as_mut().unwrap().unlimited = true;
        let bad = resource("u", "api", vec![unlimited_with_unit]);
        assert!(snapshot_domains(&[any(&bad)], false).is_err());

        let empty_domain = resource("e", "", vec![]);
        assert!(snapshot_domains(&[any(&empty_domain)], false).is_err());

        let other = prost_types::Any {
            type_url: "type.googleapis.com/envoy.config.cluster.v3.Cluster".into(),
            value: vec![],
        };
        assert!(snapshot_domains(&[other], false).is_err());
        let garbage = prost_types::Any {
            type_url: RATE_LIMIT_CONFIG_TYPE.into(),
            value: vec![0xff, 0xff],
        };
        assert!(snapshot_domains(&[garbage], false).is_err());
    }

    #[test]
    fn a_domain_twice_is_refused_unless_merged() {
        let first = resource(
            "one",
            "api",
            vec![limited("a", "", RateLimitUnit::Second, 1)],
        );
        let second = resource(
            "two",
            "api",
            vec![limited("b", "", RateLimitUnit::Second, 2)],
        );
        let snapshot = [any(&first), any(&second)];
        let error = snapshot_domains(&snapshot, false).unwrap_err();
        assert!(
            error.to_string().contains("duplicate domain 'api'"),
            "{error}"
        );
        let merged = snapshot_domains(&snapshot, true).unwrap();
        assert_eq!(merged.len(), 1);
        let keys: Vec<_> = merged[0]
            .descriptors
            .iter()
            .map(|d| d.key.as_str())
            .collect();
        assert_eq!(keys, ["a", "b"]);
        // Merged, one descriptor given twice is still refused.
        let again = resource(
            "three",
            "api",
            vec![limited("a", "", RateLimitUnit::Minute, 9)],
        );
        let error = snapshot_domains(&[any(&first), any(&again)], true).unwrap_err();
        assert!(
            error.to_string().contains("duplicate descriptor key 'a'"),
            "{error}"
        );
    }

    #[test]
    fn quota_mode_means_what_the_yaml_door_says() {
        let mut quota = limited("k", "", RateLimitUnit::Second, 1);
        quota.quota_mode = true;
        let xds = snapshot_domains(&[any(&resource("q", "api", vec![quota]))], false);
        let yaml = Config::from_yaml(
            Path::new("q.yaml"),
            "domain: api\ndescriptors:\n  - key: k\n    quota_mode: true\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: fixed_window}\n",
        );
        // Never dropped: accepted with the file's meaning, or refused as
        // the file is.
        match (xds, yaml) {
            (Ok(xds), Ok(yaml)) => assert_eq!(xds, yaml.domains),
            (Err(xds), Err(yaml)) => {
                assert!(xds.to_string().contains("quota_mode"), "{xds}");
                assert!(yaml.message().contains("quota_mode"), "{yaml}");
            }
            (xds, yaml) => panic!("the doors disagree: {xds:?} / {yaml:?}"),
        }
    }

    #[test]
    fn an_empty_snapshot_has_no_domains() {
        assert_eq!(snapshot_domains(&[], false).unwrap(), []);
    }
}
