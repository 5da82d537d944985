//! Property test: a concurrency limiter driven one operation at a time
//! equals a plain reference model, every answer and every count.
//!
//! The model is written from the rules in the module docs, not from the
//! implementation: a counter of slots, a threshold per priority
//! (`⌈limit · share / 100⌉`), three FIFO lanes of waiters served highest
//! priority first and never past a head that does not fit, newcomers
//! refused while a waiter of their priority or higher is queued, and a
//! cost above its priority's threshold refused as a cost.

use std::collections::{HashSet, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use proptest::prelude::*;
use tollgate::concurrency::{ConcurrencyLimiter, Denied, Permit, Priority, Reason, Shares, Ticket};

const MAX_WAITERS: usize = 3;

#[derive(Clone, Debug)]
enum Op {
    TryAcquire(u64, Priority),
    Enqueue(u64, Priority),
    DropPermit(usize),
    DropTicket(usize),
    PollTicket(usize),
    SetLimit(u64),
}

fn priority() -> impl Strategy<Value = Priority> {
    prop_oneof![
        Just(Priority::Critical),
        Just(Priority::Default),
        Just(Priority::Sheddable)
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u64..=5, priority()).prop_map(|(c, p)| Op::TryAcquire(c, p)),
        3 => (0u64..=5, priority()).prop_map(|(c, p)| Op::Enqueue(c, p)),
        3 => any::<usize>().prop_map(Op::DropPermit),
        1 => any::<usize>().prop_map(Op::DropTicket),
        3 => any::<usize>().prop_map(Op::PollTicket),
        1 => (1u64..=8).prop_map(Op::SetLimit),
    ]
}

fn lane(priority: Priority) -> usize {
    match priority {
        Priority::Critical => 0,
        Priority::Default => 1,
        Priority::Sheddable => 2,
    }
}

const ORDER: [Priority; 3] = [Priority::Critical, Priority::Default, Priority::Sheddable];

/// What a ticket of the model is.
#[derive(Clone, Copy, Debug, PartialEq)]
enum ModelTicket {
    /// Admitted at once.
    Ready(u32),
    /// Queued under an id.
    Queued(u64, u32, Priority),
}

struct Model {
    limit: u32,
    in_flight: u32,
    shares: [u32; 3],
    lanes: [VecDeque<(u64, u32)>; 3],
    granted: HashSet<u64>,
    next_id: u64,
}

impl Model {
    fn threshold(&self, priority: Priority) -> u32 {
        (self.limit * self.shares[lane(priority)]).div_ceil(100)
    }

    fn ahead(&self, priority: Priority) -> bool {
        self.lanes[..=lane(priority)].iter().any(|l| !l.is_empty())
    }

    fn waiting(&self) -> usize {
        self.lanes.iter().map(VecDeque::len).sum()
    }

    /// Ok, or the reason and the remaining slots of the priority.
    fn admit(&mut self, cost: u32, priority: Priority) -> Result<(), Reason> {
        // Regression: a cost above the priority's share (not only above the
        // limit) can never fit and is refused, never queued.
        if cost > self.threshold(priority) {
            Err(Reason::Cost)
        } else if self.ahead(priority) {
            Err(Reason::Queued)
        } else if self.in_flight + cost > self.threshold(priority) {
            Err(Reason::Full)
        } else {
            self.in_flight += cost;
            Ok(())
        }
    }

    fn grant(&mut self) {
        for priority in ORDER {
            let l = lane(priority);
            while let Some(&(id, cost)) = self.lanes[l].front() {
                if self.in_flight + cost > self.threshold(priority) {
                    return;
                }
                self.lanes[l].pop_front();
                self.in_flight += cost;
                self.granted.insert(id);
            }
        }
    }

    fn remaining(&self, priority: Priority) -> u32 {
        self.threshold(priority).saturating_sub(self.in_flight)
    }
}

fn check_denied(model: &Model, denied: &Denied, reason: Reason, priority: Priority) {
    assert_eq!(denied.reason(), reason);
    assert_eq!(denied.limit(), model.limit);
    assert_eq!(denied.in_flight(), model.in_flight);
    assert_eq!(denied.remaining(), model.remaining(priority));
}

fn run(ops: Vec<Op>, limit: u64, shares: Shares) {
    let limiter = ConcurrencyLimiter::builder(limit)
        .shares(shares)
        .max_waiters(MAX_WAITERS)
        .build()
        .unwrap();
    let mut model = Model {
        limit: limit as u32,
        in_flight: 0,
        shares: ORDER.map(|p| shares.percent(p) as u32),
        lanes: Default::default(),
        granted: HashSet::new(),
        next_id: 0,
    };
    let mut permits: Vec<(Permit, u32)> = Vec::new();
    let mut tickets: Vec<(Ticket, ModelTicket)> = Vec::new();
    let mut cx = Context::from_waker(Waker::noop());
    for op in ops {
        match op {
            Op::TryAcquire(cost, priority) => {
                let real = limiter.try_acquire_as(cost, priority);
                let before = (model.in_flight, model.limit);
                match (real, model.admit(cost as u32, priority)) {
                    (Ok(permit), Ok(())) => permits.push((permit, cost as u32)),
                    (Err(denied), Err(reason)) => {
                        assert_eq!((model.in_flight, model.limit), before);
                        check_denied(&model, &denied, reason, priority);
                    }
                    (real, expected) => panic!("{op:?}: got {real:?}, the model says {expected:?}"),
                }
            }
            Op::Enqueue(cost, priority) => {
                let real = limiter.enqueue(cost, priority);
                let expected = match model.admit(cost as u32, priority) {
                    Ok(()) => Ok(ModelTicket::Ready(cost as u32)),
                    Err(Reason::Cost) => Err(Reason::Cost),
                    Err(_) if model.waiting() >= MAX_WAITERS => Err(Reason::QueueFull),
                    Err(_) => {
                        let id = model.next_id;
                        model.next_id += 1;
                        model.lanes[lane(priority)].push_back((id, cost as u32));
                        Ok(ModelTicket::Queued(id, cost as u32, priority))
                    }
                };
                match (real, expected) {
                    (Ok(ticket), Ok(m)) => {
                        assert_eq!(ticket.is_queued(), matches!(m, ModelTicket::Queued(..)));
                        tickets.push((ticket, m));
                    }
                    (Err(denied), Err(reason)) => check_denied(&model, &denied, reason, priority),
                    (real, expected) => panic!("{op:?}: got {real:?}, the model says {expected:?}"),
                }
            }
            Op::DropPermit(i) if !permits.is_empty() => {
                let (permit, cost) = permits.swap_remove(i % permits.len());
                drop(permit);
                model.in_flight -= cost;
                model.grant();
            }
            Op::DropTicket(i) if !tickets.is_empty() => {
                let (ticket, m) = tickets.swap_remove(i % tickets.len());
                drop(ticket);
                match m {
                    ModelTicket::Ready(cost) => model.in_flight -= cost,
                    ModelTicket::Queued(id, cost, priority) => {
                        if model.granted.remove(&id) {
                            model.in_flight -= cost;
                        } else {
                            model.lanes[lane(priority)].retain(|&(w, _)| w != id);
                        }
                    }
                }
                model.grant();
            }
            Op::PollTicket(i) if !tickets.is_empty() => {
                let at = i % tickets.len();
                let ready = match tickets[at].1 {
                    ModelTicket::Ready(cost) => Some(cost),
                    ModelTicket::Queued(id, cost, _) => model.granted.remove(&id).then_some(cost),
                };
                match (Pin::new(&mut tickets[at].0).poll(&mut cx), ready) {
                    (Poll::Ready(permit), Some(cost)) => {
                        assert_eq!(permit.cost(), cost);
                        let _done = tickets.swap_remove(at);
                        permits.push((permit, cost));
                    }
                    (Poll::Pending, None) => {}
                    (real, expected) => panic!(
                        "{op:?}: polled {:?}, the model says {expected:?}",
                        real.is_ready()
                    ),
                }
            }
            Op::SetLimit(limit) => {
                limiter.set_limit(limit).unwrap();
                model.limit = limit as u32;
                model.grant();
            }
            _ => {}
        }
        assert_eq!(limiter.in_flight(), model.in_flight, "after {op:?}");
        assert_eq!(limiter.limit(), model.limit);
        assert_eq!(limiter.has_waiters(), model.waiting() > 0, "after {op:?}");
    }
    drop(tickets);
    drop(permits);
    assert_eq!(limiter.in_flight(), 0, "every slot came back");
    assert!(!limiter.has_waiters());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn the_limiter_equals_the_reference_model(
        ops in prop::collection::vec(op(), 1..80),
        limit in 1u64..=8,
        sheddable in 1u8..=100,
        default in 1u8..=100,
    ) {
        let (sheddable, default) = (sheddable.min(default), sheddable.max(default));
        run(ops, limit, Shares::new(sheddable, default).unwrap());
    }

    #[test]
    fn with_default_shares(ops in prop::collection::vec(op(), 1..80), limit in 1u64..=12) {
        run(ops, limit, Shares::default());
    }
}
