//! The `tollgate` binary: everything is in the library, see [`tollgate_cli`].

// musl's malloc serialises threads on one lock; the static image's binary
// takes mimalloc instead (glibc's malloc is kept where it is the libc).
#[cfg(all(feature = "mimalloc", target_env = "musl"))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    tollgate_cli::run()
}
