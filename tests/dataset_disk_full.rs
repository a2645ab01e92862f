//! A rollout whose dataset's disk fills up mid-run: the real `codegym rollout` binary writes to a
//! small tmpfs in a mount namespace of its own (root: `unshare`, then `nsenter` for each run), over
//! a real `codegym serve` outside it, against the fake model.
//!
//! Expected: the run stops with an error naming the dataset file and exits non-zero; the file holds
//! only whole records (or a torn last line, which the one reader ignores and a resume cuts off);
//! once space is freed, `--resume` completes every episode exactly once.

#[path = "support/codegym_bin.rs"]
mod codegym_bin;
#[path = "support/rollout_util.rs"]
mod rollout_util;

use std::path::{Path, PathBuf};

use codegym_bin::{BIN, Serve, finish, spawn_program};
use fake_llm::FakeLlm;
use rollout::dataset::record::StopReason;
use rollout_util::{per_episode, rollout_args, script, task_ids};
use tokio::io::AsyncBufReadExt;

/// The tmpfs's size, and how much of it a filler file leaves to the dataset and its manifest: a
/// few records' worth (a record of these episodes is 3-6 KiB).
const TMPFS_KIB: u64 = 512;
const LEFT_KIB: u64 = 24;

/// A mount namespace holding a tmpfs on `dir`, kept alive by a sleeping process; the tmpfs is
/// seen from outside under `/proc/PID/root`.
struct SmallDisk {
    holder: tokio::process::Child,
    dir: PathBuf,
}

impl SmallDisk {
    async fn mount(dir: &Path) -> SmallDisk {
        let script = format!(
            "mount -t tmpfs -o size={TMPFS_KIB}k tmpfs \"$0\" && echo mounted && exec sleep 600"
        );
        let args = ["--mount", "--propagation", "private", "sh", "-c", &script];
        let mut holder = spawn_program(
            "unshare",
            args.iter().copied().chain([dir.to_str().unwrap()]),
        );
        let mut out = tokio::io::BufReader::new(holder.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).await.unwrap();
        assert_eq!(line.trim(), "mounted", "the tmpfs was not mounted");
        SmallDisk {
            holder,
            dir: dir.to_path_buf(),
        }
    }

    fn pid(&self) -> String {
        self.holder.id().expect("the holder runs").to_string()
    }

    /// `path` (under the tmpfs) as seen from outside the namespace.
    fn outside(&self, path: &Path) -> PathBuf {
        let rel = path.strip_prefix("/").unwrap();
        Path::new("/proc").join(self.pid()).join("root").join(rel)
    }

    /// `codegym args` started inside the namespace.
    fn codegym(&self, args: &[String]) -> tokio::process::Child {
        let pid = self.pid();
        let head = ["--mount", "-t", pid.as_str(), BIN];
        spawn_program(
            "nsenter",
            head.iter()
                .map(|s| s.to_string())
                .chain(args.iter().cloned()),
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_dataset_disk_stops_the_run_with_whole_records_and_resume_completes_it() {
    let model = FakeLlm::start(script(50)).await.unwrap();
    let server = Serve::start(["--addr", "127.0.0.1:0"]).await;
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let disk = SmallDisk::mount(&data).await;
    let filler = disk.outside(&data.join("filler"));
    std::fs::write(&filler, vec![0u8; ((TMPFS_KIB - LEFT_KIB) << 10) as usize]).unwrap();

    let out = disk.dir.join("full.jsonl");
    let tasks = task_ids(4);
    let expected = tasks.len() * 4;
    let mut args = rollout_args(&model.base_url(), &tasks, 4, &out);
    args.extend(["--env-server".to_string(), server.url()]);
    args.extend(["--concurrency".to_string(), "2".to_string()]);
    let (code, stdout, stderr) = finish(disk.codegym(&args)).await;
    assert_ne!(
        code, 0,
        "the run went on with a full disk\n{stdout}\n{stderr}"
    );
    // The last line is the run's error: the file and the cause, said once.
    let error = stderr.lines().last().unwrap_or_default();
    assert_eq!(
        error,
        format!(
            "error: {}: No space left on device (os error 28)",
            out.display()
        ),
        "the error does not name the file and the cause once:\n{stderr}"
    );
    // No write after the one that failed: a later one that fits (space freed meanwhile) would
    // leave the torn line mid-file, where no reader repairs it.
    let failed_writes = stderr.matches("cannot write the dataset").count();
    assert_eq!(failed_writes, 1, "writes after the failure:\n{stderr}");

    // Only whole records, or a torn last line that the one reader ignores.
    let seen = disk.outside(&out);
    let text = std::fs::read(&seen).unwrap();
    let before = trajectory::read::read(&seen).expect("the dataset reads");
    let whole = text
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .count() as u64;
    assert!(
        before.lines == whole || before.torn_bytes > 0,
        "lines {} of {whole}, torn bytes {}",
        before.lines,
        before.torn_bytes
    );
    let written = before.records.len();
    assert!(
        written > 0 && written < expected,
        "{written} of {expected} records before the disk filled: size the filler"
    );
    println!(
        "disk full after {written} of {expected} records ({} torn bytes); stderr: {}",
        before.torn_bytes, error
    );

    // Space freed: the resume completes the rest, each episode once.
    std::fs::remove_file(&filler).unwrap();
    args.push("--resume".to_string());
    let (code, stdout, stderr) = finish(disk.codegym(&args)).await;
    assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
    let all = rollout_util::records(&seen);
    let counts = per_episode(&all);
    assert_eq!(counts.len(), expected, "{counts:?}");
    assert!(counts.values().all(|&n| n == 1), "duplicates: {counts:?}");
    assert!(all.iter().all(|r| r.stop_reason != StopReason::Error));
    let early: Vec<_> = before.records.iter().map(|r| &r.episode_id).collect();
    assert!(
        early.iter().all(|id| counts.contains_key(*id)),
        "the records written before the disk filled were lost"
    );
}
