//! Safe access to a run's work dir from the host. The work dir belongs to the program, which may
//! have planted symlinks, FIFOs or hard links there (the Judge0 CVE-2024-28185 class): every open
//! is `openat2` beneath the work dir with `RESOLVE_NO_SYMLINKS`, non-blocking, and only regular
//! files with a single link are read or written.

use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::path::{Component, Path};

use nix::fcntl::{OFlag, OpenHow, ResolveFlag, open, openat2};
use nix::sys::stat::{Mode, SFlag, fstat};

/// Largest file a file tool returns.
pub const MAX_READ_BYTES: u64 = 1 << 20;

/// A relative path with only normal components (no `..`, no root, no empty path).
pub fn validate_rel_path(path: &str) -> Result<&Path, String> {
    let p = Path::new(path);
    if path.is_empty() || path.contains('\0') {
        return Err("empty path or NUL in path".into());
    }
    if !p
        .components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(format!("path {path:?} must be relative, without `..`"));
    }
    if p.components().all(|c| matches!(c, Component::CurDir)) {
        return Err(format!("path {path:?} names no file"));
    }
    Ok(p)
}

fn how(flags: OFlag) -> OpenHow {
    // openat2 rejects a mode without O_CREAT.
    let mode = if flags.contains(OFlag::O_CREAT) {
        0o644
    } else {
        0
    };
    OpenHow::new()
        .flags(flags | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK)
        .mode(Mode::from_bits_truncate(mode))
        .resolve(
            ResolveFlag::RESOLVE_BENEATH
                | ResolveFlag::RESOLVE_NO_SYMLINKS
                | ResolveFlag::RESOLVE_NO_MAGICLINKS,
        )
}

fn open_root(root: &Path) -> Result<std::os::fd::OwnedFd, String> {
    open(
        root,
        OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW,
        Mode::empty(),
    )
    .map_err(|e| format!("work dir unavailable: {e}"))
}

fn check_regular(
    fd: &std::os::fd::OwnedFd,
    path: &str,
) -> Result<nix::sys::stat::FileStat, String> {
    let st = fstat(fd.as_fd()).map_err(|e| format!("{path}: {e}"))?;
    if SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) != SFlag::S_IFREG {
        return Err(format!("{path}: not a regular file"));
    }
    if st.st_nlink > 1 {
        return Err(format!("{path}: has several hard links; refusing"));
    }
    Ok(st)
}

/// Writes `content` to `rel` beneath `root` (parent dirs created), owned like `root`.
pub fn write_beneath(root: &Path, rel: &str, content: &[u8], max_bytes: u64) -> Result<(), String> {
    let p = validate_rel_path(rel)?;
    if content.len() as u64 > max_bytes {
        return Err(format!(
            "{rel}: {} bytes exceeds the {max_bytes}-byte file limit",
            content.len()
        ));
    }
    let root_fd = open_root(root)?;
    let owner = fstat(root_fd.as_fd()).map_err(|e| format!("work dir: {e}"))?;
    let chown = |fd: &std::os::fd::OwnedFd| {
        // The program runs as the work dir's owner: hand it what we create so it can rewrite it.
        let _ = nix::unistd::fchown(fd, Some(owner.st_uid.into()), Some(owner.st_gid.into()));
    };
    // Walk down one component at a time from directory fds, so that no path with a planted
    // symlink in it is ever handed to a syscall that would follow it (mkdirat does).
    let mut dir = root_fd;
    let names: Vec<_> = p
        .components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .collect();
    let Some((file_name, parents)) = names.split_last() else {
        return Err(format!("path {rel:?} names no file"));
    };
    for c in parents {
        let created = match nix::sys::stat::mkdirat(
            dir.as_fd(),
            c.as_os_str(),
            Mode::from_bits_truncate(0o755),
        ) {
            Ok(()) => true,
            Err(nix::errno::Errno::EEXIST) => false,
            Err(e) => return Err(format!("{rel}: cannot create a directory: {e}")),
        };
        let next = openat2(
            dir.as_fd(),
            c.as_os_str(),
            how(OFlag::O_DIRECTORY | OFlag::O_RDONLY),
        )
        .map_err(|e| format!("{rel}: {e}"))?;
        if created {
            chown(&next);
        }
        dir = next;
    }
    let fd = openat2(
        dir.as_fd(),
        file_name.as_os_str(),
        how(OFlag::O_WRONLY | OFlag::O_CREAT),
    )
    .map_err(|e| format!("{rel}: {e}"))?;
    check_regular(&fd, rel)?;
    nix::unistd::ftruncate(&fd, 0).map_err(|e| format!("{rel}: {e}"))?;
    chown(&fd);
    let mut file = std::fs::File::from(fd);
    file.write_all(content).map_err(|e| format!("{rel}: {e}"))
}

/// Reads `rel` beneath `root`; at most `max_bytes` (the flag says whether it was cut).
pub fn read_beneath(root: &Path, rel: &str, max_bytes: u64) -> Result<(Vec<u8>, bool), String> {
    let p = validate_rel_path(rel)?;
    let root_fd = open_root(root)?;
    let fd =
        openat2(root_fd.as_fd(), p, how(OFlag::O_RDONLY)).map_err(|e| format!("{rel}: {e}"))?;
    let st = check_regular(&fd, rel)?;
    let mut buf = Vec::new();
    std::fs::File::from(fd)
        .take(max_bytes)
        .read_to_end(&mut buf)
        .map_err(|e| format!("{rel}: {e}"))?;
    Ok((buf, st.st_size as u64 > max_bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_escaping_paths() {
        for bad in ["", "/etc/passwd", "../x", "a/../../b", ".", "a\0b"] {
            assert!(validate_rel_path(bad).is_err(), "{bad:?}");
        }
        assert!(validate_rel_path("./a/b.txt").is_ok());
    }

    #[test]
    fn round_trip_and_symlink_refusal() {
        let dir = tempfile::tempdir().unwrap();
        write_beneath(dir.path(), "sub/dir/a.txt", b"hello", 100).unwrap();
        assert_eq!(
            read_beneath(dir.path(), "sub/dir/a.txt", 100).unwrap(),
            (b"hello".to_vec(), false)
        );
        assert_eq!(
            read_beneath(dir.path(), "sub/dir/a.txt", 2).unwrap(),
            (b"he".to_vec(), true)
        );
        write_beneath(dir.path(), "sub/dir/a.txt", b"x", 100).unwrap();
        assert_eq!(
            read_beneath(dir.path(), "sub/dir/a.txt", 100).unwrap().0,
            b"x"
        );
        assert!(write_beneath(dir.path(), "big", &[0; 10], 5).is_err());

        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "s3cret").unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), dir.path().join("link")).unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("dirlink")).unwrap();
        assert!(read_beneath(dir.path(), "link", 100).is_err());
        assert!(read_beneath(dir.path(), "dirlink/secret", 100).is_err());
        assert!(write_beneath(dir.path(), "link", b"pwned", 100).is_err());
        assert!(write_beneath(dir.path(), "dirlink/new", b"pwned", 100).is_err());
        assert_eq!(
            std::fs::read_to_string(outside.path().join("secret")).unwrap(),
            "s3cret"
        );
        assert!(!outside.path().join("new").exists());

        std::fs::hard_link(outside.path().join("secret"), dir.path().join("hard")).unwrap();
        assert!(read_beneath(dir.path(), "hard", 100).is_err());
        nix::unistd::mkfifo(&dir.path().join("fifo"), Mode::from_bits_truncate(0o644)).unwrap();
        assert!(read_beneath(dir.path(), "fifo", 100).is_err());
        assert!(read_beneath(dir.path(), "sub", 100).is_err());
    }
}
