//! The operator's controls' markers, read in decisions: a key on the deny
//! or allow list, or under a penalty, holds a marker instead of its state
//! (`!d`, `!a`, `!p<end>`, `!pn`; written by `tollgate-redis`'s
//! `controls.lua`, whose module docs, `tollgate_redis::controls`, state the
//! contract). The controls themselves always run as that script, with or
//! without this module: they are rare, and one implementation of each is
//! simpler to keep exact than two.
//!
//! A marker is only looked for where a limit's value read as *no state*
//! (a GCRA with no debt, a window with no count, a foreign hash), the way
//! the scripts look for it only where the value is not a state: a key with
//! a live state, the common case under load, pays nothing. The answer is
//! the scripts' to the value: deny list denied with `retry` and `reset`
//! "never" (`-1`); a penalty denied with `retry` = `reset` = the time left;
//! the lists first, then the latest penalty. A penalty past its end is no
//! marker (the key is full). An allow-listed key is admitted, counting
//! nothing, and reports a look at the state the list holds aside, as the
//! core's listed decision ([`Marked::Listed`]: `crate::transition::listed`
//! builds that reply, which reads states). A lease's refund on a marked
//! key changes nothing.

use crate::args::{Call, Op};
use crate::store::{Store, lua_number};

/// A control's marker, as the scripts read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Marker {
    Deny,
    Allow,
    /// Until this clock reading; `None`: never.
    Penalty(Option<i128>),
}

/// The marker in `raw`, if any (a penalty past `now` is none).
fn marker(raw: &[u8], now: i128) -> Option<Marker> {
    match raw {
        [b'!', b'd', ..] => Some(Marker::Deny),
        [b'!', b'a', ..] => Some(Marker::Allow),
        [b'!', b'p', end @ ..] => {
            // The scripts read the end with `tonumber`: anything that is not
            // a number is "never".
            match lua_number(end) {
                #[allow(clippy::cast_possible_truncation)] // Whole, < 2^53.
                Some(e) if e.is_finite() => {
                    ((e as i128) > now).then_some(Marker::Penalty(Some(e as i128)))
                }
                _ => Some(Marker::Penalty(None)),
            }
        }
        _ => None,
    }
}

/// What a control's marker decides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Marked {
    /// This reply (a deny list, a penalty, a refund under any marker).
    Reply(Vec<i64>),
    /// The allow list: admitted, counting nothing, answered on the state
    /// the list holds aside.
    Listed,
}

/// What decides `call` if a key whose state read as none (`blank`) holds a
/// marker; `None` otherwise (the decision goes on).
pub(crate) fn marked(
    call: &Call,
    now: i128,
    unit: i128,
    store: &mut dyn Store,
    blank: impl Fn(usize) -> bool,
) -> Option<Marked> {
    let mut found: Option<Marker> = None;
    for i in 0..call.limits.len() {
        if !blank(i) {
            continue;
        }
        let Some(raw) = store.get(i).ok().flatten() else {
            continue;
        };
        let Some(m) = marker(raw, now) else {
            continue;
        };
        found = Some(match (found, m) {
            (Some(Marker::Deny), _) | (_, Marker::Deny) => Marker::Deny,
            (Some(Marker::Allow), _) | (_, Marker::Allow) => Marker::Allow,
            (Some(Marker::Penalty(None)), _) | (_, Marker::Penalty(None)) => Marker::Penalty(None),
            (Some(Marker::Penalty(Some(a))), Marker::Penalty(Some(b))) => {
                Marker::Penalty(Some(a.max(b)))
            }
            (None, m) => m,
        });
    }
    let found = found?;
    let now64 = i64::try_from(now).unwrap_or(i64::MAX);
    if call.op == Op::Refund {
        return Some(Marked::Reply(vec![1, 0, now64]));
    }
    if found == Marker::Allow {
        return Some(Marked::Listed);
    }
    let mut reply = Vec::with_capacity(3 + 4 * call.limits.len());
    reply.extend([0, 0, now64]);
    for limit in &call.limits {
        let verdict: [i128; 4] = match found {
            Marker::Penalty(Some(end)) => {
                let left = (end - now) * unit * limit.params.full_and_scale().1;
                [0, 0, left, left]
            }
            _ => [0, 0, -1, -1],
        };
        reply.extend(verdict.map(|v| i64::try_from(v).unwrap_or(i64::MAX)));
    }
    Some(Marked::Reply(reply))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_read_as_the_scripts_read_them() {
        assert_eq!(marker(b"!d", 5), Some(Marker::Deny));
        assert_eq!(marker(b"!a", 5), Some(Marker::Allow));
        assert_eq!(marker(b"!p9", 5), Some(Marker::Penalty(Some(9))));
        assert_eq!(marker(b"!p5", 5), None, "over at its end");
        assert_eq!(marker(b"!pn", 5), Some(Marker::Penalty(None)));
        for state in [&b"12"[..], b"3 4", b"", b"!", b"garbage"] {
            assert_eq!(marker(state, 5), None, "{state:?}");
        }
    }
}
