//! envoyproxy/ratelimit's dynamic metadata (`RESPONSE_DYNAMIC_METADATA`,
//! or `server.response_dynamic_metadata` in the YAML): the RLS answer's
//! `dynamic_metadata` says what was asked and what the rules that let it
//! through carry, for Envoy to route or log on (its `ratelimitToMetadata`
//! in `src/service/ratelimit.go`).
//!
//! ```text
//! { domain:      the request's domain,
//!   descriptors: [ { entries: ["key=value", …],
//!                    limit: "requests_per_unit:N unit:MINUTE"  (when the descriptor has one),
//!                    hitsAddend: N                             (when the descriptor sets one) }, … ],
//!   hitsAddend:  N      (the request's, when not 0),
//!   metadata:    { … }  (when any) }
//! ```
//!
//! `metadata` merges the `metadata:` of the rules of every descriptor not
//! answered OVER_LIMIT, in request order: a key already present keeps its
//! value unless both values are maps, which merge the same way.
//!
//! # Decisions
//!
//! - `limit` is written in protobuf's text form, as Go's `String()`
//!   prints it (fields at their zero value left out), with one space
//!   between fields; Go's printer sometimes adds a second one at random,
//!   so no reader can match on the spacing.
//! - A YAML key that is not a string (a number, a boolean) is written as
//!   text, as Go's `fmt.Sprint` writes it; numbers become protobuf
//!   numbers (`f64`), as `structpb` makes them.

use prost_types::value::Kind;
use prost_types::{ListValue, Struct, Value};

use super::proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use super::proto::envoy::r#type::v3::RateLimitUnit;

/// The part of the metadata known before deciding: what was asked.
#[derive(Debug, Clone)]
pub struct Asked {
    domain: String,
    descriptors: Vec<Value>,
    hits_addend: u32,
}

impl Asked {
    /// What `domain`, `descriptors` and the request's `hits_addend` ask.
    pub fn new(domain: &str, descriptors: &[RateLimitDescriptor], hits_addend: u32) -> Asked {
        Asked {
            domain: domain.to_owned(),
            descriptors: descriptors.iter().map(descriptor).collect(),
            hits_addend,
        }
    }

    /// The metadata, with the `metadata:` of the rules that passed, in
    /// request order.
    pub fn answer<'a>(self, passed: impl IntoIterator<Item = &'a serde_yaml_ng::Value>) -> Struct {
        let mut fields = std::collections::BTreeMap::new();
        fields.insert("domain".to_owned(), string(self.domain));
        fields.insert(
            "descriptors".to_owned(),
            kind(Kind::ListValue(ListValue {
                values: self.descriptors,
            })),
        );
        if self.hits_addend != 0 {
            fields.insert(
                "hitsAddend".to_owned(),
                kind(Kind::NumberValue(f64::from(self.hits_addend))),
            );
        }
        let mut merged = Struct::default();
        for metadata in passed {
            if let Some(Kind::StructValue(source)) = yaml(metadata).kind {
                merge(&mut merged, source);
            }
        }
        if !merged.fields.is_empty() {
            fields.insert("metadata".to_owned(), kind(Kind::StructValue(merged)));
        }
        Struct { fields }
    }
}

/// `s` in protobuf's JSON mapping (a `Struct` is the JSON object it
/// holds), for `POST /json`'s `dynamicMetadata`.
pub fn to_json(s: &Struct) -> serde_json::Value {
    serde_json::Value::Object(
        s.fields
            .iter()
            .map(|(k, v)| (k.clone(), value_json(v)))
            .collect(),
    )
}

fn value_json(value: &Value) -> serde_json::Value {
    use serde_json::Value as J;
    match &value.kind {
        None | Some(Kind::NullValue(_)) => J::Null,
        Some(Kind::NumberValue(n)) => serde_json::Number::from_f64(*n).map_or(J::Null, J::Number),
        Some(Kind::StringValue(s)) => J::String(s.clone()),
        Some(Kind::BoolValue(b)) => J::Bool(*b),
        Some(Kind::StructValue(s)) => to_json(s),
        Some(Kind::ListValue(list)) => J::Array(list.values.iter().map(value_json).collect()),
    }
}

fn kind(kind: Kind) -> Value {
    Value { kind: Some(kind) }
}

fn string(text: String) -> Value {
    kind(Kind::StringValue(text))
}

/// One descriptor as `descriptorToStruct` writes it.
fn descriptor(descriptor: &RateLimitDescriptor) -> Value {
    let mut fields = std::collections::BTreeMap::new();
    let entries = descriptor
        .entries
        .iter()
        .map(|entry| string(format!("{}={}", entry.key, entry.value)))
        .collect();
    fields.insert(
        "entries".to_owned(),
        kind(Kind::ListValue(ListValue { values: entries })),
    );
    if let Some(limit) = &descriptor.limit {
        let mut text = Vec::new();
        if limit.requests_per_unit != 0 {
            text.push(format!("requests_per_unit:{}", limit.requests_per_unit));
        }
        if limit.unit != 0 {
            let unit = RateLimitUnit::try_from(limit.unit)
                .map_or_else(|_| limit.unit.to_string(), |u| u.as_str_name().to_owned());
            text.push(format!("unit:{unit}"));
        }
        fields.insert("limit".to_owned(), string(text.join(" ")));
    }
    if let Some(hits) = descriptor.hits_addend {
        // u64 → f64 as structpb's NewNumberValue(float64(…)).
        #[allow(clippy::cast_precision_loss)]
        let hits = hits as f64;
        fields.insert("hitsAddend".to_owned(), kind(Kind::NumberValue(hits)));
    }
    kind(Kind::StructValue(Struct { fields }))
}

/// `mergeMetadata`: keys of `source` not in `dest` are added; two maps
/// under one key merge; otherwise `dest` keeps its value.
fn merge(dest: &mut Struct, source: Struct) {
    for (key, value) in source.fields {
        match dest.fields.get_mut(&key) {
            None => {
                dest.fields.insert(key, value);
            }
            Some(Value {
                kind: Some(Kind::StructValue(into)),
            }) => {
                if let Some(Kind::StructValue(from)) = value.kind {
                    merge(into, from);
                }
            }
            Some(_) => {}
        }
    }
}

/// A YAML value as protobuf's `Value` (`structpb.NewValue`).
fn yaml(value: &serde_yaml_ng::Value) -> Value {
    use serde_yaml_ng::Value as Y;
    match value {
        Y::Null => kind(Kind::NullValue(0)),
        Y::Bool(b) => kind(Kind::BoolValue(*b)),
        Y::Number(n) => kind(Kind::NumberValue(n.as_f64().unwrap_or(f64::NAN))),
        Y::String(s) => string(s.clone()),
        Y::Sequence(items) => kind(Kind::ListValue(ListValue {
            values: items.iter().map(yaml).collect(),
        })),
        Y::Mapping(map) => kind(Kind::StructValue(Struct {
            fields: map.iter().map(|(k, v)| (key_text(k), yaml(v))).collect(),
        })),
        Y::Tagged(tagged) => yaml(&tagged.value),
    }
}

fn key_text(key: &serde_yaml_ng::Value) -> String {
    use serde_yaml_ng::Value as Y;
    match key {
        Y::String(s) => s.clone(),
        Y::Bool(b) => b.to_string(),
        Y::Number(n) => n.to_string(),
        Y::Null => "<nil>".to_owned(),
        other => serde_yaml_ng::to_string(other)
            .unwrap_or_default()
            .trim_end()
            .to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grpc::proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
        Entry, RateLimitOverride,
    };

    fn field<'a>(s: &'a Struct, key: &str) -> &'a Kind {
        s.fields[key].kind.as_ref().expect("a kind")
    }

    #[test]
    fn writes_lyfts_fields_and_merges_passed_rules_metadata_first_wins() {
        let asked = Asked::new(
            "d",
            &[RateLimitDescriptor {
                entries: vec![Entry {
                    key: "k".into(),
                    value: "v".into(),
                }],
                limit: Some(RateLimitOverride {
                    requests_per_unit: 10,
                    unit: RateLimitUnit::Minute as i32,
                }),
                hits_addend: Some(3),
            }],
            2,
        );
        let a: serde_yaml_ng::Value =
            serde_yaml_ng::from_str("{team: a, nested: {x: 1}, 7: seven}").expect("yaml");
        let b: serde_yaml_ng::Value =
            serde_yaml_ng::from_str("{team: b, nested: {y: true}}").expect("yaml");
        let s = asked.answer([&a, &b]);
        assert_eq!(field(&s, "domain"), &Kind::StringValue("d".into()));
        assert_eq!(field(&s, "hitsAddend"), &Kind::NumberValue(2.0));
        let Kind::ListValue(list) = field(&s, "descriptors") else {
            panic!("a list")
        };
        let Some(Kind::StructValue(one)) = &list.values[0].kind else {
            panic!("a struct")
        };
        assert_eq!(
            field(one, "limit"),
            &Kind::StringValue("requests_per_unit:10 unit:MINUTE".into())
        );
        assert_eq!(field(one, "hitsAddend"), &Kind::NumberValue(3.0));
        let Kind::StructValue(metadata) = field(&s, "metadata") else {
            panic!("a struct")
        };
        assert_eq!(field(metadata, "team"), &Kind::StringValue("a".into()));
        assert_eq!(field(metadata, "7"), &Kind::StringValue("seven".into()));
        let Kind::StructValue(nested) = field(metadata, "nested") else {
            panic!("a struct")
        };
        assert_eq!(field(nested, "x"), &Kind::NumberValue(1.0));
        assert_eq!(field(nested, "y"), &Kind::BoolValue(true));
        // No hits, no metadata: the keys are left out.
        let bare = Asked::new("d", &[], 0).answer([]);
        assert!(!bare.fields.contains_key("hitsAddend"));
        assert!(!bare.fields.contains_key("metadata"));
    }
}
