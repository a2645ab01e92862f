//! The samples a prompt shows: the fenced blocks after lines that name them (`Sample Input`,
//! `Example output:`...). The audit's exploits echo a prompt's sample output; input derivation
//! adds its sample inputs to a stdin task's tests' own.

/// Every fenced block whose nearest non-blank line before it contains `word` (ASCII, any case).
pub fn fenced_after(prompt: &str, word: &str) -> Vec<String> {
    let word = word.to_ascii_lowercase();
    let mut out = Vec::new();
    let mut lines = prompt.lines().peekable();
    let mut last_text = String::new();
    while let Some(line) = lines.next() {
        if !line.trim_start().starts_with("```") {
            if !line.trim().is_empty() {
                last_text = line.to_ascii_lowercase();
            }
            continue;
        }
        let mut text = String::new();
        let mut closed = false;
        for l in lines.by_ref() {
            if l.trim_start().starts_with("```") {
                closed = true;
                break;
            }
            text.push_str(l);
            text.push('\n');
        }
        if closed && last_text.contains(&word) {
            out.push(text);
        }
        last_text.clear();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_after_the_lines_that_name_them() {
        let prompt = "Read n.\n\nSample Input\n```\n3\n```\nSample Output\n\n```\n6\n```\n\
                      Example input:\n```text\n1 2\n```\n```\nunnamed\n```\n";
        assert_eq!(fenced_after(prompt, "input"), ["3\n", "1 2\n"]);
        assert_eq!(fenced_after(prompt, "Output"), ["6\n"]);
        assert!(fenced_after("Print 6.", "output").is_empty());
    }
}
