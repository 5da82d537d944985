//! The loaded rules and envoyproxy/ratelimit's matching.
//!
//! # Matching
//!
//! A request descriptor `[(k1, v1), (k2, v2), …]` walks its domain's tree
//! one entry at a time. At each level the node for `(k, v)` is taken if the
//! file has one; else the first node whose value holds a `*` and matches
//! `v` (in file order; each `*` matches any run of characters, empty
//! included, anywhere in the value: `value*`, `/api/*/action`,
//! `/api/*/resource/*/action`, as envoyproxy/ratelimit); else the
//! value-less node for `k`. There is
//! no backtracking. The descriptor's rule is the limit of the node reached by
//! its *last* entry: a descriptor shorter or longer than the path to a limit
//! has no limit, and neither has an unknown domain (envoyproxy/ratelimit's
//! `GetLimit`). Where envoyproxy/ratelimit joins key and value with `_`
//! (so that `a_b`/`c` and `a`/`b_c` collide), this tree keys on the pair.
//!
//! # Buckets
//!
//! A rule counts one bucket per distinct list of request values: a
//! value-less or wildcard node gives every value its own bucket, as in
//! envoyproxy/ratelimit, except a wildcard node with `share_threshold:
//! true`, whose values all count as the pattern itself (one bucket shared
//! by every matching value, also when the limit is deeper in the tree, as
//! envoyproxy/ratelimit). The bucket key is the entries, length-prefixed, so
//! that no two lists share a key.
//!
//! # Identity
//!
//! A rule is named by its path, `domain.key_value.key` (envoyproxy/ratelimit's
//! stat key), which is also how a reload recognises the same rule.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

use crate::config::actions::ForwardAuthConfig;
use crate::config::budget::BudgetConfig;
use crate::config::{
    ConcurrencyConfig, Config, DescriptorConfig, LimitConfig, Limits, QuotaConfig,
};

/// One configured limit, at one node of a domain's tree.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// The rule's path: `domain.key_value.key`.
    pub id: Arc<str>,
    /// The domain.
    pub domain: String,
    /// The entries leading to it; `None` values match any value.
    pub path: Vec<(String, Option<String>)>,
    /// The name given in the file, if any.
    pub name: Option<String>,
    /// Decide and count, but answer OK.
    pub shadow_mode: bool,
    /// envoyproxy/ratelimit's `quota_mode`: over this limit, the request is
    /// over the limit only if every quota-mode descriptor of it is (see
    /// [`crate::request::Outcome::is_over_limit`]).
    pub quota_mode: bool,
    /// `None` for `unlimited`, and for `blocked`.
    pub limits: Option<Limits>,
    /// `requests_per_unit: 0`: every request over this limit, nothing
    /// counted.
    pub blocked: Option<QuotaConfig>,
    /// A request's `limit` override, not a rule of the file (see
    /// [`crate::service`]): backends keep its buckets apart from the
    /// installed rules'.
    pub dynamic: bool,
    /// The names of the rules this one replaces when both match in one
    /// request (envoyproxy/ratelimit's `replaces`, see [`crate::service`]).
    pub replaces: Vec<String>,
    /// Per entry of the path: whether the request's value names
    /// envoyproxy/ratelimit's metrics (`detailed_metric` on the rule: every
    /// entry; `value_to_metric` on a node: its entry; never an entry under
    /// `share_threshold`, named by its pattern). See [`crate::metrics`].
    pub metric_values: Vec<bool>,
    /// The rule's concurrency limit, if any (see [`crate::concurrency`]).
    pub concurrency: Option<ConcurrencyConfig>,
    /// The rule's limits are a budget of this unit, charged what was spent
    /// (see [`crate::config::budget`]); `None`: a gate.
    pub budget: Option<BudgetConfig>,
    /// envoyproxy/ratelimit's `metadata` of the rule's node, sent in the
    /// RLS answer's dynamic metadata when that is on ([`crate::grpc`]).
    pub metadata: Option<serde_yaml_ng::Value>,
}

impl Rule {
    /// envoyproxy/ratelimit's `key1` / `key2` for a request's entries, when
    /// the rule names its metrics by request values (`None` otherwise: the
    /// rule's own labels).
    pub fn metric_keys<'a>(
        &self,
        entries: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Option<(String, String)> {
        let mut parts = self.metric_parts(entries)?.into_iter();
        let key1 = parts.next().unwrap_or_default();
        let key2 = parts.next().unwrap_or_default();
        Some((key1, key2))
    }

    /// envoyproxy/ratelimit's stat key parts (`key_value`, or `key`) for a
    /// request's entries, when the rule names its metrics by request values
    /// (`None` otherwise: the rule's own key, see
    /// [`crate::metrics::lyft_rule_key`]).
    pub fn metric_parts<'a>(
        &self,
        entries: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Option<Vec<String>> {
        if !self.metric_values.iter().any(|&v| v) {
            return None;
        }
        let parts = entries
            .into_iter()
            .zip(self.path.iter().zip(&self.metric_values))
            .map(
                |((key, value), ((_, configured), &by_value))| match (by_value, configured) {
                    (true, _) => format!("{key}_{value}"),
                    (false, Some(configured)) => format!("{key}_{configured}"),
                    (false, None) => key.to_owned(),
                },
            )
            .collect();
        Some(parts)
    }
}

impl Rule {
    /// The most one request may cost under this rule (`u64::MAX` when
    /// unlimited).
    pub fn capacity(&self) -> u64 {
        self.limits
            .as_ref()
            .map_or(u64::MAX, |limits| limits.algorithm.capacity())
    }
}

#[derive(Default, Debug, Clone)]
struct Node {
    rule: Option<Arc<Rule>>,
    /// `share_threshold`: the wildcard pattern every matching value counts
    /// as in bucket keys.
    share: Option<String>,
    /// Children by entry key.
    children: HashMap<String, Branch>,
}

#[derive(Default, Debug, Clone)]
struct Branch {
    exact: HashMap<String, Node>,
    /// `(pattern, node)` for values holding a `*`, in file order.
    wildcards: Vec<(String, Node)>,
    any: Option<Box<Node>>,
}

impl Branch {
    fn find(&self, value: &str) -> Option<&Node> {
        if let Some(node) = self.exact.get(value) {
            return Some(node);
        }
        if let Some((_, node)) = self
            .wildcards
            .iter()
            .find(|(pattern, _)| glob_matches(pattern, value))
        {
            return Some(node);
        }
        self.any.as_deref()
    }
}

/// Every domain's tree, and the list of rules.
#[derive(Debug, Default)]
pub struct RuleSet {
    domains: HashMap<String, Node>,
    rules: Vec<Arc<Rule>>,
    /// Each domain's forward-auth actions, swapped with its rules.
    forward_auth: HashMap<String, Arc<ForwardAuthConfig>>,
}

impl RuleSet {
    /// Builds the trees of `config`.
    pub fn new(config: &Config) -> RuleSet {
        let mut set = RuleSet::default();
        for domain in &config.domains {
            let mut root = Node::default();
            let mut path = Vec::new();
            let mut metric_values = Vec::new();
            for descriptor in &domain.descriptors {
                insert(
                    &mut root,
                    &domain.domain,
                    (&mut path, &mut metric_values),
                    descriptor,
                    &mut set.rules,
                );
            }
            set.domains.insert(domain.domain.clone(), root);
            if let Some(forward_auth) = &domain.forward_auth {
                set.forward_auth
                    .insert(domain.domain.clone(), Arc::clone(forward_auth));
            }
        }
        set
    }

    /// The forward-auth actions of `domain`, if it has a `forward_auth:`
    /// section ([`crate::http::forward_auth`]).
    pub fn forward_auth(&self, domain: &str) -> Option<&Arc<ForwardAuthConfig>> {
        self.forward_auth.get(domain)
    }

    /// Whether the configuration names `domain` (with or without rules).
    pub fn has_domain(&self, domain: &str) -> bool {
        self.domains.contains_key(domain)
    }

    /// Every rule, in file order.
    pub fn rules(&self) -> &[Arc<Rule>] {
        &self.rules
    }

    /// The rule for a request descriptor, if any.
    pub fn find<'a>(
        &'a self,
        domain: &str,
        entries: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Option<&'a Arc<Rule>> {
        self.find_bucket(domain, entries).map(|(rule, _)| rule)
    }

    /// The rule for a request descriptor, if any, and the descriptor's
    /// bucket under it (see the module docs: [`bucket_key`] of the entries,
    /// where a value matched by a `share_threshold` wildcard counts as the
    /// pattern).
    pub fn find_bucket<'a>(
        &'a self,
        domain: &str,
        entries: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Option<(&'a Arc<Rule>, String)> {
        let mut node = self.domains.get(domain)?;
        let mut any = false;
        let mut key = String::new();
        for (k, value) in entries {
            node = node.children.get(k)?.find(value)?;
            push_entry(&mut key, k, node.share.as_deref().unwrap_or(value));
            any = true;
        }
        if any {
            node.rule.as_ref().map(|rule| (rule, key))
        } else {
            None
        }
    }
}

impl RuleSet {
    /// A copy of these rules where the rule `id` runs `limits` instead (the
    /// admin API's run-time change, [`crate::http::admin`]): the same tree, every
    /// other rule the same `Arc`. `None` if no rule has that id.
    pub fn with_limits(&self, id: &str, limits: Limits) -> Option<RuleSet> {
        let old = self.rules.iter().find(|rule| &*rule.id == id)?;
        let new = Arc::new(Rule {
            limits: Some(limits),
            blocked: None,
            ..Rule::clone(old)
        });
        let mut set = RuleSet {
            forward_auth: self.forward_auth.clone(),
            domains: self.domains.clone(),
            rules: self
                .rules
                .iter()
                .map(|rule| Arc::clone(if Arc::ptr_eq(rule, old) { &new } else { rule }))
                .collect(),
        };
        for root in set.domains.values_mut() {
            root.replace(old, &new);
        }
        Some(set)
    }
}

impl Node {
    fn replace(&mut self, old: &Arc<Rule>, new: &Arc<Rule>) {
        if self
            .rule
            .as_ref()
            .is_some_and(|rule| Arc::ptr_eq(rule, old))
        {
            self.rule = Some(Arc::clone(new));
        }
        for branch in self.children.values_mut() {
            for node in branch.exact.values_mut() {
                node.replace(old, new);
            }
            for (_, node) in &mut branch.wildcards {
                node.replace(old, new);
            }
            if let Some(node) = &mut branch.any {
                node.replace(old, new);
            }
        }
    }
}

/// One entry of a rule's path: the key, and the value if the file gives one.
type PathEntry = (String, Option<String>);

fn insert(
    parent: &mut Node,
    domain: &str,
    (path, metric_values): (&mut Vec<PathEntry>, &mut Vec<(bool, bool)>),
    descriptor: &DescriptorConfig,
    rules: &mut Vec<Arc<Rule>>,
) {
    path.push((descriptor.key.clone(), descriptor.value.clone()));
    // (value_to_metric, share_threshold): a shared entry is named by its
    // pattern, as envoyproxy/ratelimit.
    metric_values.push((descriptor.value_to_metric, descriptor.share_threshold));
    let branch = parent.children.entry(descriptor.key.clone()).or_default();
    let node = match &descriptor.value {
        None => branch.any.get_or_insert_with(Box::default).as_mut(),
        Some(value) if value.contains('*') => {
            let share = descriptor.share_threshold.then(|| value.clone());
            branch.wildcards.push((
                value.clone(),
                Node {
                    share,
                    ..Node::default()
                },
            ));
            let last = branch.wildcards.len() - 1;
            &mut branch.wildcards[last].1
        }
        Some(value) => branch.exact.entry(value.clone()).or_default(),
    };
    if descriptor.limit.is_some() || descriptor.concurrency.is_some() {
        // A node with only `concurrency:` is a rule with no rate limit.
        let (name, limits, blocked) = match &descriptor.limit {
            None => (None, None, None),
            Some(LimitConfig::Unlimited { name }) => (name.clone(), None, None),
            Some(LimitConfig::Blocked { name, quota }) => (name.clone(), None, Some(*quota)),
            Some(LimitConfig::Limited { name, limits }) => {
                (name.clone(), Some(limits.clone()), None)
            }
        };
        let rule = Arc::new(Rule {
            id: rule_id(domain, path).into(),
            domain: domain.to_owned(),
            path: path.clone(),
            name,
            shadow_mode: descriptor.shadow_mode,
            quota_mode: descriptor.quota_mode,
            limits,
            blocked,
            dynamic: false,
            replaces: descriptor.replaces.clone(),
            metric_values: metric_values
                .iter()
                .map(|&(by_value, shared)| (by_value || descriptor.detailed_metric) && !shared)
                .collect(),
            concurrency: descriptor.concurrency,
            budget: descriptor.budget.clone(),
            metadata: descriptor.metadata.clone(),
        });
        rules.push(Arc::clone(&rule));
        node.rule = Some(rule);
    }
    for child in &descriptor.descriptors {
        insert(node, domain, (path, metric_values), child, rules);
    }
    path.pop();
    metric_values.pop();
}

/// Whether `value` matches `pattern`, where each `*` matches any run of
/// characters (empty included) and everything else matches itself.
///
/// Greedy with one back-track point (the last `*`): linear in practice and
/// at most `pattern.len() * value.len()` steps, both bounded by
/// `max_key_bytes` and the file.
pub fn glob_matches(pattern: &str, value: &str) -> bool {
    let (p, v) = (pattern.as_bytes(), value.as_bytes());
    let (mut i, mut j) = (0, 0);
    // After the last `*` seen: where in the pattern, and the value position
    // it is currently taken to end at.
    let mut star: Option<(usize, usize)> = None;
    while j < v.len() {
        if i < p.len() && p[i] == b'*' {
            star = Some((i + 1, j));
            i += 1;
        } else if i < p.len() && p[i] == v[j] {
            i += 1;
            j += 1;
        } else if let Some((after, taken)) = star {
            // Let the last `*` take one more byte.
            star = Some((after, taken + 1));
            i = after;
            j = taken + 1;
        } else {
            return false;
        }
    }
    p[i..].iter().all(|&b| b == b'*')
}

fn rule_id(domain: &str, path: &[(String, Option<String>)]) -> String {
    let mut id = domain.to_owned();
    for (key, value) in path {
        id.push('.');
        id.push_str(key);
        if let Some(value) = value {
            id.push('_');
            id.push_str(value);
        }
    }
    id
}

/// The bucket of a request descriptor under its rule: its entries,
/// length-prefixed.
pub fn bucket_key<'a>(entries: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let mut key = String::new();
    for (k, v) in entries {
        push_entry(&mut key, k, v);
    }
    key
}

/// The entries of a [`bucket_key`], in order (`None` for a string that is
/// not one): what a backend that names keys by the entries themselves
/// (envoyproxy/ratelimit's layout) reads back.
pub fn bucket_entries(key: &str) -> Option<Vec<(&str, &str)>> {
    fn field(rest: &str) -> Option<(&str, &str)> {
        let (len, rest) = rest.split_once(':')?;
        let len: usize = len.parse().ok()?;
        (rest.is_char_boundary(len) && rest.len() >= len).then(|| rest.split_at(len))
    }
    let mut entries = Vec::new();
    let mut rest = key;
    while !rest.is_empty() {
        let (k, after) = field(rest)?;
        let (v, after) = field(after)?;
        entries.push((k, v));
        rest = after;
    }
    Some(entries)
}

fn push_entry(key: &mut String, k: &str, v: &str) {
    // Writing to a String cannot fail.
    let _ = write!(key, "{}:{k}{}:{v}", k.len(), v.len());
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn set(yaml: &str) -> RuleSet {
        RuleSet::new(&Config::from_yaml(Path::new("t.yaml"), yaml).unwrap())
    }

    fn find<'a>(set: &'a RuleSet, domain: &str, entries: &[(&'a str, &'a str)]) -> Option<&'a str> {
        set.find(domain, entries.iter().copied())
            .map(|rule| &*rule.id)
    }

    const TREE: &str = "
domain: d
descriptors:
  - key: k1
    value: v1
    rate_limit: {unit: second, requests_per_unit: 1}
    descriptors:
      - key: k2
        rate_limit: {unit: second, requests_per_unit: 2}
      - key: k2
        value: special
        rate_limit: {unlimited: true}
  - key: k1
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: path
    value: /api/*
    rate_limit: {unit: second, requests_per_unit: 4}
  - key: only_parent
    value: x
    descriptors:
      - key: child
        rate_limit: {unit: second, requests_per_unit: 5}
";

    #[test]
    fn envoy_matching() {
        let s = set(TREE);
        assert_eq!(find(&s, "d", &[("k1", "v1")]), Some("d.k1_v1"));
        assert_eq!(find(&s, "d", &[("k1", "other")]), Some("d.k1"));
        assert_eq!(
            find(&s, "d", &[("k1", "v1"), ("k2", "any")]),
            Some("d.k1_v1.k2")
        );
        assert_eq!(
            find(&s, "d", &[("k1", "v1"), ("k2", "special")]),
            Some("d.k1_v1.k2_special")
        );
        // Longer than the tree: no limit.
        assert_eq!(find(&s, "d", &[("k1", "other"), ("k2", "x")]), None);
        assert_eq!(
            find(&s, "d", &[("k1", "v1"), ("k2", "a"), ("k3", "b")]),
            None
        );
        // Stops at a node without a limit.
        assert_eq!(find(&s, "d", &[("only_parent", "x")]), None);
        assert_eq!(
            find(&s, "d", &[("only_parent", "x"), ("child", "c")]),
            Some("d.only_parent_x.child")
        );
        assert_eq!(
            find(&s, "d", &[("path", "/api/users")]),
            Some("d.path_/api/*")
        );
        assert_eq!(find(&s, "d", &[("path", "/web")]), None);
        assert_eq!(find(&s, "other", &[("k1", "v1")]), None);
        assert_eq!(find(&s, "d", &[]), None);
        assert_eq!(s.rules().len(), 6);
    }

    /// Regression: `/api/*/action` (envoyproxy/ratelimit's
    /// Examples 9b and 9c) loaded and never matched.
    #[test]
    fn wildcards_anywhere_in_the_value() {
        for (pattern, value, matches) in [
            ("value*", "value", true),
            ("value*", "valueXYZ", true),
            ("value*", "valu", false),
            ("/api/*/action", "/api/123/action", true),
            ("/api/*/action", "/api//action", true),
            ("/api/*/action", "/api/123/other", false),
            ("/api/*/action", "/api/1/action/x", false),
            (
                "/api/*/resource/*/action",
                "/api/v1/resource/123/action",
                true,
            ),
            (
                "/api/*/resource/*/action",
                "/api/v1/resource/123/other",
                false,
            ),
            ("*", "", true),
            ("a*b*c", "aXbYbZc", true),
            ("a*b*c", "aXbYcZ", false),
            ("*.pdf", "a.b.pdf", true),
        ] {
            assert_eq!(glob_matches(pattern, value), matches, "{pattern} ~ {value}");
        }
        let s = set("
domain: d
descriptors:
  - key: path
    value: /api/*/action
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: route
    value: /api/*/resource/*/action
    rate_limit: {unit: minute, requests_per_unit: 20}
");
        assert_eq!(
            find(&s, "d", &[("path", "/api/123/action")]),
            Some("d.path_/api/*/action")
        );
        assert_eq!(find(&s, "d", &[("path", "/api/123/other")]), None);
        assert_eq!(
            find(&s, "d", &[("route", "/api/v2/resource/456/action")]),
            Some("d.route_/api/*/resource/*/action")
        );
    }

    #[test]
    fn bucket_entries_read_back_bucket_keys() {
        for entries in [
            vec![("a_b", "c")],
            vec![("a", "b:1:c1:d"), ("", "")],
            vec![("10", "é:2"), ("k", "")],
        ] {
            assert_eq!(
                bucket_entries(&bucket_key(entries.iter().copied())),
                Some(entries)
            );
        }
        assert_eq!(bucket_entries("3:ab"), None);
        assert_eq!(bucket_entries("x:ab0:"), None);
    }

    #[test]
    fn bucket_keys_do_not_collide() {
        assert_ne!(bucket_key([("a_b", "c")]), bucket_key([("a", "b_c")]));
        assert_ne!(
            bucket_key([("a", "b"), ("c", "d")]),
            bucket_key([("a", "b:1:c1:d")])
        );
    }

    /// Lyft's `example11_metrics` and a nested `share_threshold`: shared
    /// entries count in one bucket and are named by their pattern in the
    /// metrics, also under `value_to_metric` / `detailed_metric`; the
    /// others by the request's value where flagged.
    #[test]
    fn shared_entries_bucket_and_name_by_pattern() {
        let s = set("
domain: d
descriptors:
  - key: route
    value: api/*
    share_threshold: true
    value_to_metric: true
    descriptors:
      - key: method
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 60}
  - key: user
    descriptors:
      - key: file
        value: f/*
        share_threshold: true
        rate_limit: {unit: minute, requests_per_unit: 60}
");
        let bucket = |entries: &[(&'static str, &'static str)]| {
            let (rule, key) = s.find_bucket("d", entries.iter().copied()).expect("a rule");
            (rule.metric_keys(entries.iter().copied()), key)
        };
        let (v1, v1_key) = bucket(&[("route", "api/v1"), ("method", "GET")]);
        let (v2, v2_key) = bucket(&[("route", "api/v2"), ("method", "GET")]);
        assert_eq!(v1_key, v2_key);
        assert_eq!(
            v1,
            Some(("route_api/*".to_owned(), "method_GET".to_owned()))
        );
        assert_eq!(v1, v2);
        // A value-less entry above a shared one keeps a bucket per value;
        // no flag: the rule's own labels.
        let (a, a_key) = bucket(&[("user", "a"), ("file", "f/1")]);
        let (_, a2_key) = bucket(&[("user", "a"), ("file", "f/2")]);
        let (_, b_key) = bucket(&[("user", "b"), ("file", "f/1")]);
        assert_eq!(a_key, a2_key);
        assert_ne!(a_key, b_key);
        assert_eq!(a, None);
    }
}
