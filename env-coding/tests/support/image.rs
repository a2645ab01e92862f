//! A small image's rootfs for the repository-task tests that need an environment
//! (`repo_image.rs`, `harbor.rs`): a static busybox and the host's git (and any other host
//! binaries a test names) with their libraries, as a tar podman imports (`podman.rs`).

// Each test binary compiles this module and uses a subset of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

const APPLETS: &[&str] = &[
    "sh", "cat", "ls", "cp", "rm", "mv", "mkdir", "printf", "test", "[", "grep", "head", "wc",
    "id", "touch", "env", "true", "false", "dirname", "basename", "sed", "tar",
];

/// The host files a binary needs: itself and what `ldd` lists (absolute paths).
#[allow(clippy::disallowed_methods)] // ldd reads the host binaries the image copies: the test's input
fn host_files(binary: &str) -> Vec<PathBuf> {
    let out = std::process::Command::new("ldd")
        .arg(binary)
        .output()
        .expect("ldd");
    let mut files = vec![PathBuf::from(binary)];
    for word in String::from_utf8_lossy(&out.stdout).split_whitespace() {
        if word.starts_with('/') {
            files.push(PathBuf::from(word));
        }
    }
    files
}

/// A rootfs tar at `path`: a static busybox (its applets in `/bin`) and the host's git, plus the
/// host's `binaries` (absolute paths) with their libraries.
pub fn rootfs_tar(path: &Path, binaries: &[&str]) {
    rootfs_tar_with(path, binaries, &[]);
}

/// [`rootfs_tar`] with `extra` entries (path in the rootfs, bytes; a path ending in `/` is a dir).
pub fn rootfs_tar_with(path: &Path, binaries: &[&str], extra: &[(String, Vec<u8>)]) {
    let mut b = tar::Builder::new(std::fs::File::create(path).expect("rootfs"));
    let mut add = |name: &str, data: &[u8], mode: u32| {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(mode);
        h.set_mtime(1_700_000_000);
        b.append_data(&mut h, name, data).expect("append");
    };
    let busybox =
        std::fs::read("/bin/busybox").expect("/bin/busybox (apt-get install busybox-static)");
    add("bin/busybox", &busybox, 0o755);
    add("etc/os-release", b"ID=codegym-env-test\n", 0o644);
    let mut files: Vec<PathBuf> = host_files("/usr/bin/git");
    for binary in binaries {
        files.extend(host_files(binary));
    }
    files.sort();
    files.dedup();
    for file in files {
        let data = std::fs::read(&file).expect("host file");
        add(
            file.to_str().expect("path").trim_start_matches('/'),
            &data,
            0o755,
        );
    }
    for applet in APPLETS {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_size(0);
        h.set_mode(0o777);
        b.append_link(&mut h, format!("bin/{applet}"), "busybox")
            .expect("link");
    }
    for (name, data) in extra {
        let mut h = tar::Header::new_gnu();
        h.set_mtime(1_700_000_000);
        if name.ends_with('/') {
            h.set_entry_type(tar::EntryType::Directory);
            h.set_mode(0o755);
            h.set_size(0);
            b.append_data(&mut h, name, &[][..]).expect("dir");
        } else {
            h.set_mode(0o644);
            h.set_size(data.len() as u64);
            b.append_data(&mut h, name, &data[..]).expect("file");
        }
    }
    b.finish().expect("rootfs");
}
