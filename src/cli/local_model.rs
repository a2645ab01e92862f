//! `codegym rollout --local-model FILE.gguf`: a llama.cpp `llama-server` started for the run on a
//! free loopback port, with one parallel slot per episode in flight, and stopped when the run ends.
//!
//! However the run ends, the server goes with it: it is killed when [`LocalModel`] is dropped
//! (normal end, error, panic unwinding), and the kernel kills it if `codegym` itself dies without
//! unwinding (a second Ctrl-C, SIGKILL), through the parent-death signal set in the child before
//! it runs `llama-server`.

use std::io::{Read, Seek};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Context window of each parallel slot, in tokens.
pub const CONTEXT_PER_SLOT: usize = 4096;
/// How long the server may take to load the model and answer `/health`.
const READY_TIMEOUT: Duration = Duration::from_secs(180);

/// A running `llama-server`; killed on drop.
#[derive(Debug)]
pub struct LocalModel {
    child: Child,
    /// `http://127.0.0.1:PORT/v1`.
    pub base_url: String,
    /// Where the server's output goes.
    pub log: PathBuf,
}

/// The name the server answers to: the model file's stem.
pub fn alias(model: &Path) -> String {
    model
        .file_stem()
        .map_or_else(|| "local".into(), |s| s.to_string_lossy().into_owned())
}

/// `llama-server` on `PATH`.
pub fn find_on_path() -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join("llama-server"))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

impl LocalModel {
    /// Starts `server` (a `llama-server` binary) on `model` with `parallel` slots, its output in
    /// `log`, and waits until it answers `/health` with 200.
    pub async fn start(
        server: &Path,
        model: &Path,
        parallel: usize,
        log: PathBuf,
    ) -> anyhow::Result<Self> {
        if !model.is_file() {
            bail!("--local-model {}: no such file", model.display());
        }
        if !is_executable(server) {
            bail!("{} is not an executable llama-server", server.display());
        }
        let alias = alias(model);
        let parallel = parallel.max(1);
        // A port found free may be taken before the server binds it: try a few.
        let mut last_error = None;
        for _ in 0..3 {
            let port = free_port()?;
            let child = spawn(server, model, &alias, port, parallel, &log)?;
            let mut local = LocalModel {
                child,
                base_url: format!("http://127.0.0.1:{port}/v1"),
                log: log.clone(),
            };
            match local.wait_ready(port).await {
                Ok(()) => return Ok(local),
                Err(e) => last_error = Some(e),
            }
        }
        Err(last_error.expect("at least one attempt"))
    }

    async fn wait_ready(&mut self, port: u16) -> anyhow::Result<()> {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!(
                    "llama-server exited ({status}) before it was ready; its output ({}):\n{}",
                    self.log.display(),
                    log_tail(&self.log)
                );
            }
            if health(port).await == Some(200) {
                return Ok(());
            }
            if start.elapsed() > READY_TIMEOUT {
                bail!(
                    "llama-server did not answer /health within {} s; its output ({}):\n{}",
                    READY_TIMEOUT.as_secs(),
                    self.log.display(),
                    log_tail(&self.log)
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for LocalModel {
    fn drop(&mut self) {
        // SIGKILL: the server holds nothing that must be flushed, and the run is over.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> anyhow::Result<u16> {
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0))
        .context("cannot find a free loopback port for llama-server")?;
    Ok(listener.local_addr()?.port())
}

/// llama-server for the run, unsandboxed (it is the user's own model server, as they would run it
/// by hand), started by the sandbox crate's host-service helper: no API key of the environment
/// reaches it, and it dies with this process.
fn spawn(
    server: &Path,
    model: &Path,
    alias: &str,
    port: u16,
    parallel: usize,
    log: &Path,
) -> anyhow::Result<Child> {
    let args: Vec<std::ffi::OsString> = [
        "--model".into(),
        model.as_os_str().to_owned(),
        "--alias".into(),
        alias.into(),
        "--host".into(),
        "127.0.0.1".into(),
        "--port".into(),
        port.to_string().into(),
        "--parallel".into(),
        parallel.to_string().into(),
        "--ctx-size".into(),
        (CONTEXT_PER_SLOT * parallel).to_string().into(),
        // Chat templates with tools need llama.cpp's Jinja engine.
        "--jinja".into(),
        "--no-webui".into(),
    ]
    .into();
    // (Started on the runtime's main thread, which lives as long as the process: the kernel's
    // parent-death signal is per thread.)
    codegym_sandbox::host_tool::start_host_service(server, &args, log)
        .with_context(|| format!("cannot start {}", server.display()))
}

/// The status code of `GET /health`, or `None` when nothing answers yet.
async fn health(port: u16) -> Option<u16> {
    let attempt = async {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()?;
        s.write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            .await
            .ok()?;
        let mut head = [0u8; 16];
        let n = s.read(&mut head).await.ok()?;
        // "HTTP/1.1 200 OK"
        std::str::from_utf8(&head[..n])
            .ok()?
            .split(' ')
            .nth(1)?
            .parse()
            .ok()
    };
    tokio::time::timeout(Duration::from_secs(2), attempt)
        .await
        .ok()
        .flatten()
}

/// The last 2 kB of the server's log.
fn log_tail(path: &Path) -> String {
    let Ok(mut f) = std::fs::File::open(path) else {
        return String::new();
    };
    let len = f.metadata().map_or(0, |m| m.len());
    let _ = f.seek(std::io::SeekFrom::Start(len.saturating_sub(2048)));
    let mut buf = Vec::new();
    let _ = f.read_to_end(&mut buf);
    String::from_utf8_lossy(&buf).into_owned()
}
