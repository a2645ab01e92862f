//! `codegym report`: a rollout dataset as one self-contained HTML page to look at.
//!
//! The page has no external resources and fetches nothing (its Content-Security-Policy forbids any
//! connection and admits only its own script, by hash). Aggregates are computed here, in Rust
//! ([`stats`]: solved rates overall and per task, pass@k and mean rewards through `trajectory`'s
//! one aggregation, the numbers `summary.json` has for the same file; reward,
//! turn, latency and token distributions, stop reasons, errors by kind, cross-checks of rewarded
//! programs by outcome and the tasks where one disagreed with the reference); the page's script draws
//! them as SVG charts and shows a trajectory browser (messages, code, execution results, rewards
//! per turn) filtered by task and outcome. Records are read by the one reader,
//! [`trajectory::read`] (latest attempt per episode, torn last line ignored, corrupt lines an
//! error), as `codegym export` and rollout resume read them.
//!
//! Trajectories hold hostile model text, so nothing from a record reaches the page as markup: the
//! data travels as JSON in a `<script type="application/json">` block with `<`, `>`, `&` and the
//! JavaScript line separators escaped (`html.rs`), and the script renders it with `textContent`
//! only.

mod html;
mod stats;

use std::path::{Path, PathBuf};

pub use html::render;
pub use stats::{Histogram, ReportData, build};

/// Why a report could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error(transparent)]
    Read(#[from] trajectory::read::ReadError),
    #[error("{0}: no trajectory records")]
    Empty(PathBuf),
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Reads the dataset at `input` and writes its report to `out` (atomically). Returns the report's
/// aggregate (episodes, solved, cross-checks...), for a caller that prints a line of it.
pub fn write_report(input: &Path, out: &Path) -> Result<trajectory::Aggregate, ReportError> {
    let records = trajectory::read::read_latest(input)?;
    if records.is_empty() {
        return Err(ReportError::Empty(input.to_path_buf()));
    }
    let title = input.file_name().map_or_else(
        || input.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let data = build(&title, &records);
    let page = render(&data);
    trajectory::atomic::write_atomic(out, page.as_bytes()).map_err(|source| {
        ReportError::Write {
            path: out.to_path_buf(),
            source,
        }
    })?;
    Ok(data.aggregate)
}
