//! The decision: the script's transitions (`decide.lua`), step for step, over
//! a [`Store`] of the call's keys.
//!
//! The arithmetic is the script's integer arithmetic in `i128` (the script
//! keeps every value below 2^53 in Lua doubles; here no value can round),
//! on the same stored formats, so that a key written by the script is read
//! by the module and the other way round: clients with and without the
//! module can share keys during a rollout or a fallback. Divisions truncate
//! as the script's `math.fmod`-based ones do.
//!
//! The parity vectors (`crates/core/tests/vectors/core.json`) check the
//! answers against the core's state machines, through `tollgate-redis`.
//!
//! # Window debts
//!
//! A budget's charge (`tollgate-redis`'s charge script) takes a fixed or
//! sliding window past its limit, into a debt the scripts carry into later
//! windows. The module does not run that carry: a fixed window whose count
//! is above its limit, or a wheel with a debt field or a count above the
//! limit, is answered with the error [`DEFER`] (nothing written), and the
//! client sends the same call to the scripts. So a window in debt is never
//! read as empty (which would admit what the budget owes); a key within its
//! limit, the common case, is decided here.
//!
//! # Foreign values
//!
//! As in the scripts (`tollgate_redis::script`, "Foreign values"): a key
//! holding something that is not a state of its limit (another type,
//! garbage, a number out of range) is read as no state, and the next
//! admission overwrites it (a hash is deleted first). Such a value is never
//! an error: the module and the scripts read the same bytes the same way.
//! Numbers in stored values are read as Lua's `tonumber` reads them
//! ([`lua_number`]), so that a value the script takes the module takes.

use std::collections::HashMap;

use crate::args::{Call, Op, Params};
use crate::controls::Marked;
use crate::store::{Fields, Held, Store, lua_number, plain_integer};
use crate::warm_up::Warm;

/// The clock of a call.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Clock {
    /// Clock units (µs on the server's clock, ns in test mode).
    now: i128,
    /// Nanoseconds per clock unit.
    unit: i128,
    /// Milliseconds added to every TTL.
    slack: i128,
    /// The call's stamp.
    stamp: i128,
}

impl Clock {
    /// The clock of `call`, read at `now` in units of `unit` ns.
    pub(crate) fn of(call: &Call, now: i128, unit: i128) -> Clock {
        Clock {
            now,
            unit,
            slack: call.slack,
            stamp: call.stamp,
        }
    }

    fn ttl_ms(&self, ns: i128) -> i128 {
        cdiv(ns, 1_000_000) + self.slack
    }
}

fn cdiv(a: i128, b: i128) -> i128 {
    let (q, r) = div_rem(a, b);
    if r > 0 { q + 1 } else { q }
}

/// `a / b` and `a % b` (truncating), in `i64` where both fit (every call
/// within the contract's bounds): an `i128` division is a library call,
/// several times slower, on the decision's hot path.
fn div_rem(a: i128, b: i128) -> (i128, i128) {
    match (i64::try_from(a), i64::try_from(b)) {
        (Ok(a), Ok(b)) if b != 0 && !(a == i64::MIN && b == -1) => {
            (i128::from(a / b), i128::from(a % b))
        }
        _ => (a / b, a % b),
    }
}

/// `a mod b` in `[0, |b|)`, as [`div_rem`] in `i64` where it fits.
fn rem_euclid(a: i128, b: i128) -> i128 {
    let r = div_rem(a, b).1;
    if r < 0 { r + b.abs() } else { r }
}

/// 2^53: every stored number the scripts accept is below it.
const EXACT: f64 = 9_007_199_254_740_992.0;

/// A whole number in `[0, 2^53)` (the scripts' `nat`).
fn nat(raw: &[u8]) -> Option<i128> {
    // Plain digits, read as `lua_number` reads them, without the double.
    if let Some(v) = plain_integer(raw) {
        return (v < 1 << 53).then_some(i128::from(v));
    }
    let v = lua_number(raw)?;
    #[allow(clippy::cast_possible_truncation)] // Whole and below 2^53: exact.
    ((0.0..EXACT).contains(&v) && v.fract() == 0.0).then_some(v as i128)
}

/// The fixed window's state, `^(%d+) (%d+)$`, read as the scripts read it.
fn window_pair(raw: &[u8]) -> Option<(f64, f64)> {
    let (a, b) = raw.split_at(raw.iter().position(|&c| c == b' ')?);
    let b = &b[1..];
    let digits = |s: &[u8]| !s.is_empty() && s.iter().all(u8::is_ascii_digit);
    if !digits(a) || !digits(b) {
        return None;
    }
    Some((lua_number(a)?, lua_number(b)?))
}

/// One limit's loaded state.
pub(crate) enum State {
    Gcra {
        debt: i128,
        /// `now mod M`, ticks.
        cur: i128,
        /// The modulus `M = m · unit · scale`, ticks.
        modulus: i128,
    },
    Fixed {
        window: i128,
        count: i128,
        until_next: i128,
    },
    Sliding(Wheel),
    /// Boxed: the others stay small on the common path.
    WarmUp(Box<Warm>),
}

pub(crate) struct Wheel {
    /// The key holds something else: deleted before the first write.
    foreign: bool,
    head: i128,
    total: i128,
    counts: HashMap<i128, i128>,
    current: i128,
    live: i128,
}

/// A limit's decision: allowed, headroom, retry, reset (the reply's four).
pub(crate) type Verdict = [i128; 4];

/// Runs `call` over `store`, returns the reply.
///
/// # Errors
///
/// None today (a foreign value is read as no state); the `Result` keeps the
/// store's read errors, should a store have them, an error reply that writes
/// nothing (every key is read before any write).
pub fn run(call: &Call, now: i128, unit: i128, store: &mut dyn Store) -> Result<Vec<i64>, String> {
    let clock = Clock::of(call, now, unit);
    let mut states = Vec::with_capacity(call.limits.len());
    for (i, limit) in call.limits.iter().enumerate() {
        states.push(load(store, i, &limit.params, &clock)?);
    }
    // The controls' markers, looked for only where a state read as none.
    match crate::controls::marked(call, now, unit, store, |i| blank(&states[i])) {
        Some(Marked::Reply(reply)) => return Ok(reply),
        Some(Marked::Listed) => return listed(call, store, &clock, call.cost),
        None => {}
    }
    if call.op == Op::Refund {
        for (i, (limit, state)) in call.limits.iter().zip(&mut states).enumerate() {
            refund(store, i, &limit.params, state, &clock, call.cost, limit.x);
        }
        return Ok(vec![1, 0, clamp(now)]);
    }
    let mut take = call.cost;
    if call.op == Op::Lease {
        for (limit, state) in call.limits.iter().zip(&states) {
            take = take.min(avail(&limit.params, state));
        }
        if take < call.stamp {
            take = call.stamp;
        }
    }
    let mut reply = verdicts(call, &states, &clock, take);
    if reply[0] == 1 && call.op != Op::Peek {
        for (i, (limit, state)) in call.limits.iter().zip(&mut states).enumerate() {
            admit(store, i, &limit.params, state, &clock, take);
        }
        reply[1] = clamp(take);
    }
    Ok(reply)
}

/// The reply `{allowed, 0, now, (allowed_i, headroom_i, retry_i,
/// reset_i)×m}` to a request of `take` permits on the loaded `states`,
/// nothing written (the scripts' `verdicts`). A denial takes nothing: an
/// admitting limit then reports its time back to full with nothing taken,
/// as the core's AllOf does (a denying limit's is that already).
pub(crate) fn verdicts(call: &Call, states: &[State], clock: &Clock, take: i128) -> Vec<i64> {
    let mut reply = Vec::with_capacity(3 + 4 * call.limits.len());
    reply.extend([1, 0, clamp(clock.now)]);
    for (limit, state) in call.limits.iter().zip(states) {
        let verdict = decide(&limit.params, state, clock, take);
        if verdict[0] == 0 {
            reply[0] = 0;
        }
        reply.extend(verdict.map(clamp));
    }
    if reply[0] == 0 {
        for (i, (limit, state)) in call.limits.iter().zip(states).enumerate() {
            if reply[3 + 4 * i] == 1 {
                reply[6 + 4 * i] = clamp(decide(&limit.params, state, clock, 0)[3]);
            }
        }
    }
    reply
}

/// An allow-listed key's reply to a request of `take` permits (the
/// scripts' `listed_reply`): admitted, counting nothing, reporting what a
/// look of `take` at the states the list holds aside reports, as the
/// core's listed decision does: the look's remaining and reset if it would
/// admit; if not, each limit's reset as the denial reports it, 0 remaining
/// for the binding denial (the longest retry in ns, "never" longest, the
/// first of equals) and full for every other limit, so that the client
/// picks the binding one.
///
/// # Errors
///
/// A state aside that is a window in debt ([`DEFER`]: the scripts decide).
pub(crate) fn listed(
    call: &Call,
    store: &mut dyn Store,
    clock: &Clock,
    take: i128,
) -> Result<Vec<i64>, String> {
    let mut held = Held::new(store);
    let mut states = Vec::with_capacity(call.limits.len());
    for (i, limit) in call.limits.iter().enumerate() {
        states.push(load(&mut held, i, &limit.params, clock)?);
    }
    let mut reply = verdicts(call, &states, clock, take);
    if reply[0] == 1 {
        return Ok(reply);
    }
    let mut binding = None;
    let mut longest = -1;
    for (i, limit) in call.limits.iter().enumerate() {
        let at = 3 + 4 * i;
        if reply[at] == 0 {
            let retry = match reply[at + 2] {
                -1 => i128::MAX,
                ticks => cdiv(i128::from(ticks), limit.params.full_and_scale().1),
            };
            if retry > longest {
                (binding, longest) = (Some(i), retry);
            }
        }
    }
    reply[0] = 1;
    for (i, limit) in call.limits.iter().enumerate() {
        let at = 3 + 4 * i;
        let room = if binding == Some(i) {
            0
        } else {
            limit.params.full_and_scale().0
        };
        reply[at] = 1;
        reply[at + 1] = clamp(room);
        reply[at + 2] = 0;
    }
    Ok(reply)
}

/// Whether a loaded state is "none" (where a control's marker may be).
pub(crate) fn blank(state: &State) -> bool {
    match state {
        State::Gcra { debt, .. } => *debt == 0,
        State::Fixed { count, .. } => *count == 0,
        State::Sliding(w) => w.foreign,
        State::WarmUp(w) => w.blank(),
    }
}

pub(crate) fn clamp(v: i128) -> i64 {
    i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX })
}

pub(crate) fn load(
    store: &mut dyn Store,
    i: usize,
    p: &Params,
    c: &Clock,
) -> Result<State, String> {
    match *p {
        Params::Gcra { scale, m, .. } => {
            // The script's state (see `tollgate_redis::script`, "State"): the
            // TAT modulo M; the debt is (TAT - now) mod M, read as 0 (a TAT
            // in the past) in the last 2·10^15 ticks below M.
            let us = c.unit * scale;
            let modulus = m * us;
            let cur = div_rem(c.now, m).1 * us;
            let mut debt = 0;
            if let Some(tat) = store.get(i).ok().flatten().and_then(nat) {
                if tat < modulus {
                    let d = rem_euclid(tat - cur, modulus);
                    if d <= modulus - 2_000_000_000_000_000 {
                        debt = d;
                    }
                }
            }
            Ok(State::Gcra { debt, cur, modulus })
        }
        Params::Fixed { period, limit } => {
            let mut window = c.now / period;
            let mut count = 0;
            let stored = store.get(i).ok().flatten();
            if let Some((w, n)) = stored.and_then(window_pair) {
                #[allow(clippy::cast_precision_loss)] // limit < 2^53: exact.
                if w < EXACT && n > limit as f64 {
                    return Err(DEFER.to_owned());
                }
                // Anything else is foreign: read as no state. An earlier
                // reading is decided in the stored window (no re-credit).
                #[allow(clippy::cast_precision_loss)] // limit < 2^53: exact.
                #[allow(clippy::cast_possible_truncation)] // Whole, < 2^53.
                if w < EXACT && n <= limit as f64 && w >= window as f64 {
                    window = w as i128;
                    count = n as i128;
                }
            }
            let window_end = (window + 1) * period;
            let until_next = (window_end - c.now.min(window_end)) * c.unit;
            Ok(State::Fixed {
                window,
                count,
                until_next,
            })
        }
        Params::Sliding { period, n, limit } => {
            let empty = Wheel {
                foreign: false,
                head: 0,
                total: 0,
                counts: HashMap::new(),
                current: 0,
                live: 0,
            };
            let mut wheel = match store.hgetall(i) {
                Ok(fields) if in_debt(&fields, limit) => return Err(DEFER.to_owned()),
                Ok(fields) => read_wheel(empty, &fields, n, limit),
                Err(_) => None,
            }
            .unwrap_or(Wheel {
                foreign: true,
                head: 0,
                total: 0,
                counts: HashMap::new(),
                current: 0,
                live: 0,
            });
            wheel.current = epoch_of(c.now, period, n).max(wheel.head);
            let gone = wheel.current - wheel.head;
            wheel.live = if gone >= n {
                0
            } else {
                let expired: i128 = (1..=gone).map(|k| wheel.slot(wheel.head + k, n)).sum();
                wheel.total - expired
            };
            Ok(State::Sliding(wheel))
        }
        Params::WarmUp(w) => {
            // Another type reads as no state, as the script's `get`.
            let raw = store.get(i).ok().flatten();
            let now_ns = u128::try_from(c.now * c.unit).unwrap_or(0);
            Ok(State::WarmUp(Box::new(Warm::load(&w, raw, now_ns)?)))
        }
    }
}

/// The error reply of a window in debt: the client sends the same call to
/// the scripts (see the module docs, "Window debts").
pub const DEFER: &str = "DEFER tollgate: a window in debt is decided by the scripts";

/// Whether a wheel's fields may hold a charge's debt: a debt field `d`, or
/// a count above the limit.
fn in_debt(fields: &Fields, limit: i128) -> bool {
    fields.iter().any(|(field, value)| {
        field == b"d" || nat(value).is_some_and(|v| v > limit && field != b"h")
    })
}

/// The wheel in `fields`, or `None` if they are not a state of this limit
/// (the script's checks).
fn read_wheel(mut wheel: Wheel, fields: &Fields, n: i128, limit: i128) -> Option<Wheel> {
    for (field, value) in fields {
        let v = nat(value)?;
        match field.as_slice() {
            b"h" => wheel.head = v,
            b"t" => {
                if v > limit {
                    return None;
                }
                wheel.total = v;
            }
            other => {
                let index = nat(other)?;
                if index >= n || v > limit {
                    return None;
                }
                wheel.counts.insert(index, v);
            }
        }
    }
    // Every write keeps the total the sum of the slots (a field may repeat
    // an index under another spelling: the last one counts, as in Lua).
    (wheel.counts.values().sum::<i128>() == wheel.total).then_some(wheel)
}

fn avail(p: &Params, state: &State) -> i128 {
    match (*p, state) {
        (
            Params::Gcra {
                interval, capacity, ..
            },
            State::Gcra { debt, .. },
        ) => {
            if *debt >= capacity {
                0
            } else {
                (capacity - debt) / interval
            }
        }
        (Params::Fixed { limit, .. }, State::Fixed { count, .. }) => limit - count,
        (Params::Sliding { limit, .. }, State::Sliding(w)) => limit - w.live,
        (Params::WarmUp(_), State::WarmUp(w)) => w.avail(),
        _ => unreachable_state(),
    }
}

pub(crate) fn decide(p: &Params, state: &State, c: &Clock, take: i128) -> Verdict {
    match (*p, state) {
        (
            Params::Gcra {
                interval, capacity, ..
            },
            State::Gcra { debt, .. },
        ) => {
            let wanted = debt + take * interval;
            if wanted <= capacity {
                return [1, capacity - wanted, 0, wanted];
            }
            let retry = if take * interval <= capacity {
                wanted - capacity
            } else {
                -1
            };
            let headroom = if *debt < capacity { capacity - debt } else { 0 };
            [0, headroom, retry, *debt]
        }
        (
            Params::Fixed { limit, .. },
            State::Fixed {
                count, until_next, ..
            },
        ) => {
            if take <= limit - count {
                let used = count + take;
                let reset = if used > 0 { *until_next } else { 0 };
                return [1, limit - used, 0, reset];
            }
            let retry = if take <= limit { *until_next } else { -1 };
            let reset = if *count > 0 { *until_next } else { 0 };
            [0, limit - count, retry, reset]
        }
        (Params::Sliding { period, n, limit }, State::Sliding(w)) => {
            if take <= limit - w.live {
                let reset = if take > 0 {
                    full_at(c, period, n, w.current)
                } else {
                    w.reset(c, period, n)
                };
                return [1, limit - w.live - take, 0, reset];
            }
            let mut retry = -1;
            if take <= limit {
                // Move the window forward one slot at a time until enough has
                // left; past the head nothing more leaves (a state whose
                // total disagrees with its slots then never fits: "never").
                let (mut still, mut e) = (w.live, w.current);
                while take > limit - still && e - n <= w.head {
                    e += 1;
                    let leaving = e - n;
                    if leaving >= 0 && leaving + n > w.head && leaving <= w.head {
                        still -= w.slot(leaving, n);
                    }
                }
                if take <= limit - still {
                    retry = (slot_start(e, period, n) - c.now) * c.unit;
                }
            }
            [0, limit - w.live, retry, w.reset(c, period, n)]
        }
        (Params::WarmUp(_), State::WarmUp(w)) => w.decide(take),
        _ => unreachable_state(),
    }
}

pub(crate) fn admit(
    store: &mut dyn Store,
    i: usize,
    p: &Params,
    state: &mut State,
    c: &Clock,
    take: i128,
) {
    if take <= 0 {
        return;
    }
    match (*p, state) {
        (
            Params::Gcra {
                interval, scale, ..
            },
            State::Gcra { debt, cur, modulus },
        ) => {
            gcra_store(
                store,
                i,
                c,
                scale,
                (*cur, *modulus),
                *debt + take * interval,
            );
        }
        (
            Params::Fixed { .. },
            State::Fixed {
                window,
                count,
                until_next,
            },
        ) => fixed_store(store, i, c, *window, *count + take, *until_next),
        (Params::Sliding { period, n, .. }, State::Sliding(w)) => {
            if w.foreign || w.current - w.head >= n {
                store.del(i);
                w.counts.clear();
                w.total = 0;
            } else {
                for e in w.head + 1..=w.current {
                    let index = e % n;
                    if let Some(old) = w.counts.remove(&index) {
                        w.total -= old;
                        store.hdel(i, &index.to_string());
                    }
                }
            }
            let index = w.current % n;
            let count = w.counts.entry(index).or_insert(0);
            *count += take;
            let count = *count;
            w.total += take;
            store.hset(
                i,
                &[
                    ("h", w.current.to_string()),
                    ("t", w.total.to_string()),
                    (&index.to_string(), count.to_string()),
                ],
            );
            store.pexpire(i, c.ttl_ms(full_at(c, period, n, w.current)));
        }
        (Params::WarmUp(_), State::WarmUp(w)) => {
            if let Some((value, until_cold)) = w.admit(take) {
                store.set(i, &value, c.ttl_ms(until_cold));
            }
        }
        _ => unreachable_state(),
    }
}

fn refund(
    store: &mut dyn Store,
    i: usize,
    p: &Params,
    state: &mut State,
    c: &Clock,
    r: i128,
    x: i128,
) {
    match (*p, state) {
        (
            Params::Gcra {
                interval, scale, ..
            },
            State::Gcra { debt, cur, modulus },
        ) => {
            // Only the part of the lease still ahead of now, never more than
            // the debt (see the script).
            let ahead = x - (c.now - c.stamp) * c.unit * scale;
            let back = (r * interval).min(ahead).min(*debt);
            if back > 0 {
                gcra_store(store, i, c, scale, (*cur, *modulus), *debt - back);
            }
        }
        (
            Params::Fixed { period, .. },
            State::Fixed {
                window,
                count,
                until_next,
            },
        ) => {
            if *count > 0 && *window == c.stamp / period {
                fixed_store(store, i, c, *window, *count - r.min(*count), *until_next);
            }
        }
        (Params::Sliding { period, n, .. }, State::Sliding(w)) => {
            if w.foreign {
                return;
            }
            let e = epoch_of(c.stamp, period, n);
            if e > w.current - n && e <= w.head {
                let index = e % n;
                let have = w.counts.get(&index).copied().unwrap_or(0);
                let back = r.min(have);
                if back <= 0 {
                    return;
                }
                if w.total - back <= 0 {
                    store.del(i);
                } else {
                    let left = have - back;
                    if left == 0 {
                        store.hdel(i, &index.to_string());
                    } else {
                        store.hset(i, &[(&index.to_string(), left.to_string())]);
                    }
                    store.hset(i, &[("t", (w.total - back).to_string())]);
                }
            }
        }
        (Params::WarmUp(_), State::WarmUp(w)) => {
            // `x` is unused, as in the script.
            if let Some((value, until_cold)) = w.refund(r) {
                store.set(i, &value, c.ttl_ms(until_cold));
            }
        }
        _ => unreachable_state(),
    }
}

/// States are loaded from the same `Params` they are decided with.
fn unreachable_state() -> ! {
    unreachable!("a state is always decided with the parameters it was loaded with")
}

/// Stores the TAT `now + debt` modulo M (`at`: `now mod M` and `M`).
pub(crate) fn gcra_store(
    store: &mut dyn Store,
    i: usize,
    c: &Clock,
    scale: i128,
    at: (i128, i128),
    debt: i128,
) {
    let (cur, modulus) = at;
    if debt <= 0 {
        store.del(i);
    } else {
        let tat = div_rem(cur + debt, modulus).1;
        // Formatted on the stack: the admission's hot path allocates nothing.
        let mut digits = itoa::Buffer::new();
        store.set(i, digits.format(tat), c.ttl_ms(cdiv(debt, scale)));
    }
}

fn fixed_store(
    store: &mut dyn Store,
    i: usize,
    c: &Clock,
    window: i128,
    count: i128,
    until_next: i128,
) {
    if count <= 0 {
        store.del(i);
    } else {
        store.set(
            i,
            &format!("{} {}", clamp(window), clamp(count)),
            c.ttl_ms(until_next),
        );
    }
}

fn epoch_of(t: i128, period: i128, n: i128) -> i128 {
    let q = t / period;
    q * n + (t - q * period) * n / period
}

fn slot_start(e: i128, period: i128, n: i128) -> i128 {
    let a = e / n;
    a * period + cdiv((e - a * n) * period, n)
}

/// Time (ns) until the window no longer holds epoch `e`.
fn full_at(c: &Clock, period: i128, n: i128, e: i128) -> i128 {
    (slot_start(e + n, period, n) - c.now).max(0) * c.unit
}

impl Wheel {
    fn slot(&self, e: i128, n: i128) -> i128 {
        self.counts.get(&(e % n)).copied().unwrap_or(0)
    }

    fn reset(&self, c: &Clock, period: i128, n: i128) -> i128 {
        let oldest = (self.current - (n - 1)).max(0);
        let mut e = self.head;
        while e >= oldest {
            if self.slot(e, n) > 0 {
                return full_at(c, period, n, e);
            }
            e -= 1;
        }
        0
    }
}

#[cfg(test)]
mod tests;
