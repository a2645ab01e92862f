//! The key of a repository task's prepared state in the sandbox's persistent store
//! (`codegym_sandbox::PreparedStore`): a sha256 of everything that decides what
//! [`RepoScorer::prepare`](super::RepoScorer::prepare) produces, so that a state is prepared
//! once per machine and reused by every later process (a restarted server, `tasks check`,
//! `tasks synth`, a rollout's env).
//!
//! The inputs: [`FORMAT`] (bumped whenever `prepare` changes what it produces), the repository's
//! content (a directory's tree: names, file types, modes, symlink targets and bytes, never
//! following a link; an archive's or a bundle's bytes), `commit`, the `setup` commands, the
//! `requirements` and the site dir the package cache resolved them to, the environment image's
//! manifest digest, the test patch, the image paths the task names (`work_dir`, `tests_dir`,
//! `reward_file`), and the limits the setup runs under. Not an input: the host's
//! own filesystem, which a task without an `environment` runs on (its Python, its git); after
//! changing the host, remove the store's entries (`codegym tasks prune --all`).
//!
//! Every field is written with its length first, so no two different inputs hash alike by
//! running into each other.

use std::io::Read as _;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use codegym_sandbox::FsLayer;
use codegym_sandbox::image::Digest;
use sha2::{Digest as _, Sha256};

use super::RepoError;
use crate::tasks::{RepoTask, RepositoryKind};

/// The version of what `prepare` produces from its inputs; bumped whenever that changes (the
/// setup script, how the repository is imported, what is committed), so no older state is used.
pub const FORMAT: u32 = 1;

/// Feeds length-prefixed fields to a hasher.
struct Hasher(Sha256);

impl Hasher {
    fn field(&mut self, bytes: &[u8]) {
        self.0.update((bytes.len() as u64).to_le_bytes());
        self.0.update(bytes);
    }

    fn list<S: AsRef<str>>(&mut self, items: &[S]) {
        self.field(&(items.len() as u64).to_le_bytes());
        for i in items {
            self.field(i.as_ref().as_bytes());
        }
    }
}

/// `task`'s key, given what `prepare` resolved: the requirements' site dir and the image's
/// manifest. Reads the repository (blocking: call on the blocking pool).
pub(crate) fn key(
    task: &RepoTask,
    site_dir: Option<&Path>,
    image: Option<&Digest>,
) -> std::io::Result<String> {
    let mut h = Hasher(Sha256::new());
    h.field(&FORMAT.to_le_bytes());
    let repo = &task.repository;
    match task.repository_kind {
        RepositoryKind::Directory => {
            h.field(b"directory");
            tree(&mut h, repo)?;
        }
        RepositoryKind::Archive => {
            h.field(b"archive");
            file(&mut h, repo)?;
        }
        RepositoryKind::Bundle => {
            h.field(b"bundle");
            file(&mut h, repo)?;
        }
    }
    h.field(task.commit.as_deref().unwrap_or("").as_bytes());
    h.list(&task.setup);
    h.list(&task.requirements);
    h.field(site_dir.map_or(&[][..], |p| p.as_os_str().as_bytes()));
    h.field(image.map(Digest::to_string).unwrap_or_default().as_bytes());
    h.field(task.test_patch.as_deref().unwrap_or("").as_bytes());
    // Where the setup sees the repository, and the empty dirs its root has for the tests.
    for path in [&task.work_dir, &task.tests_dir, &task.reward_file] {
        h.field(path.as_deref().unwrap_or("").as_bytes());
    }
    let l = &task.limits;
    for n in [
        l.setup_wall_ms,
        l.test_cpu_ms,
        l.memory_mb,
        l.disk_mib.unwrap_or(0),
    ] {
        h.field(&n.to_le_bytes());
    }
    Ok(h.0.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// A file's bytes, streamed.
fn file(h: &mut Hasher, path: &Path) -> std::io::Result<()> {
    let mut f = std::fs::File::open(path)?;
    let len = f.metadata()?.len();
    h.0.update(len.to_le_bytes());
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        h.0.update(&buf[..n]);
    }
}

/// A directory tree in name order: each entry's name, type and mode, then its bytes, its link
/// target or its own entries. Links are never followed.
fn tree(h: &mut Hasher, dir: &Path) -> std::io::Result<()> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    entries.sort();
    h.field(&(entries.len() as u64).to_le_bytes());
    for path in entries {
        let meta = std::fs::symlink_metadata(&path)?;
        h.field(path.file_name().map_or(&[][..], |n| n.as_bytes()));
        h.field(&meta.mode().to_le_bytes());
        let kind = meta.file_type();
        if kind.is_symlink() {
            h.field(std::fs::read_link(&path)?.as_os_str().as_bytes());
        } else if kind.is_dir() {
            tree(h, &path)?;
        } else if kind.is_file() {
            file(h, &path)?;
        }
    }
    Ok(())
}

impl super::RepoScorer {
    /// `task`'s key in this scorer's store (`None` without a store).
    pub(super) async fn state_key(
        &self,
        task: &Arc<RepoTask>,
        site_dir: Option<&Path>,
        image: Option<Digest>,
    ) -> Result<String, RepoError> {
        let (t, site) = (task.clone(), site_dir.map(Path::to_path_buf));
        let hashed =
            tokio::task::spawn_blocking(move || key(&t, site.as_deref(), image.as_ref())).await;
        match hashed {
            Ok(Ok(key)) => Ok(key),
            Ok(Err(e)) => Err(RepoError::Repository {
                task: task.id.clone(),
                detail: format!("{}: {e}", task.repository.display()),
            }),
            Err(e) => Err(store_err(task, e)),
        }
    }

    /// `task`'s key in this scorer's store, as `prepare` would look it up (resolving its
    /// requirements and importing its image first); `None` without a store.
    pub async fn key_of(&self, task: &Arc<RepoTask>) -> Result<Option<String>, RepoError> {
        if self.store.is_none() {
            return Ok(None);
        }
        let (site_dir, _, image) = self.inputs(task).await?;
        let key = self.state_key(task, site_dir.as_deref(), image).await?;
        Ok(Some(key))
    }

    /// This scorer's store of prepared states, if any.
    pub fn prepared_store(&self) -> Option<&Arc<codegym_sandbox::PreparedStore>> {
        self.store.as_ref()
    }

    /// The stored state of `key`: its layers and base commit (`None`: not stored, or no store).
    pub(super) async fn stored(
        &self,
        task: &RepoTask,
        key: Option<&str>,
    ) -> Result<Option<(Vec<Arc<FsLayer>>, String)>, RepoError> {
        let (Some(store), Some(key)) = (&self.store, key) else {
            return Ok(None);
        };
        let found = store.get(key).await.map_err(|e| store_err(task, e))?;
        if found.is_some() {
            tracing::debug!(task = %task.id, key, "prepared state reused from the store");
        }
        Ok(found.map(|s| (s.layers, s.base_commit)))
    }

    /// A newly prepared state stored under `key` (when there is a store): the stored layers
    /// (and base commit: another process's, if it stored the key first) replace this
    /// process's. A store that cannot take it (a full disk) fails the preparation.
    pub(super) async fn store(
        &self,
        task: &RepoTask,
        key: Option<&str>,
        layers: Vec<Arc<FsLayer>>,
        base_commit: String,
    ) -> Result<(Vec<Arc<FsLayer>>, String), RepoError> {
        let (Some(store), Some(key)) = (&self.store, key) else {
            return Ok((layers, base_commit));
        };
        let stored = store
            .put(key, &layers, &base_commit)
            .await
            .map_err(|e| store_err(task, e))?;
        Ok((stored.layers, stored.base_commit))
    }
}

fn store_err(task: &RepoTask, e: impl std::fmt::Display) -> RepoError {
    RepoError::Store {
        task: task.id.clone(),
        detail: e.to_string(),
    }
}
