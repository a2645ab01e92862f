//! Host tool processes: trusted programs the server itself runs *outside* any sandbox: `python -m
//! pip` building the per-task package cache (`crate::packages`, [`run_host_tool`]), and a model
//! server the user asked for (`rollout --local-model`, [`start_host_service`]).
//!
//! Never for untrusted code: the child runs as the server, with the server's file system and
//! network. What keeps it honest is what it is asked to do (pip with `--only-binary=:all:`, so no
//! package's build code runs on the host) and what it is given: a cleared environment plus the
//! listed variables, its own working dir, a wall-clock limit after which it is killed, and capped
//! output. It lives here because this module is the only one that starts processes.

use std::ffi::OsString;
use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// What a host tool did.
#[derive(Debug, Clone)]
pub struct HostToolOutput {
    /// `None`: killed (by a signal, or at the time limit).
    pub exit_code: Option<i32>,
    pub timed_out: bool,
    /// The last 64 KiB of stdout and stderr, lossily decoded.
    pub stdout: String,
    pub stderr: String,
}

/// Output kept per stream (the tail: errors come last).
const KEEP: usize = 64 << 10;

/// Runs `program args` in `cwd` with only `env` in its environment, killed after `timeout`.
/// Blocking: call it on a blocking thread. `Err` when it cannot be started at all.
pub fn run_host_tool(
    program: &Path,
    args: &[OsString],
    env: &[(String, String)],
    cwd: &Path,
    timeout: Duration,
) -> std::io::Result<HostToolOutput> {
    #[allow(clippy::disallowed_methods)] // the sandbox module is where processes start (see above)
    let mut child = Command::new(program)
        .args(args)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    // Drain both pipes on threads so a chatty tool never blocks on a full pipe.
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let mut chunk = [0u8; 8192];
                while let Ok(n) = p.read(&mut chunk) {
                    if n == 0 {
                        break;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    if buf.len() > 2 * KEEP {
                        buf.drain(..buf.len() - KEEP);
                    }
                }
            }
            let start = buf.len().saturating_sub(KEEP);
            String::from_utf8_lossy(&buf[start..]).into_owned()
        })
    };
    let out = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let deadline = Instant::now() + timeout;
    let mut timed_out = false;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() >= deadline {
            timed_out = true;
            let _ = child.kill();
            break child.wait()?;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Ok(HostToolOutput {
        exit_code: status.code(),
        timed_out,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    })
}

/// Variables a host service keeps from the caller's environment; nothing else (no API key or
/// token reaches it).
const SERVICE_ENV: &[&str] = &["PATH", "HOME", "LANG", "TMPDIR"];

/// Starts `program args` as a long-lived trusted host service (a model server the user asked for),
/// with stdin closed, stdout and stderr appended to `log`, and only [`SERVICE_ENV`] of the
/// caller's environment. The kernel kills it when the thread that started it exits
/// (`PR_SET_PDEATHSIG`): start it from a thread that lives as long as the service should (a
/// runtime's main thread); the caller kills and reaps it otherwise.
#[allow(clippy::disallowed_methods)] // the sandbox crate is where processes start (see above)
pub fn start_host_service(program: &Path, args: &[OsString], log: &Path) -> std::io::Result<Child> {
    use std::os::unix::process::CommandExt;
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?;
    let err = out.try_clone()?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env_clear()
        .envs(
            SERVICE_ENV
                .iter()
                .filter_map(|k| std::env::var_os(k).map(|v| (k, v))),
        )
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err);
    // SAFETY: the closure runs in the child between fork and exec and makes one
    // async-signal-safe system call (prctl).
    unsafe {
        cmd.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                .map_err(std::io::Error::from)
        });
    }
    cmd.spawn()
}
