//! The audit as one self-contained HTML page (`codegym audit -o audit.html`): a summary, then a
//! table of every (task, exploit) that earned a reward with what the exploit does and the reward's
//! breakdown; with mutation testing, the scores' distribution and each task's score with its
//! surviving mutants' diffs. No script, no external resource.

use std::fmt::Write;

use super::AuditReport;
use super::mutants::{MutationReport, MutationStatus};

/// Renders `report`.
pub fn render(report: &AuditReport, source: &str) -> String {
    let mut out = String::new();
    let verdict = if report.failed() {
        format!(
            "{} task(s) can be hacked: {}",
            report.hackable_tasks.len(),
            report.hackable_tasks.join(", ")
        )
    } else {
        "no task can be hacked by the corpus (known-weak tasks aside)".to_string()
    };
    let _ = write!(
        out,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>codegym audit: {src}</title>\n<style>\
         body{{font-family:system-ui,sans-serif;margin:2em;max-width:80em}}\
         table{{border-collapse:collapse;width:100%}}td,th{{border:1px solid #ccc;padding:.3em;\
         vertical-align:top;text-align:left}}pre{{white-space:pre-wrap;margin:0;font-size:.85em}}\
         .bad{{color:#b00}}.ok{{color:#070}}</style></head><body>\n\
         <h1>Reward-hacking audit</h1>\n<p>Task set <code>{src}</code>: {tasks} task(s), {exploits} \
         exploit(s), {attempts} program(s) scored.</p>\n<p class=\"{class}\" id=\"verdict\">{verdict}</p>\n",
        src = escape(source),
        tasks = report.tasks,
        exploits = report.exploits.len(),
        attempts = report.attempts,
        class = if report.failed() { "bad" } else { "ok" },
        verdict = escape(&verdict),
    );
    out.push_str(
        "<h2>Findings</h2>\n<table id=\"findings\"><tr><th>task</th><th>exploit</th><th>what it does</th>\
         <th>reward</th><th>known weak</th><th>breakdown</th></tr>\n",
    );
    for f in &report.findings {
        let breakdown = serde_json::to_string_pretty(&f.reward_breakdown).unwrap_or_default();
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{} <small>({})</small></td><td>{}</td><td>{:.3}</td><td>{}</td>\
             <td><pre>{}</pre></td></tr>",
            escape(&f.task_id),
            escape(&f.exploit),
            escape(&f.category),
            escape(&f.what),
            f.reward,
            escape(f.known_weak.as_deref().unwrap_or("")),
            escape(&breakdown),
        );
    }
    out.push_str("</table>\n<h2>Do-nothing answers that earn a reward</h2>\n<table id=\"baselines\"><tr><th>task</th><th>reward</th><th>known weak</th><th>breakdown</th></tr>\n");
    for b in &report.baselines {
        let breakdown = serde_json::to_string_pretty(&b.reward_breakdown).unwrap_or_default();
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{:.3}</td><td>{}</td><td><pre>{}</pre></td></tr>",
            escape(&b.task_id),
            b.reward,
            escape(b.known_weak.as_deref().unwrap_or("")),
            escape(&breakdown),
        );
    }
    out.push_str("</table>\n<h2>The corpus</h2>\n<table id=\"corpus\"><tr><th>exploit</th><th>category</th><th>languages</th><th>tasks hacked</th><th>what it does</th></tr>\n");
    let hits = report.hits_by_exploit();
    for e in &report.exploits {
        let langs: Vec<&str> = e.languages.iter().map(|l| l.name()).collect();
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&e.name),
            escape(&e.category),
            langs.join(", "),
            hits.get(e.file.as_str()).copied().unwrap_or(0),
            escape(&e.what),
        );
    }
    out.push_str("</table>\n");
    if let Some(m) = &report.mutation {
        mutation_section(&mut out, m);
    }
    out.push_str("</body></html>\n");
    out
}

fn mutation_section(out: &mut String, m: &MutationReport) {
    let _ = writeln!(
        out,
        "<h2>Mutation score</h2>\n<p>Up to {} mutant(s) of each reference solution, scored like \
         submissions: the score is killed / (mutants - probably equivalent). {} mutant(s) in \
         {:.1} s.</p>",
        m.mutants_per_task, m.mutants_scored, m.seconds
    );
    if let Some(d) = &m.distribution {
        let _ = writeln!(
            out,
            "<p id=\"distribution\">{} task(s) scored: min {:.2}, q1 {:.2}, median {:.2}, q3 {:.2}, \
             max {:.2}, mean {:.2}.</p>",
            d.tasks, d.min, d.q1, d.median, d.q3, d.max, d.mean
        );
    }
    if let Some(gate) = m.min_mutation_score {
        let (class, text) = if m.below_gate.is_empty() {
            ("ok", format!("every scored task reaches {gate}"))
        } else {
            (
                "bad",
                format!(
                    "{} task(s) below {gate}: {}",
                    m.below_gate.len(),
                    m.below_gate.join(", ")
                ),
            )
        };
        let _ = writeln!(
            out,
            "<p class=\"{class}\" id=\"gate\">{}</p>",
            escape(&text)
        );
    }
    out.push_str(
        "<table id=\"mutation\"><tr><th>task</th><th>score</th><th>mutants</th><th>killed</th>\
         <th>survived</th><th>probably equivalent</th><th>surviving mutants</th></tr>\n",
    );
    for t in &m.tasks {
        let score = match (t.status, t.mutation_score) {
            (_, Some(s)) => format!("{s:.2}"),
            (MutationStatus::NoReference, _) => "no reference".into(),
            (MutationStatus::ReferenceFails, _) => "reference fails".into(),
            _ => "not scored".into(),
        };
        let mut survivors = String::new();
        for s in &t.surviving {
            let evidence = match (&s.disagreement, s.probably_equivalent) {
                (_, true) => "probably equivalent".to_string(),
                (Some(d), _) => format!(
                    "on {}: reference {}, mutant {}",
                    d.input.trim_end(),
                    d.reference.trim_end(),
                    d.candidate.trim_end()
                ),
                (None, _) => "not compared".into(),
            };
            let _ = write!(
                survivors,
                "<div>line {} ({}: {}) <small>{}</small><pre>{}</pre></div>",
                s.line,
                escape(&s.operator),
                escape(&s.what),
                escape(&evidence),
                escape(&s.diff.join("\n"))
            );
        }
        let _ = writeln!(
            out,
            "<tr class=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            if m.below_gate.contains(&t.task_id) {
                "bad"
            } else {
                ""
            },
            escape(&t.task_id),
            escape(&score),
            t.mutants,
            t.killed,
            t.survivors,
            t.equivalent,
            survivors,
        );
    }
    out.push_str("</table>\n");
}

fn escape(text: &str) -> String {
    let mut s = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => s.push_str("&amp;"),
            '<' => s.push_str("&lt;"),
            '>' => s.push_str("&gt;"),
            '"' => s.push_str("&quot;"),
            '\'' => s.push_str("&#39;"),
            c => s.push(c),
        }
    }
    s
}

#[cfg(test)]
mod tests {
    #[test]
    fn escape_covers_markup() {
        assert_eq!(
            super::escape("<a href='x'>&\"</a>"),
            "&lt;a href=&#39;x&#39;&gt;&amp;&quot;&lt;/a&gt;"
        );
    }
}
