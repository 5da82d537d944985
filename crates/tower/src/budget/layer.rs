//! [`TokenBudgetLayer`] and its [`Builder`].

use std::fmt;
use std::sync::Arc;

use http::request::Parts;
use tower_layer::Layer;

use super::backend::BudgetBackend;
use super::config::{Budget, Config};
use super::meter::{NoUsage, Seen, Settled, Tokens};
use super::service::TokenBudgetService;
use crate::error::BuildError;
use crate::key::KeyExtractor;
use crate::response::{HeaderPolicy, sf_string};

/// A tower layer that keeps per-key token budgets for LLM traffic: see the
/// [module docs](super).
///
/// Cloning it, and every service it makes, shares one configuration and
/// the budgets through an [`Arc`].
pub struct TokenBudgetLayer<E: KeyExtractor> {
    config: Arc<Config<E>>,
}

impl<E: KeyExtractor> TokenBudgetLayer<E> {
    /// Starts building a layer that keys requests by `extractor`; add at
    /// least one [`budget`](Builder::budget).
    pub fn builder(extractor: E) -> Builder<E> {
        Builder {
            config: Config {
                extractor,
                budgets: Vec::new(),
                estimate: None,
                tokens: Tokens::Total,
                meter: None,
                no_usage: NoUsage::default(),
                headers_on_success: true,
                on_settled: None,
            },
            names: Vec::new(),
            unfit: None,
        }
    }
}

impl<E: KeyExtractor> Clone for TokenBudgetLayer<E> {
    fn clone(&self) -> TokenBudgetLayer<E> {
        TokenBudgetLayer {
            config: Arc::clone(&self.config),
        }
    }
}

impl<E: KeyExtractor> fmt::Debug for TokenBudgetLayer<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.config.budgets.iter().map(|b| &*b.name).collect();
        f.debug_struct("TokenBudgetLayer")
            .field("budgets", &names)
            .finish_non_exhaustive()
    }
}

impl<S, E: KeyExtractor> Layer<S> for TokenBudgetLayer<E> {
    type Service = TokenBudgetService<S, E>;

    fn layer(&self, inner: S) -> TokenBudgetService<S, E> {
        TokenBudgetService::new(inner, Arc::clone(&self.config))
    }
}

/// Builds a [`TokenBudgetLayer`]; [`build`](Builder::build) checks the
/// whole configuration.
pub struct Builder<E: KeyExtractor> {
    config: Config<E>,
    /// The budgets' names as given, checked by `build`.
    names: Vec<String>,
    /// The first budget whose backend cannot keep one, and why.
    unfit: Option<(String, String)>,
}

impl<E: KeyExtractor> Builder<E> {
    /// Adds a budget named `name` (printable ASCII, unique in the layer: it
    /// names the budget's `RateLimit` items), kept by `backend`: a
    /// [`tollgate::KeyedLimiter`] for a budget per key, a
    /// [`tollgate::Limiter`] for one shared by every key. Every budget must
    /// admit a request, and every one is charged what it cost.
    pub fn budget(mut self, name: impl Into<String>, backend: impl BudgetBackend<E::Key>) -> Self {
        let name = name.into();
        if let Some(reason) = backend.unfit() {
            self.unfit.get_or_insert((name.clone(), reason));
        }
        let quotas = backend.quotas();
        // `w` only for one quota of whole seconds.
        let quota = match quotas.as_slice() {
            [quota] if quota.period().subsec_nanos() == 0 && quota.period().as_secs() > 0 => {
                Some((quota.limit(), quota.period().as_secs()))
            }
            _ => None,
        };
        self.config.budgets.push(Budget {
            name: name.clone(),
            policy: HeaderPolicy {
                name: String::new(),
                quota,
            },
            backend: Box::new(backend),
        });
        self.names.push(name);
        self
    }

    /// The tokens a request is expected to cost, from its parts: reserved
    /// before it is passed on (reserve, then settle), and it is admitted
    /// only if every budget has them. By default, 0: the request is
    /// admitted while every budget has at least one token left, reserves
    /// nothing, and is charged everything after (check, then charge).
    pub fn estimate(mut self, estimate: impl Fn(&Parts) -> u64 + Send + Sync + 'static) -> Self {
        self.config.estimate = Some(Box::new(estimate));
        self
    }

    /// Which `usage` count a response is charged. By default,
    /// [`Tokens::Total`].
    pub fn tokens(mut self, tokens: Tokens) -> Self {
        self.config.tokens = tokens;
        self
    }

    /// A meter of the user's: the tokens a response cost from what the
    /// layer saw of it ([`Seen`]: the head, the usage found, the bytes),
    /// or `None` when it cannot say. It replaces [`tokens`](Self::tokens):
    /// weight completion tokens, read a count a handler put in the
    /// response's extensions, or a provider's own header. By default, the
    /// [`tokens`](Self::tokens) count of the usage.
    pub fn meter(
        mut self,
        meter: impl Fn(&Seen<'_>) -> Option<u64> + Send + Sync + 'static,
    ) -> Self {
        self.config.meter = Some(Box::new(meter));
        self
    }

    /// What a successful response is charged when no count is known (see
    /// [`NoUsage`]). By default, [`NoUsage::BodyBytes`] of 4.
    pub fn no_usage(mut self, no_usage: NoUsage) -> Self {
        self.config.no_usage = no_usage;
        self
    }

    /// Whether admitted responses carry the `x-ratelimit-*-tokens` and
    /// RateLimit headers (refusals always do). By default, `true`: LLM
    /// clients read them on every response.
    pub fn headers_on_success(mut self, enabled: bool) -> Self {
        self.config.headers_on_success = enabled;
        self
    }

    /// Called once per settled response with what it was charged: to log
    /// or count the responses charged by the fallback. By default, none.
    pub fn on_settled(mut self, hook: impl Fn(&Settled) + Send + Sync + 'static) -> Self {
        self.config.on_settled = Some(Box::new(hook));
        self
    }

    /// The layer.
    ///
    /// # Errors
    ///
    /// [`BuildError::NoBudget`] without a budget,
    /// [`BuildError::PolicyName`] for a name outside printable ASCII,
    /// [`BuildError::DuplicateBudget`] for a name given twice,
    /// [`BuildError::UnfitBudget`] for a backend that cannot record a
    /// charge into debt (a Redis limiter holding a warm-up limit).
    pub fn build(mut self) -> Result<TokenBudgetLayer<E>, BuildError> {
        if self.config.budgets.is_empty() {
            return Err(BuildError::NoBudget);
        }
        if let Some((name, reason)) = self.unfit {
            return Err(BuildError::UnfitBudget { name, reason });
        }
        for (i, name) in self.names.iter().enumerate() {
            if self.names[..i].contains(name) {
                return Err(BuildError::DuplicateBudget { name: name.clone() });
            }
            let quoted =
                sf_string(name).ok_or_else(|| BuildError::PolicyName { name: name.clone() })?;
            self.config.budgets[i].policy.name = quoted;
        }
        Ok(TokenBudgetLayer {
            config: Arc::new(self.config),
        })
    }
}

impl<E: KeyExtractor> fmt::Debug for Builder<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("budgets", &self.names)
            .finish_non_exhaustive()
    }
}
