//! Scheduling a run: every (task, sample) episode not already in the dataset, at most `concurrency`
//! in flight (a semaphore, so thousands in flight cost one task each, not batches), each pinned to
//! an endpoint (env servers are placed by the remote backend's pool), written as soon as it
//! finishes. Cancellation stops admission and
//! ends in-flight episodes as `cancelled`; everything is flushed before returning.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

use crate::backend::EnvBackend;
use crate::client::{ChatClient, ClientError};
use crate::config::{ConfigError, RolloutConfig};
use crate::cross_check::{CrossCheck, CrossChecks};
use crate::dataset::file::write_json_atomic;
use crate::dataset::manifest::ManifestCounts;
use crate::dataset::record::{EpisodeKey, TrajectoryRecord};
use crate::dataset::{DatasetError, DatasetWriter, Manifest, sidecar};
use crate::episode::{EpisodeContext, EpisodePlan, run_episode};
use crate::progress::Progress;
use crate::seed::episode_seed;
use crate::summary::{EpisodeStats, Summary, summarize};

/// A run that could not start or could not write its dataset.
#[derive(Debug, thiserror::Error)]
pub enum RolloutError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error(transparent)]
    Dataset(#[from] DatasetError),
    #[error("{0} already has records: pass --resume to continue it, or choose another file")]
    Exists(String),
    #[error("no tasks to run")]
    NoTasks,
    #[error("the rollout task was aborted: {0}")]
    Aborted(String),
}

/// Runs (or resumes) the rollout described by `config`, with environments from `backend`, until
/// every episode has a record or `shutdown` fires. Returns the summary, also written next to the
/// dataset.
///
/// The run itself is a task of its own on the current runtime: callers usually await this inside
/// `block_on`, and every finished episode would otherwise wake the blocked caller's thread (a
/// cross-thread wake-up and a third thread competing for the cores, per episode). Dropping the
/// returned future aborts that task, as dropping an inline run would.
pub async fn run(
    config: RolloutConfig,
    backend: EnvBackend,
    shutdown: CancellationToken,
) -> Result<Summary, RolloutError> {
    run_checked(config, backend, None, shutdown).await
}

/// [`run`], with rewarded programs cross-checked by `checker` as `config.cross_check` asks
/// ([`crate::cross_check`]). A config that asks for cross-checks needs a checker.
pub async fn run_checked(
    config: RolloutConfig,
    backend: EnvBackend,
    checker: Option<Arc<dyn CrossCheck>>,
    shutdown: CancellationToken,
) -> Result<Summary, RolloutError> {
    let task = AbortOnDropHandle::new(tokio::spawn(run_here(config, backend, checker, shutdown)));
    match task.await {
        Ok(result) => result,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => Err(RolloutError::Aborted(e.to_string())),
    }
}

/// The run itself: what the dataset already holds ([`Dataset::resume`]), the episodes still to run
/// ([`plan_episodes`]), their records as they finish ([`collect`]), then the final manifest and
/// the summary.
async fn run_here(
    config: RolloutConfig,
    backend: EnvBackend,
    checker: Option<Arc<dyn CrossCheck>>,
    shutdown: CancellationToken,
) -> Result<Summary, RolloutError> {
    config.validate()?;
    let cross_checks = match (config.cross_check.is_off(), checker) {
        (true, _) => None,
        (false, Some(checker)) => Some(Arc::new(CrossChecks::new(&config.cross_check, checker))),
        (false, None) => {
            return Err(ConfigError(
                "cross-checks were asked for, but the run has no checker".into(),
            )
            .into());
        }
    };
    let started = Instant::now();
    let tasks = unique_tasks(&config)?;
    let expected = tasks.len() as u64 * u64::from(config.samples);
    // Reading a large dataset is blocking file IO: off the runtime's threads.
    let resume_config = config.clone();
    let mut dataset = tokio::task::spawn_blocking(move || Dataset::resume(&resume_config))
        .await
        .map_err(|e| RolloutError::Aborted(e.to_string()))??;
    dataset.keep_only(&tasks, config.samples);

    let client = Arc::new(ChatClient::new(&config.model)?);
    let plans = plan_episodes(&config, &tasks, &dataset.done, client.endpoint_count());
    dataset.save_manifest(&tasks, config.samples, expected)?;
    let run_id = dataset.manifest.run_id.clone();
    tracing::info!(run_id = %run_id, to_run = plans.len(), already_done = dataset.done.len(), "starting rollout");

    let config = Arc::new(config);
    let ctx = EpisodeContext {
        client,
        backend,
        config: config.clone(),
        run_id: run_id.clone(),
        cross_checks,
    };
    let this_run = collect(ctx, plans, &mut dataset, &shutdown).await?;
    let interrupted = shutdown.is_cancelled();

    dataset.manifest.updated_at_ms = now_ms();
    dataset.save_manifest(&tasks, config.samples, expected)?;
    let summary = summarize(
        &run_id,
        &dataset.stats,
        expected,
        this_run,
        started.elapsed().as_secs_f64(),
        interrupted,
    );
    write_json_atomic(&sidecar(&config.output.out, ".summary.json"), &summary)?;
    Ok(summary)
}

/// The run's tasks, each once, in the configured order.
fn unique_tasks(config: &RolloutConfig) -> Result<Vec<String>, RolloutError> {
    let mut seen = HashSet::new();
    let tasks: Vec<String> = config
        .tasks
        .iter()
        .filter(|t| seen.insert(t.as_str()))
        .cloned()
        .collect();
    if tasks.is_empty() {
        return Err(RolloutError::NoTasks);
    }
    Ok(tasks)
}

/// The dataset as the run finds it and keeps it up to date: its manifest, the newest stats of every
/// episode, and which episodes need no (re-)run.
struct Dataset {
    out: PathBuf,
    manifest_path: PathBuf,
    manifest: Manifest,
    /// Newest stats per episode (of this run's tasks and samples after [`Dataset::keep_only`]).
    stats: BTreeMap<EpisodeKey, EpisodeStats>,
    /// Lines in the file, superseded records included.
    records: u64,
    /// Episodes whose newest record is final (not `error` or `cancelled`).
    done: HashSet<EpisodeKey>,
}

impl Dataset {
    /// Reads what `config.output.out` already holds. Without `--resume` the file must be empty or
    /// absent; with it, a torn last line is repaired and the run id is kept (from the manifest, else
    /// from the first record).
    fn resume(config: &RolloutConfig) -> Result<Dataset, RolloutError> {
        let out = config.output.out.clone();
        // `--out runs/qwen.jsonl` in a fresh checkout: the directory is part of the name.
        if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(DatasetError::io(dir))?;
        }
        let manifest_path = sidecar(&out, ".manifest.json");
        let resume = config.output.resume;
        if !resume && std::fs::metadata(&out).is_ok_and(|m| m.len() > 0) {
            return Err(RolloutError::Exists(out.display().to_string()));
        }
        // The one reader's policy: a torn last line is cut off before we append, a corrupt line
        // elsewhere or a newer schema version stops the run (file and line named).
        let previous = match trajectory::read::read_and_repair(&out) {
            Ok(dataset) => dataset,
            Err(e) if e.is_not_found() => trajectory::read::Dataset::default(),
            Err(e) => return Err(DatasetError::from(e).into()),
        };
        let old_manifest = if resume {
            Manifest::load(&manifest_path)?
        } else {
            None
        };
        let now = now_ms();
        let manifest = match old_manifest {
            Some(mut m) => {
                if m.config.seed != config.seed
                    || m.config.model.model != config.model.model
                    || m.config.env_id != config.env_id
                {
                    tracing::warn!(
                        "resuming with a different seed, model or env than the dataset was started with"
                    );
                }
                m.config = config.clone();
                m.updated_at_ms = now;
                m
            }
            None => {
                let run_id = previous
                    .records
                    .first()
                    .map_or_else(|| uuid::Uuid::new_v4().to_string(), |r| r.run_id.clone());
                Manifest::new(run_id, config, now)
            }
        };
        Ok(Dataset {
            out,
            manifest_path,
            manifest,
            stats: previous
                .records
                .iter()
                .map(|r| (r.key(), EpisodeStats::of(r)))
                .collect(),
            records: previous.lines,
            done: previous
                .records
                .iter()
                .filter(|r| !r.needs_rerun())
                .map(TrajectoryRecord::key)
                .collect(),
        })
    }

    /// Forgets the stats of episodes outside this run (other tasks, sample indexes beyond
    /// `samples`): the counts and the summary are about this run's episodes only.
    fn keep_only(&mut self, tasks: &[String], samples: u32) {
        let tasks: HashSet<&str> = tasks.iter().map(String::as_str).collect();
        self.stats
            .retain(|k, _| tasks.contains(k.task_id.as_str()) && k.sample_index < samples);
    }

    /// Writes the manifest with the current counts.
    fn save_manifest(
        &mut self,
        tasks: &[String],
        samples: u32,
        expected: u64,
    ) -> Result<(), DatasetError> {
        let stats = &self.stats;
        let rerun = stats.values().filter(|s| !s.is_sample()).count() as u64;
        self.manifest.counts = ManifestCounts {
            tasks: tasks.len() as u64,
            samples,
            expected_episodes: expected,
            episodes: stats.len() as u64,
            rerun_needed: rerun,
            solved: stats.values().filter(|s| s.solved).count() as u64,
            records: self.records,
            complete: stats.len() as u64 == expected && rerun == 0,
        };
        self.manifest.save(&self.manifest_path)
    }
}

/// Runs `plans` and appends every record as it arrives, batching those that finish together, until
/// every admitted episode is written and the file is synced. Returns how many records this run
/// wrote. A write error stops admission (in-flight episodes end as `cancelled`) and every later
/// write, and is returned.
async fn collect(
    ctx: EpisodeContext,
    plans: Vec<EpisodePlan>,
    dataset: &mut Dataset,
    shutdown: &CancellationToken,
) -> Result<u64, DatasetError> {
    let mut writer = DatasetWriter::open(&dataset.out).await?;
    let output = &ctx.config.output;
    let mut progress = Progress::new(
        output.progress,
        plans.len() as u64,
        output.log_interval_secs,
    );
    let (tx, mut rx) = mpsc::channel::<TrajectoryRecord>(1024);
    let admission = tokio::spawn(admit(ctx, plans, tx, shutdown.clone()));

    let mut this_run = 0u64;
    let mut write_error = None;
    let mut batch = Vec::new();
    while let Some(record) = rx.recv().await {
        // Episodes often finish together: whatever else is ready goes out in the same write.
        batch.push(record);
        while batch.len() < WRITE_BATCH {
            match rx.try_recv() {
                Ok(record) => batch.push(record),
                Err(_) => break,
            }
        }
        if write_error.is_some() {
            // No write after one that failed: it may have left a torn line, which must stay the
            // last (a later write that fits, space freed meanwhile, would put it mid-file, where
            // no reader repairs it). These episodes run again on `--resume`.
            batch.clear();
            continue;
        }
        let batch_stats: Vec<EpisodeStats> = batch.iter().map(EpisodeStats::of).collect();
        for s in &batch_stats {
            progress.record(s);
        }
        if let Err(e) = writer.append(&batch).await {
            // Without a dataset there is no point going on: stop admitting and drain.
            tracing::error!(error = %e, "cannot write the dataset; stopping");
            shutdown.cancel();
            write_error = Some(e);
            batch.clear();
            continue;
        }
        dataset.records += batch.len() as u64;
        this_run += batch.len() as u64;
        for (record, s) in batch.drain(..).zip(batch_stats) {
            dataset.stats.insert(record.key(), s);
        }
    }
    progress.finish();
    if let Err(e) = admission.await {
        tracing::error!(error = %e, "episode admission task failed");
    }
    writer.sync().await?;
    match write_error {
        Some(e) => Err(e),
        None => Ok(this_run),
    }
}

/// Episodes to run, in task-major order so a group's samples run close together. A group sticks to
/// one endpoint when there are at least as many groups as endpoints; otherwise episodes
/// are spread round-robin so every endpoint gets work.
fn plan_episodes(
    config: &RolloutConfig,
    tasks: &[String],
    done: &HashSet<EpisodeKey>,
    endpoints: usize,
) -> Vec<EpisodePlan> {
    let mut plans = Vec::new();
    let mut ordinal = 0usize;
    for (group, task) in tasks.iter().enumerate() {
        for sample_index in 0..config.samples {
            let route = |n: usize| {
                if tasks.len() >= n {
                    group % n
                } else {
                    ordinal % n
                }
            };
            let plan = EpisodePlan {
                task_id: task.clone(),
                sample_index,
                seed: episode_seed(config.seed, task, sample_index),
                endpoint: route(endpoints),
            };
            ordinal += 1;
            let key = EpisodeKey {
                task_id: task.clone(),
                sample_index,
            };
            if !done.contains(&key) {
                plans.push(plan);
            }
        }
    }
    plans
}

/// Most records written with one `write` (bounds the buffer when thousands finish together).
const WRITE_BATCH: usize = 64;

/// Starts episodes as permits free up; stops admitting on shutdown. Each episode sends its record.
async fn admit(
    ctx: EpisodeContext,
    plans: Vec<EpisodePlan>,
    tx: mpsc::Sender<TrajectoryRecord>,
    shutdown: CancellationToken,
) {
    let permits = Arc::new(Semaphore::new(ctx.config.concurrency));
    let ctx = Arc::new(ctx);
    for plan in plans {
        let permit = tokio::select! {
            biased;
            () = shutdown.cancelled() => break,
            p = permits.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
        };
        let (ctx, tx, shutdown) = (ctx.clone(), tx.clone(), shutdown.clone());
        tokio::spawn(async move {
            let record = run_episode(&ctx, plan, &shutdown).await;
            // The receiver lives until every sender is gone; a failed send means the run is over.
            let _ = tx.send(record).await;
            drop(permit);
        });
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
