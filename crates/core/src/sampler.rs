//! A rate-limited trace sampler for the OpenTelemetry SDK: at most `N` new
//! traces per second, and a child always follows its parent's decision.
//! Feature `opentelemetry`.
//!
//! # Decisions
//!
//! - A span with a valid parent (local or remote) is sampled exactly when the
//!   parent was, and takes no permit: a trace is either whole or absent.
//! - A root span takes one permit from the limiter: sampled
//!   ([`SamplingDecision::RecordAndSample`]) if admitted, dropped otherwise.
//!   The limiter's guarantee bounds the sampled roots: with GCRA, any interval
//!   of length `t` starts at most `burst + rate·t` sampled traces.
//!
//! The parent's trace state is passed on; no attributes are added.

use opentelemetry::trace::{Link, SpanKind, TraceContextExt, TraceId, TraceState};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{SamplingDecision, SamplingResult, ShouldSample};

use crate::algorithm::Gcra;
use crate::clock::{Clock, QuantaClock};
use crate::limiter::Limiter;
use crate::quota::{Quota, QuotaError};

/// Samples at most the limiter's rate of new traces; children follow their
/// parent. See the [module docs](self).
///
/// # Examples
///
/// ```
/// use opentelemetry_sdk::trace::SdkTracerProvider;
/// use tollgate::sampler::RateLimitedSampler;
/// use tollgate::Quota;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // At most 100 new traces per second, 10 at once.
/// let sampler = RateLimitedSampler::new(Quota::per_second(100)?.with_burst(10)?)?;
/// let provider = SdkTracerProvider::builder().with_sampler(sampler).build();
/// # drop(provider);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct RateLimitedSampler<C: Clock = QuantaClock> {
    limiter: Limiter<Gcra, C>,
}

impl RateLimitedSampler<QuantaClock> {
    /// Samples at most `quota` of new traces, on the default clock.
    ///
    /// # Errors
    ///
    /// As [`Gcra::new`].
    pub fn new(quota: Quota) -> Result<RateLimitedSampler<QuantaClock>, QuotaError> {
        Ok(RateLimitedSampler::with_limiter(Limiter::new(Gcra::new(
            quota,
        )?)))
    }
}

impl<C: Clock> RateLimitedSampler<C> {
    /// Samples new traces as `limiter` admits them; clones of the limiter
    /// used elsewhere share its permits.
    pub fn with_limiter(limiter: Limiter<Gcra, C>) -> RateLimitedSampler<C> {
        RateLimitedSampler { limiter }
    }

    /// The limiter.
    pub fn limiter(&self) -> &Limiter<Gcra, C> {
        &self.limiter
    }
}

impl<C: Clock + Clone + std::fmt::Debug + 'static> ShouldSample for RateLimitedSampler<C> {
    fn should_sample(
        &self,
        parent_context: Option<&Context>,
        _trace_id: TraceId,
        _name: &str,
        _span_kind: &SpanKind,
        _attributes: &[KeyValue],
        _links: &[Link],
    ) -> SamplingResult {
        let parent = parent_context.filter(|cx| cx.span().span_context().is_valid());
        let (decision, trace_state) = match parent {
            Some(cx) => {
                let span = cx.span();
                let parent = span.span_context();
                let decision = if parent.is_sampled() {
                    SamplingDecision::RecordAndSample
                } else {
                    SamplingDecision::Drop
                };
                (decision, parent.trace_state().clone())
            }
            None => {
                let decision = if self.limiter.check().is_allowed() {
                    SamplingDecision::RecordAndSample
                } else {
                    SamplingDecision::Drop
                };
                (decision, TraceState::default())
            }
        };
        SamplingResult {
            decision,
            attributes: Vec::new(),
            trace_state,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use opentelemetry::trace::{
        Span as _, SpanContext, SpanId, TraceFlags, Tracer, TracerProvider as _,
    };
    use opentelemetry_sdk::trace::SdkTracerProvider;

    use super::*;
    use crate::ManualClock;

    fn sampler(clock: &ManualClock) -> RateLimitedSampler<ManualClock> {
        let quota = Quota::per_second(2).unwrap().with_burst(2).unwrap();
        RateLimitedSampler::with_limiter(Limiter::with_clock(
            Gcra::new(quota).unwrap(),
            clock.clone(),
        ))
    }

    fn decide(
        sampler: &RateLimitedSampler<ManualClock>,
        parent: Option<&Context>,
    ) -> SamplingDecision {
        sampler
            .should_sample(
                parent,
                TraceId::from(7u128),
                "span",
                &SpanKind::Server,
                &[],
                &[],
            )
            .decision
    }

    fn parent(sampled: bool, remote: bool) -> Context {
        let flags = if sampled {
            TraceFlags::SAMPLED
        } else {
            TraceFlags::default()
        };
        let span = SpanContext::new(
            TraceId::from(1u128),
            SpanId::from(2u64),
            flags,
            remote,
            TraceState::from_key_value([("k", "v")]).unwrap(),
        );
        Context::new().with_remote_span_context(span)
    }

    #[test]
    fn roots_are_sampled_at_the_limiters_rate() {
        let clock = ManualClock::new();
        let sampler = sampler(&clock);
        let mut sampled = 0;
        for step in 0..40 {
            // 10 roots every 100 ms for 4 s: 2 per second after a burst of 2.
            if step % 10 == 0 {
                clock.advance(Duration::from_millis(100));
            }
            for _ in 0..10 {
                if decide(&sampler, None) == SamplingDecision::RecordAndSample {
                    sampled += 1;
                }
            }
        }
        // Burst 2, then one every 500 ms over the 400 ms that followed.
        assert_eq!(sampled, 2);
        clock.advance(Duration::from_secs(10));
        let sampled = (0..10)
            .filter(|_| decide(&sampler, None) == SamplingDecision::RecordAndSample)
            .count();
        assert_eq!(sampled, 2);
    }

    #[test]
    fn children_follow_their_parent_and_take_no_permit() {
        let clock = ManualClock::new();
        let sampler = sampler(&clock);
        for remote in [true, false] {
            let sampled = parent(true, remote);
            let dropped = parent(false, remote);
            for _ in 0..5 {
                assert_eq!(
                    decide(&sampler, Some(&sampled)),
                    SamplingDecision::RecordAndSample
                );
                assert_eq!(decide(&sampler, Some(&dropped)), SamplingDecision::Drop);
            }
        }
        // The limiter is untouched: a burst of 2 roots is still there.
        assert!(sampler.limiter().peek_n(2).unwrap().is_allowed());
        let result = sampler.should_sample(
            Some(&parent(true, true)),
            TraceId::from(1u128),
            "child",
            &SpanKind::Internal,
            &[],
            &[],
        );
        assert_eq!(result.trace_state.get("k"), Some("v"));
    }

    #[test]
    fn an_sdk_tracer_provider_uses_it() {
        let clock = ManualClock::new();
        let provider = SdkTracerProvider::builder()
            .with_sampler(sampler(&clock))
            .build();
        let tracer = provider.tracer("test");
        let sampled: Vec<bool> = (0..4)
            .map(|_| tracer.start("root").span_context().is_sampled())
            .collect();
        assert_eq!(sampled, [true, true, false, false]);
    }
}
