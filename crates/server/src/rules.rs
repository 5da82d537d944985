//! The loaded rules and envoyproxy/ratelimit's matching.
//!
//! # Matching
//!
//! A request descriptor `[(k1, v1), (k2, v2), …]` walks its domain's tree
//! one entry at a time. At each level the node for `(k, v)` is taken if the
//! file has one; else the first node whose value ends in `*` and is a
//! prefix of `v` (in file order); else the value-less node for `k`. There is
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
//! envoyproxy/ratelimit. The bucket key is the entries, length-prefixed, so
//! that no two lists share a key.
//!
//! # Identity
//!
//! A rule is named by its path, `domain.key_value.key` (envoyproxy/ratelimit's
//! stat key), which is also how a reload recognises the same rule.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

use crate::config::{Config, DescriptorConfig, LimitConfig, Limits};

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
    /// `None` for `unlimited`.
    pub limits: Option<Limits>,
    /// A request's `limit` override, not a rule of the file (see
    /// [`crate::service`]): backends keep its buckets apart from the
    /// installed rules'.
    pub dynamic: bool,
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

#[derive(Default, Debug)]
struct Node {
    rule: Option<Arc<Rule>>,
    /// Children by entry key.
    children: HashMap<String, Branch>,
}

#[derive(Default, Debug)]
struct Branch {
    exact: HashMap<String, Node>,
    /// `(prefix, node)` for values ending in `*`, in file order.
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
            .find(|(prefix, _)| value.starts_with(prefix.as_str()))
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
}

impl RuleSet {
    /// Builds the trees of `config`.
    pub fn new(config: &Config) -> RuleSet {
        let mut set = RuleSet::default();
        for domain in &config.domains {
            let mut root = Node::default();
            let mut path = Vec::new();
            for descriptor in &domain.descriptors {
                insert(
                    &mut root,
                    &domain.domain,
                    &mut path,
                    descriptor,
                    &mut set.rules,
                );
            }
            set.domains.insert(domain.domain.clone(), root);
        }
        set
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
        let mut node = self.domains.get(domain)?;
        let mut any = false;
        for (key, value) in entries {
            node = node.children.get(key)?.find(value)?;
            any = true;
        }
        if any { node.rule.as_ref() } else { None }
    }
}

fn insert(
    parent: &mut Node,
    domain: &str,
    path: &mut Vec<(String, Option<String>)>,
    descriptor: &DescriptorConfig,
    rules: &mut Vec<Arc<Rule>>,
) {
    path.push((descriptor.key.clone(), descriptor.value.clone()));
    let branch = parent.children.entry(descriptor.key.clone()).or_default();
    let node = match &descriptor.value {
        None => branch.any.get_or_insert_with(Box::default).as_mut(),
        Some(value) => match value.strip_suffix('*') {
            Some(prefix) => {
                branch.wildcards.push((prefix.to_owned(), Node::default()));
                let last = branch.wildcards.len() - 1;
                &mut branch.wildcards[last].1
            }
            None => branch.exact.entry(value.clone()).or_default(),
        },
    };
    if let Some(limit) = &descriptor.limit {
        let (name, limits) = match limit {
            LimitConfig::Unlimited { name } => (name.clone(), None),
            LimitConfig::Limited { name, limits } => (name.clone(), Some(limits.clone())),
        };
        let rule = Arc::new(Rule {
            id: rule_id(domain, path).into(),
            domain: domain.to_owned(),
            path: path.clone(),
            name,
            shadow_mode: descriptor.shadow_mode,
            limits,
            dynamic: false,
        });
        rules.push(Arc::clone(&rule));
        node.rule = Some(rule);
    }
    for child in &descriptor.descriptors {
        insert(node, domain, path, child, rules);
    }
    path.pop();
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
        // Writing to a String cannot fail.
        let _ = write!(key, "{}:{k}{}:{v}", k.len(), v.len());
    }
    key
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

    #[test]
    fn bucket_keys_do_not_collide() {
        assert_ne!(bucket_key([("a_b", "c")]), bucket_key([("a", "b_c")]));
        assert_ne!(
            bucket_key([("a", "b"), ("c", "d")]),
            bucket_key([("a", "b:1:c1:d")])
        );
    }
}
