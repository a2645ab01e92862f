//! OCI image layouts built by the tests (`image.rs`, `image_root.rs`): layers as tar streams with
//! raw entry names (the `tar` crate's own checks would refuse the hostile ones), blobs named by
//! their sha256, a manifest and an index.

#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest as _, Sha256};
use tar::EntryType;

pub const TAR: &str = "application/vnd.oci.image.layer.v1.tar";
pub const TAR_GZ: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
pub const TAR_ZSTD: &str = "application/vnd.oci.image.layer.v1.tar+zstd";

/// A layer's entries, written with raw names (the `tar` crate's own checks would refuse the
/// hostile ones this file needs).
pub struct LayerTar {
    b: tar::Builder<Vec<u8>>,
}

impl Default for LayerTar {
    fn default() -> Self {
        LayerTar {
            b: tar::Builder::new(Vec::new()),
        }
    }
}

impl LayerTar {
    pub fn entry(
        mut self,
        name: &str,
        kind: EntryType,
        mode: u32,
        data: &[u8],
        link: &str,
    ) -> Self {
        let mut h = tar::Header::new_ustar();
        let old = h.as_old_mut();
        old.name.fill(0);
        old.name[..name.len()].copy_from_slice(name.as_bytes());
        old.linkname.fill(0);
        old.linkname[..link.len()].copy_from_slice(link.as_bytes());
        h.set_entry_type(kind);
        h.set_mode(mode);
        h.set_size(data.len() as u64);
        h.set_mtime(1_700_000_000);
        h.set_cksum();
        self.b.append(&h, data).expect("append");
        self
    }
    pub fn dir(self, name: &str) -> Self {
        self.entry(name, EntryType::Directory, 0o755, b"", "")
    }
    pub fn file(self, name: &str, data: &str) -> Self {
        self.entry(name, EntryType::Regular, 0o644, data.as_bytes(), "")
    }
    pub fn bytes(self) -> Vec<u8> {
        self.b.into_inner().expect("tar")
    }
    /// zstd in two frames with a skippable frame between them, as chunked compressors write.
    pub fn zstd(self) -> Vec<u8> {
        use ruzstd::encoding::{CompressionLevel, compress_to_vec};
        let data = self.bytes();
        let (a, b) = data.split_at(data.len() / 2);
        let mut out = compress_to_vec(a, CompressionLevel::Fastest);
        out.extend_from_slice(&0x184D_2A50u32.to_le_bytes());
        out.extend_from_slice(&4u32.to_le_bytes());
        out.extend_from_slice(b"meta");
        out.extend(compress_to_vec(b, CompressionLevel::Fastest));
        out
    }
    pub fn gzip(self) -> Vec<u8> {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&self.bytes()).expect("gzip");
        gz.finish().expect("gzip")
    }
}

pub fn sha(data: &[u8]) -> String {
    let h = Sha256::digest(data);
    h.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn put_blob(layout: &Path, data: &[u8]) -> String {
    let hex = sha(data);
    std::fs::write(layout.join("blobs/sha256").join(&hex), data).expect("blob");
    format!("sha256:{hex}")
}

/// Writes an OCI image layout with `layers` (media type, blob; bottom first) at `dir`; returns
/// the layers' digests.
pub fn write_layout(dir: &Path, layers: &[(&str, Vec<u8>)]) -> Vec<String> {
    write_layout_with_env(dir, layers, serde_json::Value::Null)
}

/// [`write_layout`] whose image config sets `config.Env` to `env` (`null`: no `config` at all).
pub fn write_layout_with_env(
    dir: &Path,
    layers: &[(&str, Vec<u8>)],
    env: serde_json::Value,
) -> Vec<String> {
    std::fs::create_dir_all(dir.join("blobs/sha256")).expect("layout");
    std::fs::write(dir.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).expect("layout");
    let mut config = serde_json::json!(
        {"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": []}}
    );
    if !env.is_null() {
        config["config"] = serde_json::json!({"Env": env});
    }
    let config = serde_json::to_vec(&config).expect("json");
    let config = config.as_slice();
    let config_digest = put_blob(dir, config);
    let mut digests = Vec::new();
    let mut descs = Vec::new();
    for (media_type, blob) in layers {
        let d = put_blob(dir, blob);
        descs.push(serde_json::json!({"mediaType": media_type, "digest": d, "size": blob.len()}));
        digests.push(d);
    }
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": config_digest, "size": config.len()},
        "layers": descs,
    }))
    .expect("json");
    let manifest_digest = put_blob(dir, &manifest);
    let index = serde_json::json!({"schemaVersion": 2, "manifests": [
        {"mediaType": "application/vnd.oci.image.manifest.v1+json",
         "digest": manifest_digest, "size": manifest.len()}]});
    std::fs::write(dir.join("index.json"), index.to_string()).expect("index");
    digests
}

pub fn blob_path(layout: &Path, digest: &str) -> PathBuf {
    layout
        .join("blobs/sha256")
        .join(digest.trim_start_matches("sha256:"))
}

/// A layer holding a static busybox (Debian's `busybox-static`) as `/bin/sh` and a few applets,
/// and `etc/image-file`.
pub fn busybox_layer() -> LayerTar {
    let busybox =
        std::fs::read("/bin/busybox").expect("/bin/busybox (apt-get install busybox-static)");
    let mut layer = LayerTar::default()
        .dir("bin/")
        .dir("etc/")
        .entry("bin/busybox", EntryType::Regular, 0o755, &busybox, "")
        .file("etc/image-file", "from the image\n");
    for applet in [
        "sh", "cat", "ls", "touch", "sleep", "head", "wc", "id", "rm", "mkdir",
    ] {
        layer = layer.entry(
            &format!("bin/{applet}"),
            EntryType::Symlink,
            0o777,
            b"",
            "busybox",
        );
    }
    layer
}
