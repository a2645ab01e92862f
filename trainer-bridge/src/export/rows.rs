//! Building the RL, SFT and DPO tables from trajectory records.

use std::collections::HashMap;

use trajectory::record::{ChatMessage, Role, StopReason, TrajectoryRecord};

use super::table::{ColumnData as C, Message, Table, TurnLists};
use super::{DpoConfig, InfraErrorPolicy, SftConfig};
use crate::advantage::{self, AdvantageConfig, AdvantageError, EpisodeStatus, Sample};

/// How advantages see an episode's end. Infrastructure failures are the trajectory crate's one
/// classification ([`StopReason::is_infra_failure`]), the one the aggregation and resume use.
pub fn status(stop: StopReason) -> EpisodeStatus {
    if stop.is_infra_failure() {
        EpisodeStatus::InfraFailure
    } else if matches!(
        stop,
        StopReason::MaxTurns | StopReason::ContextLength | StopReason::Timeout
    ) {
        EpisodeStatus::Truncated
    } else {
        EpisodeStatus::Completed
    }
}

/// Why an infrastructure failure's row is masked: the kind of the error that ended it (`connect`,
/// `quota_exceeded`, `env`, `cancelled`, ...), else its stop reason.
fn mask_reason(r: &TrajectoryRecord) -> String {
    r.error
        .as_ref()
        .map_or(r.stop_reason.as_str(), |e| e.kind.as_str())
        .to_string()
}

fn role(r: Role) -> &'static str {
    match r {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    }
}

fn message(m: &ChatMessage) -> Message {
    Message {
        role: role(m.role).to_string(),
        content: m.content.clone(),
        tool_calls_json: m
            .tool_calls
            .as_ref()
            .and_then(|c| serde_json::to_string(c).ok()),
        tool_call_id: m.tool_call_id.clone(),
    }
}

/// `(prompt, completion)`: the messages before the first assistant message, and the rest.
fn split(r: &TrajectoryRecord) -> (Vec<Message>, Vec<Message>) {
    let first = r
        .messages
        .iter()
        .position(|m| m.role == Role::Assistant)
        .unwrap_or(r.messages.len());
    let (p, c) = r.messages.split_at(first);
    (
        p.iter().map(message).collect(),
        c.iter().map(message).collect(),
    )
}

/// Per assistant turn token data; `None` when no turn had any.
fn turn_lists<T: Copy>(
    r: &TrajectoryRecord,
    pick: impl Fn(&trajectory::record::TokenData) -> Option<&Vec<T>>,
) -> TurnLists<T> {
    let turns: Vec<Option<Vec<T>>> = r
        .turns
        .iter()
        .filter(|t| t.message_index.is_some())
        .map(|t| t.model_call.tokens.as_ref().and_then(&pick).cloned())
        .collect();
    turns.iter().any(Option::is_some).then_some(turns)
}

/// The provenance of the episode's last scored step (what produced its final reward), as JSON
/// text (a string column, like `tool_calls_json`, so JSONL and Parquet carry the same value);
/// `None` for records written before provenance existed.
fn provenance_json(r: &TrajectoryRecord) -> Option<String> {
    r.turns
        .iter()
        .flat_map(|t| &t.env_steps)
        .filter_map(|s| s.provenance.as_ref())
        .next_back()
        .and_then(|p| serde_json::to_string(p).ok())
}

fn ids(v: &[u32]) -> Vec<i64> {
    v.iter().map(|&x| i64::from(x)).collect()
}

/// Common identifying columns.
fn push_ids(t: &mut Table, rs: &[&TrajectoryRecord]) {
    t.push(
        "episode_id",
        C::Str(rs.iter().map(|r| r.episode_id.clone()).collect()),
    );
    t.push(
        "run_id",
        C::Str(rs.iter().map(|r| r.run_id.clone()).collect()),
    );
    t.push(
        "task_id",
        C::Str(rs.iter().map(|r| r.task_id.clone()).collect()),
    );
    t.push(
        "group_id",
        C::Str(rs.iter().map(|r| r.group_id.clone()).collect()),
    );
    t.push(
        "sample_index",
        C::I64(rs.iter().map(|r| i64::from(r.sample_index)).collect()),
    );
    // A string: seeds use all 64 bits, which JSON readers would turn into lossy floats.
    t.push(
        "seed",
        C::Str(rs.iter().map(|r| r.seed.to_string()).collect()),
    );
    t.push(
        "env_id",
        C::Str(rs.iter().map(|r| r.env_id.clone()).collect()),
    );
    t.push(
        "model",
        C::Str(rs.iter().map(|r| r.model.requested.clone()).collect()),
    );
}

/// One row per episode kept by the advantage mask, and per infrastructure failure under
/// [`InfraErrorPolicy::Mask`] (flagged, with a null reward and advantage).
pub fn rl(
    records: &[TrajectoryRecord],
    config: &AdvantageConfig,
    on_infra_error: InfraErrorPolicy,
) -> Result<Table, AdvantageError> {
    let samples: Vec<Sample<'_>> = records
        .iter()
        .map(|r| Sample {
            group: &r.group_id,
            reward: r.total_reward,
            status: status(r.stop_reason),
        })
        .collect();
    let adv = advantage::compute(&samples, config)?;
    let masked: Vec<bool> = samples
        .iter()
        .map(|s| s.status == EpisodeStatus::InfraFailure)
        .collect();
    let kept: Vec<usize> = (0..records.len())
        .filter(|&i| adv.mask[i] || (masked[i] && on_infra_error == InfraErrorPolicy::Mask))
        .collect();
    let rs: Vec<&TrajectoryRecord> = kept.iter().map(|&i| &records[i]).collect();
    let (prompts, completions): (Vec<_>, Vec<_>) = rs.iter().map(|r| split(r)).unzip();
    // A masked row has no reward or advantage (null), never a number a trainer could mistake for one.
    let scored = |values: &ndarray::Array1<f64>| {
        C::OptF64(
            kept.iter()
                .map(|&i| (!masked[i]).then_some(values[i]))
                .collect(),
        )
    };
    let mut t = Table::default();
    push_ids(&mut t, &rs);
    t.push("prompt", C::Messages(prompts));
    t.push("completion", C::Messages(completions));
    t.push("reward", scored(&adv.reward));
    t.push("advantage", scored(&adv.advantage));
    t.push(
        "zero_variance",
        C::Bool(kept.iter().map(|&i| adv.zero_variance[i]).collect()),
    );
    t.push("masked", C::Bool(kept.iter().map(|&i| masked[i]).collect()));
    t.push(
        "mask_reason",
        C::OptStr(
            kept.iter()
                .map(|&i| masked[i].then(|| mask_reason(&records[i])))
                .collect(),
        ),
    );
    t.push("solved", C::Bool(rs.iter().map(|r| r.solved).collect()));
    t.push(
        "stop_reason",
        C::Str(
            rs.iter()
                .map(|r| r.stop_reason.as_str().to_string())
                .collect(),
        ),
    );
    t.push(
        "num_turns",
        C::I64(rs.iter().map(|r| r.turns.len() as i64).collect()),
    );
    t.push(
        "provenance_json",
        C::OptStr(rs.iter().map(|r| provenance_json(r)).collect()),
    );
    let prompt_ids = rs
        .iter()
        .map(|r| {
            r.turns
                .iter()
                .find(|t| t.message_index.is_some())
                .and_then(|t| {
                    t.model_call
                        .tokens
                        .as_ref()?
                        .prompt_token_ids
                        .as_deref()
                        .map(ids)
                })
        })
        .collect();
    t.push("prompt_token_ids", C::OptI64List(prompt_ids));
    let completion_ids = rs
        .iter()
        .map(|r| {
            turn_lists(r, |tok| tok.completion_token_ids.as_ref())
                .map(|turns| turns.into_iter().map(|t| t.map(|v| ids(&v))).collect())
        })
        .collect();
    t.push("completion_token_ids", C::I64Lists(completion_ids));
    t.push(
        "completion_logprobs",
        C::F64Lists(
            rs.iter()
                .map(|r| turn_lists(r, |tok| tok.logprobs.as_ref()))
                .collect(),
        ),
    );
    Ok(t)
}

fn is_usable(r: &TrajectoryRecord) -> bool {
    !r.needs_rerun()
}

fn is_solved(r: &TrajectoryRecord, min_reward: Option<f64>) -> bool {
    match min_reward {
        Some(m) => r.total_reward >= m,
        None => r.solved,
    }
}

/// Solved episodes as whole conversations (rejection sampling).
pub fn sft(records: &[TrajectoryRecord], config: &SftConfig) -> Table {
    let mut per_group: HashMap<&str, usize> = HashMap::new();
    let rs: Vec<&TrajectoryRecord> = records
        .iter()
        .filter(|r| is_usable(r) && is_solved(r, config.min_reward))
        .filter(|r| {
            let n = per_group.entry(&r.group_id).or_default();
            *n += 1;
            config.max_per_group.is_none_or(|max| *n <= max)
        })
        .collect();
    let mut t = Table::default();
    push_ids(&mut t, &rs);
    t.push(
        "messages",
        C::Messages(
            rs.iter()
                .map(|r| r.messages.iter().map(message).collect())
                .collect(),
        ),
    );
    t.push(
        "reward",
        C::F64(rs.iter().map(|r| r.total_reward).collect()),
    );
    t.push(
        "num_turns",
        C::I64(rs.iter().map(|r| r.turns.len() as i64).collect()),
    );
    t.push(
        "provenance_json",
        C::OptStr(rs.iter().map(|r| provenance_json(r)).collect()),
    );
    t
}

/// Preference pairs within each group: chosen = solved, rejected = failed.
pub fn dpo(records: &[TrajectoryRecord], config: &DpoConfig) -> Table {
    // Groups in order of first appearance, so the output is deterministic.
    let mut order: Vec<&str> = Vec::new();
    let mut groups: HashMap<&str, (Vec<&TrajectoryRecord>, Vec<&TrajectoryRecord>)> =
        HashMap::new();
    for r in records.iter().filter(|r| is_usable(r)) {
        let entry = groups.entry(&r.group_id).or_insert_with(|| {
            order.push(&r.group_id);
            (Vec::new(), Vec::new())
        });
        if is_solved(r, config.min_reward) {
            entry.0.push(r);
        } else if r.messages.iter().any(|m| m.role == Role::Assistant) {
            entry.1.push(r);
        }
    }
    let mut pairs: Vec<(&TrajectoryRecord, &TrajectoryRecord)> = Vec::new();
    for g in order {
        let (mut chosen, mut rejected) = groups.remove(g).unwrap_or_default();
        // Best solved against worst failed first: the clearest preference signal.
        chosen.sort_by(|a, b| {
            b.total_reward
                .total_cmp(&a.total_reward)
                .then(a.sample_index.cmp(&b.sample_index))
        });
        rejected.sort_by(|a, b| {
            a.total_reward
                .total_cmp(&b.total_reward)
                .then(a.sample_index.cmp(&b.sample_index))
        });
        let n = chosen
            .len()
            .min(rejected.len())
            .min(config.max_pairs_per_group.unwrap_or(usize::MAX));
        pairs.extend(chosen.into_iter().zip(rejected).take(n));
    }
    let chosen: Vec<&TrajectoryRecord> = pairs.iter().map(|p| p.0).collect();
    let mut t = Table::default();
    t.push(
        "group_id",
        C::Str(chosen.iter().map(|r| r.group_id.clone()).collect()),
    );
    t.push(
        "task_id",
        C::Str(chosen.iter().map(|r| r.task_id.clone()).collect()),
    );
    t.push(
        "env_id",
        C::Str(chosen.iter().map(|r| r.env_id.clone()).collect()),
    );
    t.push(
        "prompt",
        C::Messages(pairs.iter().map(|(c, _)| split(c).0).collect()),
    );
    t.push(
        "chosen",
        C::Messages(pairs.iter().map(|(c, _)| split(c).1).collect()),
    );
    t.push(
        "rejected",
        C::Messages(pairs.iter().map(|(_, r)| split(r).1).collect()),
    );
    t.push(
        "chosen_episode_id",
        C::Str(pairs.iter().map(|(c, _)| c.episode_id.clone()).collect()),
    );
    t.push(
        "rejected_episode_id",
        C::Str(pairs.iter().map(|(_, r)| r.episode_id.clone()).collect()),
    );
    t.push(
        "chosen_reward",
        C::F64(pairs.iter().map(|(c, _)| c.total_reward).collect()),
    );
    t.push(
        "rejected_reward",
        C::F64(pairs.iter().map(|(_, r)| r.total_reward).collect()),
    );
    t.push(
        "chosen_provenance_json",
        C::OptStr(pairs.iter().map(|(c, _)| provenance_json(c)).collect()),
    );
    t.push(
        "rejected_provenance_json",
        C::OptStr(pairs.iter().map(|(_, r)| provenance_json(r)).collect()),
    );
    t
}
