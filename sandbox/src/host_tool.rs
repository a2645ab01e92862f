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
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
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
    // Killed only while unreaped, so the signal can never reach a reused pid.
    let timed_out = match exits_within(&child, timeout) {
        Ok(exited) => !exited,
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(e);
        }
    };
    if timed_out {
        let _ = child.kill();
    }
    let status = child.wait()?;
    Ok(HostToolOutput {
        exit_code: status.code(),
        timed_out,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    })
}

/// Blocks until `child` has exited (true) or `timeout` has passed (false), leaving it unreaped.
/// Its pidfd wakes the caller at the exit: a short tool (a toolchain's `--version`, on the path
/// of a batch's first verdicts) is not held back by a polling interval.
fn exits_within(child: &Child, timeout: Duration) -> std::io::Result<bool> {
    // SAFETY: pidfd_open on our own child, not yet reaped; it returns a new descriptor or -1.
    let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, child.id() as libc::pid_t, 0) };
    if raw < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `raw` is a descriptor this call just opened and nothing else owns.
    let pidfd = unsafe { OwnedFd::from_raw_fd(raw as i32) };
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let mut p = libc::pollfd {
            fd: pidfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // Rounded up: a wake-up a little early would only loop.
        let ms = left.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd for the duration of the call.
        match unsafe { libc::poll(&mut p, 1, ms) } {
            n if n > 0 => return Ok(true),
            0 if left.is_zero() => return Ok(false),
            0 => continue,
            _ => {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str, timeout: Duration) -> HostToolOutput {
        let args = [OsString::from("-c"), OsString::from(script)];
        run_host_tool(Path::new("/bin/sh"), &args, &[], Path::new("/"), timeout).unwrap()
    }

    #[test]
    fn a_tool_that_ends_gives_its_status_and_output() {
        let out = sh("echo out; echo err >&2; exit 3", Duration::from_secs(30));
        assert_eq!(out.exit_code, Some(3));
        assert!(!out.timed_out);
        assert_eq!(
            (out.stdout.as_str(), out.stderr.as_str()),
            ("out\n", "err\n")
        );
    }

    #[test]
    fn a_tool_past_its_time_is_killed() {
        let out = sh("echo started; exec sleep 30", Duration::from_millis(200));
        assert!(out.timed_out);
        assert_eq!(out.exit_code, None, "killed by a signal");
        assert_eq!(out.stdout, "started\n");
    }

    #[test]
    fn a_tool_that_closes_its_output_and_goes_on_is_still_waited_for() {
        // The exit, not the end of its output, ends the wait.
        let out = sh("exec >&- 2>&-; sleep 0.3; exit 4", Duration::from_secs(30));
        assert_eq!(out.exit_code, Some(4));
        assert!(!out.timed_out);
    }
}
