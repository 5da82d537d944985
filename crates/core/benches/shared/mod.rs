//! Helpers shared by the bench binaries that measure threads themselves
//! (`eviction`, `striped`), included with `#[path]`.

/// Nanoseconds the calling thread has spent on a CPU
/// (`/proc/thread-self/schedstat`; `None` where there is none).
pub fn thread_cpu_ns() -> Option<u64> {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}
