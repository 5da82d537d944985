//! How late this machine schedules a thread, measured while a timing test
//! runs: a test that bounds a latency (a decision within its deadline)
//! allows its margin plus the worst stall seen meanwhile, so that a 2-core
//! machine at load 5-8 widens the bound by what it did to every thread,
//! and a quiet one keeps it tight.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::{Duration, Instant};

/// The machine's scheduling delays while it lives: a thread sleeping 1 ms
/// at a time records the most it woke late.
pub struct Stalls {
    worst_us: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Stalls {
    /// Starts the probe thread; it stops when this is dropped.
    pub fn start() -> Stalls {
        use std::sync::atomic::Ordering::Relaxed;
        let worst_us = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::spawn({
            let (worst_us, stop) = (worst_us.clone(), stop.clone());
            move || {
                // Relaxed: a statistic and a flag, ordered with nothing else.
                while !stop.load(Relaxed) {
                    let t = Instant::now();
                    std::thread::sleep(Duration::from_millis(1));
                    let late = t.elapsed().saturating_sub(Duration::from_millis(1));
                    worst_us
                        .fetch_max(u64::try_from(late.as_micros()).unwrap_or(u64::MAX), Relaxed);
                }
            }
        });
        Stalls {
            worst_us,
            stop,
            thread: Some(thread),
        }
    }

    /// The longest stall seen so far.
    pub fn worst(&self) -> Duration {
        Duration::from_micros(self.worst_us.load(std::sync::atomic::Ordering::Relaxed))
    }
}

impl Drop for Stalls {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
