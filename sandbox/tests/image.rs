//! The layer store (`image/`): OCI image layouts and oci-archives built by the tests themselves
//! (and one by podman), imported into a store. Stacked as an overlay, the unpacked layers show
//! the image's files with its deletions applied; corrupt, missing and hostile layers fail the
//! import, naming the blob, and leave nothing in the store or outside it.

use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::Path;

use codegym_sandbox::image::{Image, ImageError, LayerStore};
use tar::EntryType;

#[path = "support/oci.rs"]
mod oci;
#[path = "support/podman.rs"]
mod podman;
use oci::{LayerTar, TAR, TAR_GZ, TAR_ZSTD, blob_path, write_layout};

fn two_layers() -> Vec<(&'static str, Vec<u8>)> {
    let base = LayerTar::default()
        .dir("etc/")
        .file("etc/keep", "kept")
        .file("etc/gone", "deleted above")
        .entry("etc/link", EntryType::Symlink, 0o777, b"", "keep")
        .entry("etc/hard", EntryType::Link, 0o644, b"", "etc/keep")
        .dir("d/")
        .file("d/old", "hidden by the opaque dir above")
        .file("d/sub/x", "also hidden")
        .entry("bin/tool", EntryType::Regular, 0o755, b"#!/bin/sh\n", "")
        .bytes();
    let top = LayerTar::default()
        .file("etc/.wh.gone", "")
        .file("d/.wh..wh..opq", "")
        .file("d/new", "new")
        .entry("dev/evil", EntryType::Char, 0o666, b"", "")
        .entry("bin/suid", EntryType::Regular, 0o6755, b"x", "")
        .dir("tmp/")
        .entry("tmp/", EntryType::Directory, 0o1777, b"", "")
        .gzip();
    let zstd = LayerTar::default()
        .file("etc/zstd", "from a zstd layer")
        .file("d/zstd", "zstd")
        .zstd();
    vec![(TAR, base), (TAR_GZ, top), (TAR_ZSTD, zstd)]
}

fn tree_names(dir: &Path, out: &mut Vec<String>) {
    for e in std::fs::read_dir(dir).expect("read_dir") {
        let e = e.expect("entry");
        out.push(e.file_name().to_string_lossy().into_owned());
        if e.file_type().expect("type").is_dir() {
            tree_names(&e.path(), out);
        }
    }
}

/// The merged view of `image`'s layers, read in a mount namespace of a thread of its own (the
/// overlay is never visible to the host).
fn read_merged(image: &Image, at: &Path) -> Vec<(String, Option<String>)> {
    let lowers: Vec<String> = image
        .layers
        .iter()
        .rev()
        .map(|l| l.dir.display().to_string())
        .collect();
    let at = at.to_path_buf();
    std::thread::spawn(move || {
        use nix::mount::{MsFlags, mount};
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS).expect("unshare");
        mount(
            None::<&str>,
            "/",
            None::<&str>,
            MsFlags::MS_REC | MsFlags::MS_PRIVATE,
            None::<&str>,
        )
        .expect("private");
        std::fs::create_dir_all(&at).expect("mount point");
        let opts = format!("lowerdir={}", lowers.join(":"));
        mount(
            Some("overlay"),
            &at,
            Some("overlay"),
            MsFlags::MS_RDONLY,
            Some(opts.as_str()),
        )
        .expect("overlay");
        let mut out = Vec::new();
        for p in [
            "etc/keep", "etc/gone", "etc/hard", "d/old", "d/sub", "d/new", "bin/tool", "etc/zstd",
            "d/zstd",
        ] {
            let full = at.join(p);
            let seen = std::fs::symlink_metadata(&full).is_ok();
            out.push((
                p.to_string(),
                seen.then(|| std::fs::read_to_string(&full).unwrap_or_default()),
            ));
        }
        let link = std::fs::read_link(at.join("etc/link")).ok();
        out.push(("etc/link".into(), link.map(|l| l.display().to_string())));
        out
    })
    .join()
    .expect("overlay thread")
}

fn temp() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("codegym-image-")
        .tempdir()
        .expect("tempdir")
}

fn assert_store_clean(store: &LayerStore) {
    let tmp: Vec<_> = std::fs::read_dir(store.root().join("tmp"))
        .expect("tmp")
        .collect();
    assert!(tmp.is_empty(), "temporary dirs left in the store: {tmp:?}");
}

#[test]
fn layers_stack_as_an_overlay_with_the_images_deletions() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "the layer store needs root (mknod, trusted xattrs)"
    );
    let t = temp();
    let layout = t.path().join("layout");
    let digests = write_layout(&layout, &two_layers());
    let store = LayerStore::open(t.path().join("store")).expect("store");
    let image = store.import(&layout).expect("import");
    assert_eq!(
        image
            .layers
            .iter()
            .map(|l| l.digest.to_string())
            .collect::<Vec<_>>(),
        digests
    );
    // Reopening closes a store root someone opened up.
    std::fs::set_permissions(store.root(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let store = LayerStore::open(store.root()).expect("reopen");
    let root_meta = std::fs::metadata(store.root()).expect("store root");
    assert_eq!((root_meta.uid(), root_meta.mode() & 0o7777), (0, 0o700));

    let top = &image.layers[1].dir;
    let gone = std::fs::symlink_metadata(top.join("etc/gone")).expect("whiteout");
    assert!(
        gone.file_type().is_char_device() && gone.rdev() == 0,
        "whiteout: {gone:?}"
    );
    let opaque = xattr(&top.join("d"), "trusted.overlay.opaque");
    assert_eq!(opaque.as_deref(), Some(&b"y"[..]), "opaque dir");
    let mut names = Vec::new();
    tree_names(top, &mut names);
    assert!(
        !names.iter().any(|n| n.starts_with(".wh.")),
        "OCI whiteouts left: {names:?}"
    );
    assert!(!top.join("dev/evil").exists(), "a device node was unpacked");
    let suid = std::fs::metadata(top.join("bin/suid")).expect("suid");
    assert_eq!(
        suid.permissions().mode() & 0o7777,
        0o755,
        "set-id bits kept"
    );
    let tmp = std::fs::metadata(top.join("tmp")).expect("tmp");
    assert_eq!(
        tmp.permissions().mode() & 0o7777,
        0o1777,
        "the dir's sticky bit"
    );
    let tool = std::fs::metadata(image.layers[0].dir.join("bin/tool")).expect("tool");
    assert_eq!((tool.mode() & 0o777, tool.mtime()), (0o755, 1_700_000_000));

    let merged = read_merged(&image, &t.path().join("merged"));
    let expect: Vec<(String, Option<String>)> = [
        ("etc/keep", Some("kept")),
        ("etc/gone", None),
        ("etc/hard", Some("kept")),
        ("d/old", None),
        ("d/sub", None),
        ("d/new", Some("new")),
        ("bin/tool", Some("#!/bin/sh\n")),
        ("etc/zstd", Some("from a zstd layer")),
        ("d/zstd", Some("zstd")),
        ("etc/link", Some("keep")),
    ]
    .iter()
    .map(|(p, c)| (p.to_string(), c.map(str::to_string)))
    .collect();
    assert_eq!(merged, expect);
    assert_store_clean(&store);
}

fn xattr(path: &Path, name: &str) -> Option<Vec<u8>> {
    let p = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("path");
    let n = std::ffi::CString::new(name).expect("name");
    let mut buf = [0u8; 16];
    // SAFETY: valid C strings and a buffer of the given length.
    let r = unsafe {
        libc::lgetxattr(
            p.as_ptr(),
            n.as_ptr(),
            buf.as_mut_ptr() as *mut libc::c_void,
            buf.len(),
        )
    };
    (r >= 0).then(|| buf[..r as usize].to_vec())
}

#[test]
fn a_corrupt_or_missing_blob_fails_the_import_naming_its_digest() {
    let t = temp();
    let layout = t.path().join("layout");
    let digests = write_layout(&layout, &two_layers());
    let store = LayerStore::open(t.path().join("store")).expect("store");

    // One byte of the gzip layer flipped (its size unchanged): the unpack may even succeed, the
    // hash does not.
    let top = blob_path(&layout, &digests[1]);
    let mut data = std::fs::read(&top).expect("blob");
    let last = data.len() - 9;
    data[last] ^= 0x40;
    std::fs::write(&top, &data).expect("corrupt");
    let err = store
        .import(&layout)
        .expect_err("a corrupt blob was accepted");
    assert!(err.to_string().contains(&digests[1]), "{err}");
    assert!(
        matches!(
            err,
            ImageError::DigestMismatch { .. } | ImageError::Layer { .. }
        ),
        "{err:?}"
    );
    assert!(
        !store
            .root()
            .join("layers/sha256")
            .join(&digests[1][7..])
            .exists()
    );

    // A blob with bytes appended: longer than its descriptor.
    std::fs::write(&top, [data.as_slice(), b"extra"].concat()).expect("longer");
    let err = store
        .import(&layout)
        .expect_err("a longer blob was accepted");
    assert!(err.to_string().contains(&digests[1]), "{err}");

    std::fs::remove_file(&top).expect("remove");
    let err = store
        .import(&layout)
        .expect_err("a missing blob was accepted");
    assert!(matches!(err, ImageError::MissingBlob { .. }), "{err:?}");
    assert!(err.to_string().contains(&digests[1]), "{err}");
    assert_store_clean(&store);
}

#[test]
fn entries_escaping_the_layer_fail_it_and_write_nothing_outside() {
    let t = temp();
    let outside = t.path().join("outside");
    std::fs::create_dir(&outside).expect("outside");
    let out = outside.display().to_string();
    let cases: Vec<(&str, LayerTar)> = vec![
        ("..", LayerTar::default().file("../outside/evil", "x")),
        (
            "a/../..",
            LayerTar::default()
                .dir("a/")
                .file("a/../../outside/evil", "x"),
        ),
        (
            "through a symlink",
            LayerTar::default()
                .entry("l", EntryType::Symlink, 0o777, b"", &out)
                .file("l/evil", "x"),
        ),
        (
            "through a file",
            LayerTar::default().file("f", "x").file("f/evil", "x"),
        ),
        (
            "a hard link out",
            LayerTar::default().entry("h", EntryType::Link, 0o644, b"", "../outside/victim"),
        ),
        (
            "a hard link through a symlink",
            LayerTar::default()
                .entry("l", EntryType::Symlink, 0o777, b"", &out)
                .entry("h", EntryType::Link, 0o644, b"", "l/victim"),
        ),
    ];
    std::fs::write(outside.join("victim"), "host file").expect("victim");
    for (i, (what, layer)) in cases.into_iter().enumerate() {
        let layout = t.path().join(format!("layout-{i}"));
        let digests = write_layout(&layout, &[(TAR, layer.bytes())]);
        let store = LayerStore::open(t.path().join(format!("store-{i}"))).expect("store");
        let err = store.import(&layout).expect_err(what);
        assert!(matches!(err, ImageError::Entry { .. }), "{what}: {err:?}");
        assert!(err.to_string().contains(&digests[0]), "{what}: {err}");
        let mut left = Vec::new();
        tree_names(&outside, &mut left);
        assert_eq!(left, ["victim"], "{what}: written outside the layer");
        assert_eq!(
            std::fs::metadata(outside.join("victim"))
                .expect("victim")
                .nlink(),
            1
        );
        assert!(
            !store.layer_dir(&image_digest(&digests[0])).exists(),
            "{what}"
        );
        assert_store_clean(&store);
    }

    // An absolute name is the layer's own path, not the host's.
    let layout = t.path().join("layout-abs");
    write_layout(
        &layout,
        &[(
            TAR,
            LayerTar::default().file(&format!("{out}/abs"), "x").bytes(),
        )],
    );
    let store = LayerStore::open(t.path().join("store-abs")).expect("store");
    let image = store.import(&layout).expect("absolute name");
    assert!(!outside.join("abs").exists());
    let inside = image.layers[0]
        .dir
        .join(out.trim_start_matches('/'))
        .join("abs");
    assert_eq!(std::fs::read_to_string(inside).expect("inside"), "x");
}

fn image_digest(s: &str) -> codegym_sandbox::image::Digest {
    codegym_sandbox::image::Digest::parse(s).expect("digest")
}

#[test]
fn concurrent_imports_of_one_image_unpack_each_layer_once_and_whole() {
    let t = temp();
    let layout = t.path().join("layout");
    write_layout(&layout, &two_layers());
    let store = LayerStore::open(t.path().join("store")).expect("store");
    let images: Vec<Image> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8).map(|_| s.spawn(|| store.import(&layout))).collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("thread").expect("import"))
            .collect()
    });
    assert!(images.windows(2).all(|w| w[0] == w[1]));
    let stored = std::fs::read_dir(store.root().join("layers/sha256"))
        .expect("layers")
        .count();
    assert_eq!(stored, 3);
    assert_eq!(
        std::fs::read_to_string(images[0].layers[1].dir.join("d/new")).expect("d/new"),
        "new"
    );
    assert_store_clean(&store);
}

#[test]
fn an_oci_archive_imports_like_its_layout() {
    let t = temp();
    let layout = t.path().join("layout");
    write_layout(&layout, &two_layers());
    let archive = t.path().join("image.tar");
    let mut b = tar::Builder::new(std::fs::File::create(&archive).expect("archive"));
    b.append_dir_all(".", &layout).expect("archive");
    b.finish().expect("archive");
    let from_layout = LayerStore::open(t.path().join("a"))
        .expect("store")
        .import(&layout)
        .expect("layout");
    let store = LayerStore::open(t.path().join("b")).expect("store");
    let from_archive = store.import(&archive).expect("archive");
    assert_eq!(from_archive.manifest, from_layout.manifest);
    let digests = |i: &Image| {
        i.layers
            .iter()
            .map(|l| l.digest.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(digests(&from_archive), digests(&from_layout));
    assert_eq!(
        std::fs::read_to_string(from_archive.layers[0].dir.join("etc/keep")).expect("keep"),
        "kept"
    );
    assert_store_clean(&store);
}

/// podman's own archives of an image it imported from a rootfs tar made here: its oci-archive,
/// and its default `save` format, a docker-archive (the layer verified against the config's diff
/// id and stored under it).
#[test]
fn podmans_archives_import() {
    for format in ["oci-archive", "docker-archive"] {
        let t = temp();
        let rootfs = t.path().join("rootfs.tar");
        std::fs::write(
            &rootfs,
            LayerTar::default()
                .dir("etc/")
                .file("etc/os-release", "ID=codegym-test\n")
                .bytes(),
        )
        .expect("rootfs");
        let archive = t.path().join("podman.tar");
        podman::save(&rootfs, &archive, "image", format);
        let store = LayerStore::open(t.path().join("store")).expect("store");
        let image = store.import(&archive).expect(format);
        assert_eq!(image.layers.len(), 1, "{format}");
        let os = std::fs::read_to_string(image.layers[0].dir.join("etc/os-release")).expect("file");
        assert_eq!(os, "ID=codegym-test\n", "{format}");
        assert_store_clean(&store);
    }
}

/// A docker-archive written here: `manifest.json`, the config named by its sha256 (holding the
/// layers' diff ids) and the layer tars. Returns the layers' digests.
fn write_docker_archive(
    path: &Path,
    layers: &[Vec<u8>],
    tamper: impl Fn(&mut Vec<u8>),
) -> Vec<String> {
    let hex = |data: &[u8]| {
        use sha2::Digest as _;
        format!("{:x}", sha2::Sha256::digest(data))
    };
    let ids: Vec<String> = layers.iter().map(|l| hex(l)).collect();
    let config = serde_json::json!({
        "architecture": "amd64", "os": "linux",
        "config": {"Env": ["PATH=/bin", "FROM_CONFIG=1"]},
        "rootfs": {"type": "layers", "diff_ids": ids.iter().map(|h| format!("sha256:{h}")).collect::<Vec<_>>()},
    })
    .to_string();
    let config_name = format!("{}.json", hex(config.as_bytes()));
    let names: Vec<String> = ids.iter().map(|h| format!("{h}.tar")).collect();
    let manifest = serde_json::json!([{"Config": config_name, "RepoTags": ["localhost/x:1"], "Layers": names}]).to_string();
    let mut b = tar::Builder::new(std::fs::File::create(path).expect("archive"));
    let mut add = |name: &str, data: &[u8]| {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        b.append_data(&mut h, name, data).expect("append");
    };
    for (name, layer) in names.iter().zip(layers) {
        let mut data = layer.clone();
        tamper(&mut data);
        add(name, &data);
    }
    add(&config_name, config.as_bytes());
    add("manifest.json", manifest.as_bytes());
    b.finish().expect("archive");
    ids
}

#[test]
fn a_docker_archive_is_verified_against_its_diff_ids() {
    let t = temp();
    let layers = vec![
        two_layers().remove(0).1,
        LayerTar::default().file("etc/second", "2").bytes(),
    ];
    let good = t.path().join("good.tar");
    let ids = write_docker_archive(&good, &layers, |_| {});
    let store = LayerStore::open(t.path().join("store")).expect("store");
    let image = store.import(&good).expect("docker-archive");
    let stored: Vec<String> = image
        .layers
        .iter()
        .map(|l| l.digest.hex().to_string())
        .collect();
    assert_eq!(stored, ids);
    assert_eq!(image.env, ["PATH=/bin", "FROM_CONFIG=1"]);
    assert_eq!(
        std::fs::read_to_string(image.layers[1].dir.join("etc/second")).expect("second"),
        "2"
    );
    assert_store_clean(&store);

    // One byte of a layer changed (its last: tar padding, so the tar itself still reads).
    let bad = t.path().join("bad.tar");
    write_docker_archive(&bad, &layers, |l| *l.last_mut().expect("byte") ^= 1);
    let fresh = LayerStore::open(t.path().join("fresh")).expect("store");
    match fresh.import(&bad) {
        Err(ImageError::DigestMismatch { digest, .. }) => {
            assert_eq!(digest, format!("sha256:{}", ids[0]))
        }
        other => panic!("a corrupt layer imported: {other:?}"),
    }
    let kept = std::fs::read_dir(fresh.root().join("layers/sha256"))
        .expect("layers")
        .count();
    assert_eq!(kept, 0, "a corrupt layer entered the store");
    assert_store_clean(&fresh);
}
