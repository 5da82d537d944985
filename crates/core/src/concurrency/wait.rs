//! Waiting with a deadline on tokio's timer (feature `tokio`).

use std::time::Duration;

use super::config::Denied;
use super::permit::{Permit, Ticket};

/// Waits for `ticket` at most `max_delay`; `timed_out` builds the refusal.
///
/// If the grant and the deadline race, the grant wins when the ticket is
/// polled first (tokio's `timeout` polls the future before the timer), and
/// a grant made after the deadline is released when the ticket is dropped:
/// either way no slot is lost.
pub(crate) async fn within(
    ticket: Ticket,
    max_delay: Duration,
    timed_out: impl FnOnce() -> Denied,
) -> Result<Permit, Denied> {
    if !ticket.is_queued() {
        return Ok(ticket.await);
    }
    match tokio::time::timeout(max_delay, ticket).await {
        Ok(permit) => Ok(permit),
        Err(_) => Err(timed_out()),
    }
}
