//! Reading an OCI image layout (`oci-layout`, `index.json`, `blobs/sha256/`): the index, the one
//! image manifest it leads to (through a nested index, picking this machine's platform), and its
//! layers, each verified as it is read. An archive is first staged: its layout's files (and
//! nothing else) copied out of the tar into a temporary dir of the store; a docker-archive's are
//! then read by `docker.rs`.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use sha2::{Digest as _, Sha256};

use super::unpack::{Compression, unpack};
use super::{Digest, Image, ImageError, LayerStore, StoredLayer, TempDir, io_err};

/// The largest JSON blob (index, manifest, config) read whole.
pub(super) const MAX_JSON_BLOB: u64 = 4 << 20;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Descriptor {
    media_type: String,
    digest: String,
    size: u64,
    #[serde(default)]
    platform: Option<Platform>,
}

#[derive(Debug, Deserialize)]
struct Platform {
    architecture: String,
    os: String,
}

#[derive(Debug, Deserialize)]
struct Index {
    manifests: Vec<Descriptor>,
}

#[derive(Debug, Deserialize)]
struct Manifest {
    config: Descriptor,
    layers: Vec<Descriptor>,
}

const INDEX_TYPES: [&str; 2] = [
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
];
const MANIFEST_TYPES: [&str; 2] = [
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
];

/// The OCI name of this machine's architecture.
fn host_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

pub(crate) struct Layout {
    root: PathBuf,
}

impl Layout {
    pub(crate) fn new(root: PathBuf) -> Layout {
        Layout { root }
    }

    fn bad(&self, why: impl Into<String>) -> ImageError {
        ImageError::Format {
            path: self.root.clone(),
            why: why.into(),
        }
    }

    fn digest(&self, desc: &Descriptor) -> Result<Digest, ImageError> {
        Digest::parse(&desc.digest)
            .ok_or_else(|| self.bad(format!("unsupported digest {:?}", desc.digest)))
    }

    /// Opens a blob (not a link: a layout's blobs are its own files).
    fn open_blob(&self, digest: &Digest) -> Result<File, ImageError> {
        let path = self.root.join("blobs/sha256").join(digest.hex());
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.is_file() => File::open(&path).map_err(io_err(&path)),
            _ => Err(ImageError::MissingBlob {
                digest: digest.to_string(),
            }),
        }
    }

    /// A JSON blob, verified against its descriptor.
    fn json<T: for<'de> Deserialize<'de>>(&self, desc: &Descriptor) -> Result<T, ImageError> {
        let digest = self.digest(desc)?;
        if desc.size > MAX_JSON_BLOB {
            return Err(self.bad(format!("{digest}: {} bytes of JSON", desc.size)));
        }
        let mut reader = Verified::new(self.open_blob(&digest)?, digest.clone(), desc.size);
        let mut data = Vec::new();
        reader
            .read_to_end(&mut data)
            .map_err(|source| ImageError::Layer {
                digest: digest.to_string(),
                source,
            })?;
        reader.finish()?;
        serde_json::from_slice(&data).map_err(|e| self.bad(format!("{digest}: {e}")))
    }

    /// The image manifest `index.json` leads to: the only one, or the one for this platform.
    fn manifest(&self) -> Result<(Digest, Manifest), ImageError> {
        let path = self.root.join("index.json");
        let text = std::fs::read(&path).map_err(io_err(&path))?;
        let mut index: Index =
            serde_json::from_slice(&text).map_err(|e| self.bad(format!("index.json: {e}")))?;
        // Bounded: an index leads to a manifest within a few levels, never in a cycle.
        for _ in 0..4 {
            let desc = self.pick(index.manifests)?;
            if MANIFEST_TYPES.contains(&desc.media_type.as_str()) {
                return Ok((self.digest(&desc)?, self.json(&desc)?));
            }
            if !INDEX_TYPES.contains(&desc.media_type.as_str()) {
                return Err(self.bad(format!("unsupported manifest type {}", desc.media_type)));
            }
            index = self.json(&desc)?;
        }
        Err(self.bad("indexes nested too deep"))
    }

    fn pick(&self, mut manifests: Vec<Descriptor>) -> Result<Descriptor, ImageError> {
        if manifests.len() > 1 {
            manifests.retain(|d| {
                d.platform
                    .as_ref()
                    .is_some_and(|p| p.os == "linux" && p.architecture == host_arch())
            });
        }
        match manifests.len() {
            1 => Ok(manifests.remove(0)),
            0 => Err(self.bad(format!("no image for linux/{}", host_arch()))),
            n => Err(self.bad(format!(
                "{n} images for linux/{}: one expected",
                host_arch()
            ))),
        }
    }

    /// Verifies the manifest and config and unpacks every layer not yet in `store`.
    pub(crate) fn import(&self, store: &LayerStore) -> Result<Image, ImageError> {
        let (manifest_digest, manifest) = self.manifest()?;
        let config: serde_json::Value = self.json(&manifest.config)?;
        let env = config_env(&config, |why| self.bad(why))?;
        let mut layers = Vec::with_capacity(manifest.layers.len());
        for desc in &manifest.layers {
            let digest = self.digest(desc)?;
            let compression = Compression::of(&desc.media_type).ok_or_else(|| {
                self.bad(format!(
                    "layer {digest}: unsupported type {}",
                    desc.media_type
                ))
            })?;
            let dir = store.layer_dir(&digest);
            if !dir.is_dir() {
                let blob = self.open_blob(&digest)?;
                unpack_verified(store, blob, &digest, desc.size, compression, &dir)?;
            }
            layers.push(StoredLayer { digest, dir });
        }
        Ok(Image {
            manifest: manifest_digest,
            layers,
            env,
            working_dir: config_working_dir(&config),
        })
    }
}

/// Unpacks the blob `file` into the store's `dir` for `digest` (which the bytes of `file`, `size`
/// of them, must hash to): into a temporary dir first, renamed once whole and verified.
pub(super) fn unpack_verified(
    store: &LayerStore,
    file: File,
    digest: &Digest,
    size: u64,
    compression: Compression,
    dir: &Path,
) -> Result<(), ImageError> {
    let tmp = store.temp_dir(digest.hex())?;
    let tree = tmp.path().join("tree");
    let mut blob = Verified::new(BufReader::new(file), digest.clone(), size);
    unpack(&mut blob, compression, &tree, digest)?;
    // Trailing bytes (tar padding, a compressor's trailer) are part of the blob.
    std::io::copy(&mut blob, &mut std::io::sink()).map_err(|source| ImageError::Layer {
        digest: digest.to_string(),
        source,
    })?;
    blob.finish()?;
    match std::fs::rename(&tree, dir) {
        Ok(()) => Ok(()),
        // Another import of the same digest finished first: its dir is as good as ours.
        Err(_) if dir.is_dir() => Ok(()),
        Err(e) => Err(io_err(dir)(e)),
    }
}

/// The config's `config.WorkingDir`, when it is a non-empty string.
pub(super) fn config_working_dir(config: &serde_json::Value) -> Option<String> {
    let dir = config.pointer("/config/WorkingDir")?.as_str()?;
    (!dir.is_empty()).then(|| dir.to_string())
}

/// The config's `config.Env` (absent: none). Each entry must be `NAME=value` with a name of
/// letters, digits and `_` and no NUL: anything else is a malformed image, not a run's problem.
pub(super) fn config_env(
    config: &serde_json::Value,
    bad: impl Fn(String) -> ImageError,
) -> Result<Vec<String>, ImageError> {
    let Some(env) = config.pointer("/config/Env") else {
        return Ok(Vec::new());
    };
    if env.is_null() {
        return Ok(Vec::new());
    }
    let entries = env
        .as_array()
        .ok_or_else(|| bad("config.Env is not a list".into()))?;
    let mut out = Vec::with_capacity(entries.len());
    for e in entries {
        let entry = e
            .as_str()
            .ok_or_else(|| bad(format!("config.Env entry {e} is not a string")))?;
        let name = entry.split_once('=').map(|(n, _)| n);
        let good = name.is_some_and(|n| {
            !n.is_empty() && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        }) && !entry.contains('\0');
        if !good {
            return Err(bad(format!("config.Env entry {entry:?} is not NAME=value")));
        }
        out.push(entry.to_string());
    }
    Ok(out)
}

/// A reader that hashes and counts what passes through, checked by [`Verified::finish`].
pub(crate) struct Verified<R> {
    inner: R,
    hasher: Sha256,
    read: u64,
    digest: Digest,
    size: u64,
}

impl<R: Read> Verified<R> {
    pub(super) fn new(inner: R, digest: Digest, size: u64) -> Self {
        Verified {
            inner,
            hasher: Sha256::new(),
            read: 0,
            digest,
            size,
        }
    }

    pub(super) fn finish(self) -> Result<(), ImageError> {
        if self.read != self.size {
            return Err(ImageError::SizeMismatch {
                digest: self.digest.to_string(),
                expected: self.size,
                actual: self.read,
            });
        }
        let actual = Digest::of(self.hasher);
        if actual != self.digest.hex() {
            return Err(ImageError::DigestMismatch {
                digest: self.digest.to_string(),
                actual,
            });
        }
        Ok(())
    }
}

impl<R: Read> Read for Verified<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.read += n as u64;
        // A blob longer than its descriptor is corrupt: stop reading it early.
        if self.read > self.size {
            return Err(std::io::Error::other(format!(
                "blob {} is longer than its descriptor's {} bytes",
                self.digest, self.size
            )));
        }
        Ok(n)
    }
}

/// What kind of image archive [`stage_archive`] found.
pub(crate) enum Staged {
    /// An oci-archive: the staged dir is an OCI image layout.
    Oci,
    /// A docker-archive (`docker save`, podman's default `save` format): `manifest.json`, the
    /// config and the layer tars, staged under their names (see `docker.rs`).
    Docker,
}

/// Copies an image archive's files into `dir`, which the caller's guard removes: an
/// oci-archive's layout files (`oci-layout`, `index.json`, `blobs/sha256/HEX`) or a
/// docker-archive's (`manifest.json`, `HEX.json`, `HEX.tar`, `HEX/layer.tar`). Regular files
/// only; anything else is skipped.
pub(crate) fn stage_archive(src: &Path, dir: &TempDir) -> Result<Staged, ImageError> {
    std::fs::create_dir(dir.path().join("blobs")).map_err(io_err(dir.path()))?;
    std::fs::create_dir(dir.path().join("blobs/sha256")).map_err(io_err(dir.path()))?;
    let file = File::open(src).map_err(io_err(src))?;
    let mut archive = tar::Archive::new(BufReader::new(file));
    let tar_err = |e: std::io::Error| io_err(src)(e);
    for entry in archive.entries().map_err(tar_err)? {
        let mut entry = entry.map_err(tar_err)?;
        if entry.header().entry_type() != tar::EntryType::Regular {
            continue;
        }
        let name = entry
            .path()
            .map_err(tar_err)?
            .to_string_lossy()
            .into_owned();
        let name = name.trim_start_matches("./");
        let keep = match name.strip_prefix("blobs/sha256/") {
            Some(hex) => Digest::parse(&format!("sha256:{hex}")).is_some(),
            None => {
                name == "oci-layout" || name == "index.json" || super::docker::staged_name(name)
            }
        };
        if keep {
            let to = dir.path().join(name);
            if let Some(parent) = to.parent() {
                std::fs::create_dir_all(parent).map_err(io_err(parent))?;
            }
            let mut out = File::create_new(&to).map_err(io_err(&to))?;
            std::io::copy(&mut entry, &mut out).map_err(io_err(&to))?;
        }
    }
    if dir.path().join("oci-layout").is_file() {
        Ok(Staged::Oci)
    } else if dir.path().join("manifest.json").is_file() {
        Ok(Staged::Docker)
    } else {
        Err(ImageError::Format {
            path: src.to_path_buf(),
            why: "neither an oci-archive (no oci-layout file) nor a docker-archive (no \
                  manifest.json)"
                .into(),
        })
    }
}
