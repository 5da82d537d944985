//! envoyproxy/ratelimit's example rules and integration scripts, as data
//! shared by the tests that replay them (`lyft` from a YAML file,
//! `lyft_env::replay` from Lyft's environment and config directory).
//! A file as Lyft ships it starts with a document marker (`---`): the
//! YAML-file tests put a `server:` section first and drop it.

// Each user takes a part.
#![allow(dead_code)]

/// envoyproxy/ratelimit's `examples/ratelimit/config/config.yaml`.
pub const CONFIG_YAML: &str = "---
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500

  - key: database
    value: default
    rate_limit:
      unit: second
      requests_per_unit: 500
";

/// envoyproxy/ratelimit's `examples/ratelimit/config/example.yaml`, domain
/// `rl`, as it ships (its `quota_mode` and `metadata` keys included).
pub const EXAMPLE_YAML: &str = "---
domain: rl
descriptors:
  - key: category
    value: account
    rate_limit:
      replaces:
        - name: bkthomps
        - name: fake_name
      unit: minute
      requests_per_unit: 4
  - key: source_cluster
    value: proxy
    descriptors:
      - key: destination_cluster
        value: bkthomps
        rate_limit:
          replaces:
            - name: bkthomps
          unit: minute
          requests_per_unit: 2
      - key: destination_cluster
        value: mock
        rate_limit:
          unit: minute
          requests_per_unit: 1
      - key: destination_cluster
        value: override
        rate_limit:
          replaces:
            - name: banned_limit
          unit: minute
          requests_per_unit: 2
      - key: destination_cluster
        value: fake
        rate_limit:
          name: fake_name
          unit: minute
          requests_per_unit: 2
  - key: foo
    rate_limit:
      unit: minute
      requests_per_unit: 2
    descriptors:
      - key: bar
        rate_limit:
          unit: minute
          requests_per_unit: 3
      - key: bar
        value: bkthomps
        rate_limit:
          name: bkthomps
          unit: minute
          requests_per_unit: 1
      - key: bar
        value: banned
        rate_limit:
          name: banned_limit
          unit: minute
          requests_per_unit: 0
      - key: baz
        rate_limit:
          unit: second
          requests_per_unit: 1
      - key: baz
        value: not-so-shady
        rate_limit:
          unit: minute
          requests_per_unit: 3
      - key: baz
        value: shady
        rate_limit:
          unit: minute
          requests_per_unit: 3
        shadow_mode: true
      - key: bay
        rate_limit:
          unlimited: true
  - key: unspec
    detailed_metric: true
    rate_limit:
      unit: minute
      requests_per_unit: 2
  - key: qux
    rate_limit:
      unlimited: true
  - key: service
    value: service_1
    quota_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 1
    metadata:
      service_with_quota:
        name: \"service_1\"
  - key: service
    value: service_2
    quota_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 2
    metadata:
      service_with_quota:
        name: \"service_2\"
";

/// The descriptors Envoy sends for `examples/envoy/proxy.yaml`'s routes
/// (a descriptor whose headers are not all present is not sent).
pub fn route(headers: &[(&'static str, &'static str)]) -> Vec<Vec<(&'static str, &'static str)>> {
    let get = |name: &str| headers.iter().find(|(k, _)| *k == name).copied();
    let actions: &[&[&str]] = &[
        &["foo", "bar"],
        &["foo", "baz"],
        &["source_cluster", "destination_cluster"],
        &["category"],
        &["unspec"],
    ];
    actions
        .iter()
        .filter_map(|keys| keys.iter().map(|k| get(k)).collect::<Option<Vec<_>>>())
        .collect()
}

/// Headers of one scripted call to Envoy, and whether Envoy answers 429.
pub type Call = (&'static [(&'static str, &'static str)], bool);

pub const BANNED: &[(&str, &str)] = &[("foo", "bkthomps"), ("bar", "banned")];
pub const MOCK: &[(&str, &str)] = &[
    ("foo", "bkthomps"),
    ("bar", "banned"),
    ("source_cluster", "proxy"),
    ("destination_cluster", "mock"),
];
pub const OVERRIDE: &[(&str, &str)] = &[
    ("foo", "bkthomps"),
    ("bar", "banned"),
    ("source_cluster", "proxy"),
    ("destination_cluster", "override"),
];
pub const BKTHOMPS: &[(&str, &str)] = &[
    ("foo", "my_foo"),
    ("bar", "bkthomps"),
    ("source_cluster", "proxy"),
    ("destination_cluster", "bkthomps"),
];
pub const NOT_BKTHOMPS: &[(&str, &str)] = &[
    ("foo", "my_foo"),
    ("bar", "bkthomps"),
    ("source_cluster", "proxy"),
    ("destination_cluster", "not_bkthomps"),
];
pub const FIVE: &[(&str, &str)] = &[
    ("foo", "my_foo"),
    ("bar", "bkthomps"),
    ("source_cluster", "proxy"),
    ("destination_cluster", "fake"),
    ("category", "account"),
];
pub const FOO_2: &[(&str, &str)] = &[("foo", "foo_2"), ("bar", "bkthomps")];
pub const FOO_3: &[(&str, &str)] = &[
    ("foo", "foo_3"),
    ("bar", "bar_3"),
    ("source_cluster", "proxy"),
    ("destination_cluster", "fake"),
];
pub const PELLE: &[(&str, &str)] = &[("foo", "pelle"), ("baz", "not-so-shady")];
pub const UNSPEC: &[(&str, &str)] = &[("unspec", "unspecified_value")];

/// envoyproxy/ratelimit's `integration-test/scripts/replaces.sh`,
/// `trigger-ratelimit.sh` and `value-included-in-stats-key-when-unspecified.sh`
/// against its `example.yaml`, call for call: `(headers, limited)`, where
/// limited means the overall answer is OVER_LIMIT (Envoy's 429). The
/// descriptors Envoy sends for each call are [`route`]'s.
pub const SCRIPT: &[Call] = &[
    // replaces.sh: replaces increases the limit.
    (BANNED, true),
    (MOCK, true),
    (OVERRIDE, false),
    (OVERRIDE, false),
    (OVERRIDE, true),
    // replaces does not affect the original limit.
    (BKTHOMPS, false),
    (BKTHOMPS, false),
    (BKTHOMPS, true),
    (NOT_BKTHOMPS, false),
    (NOT_BKTHOMPS, true),
    (BKTHOMPS, true),
    // replaces can replace several limits.
    (FIVE, false),
    (FIVE, false),
    (FIVE, false),
    (FIVE, false),
    (FIVE, true),
    (FOO_2, false),
    (FOO_2, true),
    (FOO_3, false),
    (FOO_3, false),
    (FOO_3, true),
    (FIVE, true),
    // trigger-ratelimit.sh.
    (PELLE, false),
    (PELLE, false),
    (PELLE, false),
    (PELLE, true),
    // value-included-in-stats-key-when-unspecified.sh.
    (UNSPEC, false),
    (UNSPEC, false),
    (UNSPEC, true),
];

/// envoyproxy/ratelimit's `integration-test/scripts/quota.sh`: the `/quota`
/// route sends `(service: service_1)` and `(service: service_2)`, both in
/// `quota_mode` (1 and 2 per minute): the request is over the limit only
/// when both are.
pub const QUOTA_SCRIPT: &[bool] = &[false, false, true];

/// The descriptors of `/quota`.
pub const QUOTA_DESCRIPTORS: &[&[(&str, &str)]] =
    &[&[("service", "service_1")], &[("service", "service_2")]];
