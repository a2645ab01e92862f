//! The `repo-copies` benchmark's Markdown table: one row per round and side (medians over the
//! round's G samples, with their range), so that sides are compared within a round.

use std::fmt::Write;

use crate::repo_copies::{Sample, Side};

const SIDES: [&str; 3] = ["codegym", "podman", "fork+exec floor"];

pub fn render(rounds: &[[Side; 3]], copies: usize, prepare_ms: f64, image: Option<&str>) -> String {
    let mut out = format!(
        "{copies} copies at once; task prepared once in {prepare_ms:.0} ms (import, setup, \
         commit, freeze); podman image: {}\n\n\
         | round | side | to start (ms) | `date` done (ms) | `import inflection` done (ms) \
         | memory / copy (MiB) | disk / copy (KiB) | scoring (ms) |\n\
         |---:|---|---:|---:|---:|---:|---:|---:|\n",
        image.unwrap_or("(skipped)")
    );
    for (i, round) in rounds.iter().enumerate() {
        for (side, name) in round.iter().zip(SIDES) {
            if side.samples.is_empty() {
                continue;
            }
            let col = |f: fn(&Sample) -> f64| spread(side.samples.iter().map(f).collect());
            let has_second = side.samples.iter().any(|s| s.second_end_ms > 0.0);
            let mem = if side.samples.iter().any(|s| s.mem_bytes > 0) {
                let mut m = col(|s| s.mem_bytes as f64 / 1048576.0);
                if side.shared_bytes > 0 {
                    let _ = write!(
                        m,
                        " + {:.2} in the server",
                        side.shared_bytes as f64 / 1048576.0 / copies as f64
                    );
                }
                m
            } else {
                "-".into()
            };
            let _ = writeln!(
                out,
                "| {} | {name} | {} | {} | {} | {mem} | {} | {} |",
                i + 1,
                col(|s| s.start_ms),
                col(|s| s.first_end_ms),
                if has_second {
                    col(|s| s.second_end_ms)
                } else {
                    "-".into()
                },
                if side.samples.iter().any(|s| s.disk_bytes > 0) {
                    col(|s| s.disk_bytes as f64 / 1024.0)
                } else {
                    "-".into()
                },
                side.score_ms.map_or("-".into(), |v| format!("{v:.0}")),
            );
        }
    }
    out
}

/// `median (min-max)`.
fn spread(mut v: Vec<f64>) -> String {
    v.sort_by(f64::total_cmp);
    let (lo, hi) = (v[0], v[v.len() - 1]);
    let med = v[v.len() / 2];
    let digits = if hi < 10.0 { 1 } else { 0 };
    format!("{med:.digits$} ({lo:.digits$}-{hi:.digits$})")
}
