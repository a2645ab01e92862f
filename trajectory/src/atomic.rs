//! Atomic replacement of a file: the bytes go to a temporary file in the target's directory, are
//! synced, and the temporary file is renamed over the target (then the directory is synced, so the
//! rename itself survives a crash). A reader, or a crash at any point, sees the old file or the new
//! one, never a partial one; a failed write leaves the old file and no temporary file behind.
//!
//! The new file keeps the mode of the file it replaces, or gets 0644 when there was none: temporary
//! files are created 0600, and a dataset is meant to be read by others.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

/// Mode of a file that did not exist before.
const NEW_FILE_MODE: u32 = 0o644;

/// Replaces `path` with `data` atomically.
pub fn write_atomic(path: &Path, data: &[u8]) -> std::io::Result<()> {
    write_atomic_with(path, |w| w.write_all(data))
}

/// Replaces `path` atomically with what `fill` writes. `fill` gets a buffered writer on the
/// temporary file; when it fails, its error is returned and the target is untouched. IO errors of
/// the temporary file itself become `E` through `From`.
pub fn write_atomic_with<E: From<std::io::Error>>(
    path: &Path,
    fill: impl FnOnce(&mut BufWriter<File>) -> Result<(), E>,
) -> Result<(), E> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // Hidden and named after the target, so a leftover (a killed process) is recognisable.
    let tmp = tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(".tmp")
        .tempfile_in(dir)?;
    let (file, tmp_path) = tmp.into_parts();
    {
        use std::os::unix::fs::PermissionsExt;
        let mode =
            std::fs::metadata(path).map_or(NEW_FILE_MODE, |m| m.permissions().mode() & 0o7777);
        file.set_permissions(std::fs::Permissions::from_mode(mode))?;
    }
    let mut w = BufWriter::new(file);
    // On any error from here to the rename, dropping `tmp_path` deletes the temporary file.
    fill(&mut w)?;
    let file = w.into_inner().map_err(|e| e.into_error())?;
    file.sync_all()?;
    tmp_path.persist(path).map_err(|e| e.error)?;
    sync_dir(dir)?;
    Ok(())
}

/// Syncs a directory, so that a rename in it is durable. Filesystems that cannot sync directories
/// (EINVAL) are accepted: the data itself was synced, only the rename's durability is theirs.
fn sync_dir(dir: &Path) -> std::io::Result<()> {
    match File::open(dir).and_then(|d| d.sync_all()) {
        Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => Ok(()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn replaces_the_file_and_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("out.jsonl");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        assert!(write_atomic(&dir.path().join("missing/out"), b"x").is_err());
    }

    #[test]
    fn a_failing_fill_keeps_the_old_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("out.json");
        write_atomic(&p, b"old").unwrap();
        let err = write_atomic_with(&p, |w| {
            w.write_all(b"half")?;
            Err(std::io::Error::other("encoder failed"))
        })
        .unwrap_err();
        assert_eq!(err.to_string(), "encoder failed");
        assert_eq!(std::fs::read(&p).unwrap(), b"old");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn keeps_the_mode_of_the_replaced_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("data.jsonl");
        write_atomic(&p, b"a").unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode(&p), NEW_FILE_MODE);
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).unwrap();
        write_atomic(&p, b"b").unwrap();
        assert_eq!(mode(&p), 0o640);
    }
}
