//! Stdin text mutated only where its format is clear: text made of integers, one changed by +-1
//! (never made negative) or doubled, or two swapped; a count alone on the first line is kept
//! (it says how much follows). Other text is used as it is.

use super::mutate::Rng;

/// Stdin text made of integers with one changed, or `None` when the text is not made of integers
/// only (its format is unclear: used as it is).
pub fn mutate_numbers(text: &str, rng: &mut Rng) -> Option<String> {
    // (start, end, value) of every token; every token must be an integer.
    let mut tokens = Vec::new();
    let mut first_line_tokens = 0;
    let mut at = 0;
    for (n, line) in text.split_inclusive('\n').enumerate() {
        let mut start = None;
        for (i, c) in line
            .char_indices()
            .chain(std::iter::once((line.len(), ' ')))
        {
            match (c.is_whitespace(), start) {
                (false, None) => start = Some(i),
                (true, Some(s)) => {
                    let v: i64 = line[s..i].parse().ok()?;
                    tokens.push((at + s, at + i, v));
                    if n == 0 {
                        first_line_tokens += 1;
                    }
                    start = None;
                }
                _ => {}
            }
        }
        at += line.len();
    }
    // A count alone on the first line says how much follows: changing it breaks the format
    // (unless it is the whole input).
    let skip = usize::from(first_line_tokens == 1 && tokens.len() > 1);
    let eligible = &tokens[skip.min(tokens.len())..];
    if eligible.is_empty() {
        return None;
    }
    let k = rng.below(eligible.len());
    let (s, e, v) = eligible[k];
    let mut out = text.to_string();
    match rng.below(4) {
        1 if v != 0 => out.replace_range(s..e, &(v - 1).to_string()),
        3 => out.replace_range(s..e, &v.checked_mul(2)?.to_string()),
        2 if eligible.len() > 1 => {
            // Another token: swapped, the later span first so the earlier offsets still hold.
            let other = (k + 1 + rng.below(eligible.len() - 1)) % eligible.len();
            let (s2, e2, v2) = eligible[other];
            let (later, earlier) = if s2 > s {
                ((s2, e2, v), (s, e, v2))
            } else {
                ((s, e, v2), (s2, e2, v))
            };
            out.replace_range(later.0..later.1, &later.2.to_string());
            out.replace_range(earlier.0..earlier.1, &earlier.2.to_string());
        }
        _ => out.replace_range(s..e, &v.checked_add(1)?.to_string()),
    }
    (out != text).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stdin_numbers_change_only_where_the_format_is_clear() {
        let mut rng = Rng::new("io");
        assert_eq!(mutate_numbers("abc 3\n", &mut rng), None);
        assert!(
            mutate_numbers("2\n", &mut rng).is_some(),
            "a lone number is the input"
        );
        for _ in 0..50 {
            let out = mutate_numbers("3\n1 2 3\n", &mut rng).unwrap();
            assert!(out.starts_with("3\n"), "the count stays: {out:?}");
            assert_eq!(out.split_whitespace().count(), 4);
            assert!(
                out.split_whitespace().all(|t| t.parse::<u64>().is_ok()),
                "{out:?}"
            );
        }
    }
}
