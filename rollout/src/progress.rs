//! Console progress: an indicatif bar on a terminal, periodic structured log lines otherwise (CI and
//! log collectors read those), or nothing.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::config::ProgressMode;
use crate::summary::EpisodeStats;

/// Tracks finished episodes and reports them.
#[derive(Debug)]
pub struct Progress {
    bar: Option<ProgressBar>,
    log_every: Option<Duration>,
    last_log: Instant,
    started: Instant,
    total: u64,
    done: u64,
    solved: u64,
    errors: u64,
}

impl Progress {
    /// `total` episodes to run in this invocation.
    pub fn new(mode: ProgressMode, total: u64, log_interval_secs: f64) -> Self {
        let interval = if log_interval_secs > 0.0 && log_interval_secs.is_finite() {
            Duration::from_secs_f64(log_interval_secs)
        } else {
            Duration::from_secs(10)
        };
        let bar_wanted = match mode {
            ProgressMode::Bar => true,
            ProgressMode::Auto => std::io::stderr().is_terminal(),
            ProgressMode::Log | ProgressMode::Off => false,
        };
        let bar = bar_wanted.then(|| {
            let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
            if let Ok(style) = ProgressStyle::with_template(
                "{elapsed_precise} [{bar:40}] {pos}/{len} episodes ({per_sec}, eta {eta}) {msg}",
            ) {
                bar.set_style(style.progress_chars("=> "));
            }
            bar
        });
        let log_every = (mode != ProgressMode::Off && bar.is_none()).then_some(interval);
        Progress {
            bar,
            log_every,
            last_log: Instant::now(),
            started: Instant::now(),
            total,
            done: 0,
            solved: 0,
            errors: 0,
        }
    }

    /// Counts one finished episode.
    pub fn record(&mut self, e: &EpisodeStats) {
        self.done += 1;
        self.solved += u64::from(e.solved);
        self.errors += u64::from(!e.is_sample());
        if let Some(bar) = &self.bar {
            bar.inc(1);
            bar.set_message(format!("solved {} errors {}", self.solved, self.errors));
        }
        if let Some(every) = self.log_every
            && (self.last_log.elapsed() >= every || self.done == self.total)
        {
            self.last_log = Instant::now();
            let secs = self.started.elapsed().as_secs_f64();
            tracing::info!(
                done = self.done,
                total = self.total,
                solved = self.solved,
                errors = self.errors,
                episodes_per_sec = if secs > 0.0 {
                    self.done as f64 / secs
                } else {
                    0.0
                },
                "rollout progress"
            );
        }
    }

    /// Removes the bar.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
