//! From trajectories to training data: group-relative advantages ([`advantage`]) and exports of
//! rollout datasets to RL, SFT and DPO datasets in JSONL or Parquet ([`export`]), and a dataset's
//! self-contained HTML report ([`report`]).

pub mod advantage;
pub mod export;
pub mod report;

pub use advantage::{
    AdvantageConfig, AdvantageError, Advantages, ERRORED_REPLACED, EpisodeStatus, Estimator,
    MaskPolicy, Sample, StdKind,
};
pub use export::{
    DpoConfig, ExportConfig, ExportError, ExportFormat, ExportSummary, FileFormat,
    InfraErrorPolicy, SftConfig, export,
};
