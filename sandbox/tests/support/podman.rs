//! podman as a test's image builder: an image imported from a rootfs tar and saved as the
//! oci-archive a task names (`tests/image.rs`; env-coding's `tests/repo_image.rs` includes this
//! file by path). podman only builds the input: it runs nothing, and nothing of it runs while the
//! sandbox uses the archive.

// Each test binary compiles this module and uses a subset of it.
#![allow(dead_code)]

use std::path::Path;

/// podman's archive at `archive` (`format`: `oci-archive`, or `docker-archive`, its default) of
/// an image imported from `rootfs`; the image is removed from podman's storage at once (the
/// archive is all a test needs). `name` keeps the tags of tests running at once apart.
pub fn save(rootfs: &Path, archive: &Path, name: &str, format: &str) {
    save_with(rootfs, archive, name, format, &[]);
}

/// [`save`] with `changes` to the image's config (`podman import --change`, e.g. `WORKDIR=/app`).
#[allow(clippy::disallowed_methods)] // podman builds the test's input
pub fn save_with(rootfs: &Path, archive: &Path, name: &str, format: &str, changes: &[&str]) {
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
    let mut import = vec!["import"];
    for change in changes {
        import.extend(["--change", change]);
    }
    import.extend([rootfs.to_str().expect("path"), &tag]);
    podman(&import);
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
