//! podman as a test's image builder: an image imported from a rootfs tar and saved as the
//! oci-archive a task names (`tests/image.rs`; env-coding's `tests/repo_image.rs` includes this
//! file by path). podman only builds the input: it runs nothing, and nothing of it runs while the
//! sandbox uses the archive.

use std::path::Path;

/// podman's archive at `archive` (`format`: `oci-archive`, or `docker-archive`, its default) of
/// an image imported from `rootfs`; the image is removed from podman's storage at once (the
/// archive is all a test needs). `name` keeps the tags of tests running at once apart.
#[allow(clippy::disallowed_methods)] // podman builds the test's input
pub fn save(rootfs: &Path, archive: &Path, name: &str, format: &str) {
    let tag = format!("localhost/codegym-test-{name}:{}", std::process::id());
    let podman = |args: &[&str]| {
        let out = std::process::Command::new("podman")
            .args(args)
            .output()
            .expect("podman");
        assert!(
            out.status.success(),
            "podman {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    podman(&["import", rootfs.to_str().expect("path"), &tag]);
    podman(&[
        "save",
        "--format",
        format,
        "-o",
        archive.to_str().expect("path"),
        &tag,
    ]);
    podman(&["rmi", &tag]);
}
