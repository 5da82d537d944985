//! Shell completions and man pages, generated from the command line's
//! clap definition ([`crate::cli::Cli`]) so that they cannot drift from it.
//!
//! - `tollgate completions <shell>` prints the completion script of bash,
//!   zsh, fish, elvish or PowerShell on stdout (clap_complete), to be saved
//!   where the shell loads completions from (the README's "Install").
//! - `tollgate man` prints the `tollgate(1)` page in roff on stdout
//!   (clap_mangen); `tollgate man --out-dir DIR` writes instead one page per
//!   command, `tollgate.1` and `tollgate-<command>.1` (`tollgate-serve.1`,
//!   …), as packagers install them.
//!
//! Generated at run time rather than by a build script: the binary a user
//! has is the one the pages describe, and no build step writes outside
//! cargo's target directory.

use std::io::{self, Write};
use std::path::Path;

use anyhow::Context as _;
use clap::CommandFactory as _;
use clap_complete::Shell;

use crate::cli::Cli;

/// The binary's name, as the completion scripts complete it.
const BIN: &str = "tollgate";

/// Writes `shell`'s completion script for `tollgate`.
pub fn completions(shell: Shell, out: &mut dyn Write) {
    let mut command = Cli::command();
    clap_complete::generate(shell, &mut command, BIN, out);
}

/// Writes the `tollgate(1)` man page in roff.
///
/// # Errors
///
/// When `out` cannot be written.
pub fn man_page(out: &mut dyn Write) -> io::Result<()> {
    clap_mangen::Man::new(Cli::command()).render(out)
}

/// Writes `tollgate.1` and a `tollgate-<command>.1` per subcommand into
/// `dir` (created if missing).
///
/// # Errors
///
/// When `dir` cannot be created or a page cannot be written.
pub fn man_pages(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    clap_mangen::generate_to(Cli::command(), dir)
        .with_context(|| format!("writing man pages into {}", dir.display()))
}

#[cfg(test)]
mod tests {
    use std::process::{Command, Stdio};

    use super::*;

    /// Every subcommand's name, from the definition itself.
    fn subcommands() -> Vec<String> {
        let names: Vec<String> = Cli::command()
            .get_subcommands()
            .filter(|c| c.get_name() != "help")
            .map(|c| c.get_name().to_owned())
            .collect();
        for expected in ["serve", "loadgen", "simulate", "completions", "man"] {
            assert!(
                names.iter().any(|n| n == expected),
                "{expected} in {names:?}"
            );
        }
        names
    }

    fn completion(shell: Shell) -> String {
        let mut out = Vec::new();
        completions(shell, &mut out);
        String::from_utf8(out).expect("UTF-8 script")
    }

    /// Runs `program args` with `input` on stdin; its status and stderr.
    fn run(program: &str, args: &[&str], input: &str) -> (bool, String) {
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{program} runs (.ci/deps installs it): {e}"));
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(input.as_bytes())
            .expect("input written");
        let output = child.wait_with_output().expect("exits");
        (
            output.status.success(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    }

    #[test]
    fn every_shell_completes_every_subcommand() {
        let names = subcommands();
        for shell in [
            Shell::Bash,
            Shell::Zsh,
            Shell::Fish,
            Shell::Elvish,
            Shell::PowerShell,
        ] {
            let script = completion(shell);
            for name in &names {
                assert!(script.contains(name.as_str()), "{shell}: no {name}");
            }
            // An option of a subcommand, so that the scripts go below the
            // top level.
            assert!(script.contains("log-format"), "{shell}: no --log-format");
        }
    }

    #[test]
    fn bash_completion_parses_and_completes_subcommands() {
        let script = completion(Shell::Bash);
        let (ok, stderr) = run("bash", &["-n"], &script);
        assert!(ok, "bash -n: {stderr}");
        // Sourced and asked, as bash asks it after `tollgate se<TAB>`.
        let probe = format!(
            "{script}\nCOMP_WORDS=(tollgate se); COMP_CWORD=1; COMP_LINE='tollgate se'; COMP_POINT=11\n\
             _tollgate tollgate se tollgate\nprintf '%s\\n' \"${{COMPREPLY[@]}}\" >&2\n"
        );
        let (ok, stderr) = run("bash", &[], &probe);
        assert!(ok, "bash: {stderr}");
        assert_eq!(stderr.trim(), "serve", "completions of `se`");
    }

    #[test]
    fn man_page_renders_with_every_subcommand() {
        let mut out = Vec::new();
        man_page(&mut out).expect("rendered");
        let roff = String::from_utf8(out).expect("UTF-8 roff");
        assert!(roff.contains(".TH tollgate 1"), "{roff}");
        for name in subcommands() {
            assert!(
                roff.contains(&format!("tollgate\\-{name}")),
                "no {name}: {roff}"
            );
        }
        // groff reads it as a man page without a warning.
        let (ok, stderr) = run("groff", &["-man", "-Tutf8", "-ww", "-z"], &roff);
        assert!(ok && stderr.is_empty(), "groff: {stderr}");
    }

    #[test]
    fn man_pages_cover_every_command() {
        let dir = std::env::temp_dir().join(format!("tollgate-man-{}", std::process::id()));
        man_pages(&dir).expect("written");
        for name in subcommands() {
            let page = dir.join(format!("tollgate-{name}.1"));
            let roff = std::fs::read_to_string(&page).expect("page written");
            assert!(roff.contains(&format!(".TH tollgate-{name} 1")), "{roff}");
        }
        let serve = std::fs::read_to_string(dir.join("tollgate-serve.1")).expect("serve page");
        assert!(serve.contains("log\\-format"), "{serve}");
        std::fs::remove_dir_all(&dir).expect("cleaned");
    }
}
