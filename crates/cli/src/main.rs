//! The `tollgate` binary: everything is in the library, see [`tollgate_cli`].

fn main() -> std::process::ExitCode {
    tollgate_cli::run()
}
