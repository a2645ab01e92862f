//! Programs in languages other than Python (issue 14): an optional compile step, then the run, both
//! fresh executions under every layer the Python path has (namespaces, per-execution uid, rlimits,
//! seccomp, Landlock, no network, private work dir, whole-tree kill), on either backend: the warm
//! backend forks a Python interpreter, which no other language can use, so these always start
//! fresh (`fresh::start_command`).
//!
//! The compile runs in its own work dir with its own limits (`SandboxConfig::compile_limits`, or
//! the request's); its artifacts are read back from the artifact dir after every process of the
//! compile has died and kept in the [`ArtifactCache`], keyed by (language, toolchain, flags,
//! source), so identical submissions and the many tests of one submission compile once. A run gets
//! copies of the artifacts in its own work dir. A compile error is an outcome: the result carries
//! the compile's own result (`compile`) and the program never runs.

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use env_core::ExecutionResult;

use super::config::Limits;
use super::fresh::{self, Command};
use super::prepare::{Inner, RunLayout};
use super::request::{ExecRequest, RunData, SandboxError};
use super::{metrics, supervise, workdir};
use crate::lang::cache::{ArtifactCache, CacheKey, Compiled};
use crate::lang::toolchain::{self, Toolchain};
use crate::lang::{self, ARTIFACT_DIR, Language};

fn cstrings(v: Vec<String>) -> Result<Vec<CString>, SandboxError> {
    v.into_iter()
        .map(|s| {
            CString::new(s).map_err(|_| SandboxError::InvalidPath("NUL in an argument".into()))
        })
        .collect()
}

/// The toolchain of `language`, or why this machine cannot run it.
pub(crate) fn toolchain_for(language: Language) -> Result<&'static Toolchain, SandboxError> {
    toolchain::get(language).map_err(|m| SandboxError::LanguageUnavailable {
        language,
        reason: m.reason.clone(),
    })
}

/// Compiles (through the cache) and runs `req`, whose language is not Python.
pub(crate) async fn run(
    inner: &Arc<Inner>,
    cache: &ArtifactCache,
    mut req: ExecRequest,
    fetch: Vec<String>,
) -> Result<(ExecutionResult, Vec<(String, Vec<u8>)>), SandboxError> {
    let language = req.language;
    let tc = toolchain_for(language)?;
    let source_file = lang::source_file(language, &req.source);
    let limits = language.run_limits(req.limits.unwrap_or(inner.config.limits));
    let mut files: Vec<(PathBuf, &[u8])> = Vec::with_capacity(req.files.len() + 2);
    for (name, data) in &req.files {
        let p = workdir::validate_rel(name)?;
        if p == Path::new(&source_file) || p.starts_with(ARTIFACT_DIR) {
            return Err(SandboxError::InvalidPath(format!(
                "{name} (reserved for the source or its build)"
            )));
        }
        files.push((p, data.as_slice()));
    }
    files.push((PathBuf::from(&source_file), req.source.as_bytes()));
    let compiled = match tc.compile_argv(&source_file) {
        Some(argv) => {
            let compile_limits = req.compile_limits.unwrap_or(inner.config.compile_limits);
            let key = CacheKey {
                language,
                toolchain: tc.id.clone(),
                flags: format!("{argv:?} {:?}", tc.compile_env(Path::new("."))),
                source: req.source.clone(),
            };
            let c = cache
                .get_or_compile(key, || {
                    compile(inner, tc, argv, &source_file, &req.source, compile_limits)
                })
                .await?;
            if !c.ok {
                // A program that does not compile is a finished execution too (its compile's
                // time; a cached verdict, none).
                let result = supervise::not_run_after_compile(c.result.clone());
                metrics::finished(Ok(&result), Duration::from_millis(c.result.wall_ms));
                return Ok((result, Vec::new()));
            }
            Some(c)
        }
        None => None,
    };
    let artifacts: Vec<(PathBuf, &[u8])> = compiled
        .iter()
        .flat_map(|c| c.artifacts.iter())
        .map(|(name, bytes)| (Path::new(ARTIFACT_DIR).join(name), bytes.as_slice()))
        .collect();
    files.extend(artifacts);
    let mut argv = tc.run_argv(
        &source_file,
        &lang::java_main_class(&req.source),
        limits.memory_bytes,
    );
    argv.extend(req.args.iter().cloned());
    let command = Command {
        argv: cstrings(argv)?,
        extra_env: cstrings(tc.run_env())?,
        address_space: language.address_space(limits.memory_bytes),
    };
    let admitted = metrics::admit(&inner.permits).await?;
    let stdin = req.stdin.take();
    let out = run_admitted(inner, &req.data, stdin, files, limits, command, fetch).await;
    admitted.finished(out.as_ref().map(|(r, _)| r).map_err(|_| ()));
    let (mut result, fetched) = out?;
    if let Some(c) = compiled {
        result.compile = Some(Box::new(c.result.clone()));
    }
    Ok((result, fetched))
}

/// The compiled program's run, in its slot.
async fn run_admitted(
    inner: &Arc<Inner>,
    data: &RunData,
    stdin: Option<Vec<u8>>,
    files: Vec<(PathBuf, &[u8])>,
    limits: Limits,
    command: Command,
    fetch: Vec<String>,
) -> Result<(ExecutionResult, Vec<(String, Vec<u8>)>), SandboxError> {
    let id = inner.next_id();
    let with_stdin = stdin.is_some();
    // Data tasks (issue 13) in any language: read-only inputs, `--name value` arguments (after
    // `args`), the outputs dir and its typed outputs.
    let read_only = workdir::inputs(&data.inputs, &files)?;
    let mut command = command;
    command.argv.extend(cstrings(data.argv.clone())?);
    let layout = RunLayout {
        files,
        read_only,
        outputs_dir: data.outputs.is_some(),
        args: Vec::new(),
        python_path: None,
        overlay: None,
        image_root: None,
    };
    let started =
        fresh::start_command(inner, id, &layout, &limits, command, Vec::new(), with_stdin).await?;
    let outputs = data.outputs.clone();
    supervise::script(started, stdin, &limits, fetch, outputs).await
}

/// One sandboxed compile of `source`; its artifacts are the regular files the compiler left in the
/// artifact dir.
async fn compile(
    inner: &Arc<Inner>,
    tc: &Toolchain,
    argv: Vec<String>,
    source_file: &str,
    source: &str,
    limits: Limits,
) -> Result<Compiled, SandboxError> {
    let _admitted = metrics::admit(&inner.permits).await?;
    let id = inner.next_id();
    let workdir = inner.work_root.join(format!("run-{id}"));
    let limits = tc.language.run_limits(limits);
    let command = Command {
        argv: cstrings(argv)?,
        extra_env: cstrings(tc.compile_env(&workdir))?,
        address_space: tc.language.address_space(limits.memory_bytes),
    };
    // The marker makes the artifact dir exist (owned by the compile's uid) for compilers that do
    // not create their output dir; names starting with `.` are never artifacts.
    let layout = RunLayout {
        files: vec![
            (PathBuf::from(source_file), source.as_bytes()),
            (Path::new(ARTIFACT_DIR).join(".dir"), &b""[..]),
        ],
        read_only: Vec::new(),
        outputs_dir: false,
        args: Vec::new(),
        python_path: None,
        overlay: None,
        image_root: None,
    };
    let started =
        fresh::start_command(inner, id, &layout, &limits, command, Vec::new(), false).await?;
    let fetch = vec![format!("{ARTIFACT_DIR}/")];
    let (result, fetched) =
        supervise::script(started, None, &limits, fetch, Default::default()).await?;
    let prefix = format!("{ARTIFACT_DIR}/");
    let artifacts: Vec<(String, Vec<u8>)> = fetched
        .into_iter()
        .filter_map(|(p, b)| p.strip_prefix(&prefix).map(|n| (n.to_string(), b)))
        .filter(|(n, _)| !n.starts_with('.'))
        .collect();
    let ok = result.success() && !artifacts.is_empty();
    tracing::debug!(language = %tc.language, ok, wall_ms = result.wall_ms, "compiled");
    Ok(Compiled {
        result,
        ok,
        artifacts: if ok { artifacts } else { Vec::new() },
    })
}
