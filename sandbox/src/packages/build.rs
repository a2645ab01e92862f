//! Building and keeping cache entries (see the parent module): the key, the per-key lock, pip run as
//! a host tool into a temporary dir renamed into place, the manifest, LRU eviction, the report.

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};

use super::{PackageCache, PackageError};
use crate::host_tool::run_host_tool;

const MANIFEST: &str = "manifest.json";

/// Host variables pip may need to reach an index (proxies, certificates, index settings).
const PASS_ENV: &[&str] = &[
    "PIP_INDEX_URL",
    "PIP_EXTRA_INDEX_URL",
    "PIP_TRUSTED_HOST",
    "PIP_CERT",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
];

fn io(what: &Path) -> impl FnOnce(std::io::Error) -> PackageError + '_ {
    move |e| PackageError::Io(format!("{}: {e}", what.display()))
}

/// The entry's site dir for `requirements`, built under the key's lock if it is not there yet.
pub(super) fn ensure_blocking(
    cache: &PackageCache,
    requirements: &[String],
) -> Result<PathBuf, PackageError> {
    let mut reqs: Vec<String> = requirements.iter().map(|r| r.trim().to_string()).collect();
    reqs.sort();
    reqs.dedup();
    let cfg = &cache.config;
    let source = match (&cfg.wheelhouse, &cfg.index_url) {
        (Some(w), _) => format!("wheelhouse:{}", w.display()),
        (None, Some(u)) => format!("index:{u}"),
        (None, None) => format!(
            "index:{}",
            std::env::var("PIP_INDEX_URL").unwrap_or_default()
        ),
    };
    let key = key(&cache.python_version, &source, &reqs);
    let root = &cfg.cache_dir;
    let entry = root.join(&key);
    if let Some(site) = reuse(root, &entry)? {
        return Ok(site);
    }
    let locks = root.join(".locks");
    std::fs::create_dir_all(&locks).map_err(io(&locks))?;
    let lock_path = locks.join(format!("{key}.lock"));
    let lock_file = std::fs::File::create(&lock_path).map_err(io(&lock_path))?;
    // Held until the end of this function: a concurrent builder of the same set waits here and then
    // finds the entry. Errors from flock (EINTR aside, none expected) fail the build.
    let _lock = nix::fcntl::Flock::lock(lock_file, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| PackageError::Io(format!("lock {}: {e}", lock_path.display())))?;
    if let Some(site) = reuse(root, &entry)? {
        return Ok(site);
    }
    let tmp = root.join(format!(
        ".tmp-{key}-{}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    ));
    let result = build_into(cache, &tmp, &reqs, &source);
    if result.is_ok() {
        std::fs::rename(&tmp, &entry).map_err(io(&entry))?;
        tracing::info!(key, requirements = ?reqs, "package cache entry built");
        evict(root, cfg.max_cache_bytes, &key);
    } else {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    result.map(|()| entry.join("site"))
}

/// The key: SHA-256 over the interpreter, the source and the sorted requirements (hex, 32 chars).
fn key(python: &str, source: &str, reqs: &[String]) -> String {
    let mut h = Sha256::new();
    for part in [python, source, &reqs.join("\n")] {
        h.update(part.as_bytes());
        h.update([0]);
    }
    h.finalize()
        .iter()
        .take(16)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A complete entry's site dir (its manifest is written last, before the rename), marked used;
/// an error if the runs could not read it.
fn reuse(root: &Path, entry: &Path) -> Result<Option<PathBuf>, PackageError> {
    let manifest = entry.join(MANIFEST);
    let Ok(f) = std::fs::File::options().append(true).open(&manifest) else {
        return Ok(None);
    };
    let _ = f.set_modified(SystemTime::now()); // LRU order; harmless if it fails
    let site = entry.join("site");
    readable_by_runs(&[root, entry, &site])?;
    Ok(Some(site))
}

/// Whether a run (another uid, no privileges) can search and read each of `dirs`: their "other"
/// permission bits. The server may be root and read them anyway, so its own access proves
/// nothing; a cache the runs cannot read would fail their imports, a wrong verdict (reward 0)
/// where the machinery is at fault.
fn readable_by_runs(dirs: &[&Path]) -> Result<(), PackageError> {
    for dir in dirs {
        let mode = std::fs::metadata(dir)
            .map_err(io(dir))?
            .permissions()
            .mode();
        if mode & 0o005 != 0o005 {
            return Err(PackageError::Io(format!(
                "{}: not readable by the runs (mode {:o})",
                dir.display(),
                mode & 0o7777
            )));
        }
    }
    Ok(())
}

/// Runs pip into `tmp/site` and writes the manifest.
fn build_into(
    cache: &PackageCache,
    tmp: &Path,
    reqs: &[String],
    source: &str,
) -> Result<(), PackageError> {
    let cfg = &cache.config;
    let site = tmp.join("site");
    std::fs::create_dir_all(&site).map_err(io(&site))?;
    let mut args: Vec<OsString> = [
        "-m",
        "pip",
        "install",
        "--no-input",
        "--disable-pip-version-check",
        "--no-cache-dir",
        "--no-compile",
        "--no-warn-script-location",
        // Wheels only: an sdist's build code would run here, on the host, unsandboxed.
        "--only-binary=:all:",
        "--target",
    ]
    .iter()
    .map(OsString::from)
    .collect();
    args.push(site.clone().into_os_string());
    match (&cfg.wheelhouse, &cfg.index_url) {
        (Some(w), _) => {
            args.push("--no-index".into());
            args.push("--find-links".into());
            args.push(w.clone().into_os_string());
        }
        (None, Some(u)) => {
            args.push("--index-url".into());
            args.push(u.into());
        }
        (None, None) => {}
    }
    args.extend(reqs.iter().map(OsString::from));
    let mut env: Vec<(String, String)> = vec![
        ("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()),
        ("HOME".into(), tmp.display().to_string()),
        ("LANG".into(), "C.UTF-8".into()),
        ("PYTHONDONTWRITEBYTECODE".into(), "1".into()),
    ];
    for k in PASS_ENV {
        if let Ok(v) = std::env::var(k) {
            env.push((k.to_string(), v));
        }
    }
    let out = run_host_tool(
        &cache.python,
        &args,
        &env,
        tmp,
        Duration::from_secs(cfg.build_timeout_s.max(1)),
    )
    .map_err(|e| PackageError::Io(format!("cannot start pip: {e}")))?;
    if out.exit_code != Some(0) {
        let detail = if out.timed_out {
            format!("pip timed out after {} s", cfg.build_timeout_s)
        } else {
            last_lines(&out.stderr, 6)
        };
        return Err(PackageError::Install {
            requirement: failed_requirement(&out.stderr).unwrap_or_else(|| reqs.join(", ")),
            detail,
        });
    }
    make_readable(&site);
    let resolved: Vec<String> = std::fs::read_dir(&site)
        .map_err(io(&site))?
        .flatten()
        .filter_map(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.strip_suffix(".dist-info").map(str::to_string)
        })
        .collect();
    let manifest = serde_json::json!({
        "requirements": reqs,
        "python": cache.python_version,
        "source": source,
        "resolved": resolved,
    });
    let path = tmp.join(MANIFEST);
    std::fs::write(&path, manifest.to_string()).map_err(io(&path))?;
    let _ = std::fs::set_permissions(tmp, std::fs::Permissions::from_mode(0o755));
    Ok(())
}

/// The requirement pip names in its failure, if it names one.
fn failed_requirement(stderr: &str) -> Option<String> {
    for marker in [
        "No matching distribution found for ",
        "Could not find a version that satisfies the requirement ",
    ] {
        if let Some(i) = stderr.find(marker) {
            let rest = &stderr[i + marker.len()..];
            let req: String = rest.chars().take_while(|c| !c.is_whitespace()).collect();
            if !req.is_empty() {
                return Some(req);
            }
        }
    }
    None
}

fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Whatever the server's umask: dirs 0755, files 0644 (0755 if executable). Owned by the server,
/// so a run (another uid) can read and never write.
fn make_readable(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755));
    for e in entries.flatten() {
        let Ok(t) = e.file_type() else { continue };
        if t.is_dir() {
            make_readable(&e.path());
        } else if t.is_file() {
            let exec = e
                .metadata()
                .is_ok_and(|m| m.permissions().mode() & 0o111 != 0);
            let mode = if exec { 0o755 } else { 0o644 };
            let _ = std::fs::set_permissions(e.path(), std::fs::Permissions::from_mode(mode));
        }
    }
}

fn size_of(path: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    if !meta.is_dir() {
        return meta.len();
    }
    std::fs::read_dir(path)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| size_of(&e.path()))
        .sum()
}

/// Complete entries: (key, manifest mtime, bytes).
fn entries(root: &Path) -> Vec<(String, SystemTime, u64)> {
    std::fs::read_dir(root)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                return None;
            }
            let used = std::fs::metadata(e.path().join(MANIFEST))
                .and_then(|m| m.modified())
                .ok()?;
            Some((name, used, size_of(&e.path())))
        })
        .collect()
}

/// Removes least recently used entries (never `keep`) until the cache fits in `max_bytes`.
fn evict(root: &Path, max_bytes: u64, keep: &str) {
    let mut all = entries(root);
    let mut total: u64 = all.iter().map(|e| e.2).sum();
    all.sort_by_key(|e| e.1);
    for (key, _, bytes) in all {
        if total <= max_bytes {
            break;
        }
        if key == keep {
            continue;
        }
        tracing::info!(key, bytes, "package cache over its cap: removing an entry");
        if std::fs::remove_dir_all(root.join(&key)).is_ok() {
            total = total.saturating_sub(bytes);
        }
    }
}

/// The cache's contents, as `codegym doctor` prints them.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CacheReport {
    pub dir: PathBuf,
    pub entries: Vec<(String, Vec<String>, u64)>,
    pub total_bytes: u64,
}

impl std::fmt::Display for CacheReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "package cache {}: {} entries, {} bytes",
            self.dir.display(),
            self.entries.len(),
            self.total_bytes
        )?;
        for (key, reqs, bytes) in &self.entries {
            writeln!(f, "  {key}  {bytes:>10} bytes  {}", reqs.join(" "))?;
        }
        Ok(())
    }
}

pub(super) fn report(root: &Path) -> CacheReport {
    let entries: Vec<(String, Vec<String>, u64)> = entries(root)
        .into_iter()
        .map(|(key, _, bytes)| {
            let reqs = std::fs::read(root.join(&key).join(MANIFEST))
                .ok()
                .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
                .and_then(|m| serde_json::from_value(m["requirements"].clone()).ok())
                .unwrap_or_default();
            (key, reqs, bytes)
        })
        .collect();
    CacheReport {
        dir: root.to_path_buf(),
        total_bytes: entries.iter().map(|e| e.2).sum(),
        entries,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_pip_messages() {
        let a = key("py", "index:", &["six==1.16.0".into()]);
        assert_eq!(a.len(), 32);
        assert_ne!(a, key("py", "wheelhouse:/w", &["six==1.16.0".into()]));
        assert_ne!(a, key("py2", "index:", &["six==1.16.0".into()]));
        assert_eq!(
            failed_requirement(
                "ERROR: No matching distribution found for nonexistent-pkg-xyz==9\n"
            ),
            Some("nonexistent-pkg-xyz==9".into())
        );
        assert_eq!(failed_requirement("boom"), None);
    }

    #[test]
    fn eviction_keeps_the_newest_within_the_cap() {
        let root = tempfile::tempdir().unwrap();
        for (i, k) in ["old", "mid", "new"].iter().enumerate() {
            let e = root.path().join(k);
            std::fs::create_dir_all(e.join("site")).unwrap();
            std::fs::write(e.join("site/blob"), vec![0u8; 1000]).unwrap();
            std::fs::write(e.join(MANIFEST), r#"{"requirements": ["x"]}"#).unwrap();
            let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + i as u64);
            std::fs::File::options()
                .append(true)
                .open(e.join(MANIFEST))
                .unwrap()
                .set_modified(t)
                .unwrap();
        }
        evict(root.path(), 2_100, "old");
        let left: Vec<String> = entries(root.path()).into_iter().map(|e| e.0).collect();
        assert!(left.contains(&"old".to_string()) && left.contains(&"new".to_string()));
        assert!(!left.contains(&"mid".to_string()));
        assert_eq!(report(root.path()).entries.len(), 2);
    }
}
