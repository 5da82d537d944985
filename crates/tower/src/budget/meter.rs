//! What a response cost, in tokens: from its `usage` ([`Tokens`]), from a
//! user function of what was seen ([`Seen`]), and otherwise the fallback
//! ([`NoUsage`]).

use std::num::NonZeroU64;

use http::response::Parts;

use super::scan::Usage;

/// Which of the `usage` counts a budget is charged.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Tokens {
    /// `total_tokens`, or `prompt_tokens + completion_tokens` when the total
    /// is not sent. The default.
    #[default]
    Total,
    /// `prompt_tokens` (`input_tokens`).
    Prompt,
    /// `completion_tokens` (`output_tokens`).
    Completion,
}

impl Tokens {
    /// This count of `usage`, when it is there.
    pub fn of(self, usage: &Usage) -> Option<u64> {
        match self {
            Tokens::Total => usage.total_tokens.or_else(|| {
                Some(
                    usage
                        .prompt_tokens?
                        .saturating_add(usage.completion_tokens?),
                )
            }),
            Tokens::Prompt => usage.prompt_tokens,
            Tokens::Completion => usage.completion_tokens,
        }
    }
}

/// What the layer saw of one response, for a user's meter
/// ([`Builder::meter`](super::Builder::meter)).
#[derive(Debug)]
#[non_exhaustive]
pub struct Seen<'a> {
    /// The response head: status, headers, and the extensions a handler
    /// may have put a count in.
    pub head: &'a Parts,
    /// The last top-level `usage` found in the body, if any.
    pub usage: Option<&'a Usage>,
    /// Body bytes passed on.
    pub body_bytes: u64,
    /// Whether the body reached its end (`false`: cut, by an error or a
    /// client gone).
    pub complete: bool,
    /// The tokens reserved before the request (its estimate).
    pub reserved: u64,
}

/// A user's meter: the tokens a response cost, or `None` when it cannot
/// say (then [`NoUsage`] decides).
pub(crate) type MeterFn = Box<dyn Fn(&Seen<'_>) -> Option<u64> + Send + Sync>;

/// What a successful (`2xx`) response is charged when no count is known:
/// no `usage` in the body (a stream without `stream_options.include_usage`,
/// a provider that does not report, a body cut before its last chunk, a
/// malformed or oversized `usage`), or a meter that answered `None`.
///
/// Never nothing: a response that reports no usage must not be free. A
/// response that is not `2xx` and reports no usage is charged its
/// reservation only (an upstream that failed generated nothing; OpenAI
/// bills no failed request), which every request passed through first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NoUsage {
    /// One token per started `n` bytes of body passed on, at least the
    /// reservation. With 4 (the default: English text runs about 4 bytes a
    /// token, and the JSON around the text counts too) it errs on the high
    /// side for the completion and misses the prompt.
    BodyBytes(NonZeroU64),
    /// These many tokens, at least the reservation (a `max_tokens` ceiling).
    Tokens(u64),
    /// The reservation only: with an estimate of 0, nothing. Choose it only
    /// where every response is known to report its usage.
    Reservation,
}

impl Default for NoUsage {
    fn default() -> NoUsage {
        NoUsage::BodyBytes(NonZeroU64::new(4).unwrap_or(NonZeroU64::MIN))
    }
}

impl NoUsage {
    /// The tokens a response without a count is charged.
    pub(crate) fn tokens(self, seen: &Seen<'_>) -> u64 {
        if !seen.head.status.is_success() {
            return seen.reserved;
        }
        match self {
            NoUsage::BodyBytes(per_token) => {
                seen.body_bytes.div_ceil(per_token.get()).max(seen.reserved)
            }
            NoUsage::Tokens(tokens) => tokens.max(seen.reserved),
            NoUsage::Reservation => seen.reserved,
        }
    }
}

/// How one response was settled, for
/// [`Builder::on_settled`](super::Builder::on_settled): to log or count the
/// responses charged by the fallback.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Settled {
    /// Tokens the request cost in all: its reservation plus the charge (or
    /// minus the refund) of its settlement.
    pub tokens: u64,
    /// Tokens reserved before the request.
    pub reserved: u64,
    /// The usage found in the body.
    pub usage: Option<Usage>,
    /// Whether [`NoUsage`] decided (no count was known).
    pub fallback: bool,
    /// Whether the body reached its end.
    pub complete: bool,
    /// The most tokens one budget did not record of its charge (see
    /// [`Settlement::unrecorded`](super::Settlement::unrecorded)): 0
    /// unless a charge passed the debt cap, the key was listed or
    /// penalised, or a remote store did not take it.
    pub unrecorded: u64,
}
