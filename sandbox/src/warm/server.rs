//! The warm backend's long-lived server: one pre-started interpreter (`server.py`) per sandbox
//! that forks every script run instead of starting Python from scratch, which is most of the cost
//! of a fresh execution. One run of it, on the Rust side, is `run.rs`'s `WarmRun`.
//!
//! Isolation per run stays the fresh backend's: the server is spawned like any sandboxed process
//! (new PID, mount, network, IPC and UTS namespaces, host dirs hidden, `no_new_privs`), and each
//! run then gets its own PID, mount and IPC namespaces (and network, see [`RUN_NAMESPACES`]), a
//! fresh `/proc`, its own uid, rlimits, a Landlock domain and the same seccomp filters. The values
//! (ids, limits, the compiled BPF, a Landlock ruleset fd) are all prepared in Rust; the Python side
//! only applies them. Each run's memory and pids groups are its own too, reused from run to run
//! (`cgroup/pool.rs`): the child moves itself in before anything of the program runs. What
//! differs: runs share the server's string-hash seed and (where Landlock scopes abstract sockets)
//! its empty network namespace.
//!
//! One thread per server reads its replies and completes the runs' oneshots, so a run can be
//! awaited from any tokio runtime (the sync `Env` bridge uses short-lived ones).

use std::collections::HashMap;
use std::ffi::CString;
use std::io::IoSlice;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use nix::sys::socket::{self, AddressFamily, ControlMessage, MsgFlags, SockFlag, SockType};
use serde::Deserialize;
use tokio::sync::oneshot;

use crate::cgroup::{CellPool, Lease, RunCgroup};
use crate::child::{ChildPlan, cstr};
use crate::isolation;
use crate::prepare::{self, Inner, RunGuard};
use crate::probe::Layers;
use crate::request::SandboxError;
use crate::seccomp;
use crate::spawn;
use crate::supervise::Exit;
use crate::uids::RunUid;

/// The server, after the run reporter it calls for runs with a report channel (issue 12).
const SERVER: &str = concat!(include_str!("../report.py"), include_str!("server.py"));
/// The server's request loop (`fork_loop.c`, built by `build.rs`; issue 17), handed to each
/// server as a sealed memfd on fd 4 that it loads with `ctypes`.
const FORK_LOOP: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/fork_loop.so"));

/// Namespaces each run's main process unshares (those the machine offers), besides the PID
/// namespace it is forked into. The network namespace is added only where Landlock cannot scope
/// abstract unix sockets (ABI < 6): runs already share the server's empty network namespace and may
/// only create `AF_UNIX` sockets (seccomp), so abstract sockets are the one channel between
/// concurrent runs there, and a new namespace per run costs ~0.6 ms plus the kernel's teardown.
const RUN_NAMESPACES: u64 = (libc::CLONE_NEWNS | libc::CLONE_NEWIPC) as u64;

/// What a run holds until its whole tree is gone: its uid, and its share of its groups. Never
/// read: held for their drop, which gives them back.
pub(crate) struct Held {
    pub _uid: Option<RunUid>,
    pub _cell: Option<Arc<Lease>>,
}

/// Runs in flight: who waits for each reply, and what the run holds until then.
type Pending = Arc<Mutex<HashMap<u64, (oneshot::Sender<Result<Exit, String>>, Held)>>>;

/// A running fork server. Dropping it kills the server, and with its PID namespace every run.
pub(crate) struct ForkServer {
    sock: OwnedFd,
    pending: Pending,
    alive: Arc<AtomicBool>,
    /// The runs' own groups (none without cgroups), shared by every server of the sandbox.
    cells: Option<Arc<CellPool>>,
    process: RunGuard,
}

fn run_namespaces(layers: &Layers) -> u64 {
    let scoped = layers.landlock && isolation::landlock_abi() >= 6;
    if scoped {
        RUN_NAMESPACES
    } else {
        RUN_NAMESPACES | libc::CLONE_NEWNET as u64
    }
}

#[derive(Deserialize)]
struct Reply {
    id: u64,
    #[serde(default)]
    status: Option<i32>,
    #[serde(default)]
    cpu_ms: u64,
    #[serde(default)]
    max_rss: u64,
    #[serde(default)]
    error: Option<String>,
}

impl ForkServer {
    /// Starts a server for `inner`'s configuration, its runs in groups from `cells`. Blocking
    /// (the interpreter's start-up).
    pub fn start(inner: &Inner, cells: Option<Arc<CellPool>>) -> Result<ForkServer, SandboxError> {
        let layers = &inner.layers;
        let (ours, theirs) = socket::socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .map_err(|e| SandboxError::Setup {
            stage: "fork server socket",
            source: e.into(),
        })?;
        let (err_r, err_w) = prepare::pipe_pair()?;
        let null = || {
            std::fs::File::open("/dev/null")
                .map(OwnedFd::from)
                .map_err(SandboxError::setup("/dev/null"))
        };
        let mut guard = RunGuard::default();
        let config_limits = &inner.config.limits;
        if let Some(root) = &layers.cgroup {
            // The server, its children forked ahead, and what each child writes before it moves
            // into its own groups (its first pages stay charged here until it exits): bounded by
            // the runs' sum, as when the runs themselves were in this group.
            let n = inner.max_concurrent as u64;
            let memory = config_limits
                .memory_bytes
                .saturating_mul(n)
                .saturating_add(256 << 20);
            let pids = (config_limits.max_processes.saturating_add(2) as u64)
                .saturating_mul(n)
                .saturating_add(16)
                .min(u64::from(u32::MAX)) as u32;
            // A replaced server may still be on its way out: every server has its own group.
            static STARTED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            let name = format!("fork-server-{}", STARTED.fetch_add(1, Ordering::Relaxed));
            guard.cgroup = Some(
                RunCgroup::create(root, &name, memory, pids)
                    .map_err(SandboxError::setup("fork server cgroup"))?,
            );
        }
        let py = &inner.python.exe;
        let mut argv = prepare::interpreter_argv(inner)?;
        argv.push(c"-c".to_owned());
        argv.push(CString::new(SERVER).unwrap_or_default());
        let child_plan = ChildPlan {
            program: argv[0].clone(),
            argv,
            envp: {
                // The loader resolves every symbol at start-up: with lazy binding each child's first
                // call through a library's PLT wrote its GOT page (a copy-on-write fault, ~5 per
                // run). server.py removes the variable before anything runs, so programs never see it.
                let mut envp = prepare::environment(inner, &inner.work_root);
                envp.push(c"LD_BIND_NOW=1".to_owned());
                envp
            },
            workdir: cstr(&inner.work_root)
                .ok_or_else(|| SandboxError::InvalidPath(inner.work_root.display().to_string()))?,
            rlimits: vec![(libc::RLIMIT_CORE, 0, 0)],
            ids: None,
            mounts: layers.mounts.clone(),
            clone_flags: layers.clone_flags,
            landlock: None,
            seccomp: Vec::new(),
            stdin: null()?,
            stdout: null()?,
            stderr: err_w,
            extra_fds: vec![(theirs, 3), (fork_loop()?, 4)],
            cgroup: guard.cgroup.as_ref().map(|c| c.join()).unwrap_or_default(),
            landlock_paths: Vec::new(),
        };
        guard.child = Some(spawn::spawn_blocking(child_plan)?);
        log_stderr(err_r);

        // Issue 17: the filter in two stacked parts (`seccomp::build_for_fork_server`): the server
        // installs its part once, on itself, and each child adds the rest; together they are the
        // whole filter, as on the fresh backend.
        let (server_seccomp, seccomp) = match layers.seccomp.is_empty() {
            true => (Vec::new(), Vec::new()),
            false => match seccomp::build_for_fork_server() {
                Ok((server, child)) => (vec![hex(&server)], vec![hex(&child)]),
                Err(_) => (Vec::new(), layers.seccomp.iter().map(|p| hex(p)).collect()),
            },
        };
        let init = serde_json::json!({
            "seccomp": seccomp,
            "server_seccomp": server_seccomp,
            "unshare": layers.clone_flags & run_namespaces(layers),
            "mount_proc": true,
            "proc_access": isolation::proc_access(),
            "sys_landlock_add_rule": libc::SYS_landlock_add_rule,
            "sys_landlock_restrict_self": libc::SYS_landlock_restrict_self,
            // The caller's trusted programs (a test harness: compiling it cost ~1.4 ms per run).
            "precompiled": &inner.config.precompiled,
        });
        let server = ForkServer {
            sock: ours,
            pending: Pending::default(),
            alive: Arc::new(AtomicBool::new(true)),
            cells,
            process: guard,
        };
        server
            .send(init.to_string().as_bytes(), &[])
            .map_err(SandboxError::setup("fork server init"))?;
        server.read_replies()?;
        tracing::debug!(python = %py.display(), "fork server started");
        Ok(server)
    }

    /// Where its runs' own groups come from (`None`: the sandbox has no cgroups).
    pub fn cells(&self) -> Option<&Arc<CellPool>> {
        self.cells.as_ref()
    }

    /// False once the server has exited (it is then replaced on the next run).
    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }

    /// Asks for a run; the child-side `fds` are duplicated into the server by the kernel.
    pub fn fork(
        &self,
        id: u64,
        body: &[u8],
        fds: &[RawFd],
        held: Held,
    ) -> Result<oneshot::Receiver<Result<Exit, String>>, SandboxError> {
        let (tx, rx) = oneshot::channel();
        self.pending
            .lock()
            .map_err(|_| SandboxError::Closed)?
            .insert(id, (tx, held));
        // The header line is what the server's native loop reads; the body is the child's.
        let mut msg = format!("run {id}\n").into_bytes();
        msg.extend_from_slice(body);
        if let Err(e) = self.send(&msg, fds) {
            if let Ok(mut p) = self.pending.lock() {
                p.remove(&id);
            }
            // Its end of the socket is gone (or it stopped reading): this server is done.
            self.alive.store(false, Ordering::Release);
            return Err(SandboxError::Setup {
                stage: "fork server request",
                source: e,
            });
        }
        Ok(rx)
    }

    /// Kills run `id`'s whole tree (its reply follows as usual). Unknown ids are ignored.
    pub fn kill(&self, id: u64) {
        if let Err(e) = self.send(format!("kill {id}").as_bytes(), &[]) {
            tracing::warn!(error = %e, id, "cannot ask the fork server to kill a run");
        }
    }

    fn send(&self, msg: &[u8], fds: &[RawFd]) -> std::io::Result<()> {
        let iov = [IoSlice::new(msg)];
        let cmsg = [ControlMessage::ScmRights(fds)];
        let cmsgs: &[ControlMessage<'_>] = if fds.is_empty() { &[] } else { &cmsg };
        // Never blocks the runtime: the server drains its socket continuously; a full buffer
        // means it is stuck, which is an error, not something to wait for.
        socket::sendmsg::<()>(
            self.sock.as_raw_fd(),
            &iov,
            cmsgs,
            MsgFlags::MSG_DONTWAIT,
            None,
        )
        .map(|_| ())
        .map_err(std::io::Error::from)
    }

    /// The reply reader: one thread, ends when the server's end closes.
    fn read_replies(&self) -> Result<(), SandboxError> {
        let sock = self.sock.try_clone().map_err(SandboxError::setup("dup"))?;
        let pending = self.pending.clone();
        let alive = self.alive.clone();
        let process = match &self.process.child {
            Some(child) => Some(
                child
                    .pidfd
                    .try_clone()
                    .map_err(SandboxError::setup("dup"))?,
            ),
            None => None,
        };
        let reader = move || {
            let mut buf = vec![0u8; 64 << 10];
            loop {
                match socket::recv(sock.as_raw_fd(), &mut buf, MsgFlags::empty()) {
                    Ok(0) => break,
                    Ok(n) => dispatch(&pending, &buf[..n]),
                    Err(nix::errno::Errno::EINTR) => continue,
                    Err(e) => {
                        tracing::warn!(error = %e, "fork server socket failed");
                        break;
                    }
                }
            }
            alive.store(false, Ordering::Release);
            // Dropping the senders fails every run still waiting, now. Their uids and groups go
            // back only once the server has ended: it is the init of the runs' PID namespaces'
            // parent, and its end is when the kernel has killed and reaped every run's tree.
            let held: Vec<Held> = match pending.lock() {
                Ok(mut p) => p.drain().map(|(_, (_tx, held))| held).collect(),
                Err(_) => Vec::new(),
            };
            if let (false, Some(process)) = (held.is_empty(), &process) {
                spawn::wait_ended(process);
            }
            drop(held);
        };
        std::thread::Builder::new()
            .name("codegym-forkserver".into())
            .spawn(reader)
            .map(|_| ())
            .map_err(SandboxError::setup("fork server thread"))
    }
}

impl Drop for ForkServer {
    fn drop(&mut self) {
        // Ends the reader thread (and the server, which exits at EOF; `process` makes sure).
        let _ = socket::shutdown(self.sock.as_raw_fd(), socket::Shutdown::Both);
        // Killed and reaped, the server has taken every run's tree with it: what runs still
        // pending hold goes back now (their groups before the sandbox's cgroup root is removed),
        // not whenever the reader thread gets to it.
        drop(std::mem::take(&mut self.process));
        let held: Vec<(_, Held)> = match self.pending.lock() {
            Ok(mut p) => p.drain().map(|(_, entry)| entry).collect(),
            Err(_) => Vec::new(),
        };
        drop(held);
    }
}

fn dispatch(pending: &Pending, msg: &[u8]) {
    let reply: Reply = match serde_json::from_slice(msg) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(error = %e, "malformed reply from the fork server");
            return;
        }
    };
    let result = match (reply.error, reply.status) {
        (Some(e), _) => Err(e),
        (None, Some(status)) => Ok(Exit::from_status(status, reply.cpu_ms, reply.max_rss)),
        (None, None) => Err("reply without a status".into()),
    };
    // The reply comes once the run's process (its PID namespace's init) was reaped: its tree is
    // gone, and its uid may serve another run. Given back before the waiter wakes: the caller's
    // next run (the same slot) must find it free.
    let entry = pending.lock().ok().and_then(|mut p| p.remove(&reply.id));
    if let Some((tx, held)) = entry {
        // Its groups go back once its guard lets go too (after its work dir is removed).
        drop(held);
        let _ = tx.send(result);
    }
}

/// [`FORK_LOOP`] in a sealed memfd: the server maps it from there, and nothing can change it.
fn fork_loop() -> Result<OwnedFd, SandboxError> {
    use nix::fcntl::{FcntlArg, SealFlag, fcntl};
    use nix::sys::memfd::{MFdFlags, memfd_create};
    let fd = memfd_create(
        c"codegym-fork-loop",
        MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING,
    )
    .map_err(|e| SandboxError::setup("fork loop memfd")(e.into()))?;
    let mut file = std::fs::File::from(fd);
    std::io::Write::write_all(&mut file, FORK_LOOP)
        .map_err(SandboxError::setup("fork loop memfd"))?;
    let fd = OwnedFd::from(file);
    let seals = SealFlag::F_SEAL_SEAL
        | SealFlag::F_SEAL_SHRINK
        | SealFlag::F_SEAL_GROW
        | SealFlag::F_SEAL_WRITE;
    fcntl(&fd, FcntlArg::F_ADD_SEALS(seals))
        .map_err(|e| SandboxError::setup("fork loop memfd")(e.into()))?;
    Ok(fd)
}

/// The compiled filter in the kernel's `sock_filter` layout, hex-encoded.
fn hex(program: &[libc::sock_filter]) -> String {
    let mut out = String::with_capacity(program.len() * 16);
    for f in program {
        let mut bytes = Vec::with_capacity(8);
        bytes.extend_from_slice(&f.code.to_ne_bytes());
        bytes.push(f.jt);
        bytes.push(f.jf);
        bytes.extend_from_slice(&f.k.to_ne_bytes());
        for b in bytes {
            out.push_str(&format!("{b:02x}"));
        }
    }
    out
}

/// The server's own stderr (a crash traceback) goes to the log, line by line.
fn log_stderr(fd: OwnedFd) {
    let reader = move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(std::fs::File::from(fd))
            .lines()
            .map_while(Result::ok)
        {
            tracing::warn!(target: "codegym::forkserver", "{line}");
        }
    };
    if let Err(e) = std::thread::Builder::new()
        .name("codegym-forkserver-log".into())
        .spawn(reader)
    {
        tracing::warn!(error = %e, "cannot start the fork server's log thread");
    }
}
