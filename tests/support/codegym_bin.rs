//! Support for the tests that run the `codegym` binary itself (`rollout_cli.rs`, `env_pool.rs`,
//! `autocoder_cli.rs`, `metrics.rs`, `tracing.rs`, `server_lifecycle.rs`): starting it with the
//! tests' defaults, collecting how it ended, and starting `codegym serve` until it prints its
//! address. Starting the binary under test is what these tests are for, hence the local
//! `disallowed_methods` allowances (only the sandbox spawns processes in the product).
//!
//! Included with `#[path = "support/codegym_bin.rs"] mod codegym_bin;` (like `rollout_util.rs`),
//! so a test binary compiles only the support it uses.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_codegym");
/// How long any one wait on the binary may take before the test fails.
pub const LIMIT: Duration = Duration::from_secs(300);

/// `program args` with the tests' defaults: warnings only in the logs, no stdin, stdout and stderr
/// piped, killed when dropped. For a test that adds to it before spawning.
pub fn command<I>(program: &str, args: I) -> Command
where
    I: IntoIterator,
    I::Item: AsRef<OsStr>,
{
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd
}

/// `program args` (see [`command`]) started: `program` is [`BIN`] or a wrapper that runs it.
#[allow(clippy::disallowed_methods)] // the test runs the binary under test
pub fn spawn_program<I>(program: &str, args: I) -> Child
where
    I: IntoIterator,
    I::Item: AsRef<OsStr>,
{
    command(program, args)
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {program}: {e}"))
}

/// `codegym args` started (see [`command`]).
pub fn spawn<I>(args: I) -> Child
where
    I: IntoIterator,
    I::Item: AsRef<OsStr>,
{
    spawn_program(BIN, args)
}

/// Waits (at most [`LIMIT`]) for `child` to end: its exit code (-1 if a signal ended it), stdout
/// and stderr.
pub async fn finish(child: Child) -> (i32, String, String) {
    let out = tokio::time::timeout(LIMIT, child.wait_with_output())
        .await
        .expect("codegym finishes")
        .expect("wait for codegym");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A `codegym serve` process and the address its first line announced.
pub struct Serve {
    pub child: Child,
    /// `HOST:PORT`.
    pub addr: String,
}

impl Serve {
    /// Starts `codegym serve args` and waits for its `listening on ADDR` line; its logs go to the
    /// test's stderr.
    pub async fn start<I>(args: I) -> Serve
    where
        I: IntoIterator,
        I::Item: AsRef<OsStr>,
    {
        Self::start_in(Path::new("."), args).await
    }

    /// [`Serve::start`] in the working directory `dir` (relative paths in `args` and in a
    /// `--config` file resolve there).
    pub async fn start_in<I>(dir: &Path, args: I) -> Serve
    where
        I: IntoIterator,
        I::Item: AsRef<OsStr>,
    {
        let mut cmd = command(BIN, [OsStr::new("serve")]);
        cmd.args(args).current_dir(dir);
        Self::start_command(cmd, &[]).await.0
    }

    /// Starts `cmd` (a [`command`] running `codegym serve`) and waits for its first line, then for
    /// the lines the other listeners print, one per prefix in `more` (e.g. `http listening on `,
    /// `metrics listening on `): returns what follows each prefix, in order.
    #[allow(clippy::disallowed_methods)] // the test runs the server binary under test
    pub async fn start_command(mut cmd: Command, more: &[&str]) -> (Serve, Vec<String>) {
        let mut child = cmd
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn codegym serve");
        let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut first = String::new();
        tokio::time::timeout(LIMIT, stdout.read_line(&mut first))
            .await
            .expect("the server prints its address")
            .expect("read the server's stdout");
        let mut found = Vec::new();
        for prefix in more {
            let mut line = String::new();
            tokio::time::timeout(LIMIT, stdout.read_line(&mut line))
                .await
                .expect("the server prints its other addresses")
                .expect("read the server's stdout");
            let rest = line
                .trim()
                .strip_prefix(prefix)
                .unwrap_or_else(|| panic!("`{prefix}ADDR`, got {line:?}"));
            found.push(rest.to_string());
        }
        // Keep reading: the server may print more lines, and a closed pipe would fail its writes.
        tokio::spawn(async move { tokio::io::copy(&mut stdout, &mut tokio::io::sink()).await });
        let addr = first
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("`listening on ADDR`, got {first:?}"))
            .to_string();
        (Serve { child, addr }, found)
    }

    /// `http://HOST:PORT`, as `--env-server` takes it.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        let pid = nix::unistd::Pid::from_raw(self.child.id().expect("running") as i32);
        nix::sys::signal::kill(pid, signal).expect("signal the server");
    }
}
