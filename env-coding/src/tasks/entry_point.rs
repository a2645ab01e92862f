//! The function a task's tests call, as the prompt shows it to a model: the audit's exploits
//! define it, and input derivation wraps it to record what the tests pass.

use super::Task;
use crate::reward::Component;
use codegym_sandbox::lang::Language;

impl Task {
    /// The function the tests call: a component's `entry_point`, the metadata's, or the first
    /// call in an MBPP-style assert; for MultiPL-E and appended-test tasks the function the
    /// completion prefix (or the prompt) declares last.
    pub fn entry_point(&self) -> Option<String> {
        for c in &self.reward.components {
            match c {
                Component::CheckFunction { entry_point, .. } => return Some(entry_point.clone()),
                Component::Differential(spec) => return Some(spec.entry_point.clone()),
                Component::Asserts { asserts, .. } => {
                    if let Some(name) = asserts.iter().find_map(|a| first_call(a)) {
                        return Some(name);
                    }
                }
                _ => {}
            }
        }
        if let Some(name) = self.metadata.get("entry_point").and_then(|v| v.as_str()) {
            return Some(name.to_string());
        }
        let keyword = match self.language {
            Language::Python => "def ",
            Language::NodeJs | Language::TypeScript => "function ",
            _ => return None,
        };
        self.completion_prefix
            .as_deref()
            .unwrap_or(&self.prompt)
            .lines()
            .rev()
            .find_map(|l| l.trim_start().strip_prefix(keyword))
            .and_then(identifier)
    }
}

/// The first `name(` of an assert: `assert f(1) == 2` -> `f`.
fn first_call(assert: &str) -> Option<String> {
    let rest = assert.trim_start().strip_prefix("assert")?;
    let rest = rest
        .trim_start()
        .trim_start_matches("not ")
        .trim_start_matches('(');
    let rest = rest.trim_start();
    let name = identifier(rest)?;
    rest[name.len()..]
        .trim_start()
        .starts_with('(')
        .then_some(name)
}

fn identifier(text: &str) -> Option<String> {
    let end = text
        .char_indices()
        .find(|&(i, c)| !(c == '_' || c.is_alphanumeric()) || (i == 0 && c.is_numeric()))
        .map_or(text.len(), |(i, _)| i);
    (end > 0).then(|| text[..end].to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_points_from_asserts_and_prompts() {
        assert_eq!(
            first_call("assert is_prime(7) == True").as_deref(),
            Some("is_prime")
        );
        assert_eq!(first_call("assert not f (3)").as_deref(), Some("f"));
        assert_eq!(first_call("assert x == 1"), None);
        assert_eq!(identifier("abc_1(2)").as_deref(), Some("abc_1"));
    }
}
