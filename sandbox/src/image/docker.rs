//! Reading a docker-archive (what `docker save` writes, and `podman save` by default): a tar of
//! `manifest.json` (a list of images, each naming its config and its layer tars), the config
//! (`HEX.json`, HEX its sha256) and the layers (`HEX.tar`, or `HEX/layer.tar` from older
//! docker), staged by `layout::stage_archive`.
//!
//! The archive has no descriptors: what vouches for a layer is the config's `rootfs.diff_ids`,
//! the sha256 of each layer's (uncompressed) tar. So the config is verified against its file
//! name, each layer is verified against its diff id as it unpacks, and the store keeps it under
//! that digest (for an uncompressed layer, the digest an OCI manifest would give it too).
//! Compressed layers (a docker-archive may hold them, docker never writes them) are refused:
//! their diff id is the hash of bytes the store does not see whole.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use serde::Deserialize;
use sha2::{Digest as _, Sha256};

use super::layout::{MAX_JSON_BLOB, config_env, config_working_dir, unpack_verified};
use super::unpack::Compression;
use super::{Digest, Image, ImageError, LayerStore, StoredLayer, io_err};

/// One image of `manifest.json`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Entry {
    config: String,
    layers: Vec<String>,
}

/// Whether `name` (a path in the archive) is one of the files a docker-archive's import reads.
pub(super) fn staged_name(name: &str) -> bool {
    let hex = |s: &str| s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit());
    match name.split('/').collect::<Vec<_>>().as_slice() {
        ["manifest.json"] => true,
        [file] => file
            .strip_suffix(".json")
            .or_else(|| file.strip_suffix(".tar"))
            .is_some_and(hex),
        [dir, "layer.tar"] => hex(dir),
        _ => false,
    }
}

/// Imports the docker-archive staged in `dir` (`src` names it in errors) into `store`.
pub(super) fn import(dir: &Path, src: &Path, store: &LayerStore) -> Result<Image, ImageError> {
    let bad = |why: String| ImageError::Format {
        path: src.to_path_buf(),
        why,
    };
    let entries: Vec<Entry> = serde_json::from_slice(&read_json(dir, "manifest.json", &bad)?)
        .map_err(|e| bad(format!("manifest.json: {e}")))?;
    let entry = match <[Entry; 1]>::try_from(entries) {
        Ok([entry]) => entry,
        Err(entries) => {
            return Err(bad(format!(
                "{} images in the archive: one expected",
                entries.len()
            )));
        }
    };
    if !staged_name(&entry.config) || !entry.config.ends_with(".json") {
        return Err(bad(format!("config {:?} is not HEX.json", entry.config)));
    }
    let config_bytes = read_json(dir, &entry.config, &bad)?;
    let mut hasher = Sha256::new();
    hasher.update(&config_bytes);
    let config_digest = Digest::of(hasher);
    let named = entry.config.trim_end_matches(".json");
    if config_digest != named {
        return Err(ImageError::DigestMismatch {
            digest: format!("sha256:{named}"),
            actual: config_digest,
        });
    }
    let config: serde_json::Value =
        serde_json::from_slice(&config_bytes).map_err(|e| bad(format!("{}: {e}", entry.config)))?;
    let env = config_env(&config, bad)?;
    let diff_ids = config
        .pointer("/rootfs/diff_ids")
        .and_then(|v| v.as_array())
        .ok_or_else(|| bad("the config has no rootfs.diff_ids".into()))?;
    if diff_ids.len() != entry.layers.len() {
        return Err(bad(format!(
            "{} layers, {} diff ids in the config",
            entry.layers.len(),
            diff_ids.len()
        )));
    }
    let mut layers = Vec::with_capacity(entry.layers.len());
    for (name, id) in entry.layers.iter().zip(diff_ids) {
        let digest = id
            .as_str()
            .and_then(Digest::parse)
            .ok_or_else(|| bad(format!("unsupported diff id {id}")))?;
        let layer_dir = store.layer_dir(&digest);
        if !layer_dir.is_dir() {
            if !staged_name(name) || name.ends_with(".json") || name == "manifest.json" {
                return Err(bad(format!(
                    "layer {name:?} is not HEX.tar or HEX/layer.tar"
                )));
            }
            let path = dir.join(name);
            let file = File::open(&path).map_err(|_| ImageError::MissingBlob {
                digest: digest.to_string(),
            })?;
            let size = file.metadata().map_err(io_err(&path))?.len();
            let mut magic = [0u8; 4];
            let got = (&file).read(&mut magic).map_err(io_err(&path))?;
            if got == 4 && (magic[..2] == [0x1f, 0x8b] || magic == [0x28, 0xb5, 0x2f, 0xfd]) {
                return Err(bad(format!("layer {name}: compressed layers are not read")));
            }
            let file = File::open(&path).map_err(io_err(&path))?;
            unpack_verified(store, file, &digest, size, Compression::None, &layer_dir)?;
        }
        layers.push(StoredLayer {
            digest,
            dir: layer_dir,
        });
    }
    Ok(Image {
        manifest: Digest::parse(&format!("sha256:{config_digest}"))
            .ok_or_else(|| bad("config digest".into()))?,
        layers,
        env,
        working_dir: config_working_dir(&config),
    })
}

/// A staged JSON file, whole (at most [`MAX_JSON_BLOB`] bytes).
fn read_json(
    dir: &Path,
    name: &str,
    bad: &impl Fn(String) -> ImageError,
) -> Result<Vec<u8>, ImageError> {
    let path = dir.join(name);
    let file = File::open(&path).map_err(|_| bad(format!("no {name} in the archive")))?;
    let mut data = Vec::new();
    file.take(MAX_JSON_BLOB + 1)
        .read_to_end(&mut data)
        .map_err(io_err(&path))?;
    if data.len() as u64 > MAX_JSON_BLOB {
        return Err(bad(format!(
            "{name}: more than {MAX_JSON_BLOB} bytes of JSON"
        )));
    }
    Ok(data)
}
