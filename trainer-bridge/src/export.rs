//! `codegym export`: a rollout dataset (JSONL of trajectory records) to training data.
//!
//! Formats (each row carries `schema_version` = [`EXPORT_SCHEMA_VERSION`]; Parquet files also carry
//! `codegym.export` = `{"format", "schema_version"}` in their footer metadata):
//! - `rl`: one row per episode kept by the advantage mask: ids, `prompt` and `completion` messages,
//!   `reward`, `advantage`, `zero_variance`, `masked`, `mask_reason`, `solved`, `stop_reason`, and
//!   server token ids and logprobs per assistant turn when the rollout recorded them. An episode
//!   that ended in an infrastructure failure is never a reward: by [`InfraErrorPolicy`] its row
//!   stays with `masked: true`, its failure's kind as `mask_reason`, and a null reward and
//!   advantage, or it is left out; either way it is outside its group's advantage statistics.
//! - `sft`: solved episodes as whole conversations (`messages`), for rejection sampling.
//! - `dpo`: pairs within a group, `prompt` / `chosen` (solved) / `rejected` (failed).
//!
//! An infrastructure failure is never an SFT example nor a DPO side, whatever the policy: those
//! formats select episodes, and a failed one has no outcome to select on.
//!
//! Messages are `{role, content, tool_calls_json, tool_call_id}`, TRL's conversational format.
//! Output is written to a temporary file beside the target and renamed into place
//! (`trajectory::atomic`), so a reader never sees a half-written dataset.

mod parquet_file;
mod rows;
mod table;

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::advantage::{AdvantageConfig, AdvantageError};
pub use table::{ColumnData, Message, Table};

/// Version of the exported layouts; bumped when a column is renamed, retyped or removed (the
/// changes: `trainer-bridge/CHANGELOG.md`).
pub const EXPORT_SCHEMA_VERSION: i64 = 2;

/// What to export.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExportFormat {
    #[default]
    Rl,
    Sft,
    Dpo,
}

impl ExportFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            ExportFormat::Rl => "rl",
            ExportFormat::Sft => "sft",
            ExportFormat::Dpo => "dpo",
        }
    }
}

/// File encoding, chosen by the output's extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileFormat {
    Jsonl,
    Parquet,
}

impl FileFormat {
    /// `.jsonl` / `.json` or `.parquet`.
    pub fn from_path(path: &Path) -> Result<Self, ExportError> {
        match path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            Some("jsonl" | "json") => Ok(FileFormat::Jsonl),
            Some("parquet") => Ok(FileFormat::Parquet),
            _ => Err(ExportError::UnknownExtension(path.to_path_buf())),
        }
    }
}

/// What an `rl` export does with an episode that ended in an infrastructure failure
/// (`StopReason::is_infra_failure`: the model endpoint, the environment or its sandbox failed, a
/// server was lost, the run was interrupted). Never a reward: only where its row goes differs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InfraErrorPolicy {
    /// The row stays, with `masked: true`, `mask_reason` (the failure's kind) and no reward or
    /// advantage (null), so a trainer sees every episode and masks these.
    #[default]
    Mask,
    /// The row is left out.
    Drop,
}

impl InfraErrorPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            InfraErrorPolicy::Mask => "mask",
            InfraErrorPolicy::Drop => "drop",
        }
    }
}

/// Which episodes become SFT examples.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SftConfig {
    /// Keep episodes whose total reward is at least this; `None`: the episode's `solved` flag.
    pub min_reward: Option<f64>,
    /// At most this many examples per group (the first ones in the file).
    pub max_per_group: Option<usize>,
}

/// How DPO pairs are formed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DpoConfig {
    /// Chosen when total reward is at least this; `None`: the episode's `solved` flag.
    pub min_reward: Option<f64>,
    /// Cap on pairs per group; `None`: `min(#solved, #failed)`.
    pub max_pairs_per_group: Option<usize>,
}

/// Everything `export` needs besides the paths.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExportConfig {
    pub format: ExportFormat,
    /// Infrastructure failures in `rl` (no effect on `sft` and `dpo`, which never use them).
    pub on_infra_error: InfraErrorPolicy,
    pub advantage: AdvantageConfig,
    pub sft: SftConfig,
    pub dpo: DpoConfig,
}

/// What an export did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExportSummary {
    /// Distinct episodes read (after deduplication).
    pub episodes: usize,
    /// Rows written.
    pub rows: usize,
    /// Rows written masked (`rl` with `on_infra_error: mask`): infrastructure failures.
    pub masked: usize,
}

/// Why an export failed. Every variant names the file concerned.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("{path}: {source}", path = path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The dataset, per the one reader's policy ([`trajectory::read`]).
    #[error(transparent)]
    Read(#[from] trajectory::read::ReadError),
    #[error("{}: unknown output extension (use .jsonl or .parquet)", .0.display())]
    UnknownExtension(PathBuf),
    #[error("{path}: parquet: {message}", path = path.display())]
    Parquet { path: PathBuf, message: String },
    #[error("{path}: {source}", path = path.display())]
    Advantage {
        path: PathBuf,
        source: AdvantageError,
    },
}

/// Builds the table of `config.format` from already-read records.
pub fn build_table(
    records: &[trajectory::record::TrajectoryRecord],
    config: &ExportConfig,
) -> Result<Table, AdvantageError> {
    let mut table = match config.format {
        ExportFormat::Rl => rows::rl(records, &config.advantage, config.on_infra_error)?,
        ExportFormat::Sft => rows::sft(records, &config.sft),
        ExportFormat::Dpo => rows::dpo(records, &config.dpo),
    };
    let n = table.num_rows();
    table.columns.insert(
        0,
        (
            "schema_version",
            ColumnData::I64(vec![EXPORT_SCHEMA_VERSION; n]),
        ),
    );
    Ok(table)
}

/// Reads the rollout dataset at `input` and writes `config.format` rows to `output` atomically.
pub fn export(
    input: &Path,
    output: &Path,
    config: &ExportConfig,
) -> Result<ExportSummary, ExportError> {
    let file_format = FileFormat::from_path(output)?;
    let records = trajectory::read::read_latest(input)?;
    let table = build_table(&records, config).map_err(|source| ExportError::Advantage {
        path: input.to_path_buf(),
        source,
    })?;
    write_atomically(output, |w| match file_format {
        FileFormat::Jsonl => write_jsonl(&table, w).map_err(Failure::Io),
        FileFormat::Parquet => {
            let meta = serde_json::json!({"format": config.format.as_str(), "schema_version": EXPORT_SCHEMA_VERSION});
            parquet_file::write(&table, w, vec![("codegym.export".into(), meta.to_string())])
                .map_err(|e| Failure::Parquet(e.to_string()))
        }
    })?;
    let summary = ExportSummary {
        episodes: records.len(),
        rows: table.num_rows(),
        masked: table.count_true("masked"),
    };
    tracing::info!(input = %input.display(), output = %output.display(), format = config.format.as_str(), episodes = summary.episodes, rows = summary.rows, masked = summary.masked, "exported");
    Ok(summary)
}

fn write_jsonl(table: &Table, w: &mut BufWriter<std::fs::File>) -> std::io::Result<()> {
    for i in 0..table.num_rows() {
        table.write_row_json(i, w)?;
        w.write_all(b"\n")?;
    }
    Ok(())
}

/// Why filling the output failed, before it is named after the file.
enum Failure {
    Io(std::io::Error),
    Parquet(String),
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        Failure::Io(e)
    }
}

/// Runs `fill` on a temporary file beside `path` and renames it into place
/// ([`trajectory::atomic::write_atomic_with`]).
fn write_atomically(
    path: &Path,
    fill: impl FnOnce(&mut BufWriter<std::fs::File>) -> Result<(), Failure>,
) -> Result<(), ExportError> {
    trajectory::atomic::write_atomic_with(path, fill).map_err(|failure| match failure {
        Failure::Io(source) => ExportError::Io {
            path: path.to_path_buf(),
            source,
        },
        Failure::Parquet(message) => ExportError::Parquet {
            path: path.to_path_buf(),
            message,
        },
    })
}

#[cfg(test)]
mod tests;
