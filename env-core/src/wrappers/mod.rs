//! Gymnasium's standard wrappers. Each is generic over `E: Env` and is itself an `Env`, so they stack
//! over typed envs and over `Box<dyn DynEnv>` alike (wrap the latter in [`crate::ValueEnv`] to box it
//! again).

mod autoreset;
mod order_enforcing;
mod record_episode_statistics;
mod time_limit;
mod transform_reward;

pub use autoreset::Autoreset;
pub use order_enforcing::OrderEnforcing;
pub use record_episode_statistics::RecordEpisodeStatistics;
pub use time_limit::TimeLimit;
pub use transform_reward::TransformReward;
