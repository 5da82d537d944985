//! Running the `tollgate` binary with a deadline.

#![allow(dead_code)]

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What a run of the binary left.
pub struct Run {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// stdout parsed as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|error| {
            panic!(
                "stdout is not JSON ({error}):\n{}\nstderr:\n{}",
                self.stdout, self.stderr
            )
        })
    }

    /// Asserts a clean failure: non-zero, the message, no panic.
    pub fn assert_refused(&self, code: i32, message: &str) {
        assert_eq!(self.code, Some(code), "stderr: {}", self.stderr);
        assert!(
            self.stderr.contains(message),
            "expected {message:?} in stderr:\n{}",
            self.stderr
        );
        assert!(!self.stderr.contains("panicked"), "{}", self.stderr);
    }
}

/// Runs `tollgate ARGS`, killing it after `deadline`.
pub fn tollgate(args: &[&str], deadline: Duration) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the tollgate binary starts");
    let mut stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let out = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    let err = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if started.elapsed() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("tollgate {args:?} ran past its {deadline:?} deadline");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Run {
        code: status.code(),
        stdout: out.join().expect("reader"),
        stderr: err.join().expect("reader"),
    }
}

/// A `tollgate serve` process whose stderr is read on a thread, so that a
/// silent server cannot hang a test: what it says is waited for with a
/// deadline, and every line read is kept in `seen`. Killed when dropped.
pub struct Server {
    pub child: std::process::Child,
    pub seen: Vec<String>,
    lines: std::sync::mpsc::Receiver<String>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    /// Starts `command`, its stderr piped and its stdout discarded.
    pub fn spawn(command: &mut Command) -> Server {
        use std::io::{BufRead, BufReader};
        let mut child = command
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("tollgate starts");
        let stderr = child.stderr.take().expect("stderr piped");
        let (send, lines) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        Server {
            child,
            seen: Vec::new(),
            lines,
            reader: Some(reader),
        }
    }

    /// The first stderr line of which `found` makes something, within 20 s.
    pub fn wait_for<T>(&mut self, mut found: impl FnMut(&str) -> Option<T>) -> T {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let line = self
                .lines
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .expect("the server says where it listens");
            self.seen.push(line.clone());
            if let Some(value) = found(&line) {
                return value;
            }
        }
    }

    /// The HTTP API's address, from the server's "the HTTP API on ADDR;" line.
    pub fn http_addr(&mut self) -> std::net::SocketAddr {
        self.wait_for(|line| {
            let rest = line.split("the HTTP API on ").nth(1)?;
            Some(
                rest.split(';')
                    .next()
                    .and_then(|addr| addr.trim().parse().ok())
                    .expect("an address"),
            )
        })
    }

    /// SIGTERM, then the exit status within 20 s; every stderr line is in
    /// `seen` afterwards.
    pub fn stop(&mut self) -> std::process::ExitStatus {
        let pid =
            nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).expect("a pid fits in i32"));
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM sent");
        let stopped = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("waitable") {
                break status;
            }
            assert!(
                Instant::now() < stopped,
                "the server did not stop on SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        if let Some(reader) = self.reader.take() {
            reader.join().expect("the stderr reader");
        }
        self.seen.extend(self.lines.try_iter());
        status
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
