//! Unpacking one layer's tar stream into a new dir, entry by entry, as overlayfs reads a lower
//! layer: OCI whiteouts converted, nothing written outside the dir, no device node, no set-id bit.
//! The same unpacker reads a plain archive ([`unpack_archive`]: a repository given as a `.tar` or
//! `.tar.gz`, as an sdist or `git archive` writes it), where `.wh.` names are ordinary files, a
//! device node or FIFO fails the archive instead of being dropped, and one top-level dir holding
//! everything is stripped.
//!
//! Safety rests on one rule: every parent of an entry is a real dir of the tree (checked with
//! `lstat`, created when missing), and an existing entry at the path is removed before the new
//! one is created with `O_EXCL | O_NOFOLLOW`, so no write ever goes through a symlink the layer
//! planted. Dir modes are applied last (deepest first): a dir of mode 0555 still takes its
//! entries. The dir is the importer's own (a fresh temporary dir only root can reach), so nothing
//! else changes it meanwhile.

use std::ffi::CString;
use std::fs::OpenOptions;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use super::{Digest, ImageError, io_err};

/// How a layer blob is compressed (from its media type).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Compression {
    None,
    Gzip,
    Zstd,
}

impl Compression {
    /// `None` for a type this store cannot read (not a layer).
    pub(crate) fn of(media_type: &str) -> Option<Compression> {
        if media_type.ends_with("+gzip") || media_type.ends_with(".tar.gzip") {
            Some(Compression::Gzip)
        } else if media_type.ends_with("+zstd") {
            Some(Compression::Zstd)
        } else if media_type.ends_with(".tar") {
            Some(Compression::None)
        } else {
            None
        }
    }
}

const OPAQUE: &[u8] = b".wh..wh..opq";
const META_PREFIX: &[u8] = b".wh..wh.";
const WHITEOUT_PREFIX: &[u8] = b".wh.";

/// Unpacks the layer `digest` read from `blob` into the new dir `tree`.
pub(crate) fn unpack(
    blob: &mut impl Read,
    compression: Compression,
    tree: &Path,
    digest: &Digest,
) -> Result<(), ImageError> {
    unpack_stream(blob, compression, tree, Source::Layer(digest))
}

/// Unpacks the archive `src` (a tar, plain, gzip or zstd: told by its first bytes) into the new
/// dir `tree`; when every entry lies under one top-level dir, that dir's contents are `tree`'s.
/// Also the task synthesizer's sdist unpacker (`env-coding`'s `repo::synth`).
pub fn unpack_archive(src: &Path, tree: &Path) -> Result<(), ImageError> {
    let mut file = std::io::BufReader::new(std::fs::File::open(src).map_err(io_err(src))?);
    let magic = std::io::BufRead::fill_buf(&mut file).map_err(io_err(src))?;
    let compression = match magic {
        [0x1f, 0x8b, ..] => Compression::Gzip,
        [0x28, 0xb5, 0x2f, 0xfd, ..] => Compression::Zstd,
        _ => Compression::None,
    };
    let unpacked = tree.with_extension("unpacked");
    unpack_stream(&mut file, compression, &unpacked, Source::Archive(src))?;
    let mut entries = std::fs::read_dir(&unpacked)
        .map_err(io_err(&unpacked))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(io_err(&unpacked))?;
    let only_dir = match entries.as_slice() {
        [one] => one.file_type().map_err(io_err(&unpacked))?.is_dir(),
        _ => false,
    };
    let top = match (only_dir, entries.pop()) {
        (true, Some(one)) => one.path(),
        _ => unpacked.clone(),
    };
    std::fs::rename(&top, tree).map_err(io_err(tree))?;
    if top != unpacked {
        std::fs::remove_dir(&unpacked).map_err(io_err(&unpacked))?;
    }
    Ok(())
}

/// What is being unpacked: an image's layer (whiteouts, devices dropped) or a plain archive.
#[derive(Clone, Copy)]
enum Source<'a> {
    Layer(&'a Digest),
    Archive(&'a Path),
}

fn unpack_stream(
    blob: &mut impl Read,
    compression: Compression,
    tree: &Path,
    source: Source<'_>,
) -> Result<(), ImageError> {
    std::fs::DirBuilder::new()
        .mode(0o755)
        .create(tree)
        .map_err(io_err(tree))?;
    let reader: Box<dyn Read + '_> = match compression {
        Compression::None => Box::new(blob),
        Compression::Gzip => Box::new(flate2::read::GzDecoder::new(blob)),
        Compression::Zstd => Box::new(ZstdFrames {
            source: std::io::BufReader::new(blob),
            decoder: ruzstd::decoding::FrameDecoder::new(),
            in_frame: false,
        }),
    };
    let mut u = Unpacker {
        tree,
        source,
        root: nix::unistd::geteuid().is_root(),
        dirs: Vec::new(),
    };
    let mut archive = tar::Archive::new(reader);
    for entry in archive.entries().map_err(|e| u.layer_err(e))? {
        let entry = entry.map_err(|e| u.layer_err(e))?;
        u.entry(entry)?;
    }
    u.finish_dirs()
}

struct Unpacker<'a> {
    tree: &'a Path,
    source: Source<'a>,
    /// Whether entries get their owners (only root can give them).
    root: bool,
    /// Dirs whose mode, owner and mtime are applied last: (path, mode, uid, gid, mtime).
    dirs: Vec<(PathBuf, u32, u32, u32, i64)>,
}

impl Unpacker<'_> {
    fn layer_err(&self, source: std::io::Error) -> ImageError {
        match self.source {
            Source::Layer(digest) => ImageError::Layer {
                digest: digest.to_string(),
                source,
            },
            Source::Archive(path) => ImageError::Io {
                path: path.to_path_buf(),
                source,
            },
        }
    }

    fn refuse(&self, path: &Path, why: &'static str) -> ImageError {
        match self.source {
            Source::Layer(digest) => ImageError::Entry {
                digest: digest.to_string(),
                path: path.display().to_string(),
                why,
            },
            Source::Archive(archive) => ImageError::ArchiveEntry {
                archive: archive.to_path_buf(),
                path: path.display().to_string(),
                why: why.replace("the layer", "the archive's root"),
            },
        }
    }

    fn label(&self) -> String {
        match self.source {
            Source::Layer(digest) => digest.to_string(),
            Source::Archive(path) => path.display().to_string(),
        }
    }

    /// The name that is a layer's whiteout marker; in a plain archive, none is.
    fn marker<'n>(&self, name: &'n [u8], prefix: &[u8]) -> Option<&'n [u8]> {
        match self.source {
            Source::Layer(_) => name.strip_prefix(prefix),
            Source::Archive(_) => None,
        }
    }

    /// The entry's path relative to the tree (`None`: the tree's root itself).
    fn relative(&self, raw: &Path) -> Result<Option<PathBuf>, ImageError> {
        let mut rel = PathBuf::new();
        for c in raw.components() {
            match c {
                Component::Normal(n) => rel.push(n),
                Component::CurDir | Component::RootDir => {}
                Component::ParentDir | Component::Prefix(_) => {
                    return Err(self.refuse(raw, "leaves the layer (`..`)"));
                }
            }
        }
        Ok((!rel.as_os_str().is_empty()).then_some(rel))
    }

    /// Makes every missing dir of `rel` (a dir path); refuses one that is a symlink or a file.
    fn parents(&self, rel: &Path, shown: &Path) -> Result<(), ImageError> {
        let mut at = self.tree.to_path_buf();
        for c in rel.components() {
            at.push(c);
            match std::fs::symlink_metadata(&at) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => return Err(self.refuse(shown, "lies under a symlink or a file")),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    std::fs::DirBuilder::new()
                        .mode(0o755)
                        .create(&at)
                        .map_err(io_err(&at))?;
                }
                Err(e) => return Err(io_err(&at)(e)),
            }
        }
        Ok(())
    }

    /// Removes whatever an earlier entry left at `path` (a dir with its contents; links unlinked).
    fn clear(&self, path: &Path) -> Result<(), ImageError> {
        match std::fs::symlink_metadata(path) {
            Ok(m) if m.is_dir() => std::fs::remove_dir_all(path).map_err(io_err(path)),
            Ok(_) => std::fs::remove_file(path).map_err(io_err(path)),
            Err(_) => Ok(()),
        }
    }

    fn entry<R: Read>(&mut self, mut e: tar::Entry<'_, R>) -> Result<(), ImageError> {
        let raw = e.path().map_err(|x| self.layer_err(x))?.into_owned();
        // The root entry (`./`): the tree's own dir keeps the store's owner and mode 0755.
        let Some(rel) = self.relative(&raw)? else {
            return Ok(());
        };
        let name = rel.file_name().map(OsStrExt::as_bytes).unwrap_or_default();
        let parent = rel.parent().unwrap_or(Path::new(""));
        self.parents(parent, &raw)?;
        if self.marker(name, OPAQUE) == Some(b"") {
            return set_opaque(&self.tree.join(parent));
        }
        if self.marker(name, META_PREFIX).is_some() {
            // aufs's own bookkeeping (`.wh..wh.plnk`, `.wh..wh.aufs`): no meaning in overlayfs.
            return Ok(());
        }
        let path = self.tree.join(&rel);
        if let Some(hidden) = self.marker(name, WHITEOUT_PREFIX) {
            if hidden.is_empty() {
                return Err(self.refuse(&raw, "is a whiteout of nothing"));
            }
            let target = self
                .tree
                .join(parent)
                .join(std::ffi::OsStr::from_bytes(hidden));
            self.clear(&target)?;
            return whiteout(&target);
        }
        let header = e.header();
        let kind = header.entry_type();
        // Set-id bits never reach a run; a dir keeps its sticky bit.
        let mode = header.mode().map_err(|x| self.layer_err(x))?;
        let (uid, gid) = (
            header.uid().unwrap_or(0) as u32,
            header.gid().unwrap_or(0) as u32,
        );
        let mtime = header.mtime().unwrap_or(0) as i64;
        match kind {
            tar::EntryType::Directory => {
                if !std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir()) {
                    self.clear(&path)?;
                    std::fs::DirBuilder::new()
                        .mode(0o700)
                        .create(&path)
                        .map_err(io_err(&path))?;
                }
                self.dirs.push((path, mode & 0o1777, uid, gid, mtime));
            }
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                self.clear(&path)?;
                let mut file = OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .custom_flags(libc::O_NOFOLLOW)
                    .open(&path)
                    .map_err(io_err(&path))?;
                std::io::copy(&mut e, &mut file).map_err(|x| self.layer_err(x))?;
                drop(file);
                self.attributes(&path, Some(mode & 0o777), uid, gid, mtime)?;
            }
            tar::EntryType::Symlink => {
                let target = e
                    .link_name()
                    .map_err(|x| self.layer_err(x))?
                    .ok_or_else(|| self.refuse(&raw, "is a symlink to nothing"))?;
                self.clear(&path)?;
                std::os::unix::fs::symlink(&target, &path).map_err(io_err(&path))?;
                self.attributes(&path, None, uid, gid, mtime)?;
            }
            tar::EntryType::Link => {
                let target = e
                    .link_name()
                    .map_err(|x| self.layer_err(x))?
                    .ok_or_else(|| self.refuse(&raw, "is a hard link to nothing"))?;
                let source = self.link_source(&target, &raw)?;
                self.clear(&path)?;
                std::fs::hard_link(&source, &path).map_err(io_err(&path))?;
            }
            tar::EntryType::Char | tar::EntryType::Block | tar::EntryType::Fifo => {
                if let Source::Archive(_) = self.source {
                    return Err(self.refuse(&raw, "is a device node or FIFO"));
                }
                tracing::debug!(layer = %self.label(), path = %raw.display(), "device node or FIFO dropped");
            }
            tar::EntryType::GNUSparse => {
                return Err(self.refuse(&raw, "is a sparse file (unsupported)"));
            }
            other => {
                tracing::debug!(layer = %self.label(), path = %raw.display(), kind = ?other, "tar entry dropped");
            }
        }
        Ok(())
    }

    /// The existing file a hard link names: inside the tree, through real dirs only, not a dir.
    fn link_source(&self, target: &Path, shown: &Path) -> Result<PathBuf, ImageError> {
        let escape = || self.refuse(shown, "is a hard link outside the layer");
        let rel = self
            .relative(target)
            .map_err(|_| escape())?
            .ok_or_else(escape)?;
        let mut at = self.tree.to_path_buf();
        for c in rel.parent().unwrap_or(Path::new("")).components() {
            at.push(c);
            if !std::fs::symlink_metadata(&at).is_ok_and(|m| m.is_dir()) {
                return Err(escape());
            }
        }
        let source = self.tree.join(&rel);
        match std::fs::symlink_metadata(&source) {
            Ok(m) if !m.is_dir() => Ok(source),
            _ => Err(escape()),
        }
    }

    /// Owner (as root), mode (`None` for a symlink) and mtime of `path`, never following a link.
    fn attributes(
        &self,
        path: &Path,
        mode: Option<u32>,
        uid: u32,
        gid: u32,
        mtime: i64,
    ) -> Result<(), ImageError> {
        if self.root {
            std::os::unix::fs::lchown(path, Some(uid), Some(gid)).map_err(io_err(path))?;
        }
        // After the chown, which clears set-id bits anyway.
        if let Some(mode) = mode {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
                .map_err(io_err(path))?;
        }
        set_mtime(path, mtime)
    }

    /// Dirs' attributes, deepest first, each only if it is still a dir (a later entry may have
    /// replaced or whited it out); of one path the last entry's win.
    fn finish_dirs(mut self) -> Result<(), ImageError> {
        let dirs = std::mem::take(&mut self.dirs);
        let mut order: Vec<usize> = (0..dirs.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(dirs[i].0.components().count()));
        for i in order {
            let (path, mode, uid, gid, mtime) = &dirs[i];
            if std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir()) {
                self.attributes(path, Some(*mode), *uid, *gid, *mtime)?;
            }
        }
        Ok(())
    }
}

fn c_path(path: &Path) -> Result<CString, ImageError> {
    CString::new(path.as_os_str().as_bytes()).map_err(|e| io_err(path)(std::io::Error::other(e)))
}

/// overlayfs's whiteout: a character device 0/0 (needs `CAP_MKNOD`).
fn whiteout(path: &Path) -> Result<(), ImageError> {
    let c = c_path(path)?;
    // SAFETY: a valid NUL-terminated path; mknod reads nothing else.
    let r = unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR, libc::makedev(0, 0)) };
    if r != 0 {
        return Err(io_err(path)(std::io::Error::last_os_error()));
    }
    Ok(())
}

/// overlayfs's opaque dir: `trusted.overlay.opaque = y` (needs `CAP_SYS_ADMIN`).
fn set_opaque(dir: &Path) -> Result<(), ImageError> {
    let c = c_path(dir)?;
    // SAFETY: valid NUL-terminated name and path, a 1-byte value.
    let r = unsafe {
        libc::lsetxattr(
            c.as_ptr(),
            c"trusted.overlay.opaque".as_ptr(),
            b"y".as_ptr() as *const libc::c_void,
            1,
            0,
        )
    };
    if r != 0 {
        return Err(io_err(dir)(std::io::Error::last_os_error()));
    }
    Ok(())
}

fn set_mtime(path: &Path, mtime: i64) -> Result<(), ImageError> {
    let c = c_path(path)?;
    let ts = libc::timespec {
        tv_sec: mtime,
        tv_nsec: 0,
    };
    // SAFETY: a valid path and two timespecs; AT_SYMLINK_NOFOLLOW sets a link's own time.
    let r = unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c.as_ptr(),
            [ts, ts].as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if r != 0 {
        return Err(io_err(path)(std::io::Error::last_os_error()));
    }
    Ok(())
}

/// A zstd stream of any number of frames (a layer compressed in chunks has several, and skippable
/// frames of metadata), decoded frame after frame until the input ends.
struct ZstdFrames<R: std::io::BufRead> {
    source: R,
    decoder: ruzstd::decoding::FrameDecoder,
    in_frame: bool,
}

impl<R: std::io::BufRead> Read for ZstdFrames<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use ruzstd::decoding::BlockDecodingStrategy;
        use ruzstd::decoding::errors::{FrameDecoderError, ReadFrameHeaderError};
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            if self.in_frame {
                let d = &mut self.decoder;
                // As ruzstd's own `StreamingDecoder`: decode until a buffer's worth is ready.
                while d.can_collect() < buf.len() && !d.is_finished() {
                    let more = BlockDecodingStrategy::UptoBytes(buf.len() - d.can_collect());
                    d.decode_blocks(&mut self.source, more)
                        .map_err(|e| std::io::Error::other(format!("zstd: {e}")))?;
                }
                let n = d.read(buf)?;
                if n > 0 {
                    return Ok(n);
                }
                self.in_frame = false;
            }
            if self.source.fill_buf()?.is_empty() {
                return Ok(0);
            }
            match self.decoder.init(&mut self.source) {
                Ok(()) => self.in_frame = true,
                Err(FrameDecoderError::ReadFrameHeaderError(ReadFrameHeaderError::SkipFrame {
                    length,
                    ..
                })) => {
                    let mut skipped = (&mut self.source).take(u64::from(length));
                    std::io::copy(&mut skipped, &mut std::io::sink())?;
                }
                Err(e) => return Err(std::io::Error::other(format!("zstd: {e}"))),
            }
        }
    }
}
