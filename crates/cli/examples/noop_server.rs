//! A no-op HTTP server (HTTP/1.1 and h2c) for benchmarks and the stall
//! demonstration: `cargo run --release -p tollgate-cli --example
//! noop_server -- --addr 127.0.0.1:8080 [--threads 1] [--stall-after 2s
//! --stall-for 1s]`. Prints `listening on http://ADDRESS` once bound, then
//! serves until killed.

use std::io::Write as _;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use tollgate_cli::noop::{NoopServer, Stall};

/// A no-op HTTP server: 200 OK, empty body, to every request.
#[derive(Debug, Parser)]
struct Args {
    /// Address to bind (port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    addr: SocketAddr,
    /// Worker threads.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Stop answering this long after the start...
    #[arg(long, value_parser = humantime::parse_duration, requires = "stall_for")]
    stall_after: Option<Duration>,
    /// ...for this long.
    #[arg(long, value_parser = humantime::parse_duration, requires = "stall_after")]
    stall_for: Option<Duration>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let stall = args
        .stall_after
        .zip(args.stall_for)
        .map(|(after, length)| Stall { after, length });
    let server = match NoopServer::start(args.addr, args.threads, stall) {
        Ok(server) => server,
        Err(error) => {
            eprintln!("noop_server: cannot serve on {}: {error}", args.addr);
            return ExitCode::FAILURE;
        }
    };
    println!("listening on http://{}", server.address());
    let _ = std::io::stdout().flush();
    loop {
        std::thread::park();
    }
}
