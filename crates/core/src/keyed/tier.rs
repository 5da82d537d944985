//! The rules a key's quota is resolved by: the default, exact overrides,
//! the override function, and the generation that tells an entry resolved
//! under older rules to re-resolve.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;

use super::{Hasher, SHARED_FUNCTION_RESULTS, Shared};
use crate::algorithm::{Algorithm, Carry};
use crate::sync::{Ordering, RwLockReadGuard, RwLockWriteGuard};

/// An algorithm as the rules of one generation resolved it. The generation
/// lives here, shared by every key of the tier, rather than in each entry.
pub(super) struct Resolved<A> {
    pub(super) algorithm: A,
    /// The rules' generation when this was made; a key holding an older one
    /// re-resolves on its next request.
    pub(super) generation: u64,
}

impl<A> std::ops::Deref for Resolved<A> {
    type Target = A;

    fn deref(&self) -> &A {
        &self.algorithm
    }
}

pub(super) struct Tier<A> {
    pub(super) algorithm: Arc<Resolved<A>>,
    pub(super) carry: Carry,
    /// The carry rule is that of a removed override, spent once applied.
    pub(super) pending: bool,
}

impl<A: Clone> Tier<A> {
    pub(super) fn new(algorithm: A, generation: u64, carry: Carry) -> Tier<A> {
        Tier {
            algorithm: Arc::new(Resolved {
                algorithm,
                generation,
            }),
            carry,
            pending: false,
        }
    }

    /// The same algorithm under `generation`: keys holding the older copy
    /// re-resolve, and keep their state (the algorithm is equal).
    fn restamp(&mut self, generation: u64) {
        if self.algorithm.generation != generation {
            self.algorithm = Arc::new(Resolved {
                algorithm: self.algorithm.algorithm.clone(),
                generation,
            });
        }
    }
}

impl<A> Clone for Tier<A> {
    fn clone(&self) -> Tier<A> {
        Tier {
            algorithm: Arc::clone(&self.algorithm),
            carry: self.carry,
            pending: self.pending,
        }
    }
}

pub(super) type OverrideFn<K, A> = Box<dyn Fn(&K) -> Option<A> + Send + Sync>;

pub(super) struct Policies<K, A> {
    /// Bumped by every change of quota, under the write lock.
    pub(super) generation: u64,
    pub(super) default: Tier<A>,
    pub(super) exact: HashMap<K, Tier<A>, Hasher>,
    pub(super) function: Option<OverrideFn<K, A>>,
    /// Distinct results of `function`, shared between the keys that get them.
    pub(super) function_results: Vec<Arc<Resolved<A>>>,
    /// Keys whose exact override was removed, with the carry rule of the
    /// removal, until their state is carried over.
    pub(super) pending_carry: HashMap<K, Carry, Hasher>,
}

impl<K, A> Shared<K, A>
where
    K: Hash + Eq + Send + Sync + 'static,
    A: Algorithm,
{
    /// The algorithm `key` runs now, and the carry rule that brought it.
    pub(super) fn resolve(&self, key: &K) -> Tier<A> {
        let policies = self.read_policies();
        if let Some(tier) = policies.exact.get(key) {
            return tier.clone();
        }
        let mut tier = match &policies.function {
            None => policies.default.clone(),
            Some(function) => match function(key) {
                None => policies.default.clone(),
                Some(algorithm) => {
                    let shared = policies
                        .function_results
                        .iter()
                        .find(|a| a.algorithm == algorithm)
                        .cloned();
                    Tier {
                        algorithm: shared.unwrap_or_else(|| {
                            Arc::new(Resolved {
                                algorithm,
                                generation: policies.generation,
                            })
                        }),
                        carry: policies.default.carry,
                        pending: false,
                    }
                }
            },
        };
        if let Some(&carry) = policies.pending_carry.get(key) {
            tier.carry = carry;
            tier.pending = true;
        }
        let share = policies.function_results.len() < SHARED_FUNCTION_RESULTS
            && !Arc::ptr_eq(&tier.algorithm, &policies.default.algorithm)
            && !policies
                .function_results
                .iter()
                .any(|a| Arc::ptr_eq(a, &tier.algorithm));
        drop(policies);
        if share {
            self.write_policies()
                .function_results
                .push(Arc::clone(&tier.algorithm));
        }
        tier
    }

    /// Forgets the carry rule of `key`'s removed override once `tier`, which
    /// brought it, has been applied.
    pub(super) fn spend(&self, tier: &Tier<A>, key: &K) {
        if tier.pending {
            self.write_policies().pending_carry.remove(key);
        }
    }

    /// Applies a change of quota and publishes it.
    pub(super) fn change(&self, apply: impl FnOnce(&mut Policies<K, A>)) {
        let mut policies = self.write_policies();
        apply(&mut policies);
        policies.function_results.clear();
        // Every tier under the new generation (one copy of each algorithm,
        // so this is linear in the exact overrides; changes are rare).
        policies.generation += 1;
        let generation = policies.generation;
        policies.default.restamp(generation);
        for tier in policies.exact.values_mut() {
            tier.restamp(generation);
        }
        // Release, under the write lock: a request that sees the new
        // generation re-resolves under the new rules.
        self.generation.store(generation, Ordering::Release);
    }

    pub(super) fn read_policies(&self) -> RwLockReadGuard<'_, Policies<K, A>> {
        crate::sync::read(&self.policies)
    }

    pub(super) fn write_policies(&self) -> RwLockWriteGuard<'_, Policies<K, A>> {
        crate::sync::write(&self.policies)
    }
}
