//! Per-task packages (issue 13): a task's `requirements` (pip requirement strings) resolved once,
//! outside any sandbox, into a content-addressed, read-only site directory that runs of the task
//! import from.
//!
//! - Policy ([`PackagesConfig`]): off unless enabled; an allow-list of project names (empty: any);
//!   requirements are plain `name[extras] specifiers` (no URLs, paths, options or markers).
//! - Key: SHA-256 of the interpreter (path and version), the source (index URL or wheelhouse) and
//!   the sorted requirement strings. An entry is `CACHE/<key>/site` plus `manifest.json` (the
//!   request and the distributions pip installed, i.e. the resolved set).
//! - Build (`build.rs`): `python -m pip install --target` with `--only-binary=:all:` (no package's
//!   build code ever runs on the host), from the configured index or `--no-index --find-links
//!   WHEELHOUSE` (air-gapped), through the sandbox's host-tool helper, in a temporary dir renamed
//!   into place; an exclusive `flock` per key makes concurrent builders (threads or servers sharing
//!   the cache) build once and the others wait and reuse.
//! - Read-only for programs: entries are owned by the server (runs have their own uids), and the
//!   cache root is in the sandbox's read-only trees (bound back read-only under hidden dirs, readable
//!   but not writable under Landlock). Runs get the site dir first on `sys.path`; the warm-fork
//!   server preloads nothing from it (the path is added in the forked child only).
//! - Size cap: after a build, least recently used entries are removed until the cache fits.

mod build;

use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

pub use build::CacheReport;

/// Server policy and cache settings for task packages (`packages` in the coding config).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PackagesConfig {
    /// Whether tasks may have requirements at all.
    pub enabled: bool,
    /// Allowed project names (normalised: lowercase, `_` and `.` as `-`); empty: any.
    pub allow: Vec<String>,
    /// The package index (`None`: pip's default, or `PIP_INDEX_URL` of the server's environment).
    pub index_url: Option<String>,
    /// An offline wheelhouse: install only from the wheels in this dir (`--no-index`).
    pub wheelhouse: Option<PathBuf>,
    /// The cache root. Must not be under the sandbox's work root.
    pub cache_dir: PathBuf,
    /// Least recently used entries are removed above this size.
    pub max_cache_bytes: u64,
    /// A build is killed after this long.
    pub build_timeout_s: u64,
}

impl Default for PackagesConfig {
    fn default() -> Self {
        PackagesConfig {
            enabled: false,
            allow: Vec::new(),
            index_url: None,
            wheelhouse: None,
            cache_dir: PathBuf::from("/var/cache/codegym/packages"),
            max_cache_bytes: 4 << 30,
            build_timeout_s: 300,
        }
    }
}

/// Why a task's packages are not available. `Refused` and `Install` are the request's problem
/// (FAILED_PRECONDITION naming the package); `Io` is the machinery's.
#[derive(Debug, thiserror::Error)]
pub enum PackageError {
    #[error("requirements are not allowed by this server's policy (packages.enabled is off)")]
    Disabled,
    #[error("requirement {0:?} is refused: {1}")]
    Refused(String, String),
    #[error("cannot install {requirement}: {detail}")]
    Install { requirement: String, detail: String },
    #[error("package cache: {0}")]
    Io(String),
}

/// The package cache of one registration.
#[derive(Debug)]
pub struct PackageCache {
    config: PackagesConfig,
    python: PathBuf,
    python_version: String,
}

impl PackageCache {
    /// The cache of `config` for the interpreter `python` (the sandbox's).
    pub fn new(config: PackagesConfig, python: PathBuf) -> Arc<PackageCache> {
        // The resolved interpreter path keys the cache (pyenv and distro paths carry the version):
        // a rebuilt interpreter at the same path is the operator's to flush (`codegym doctor`).
        let python_version = std::fs::canonicalize(&python)
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| python.display().to_string());
        Arc::new(PackageCache {
            config,
            python,
            python_version,
        })
    }

    pub fn config(&self) -> &PackagesConfig {
        &self.config
    }

    /// Checks requirement strings against the syntax and the policy.
    pub fn check(&self, requirements: &[String]) -> Result<(), PackageError> {
        if requirements.is_empty() {
            return Ok(());
        }
        if !self.config.enabled {
            return Err(PackageError::Disabled);
        }
        for r in requirements {
            let name = project_name(r).map_err(|why| PackageError::Refused(r.clone(), why))?;
            let allowed = self.config.allow.is_empty()
                || self.config.allow.iter().any(|a| normalise(a) == name);
            if !allowed {
                return Err(PackageError::Refused(
                    r.clone(),
                    format!("{name} is not on the server's allow-list"),
                ));
            }
        }
        Ok(())
    }

    /// The site dir holding `requirements`, built on first use. Blocking work runs on the blocking
    /// pool; concurrent callers for the same set build it once.
    pub async fn ensure(
        self: &Arc<Self>,
        requirements: &[String],
    ) -> Result<PathBuf, PackageError> {
        self.check(requirements)?;
        let me = self.clone();
        let reqs = requirements.to_vec();
        tokio::task::spawn_blocking(move || build::ensure_blocking(&me, &reqs))
            .await
            .map_err(|e| PackageError::Io(format!("build task: {e}")))?
    }

    /// What the cache holds (for `codegym doctor`).
    pub fn report(&self) -> CacheReport {
        build::report(&self.config.cache_dir)
    }
}

/// Creates the cache root (mode 0755, owned by the server): it must exist before the sandbox
/// probes its mount plan.
pub fn create_cache_dir(config: &PackagesConfig) -> Result<(), PackageError> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(&config.cache_dir)
        .map_err(|e| PackageError::Io(format!("{}: {e}", config.cache_dir.display())))
}

/// PEP 503 normalisation of a project name.
pub fn normalise(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        let c = if matches!(c, '_' | '.') { '-' } else { c };
        if !(c == '-' && out.ends_with('-')) {
            out.push(c.to_ascii_lowercase());
        }
    }
    out
}

/// The normalised project name of a plain requirement (`name[extras] specifiers`), or why it is
/// refused. Anything pip would read as an option, a URL, a path or an environment marker is.
fn project_name(req: &str) -> Result<String, String> {
    let r = req.trim();
    if r.is_empty() || r.len() > 200 {
        return Err("empty or longer than 200 characters".into());
    }
    let ok_chars = r.chars().all(|c| {
        c.is_ascii_alphanumeric()
            || matches!(
                c,
                '.' | '_' | '-' | '[' | ']' | ',' | '<' | '>' | '=' | '!' | '~' | '*' | ' '
            )
    });
    if !ok_chars || r.starts_with('-') || !r.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return Err("only `name[extras] version-specifiers` requirements are accepted (no options, URLs, paths or markers)".into());
    }
    let end = r
        .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
        .unwrap_or(r.len());
    Ok(normalise(&r[..end]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requirement_syntax_and_policy() {
        assert_eq!(project_name("Six==1.16.0").unwrap(), "six");
        assert_eq!(
            project_name("zope.interface[test] >=5, <7").unwrap(),
            "zope-interface"
        );
        for bad in [
            "",
            "-r /etc/passwd",
            "--index-url=http://x",
            "pkg @ https://evil/x.whl",
            "./local",
            "/abs/path",
            "pkg; python_version<'3'",
            "git+https://x",
        ] {
            assert!(project_name(bad).is_err(), "{bad:?}");
        }
        let cache = |enabled, allow: &[&str]| PackageCache {
            config: PackagesConfig {
                enabled,
                allow: allow.iter().map(|s| s.to_string()).collect(),
                ..PackagesConfig::default()
            },
            python: PathBuf::from("/usr/bin/python3"),
            python_version: String::new(),
        };
        let six = vec!["six==1.16.0".to_string()];
        assert!(cache(true, &[]).check(&six).is_ok());
        assert!(cache(true, &["Six"]).check(&six).is_ok());
        assert!(matches!(
            cache(true, &["numpy"]).check(&six),
            Err(PackageError::Refused(..))
        ));
        assert!(matches!(
            cache(false, &[]).check(&six),
            Err(PackageError::Disabled)
        ));
        assert!(cache(false, &[]).check(&[]).is_ok());
    }
}
