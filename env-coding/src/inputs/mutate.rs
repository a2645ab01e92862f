//! Type-aware input mutation (EvalPlus's): a seed input changed in one place, keeping its types
//! and nesting. Integers +-1, doubled, negated, zero, small random ones or another integer of the
//! seeds; floats scaled, negated, shifted, small random ones or another float of the seeds;
//! strings with a character inserted, replaced, removed or two swapped (characters of the
//! string, of the seeds or of an ASCII alphabet), words swapped, dropped or repeated, or another
//! string of the seeds inserted or in their place; lists with an element dropped, duplicated,
//! added, the order shuffled or an element mutated (recursively); dicts with a value mutated;
//! booleans flipped. The reference's own constants count as the seeds' values. (Stdin text:
//! [`super::numbers`].)
//!
//! Deterministic: [`Rng`] is seeded from a text (a task's id), so the same task gives the same
//! inputs on every run and machine.

use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Number, Value};
use sha2::{Digest, Sha256};

/// A small deterministic generator (SplitMix64) seeded from a text.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: &str) -> Rng {
        let digest = Sha256::digest(seed.as_bytes());
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(&digest[..8]);
        Rng(u64::from_le_bytes(bytes))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            items.swap(i, self.below(i + 1));
        }
    }
}

/// What a task's seed inputs are made of (EvalPlus's "ingredients"): mutations draw values from
/// them as well as from small random ones, so that an input can gain a character or a number the
/// tests use elsewhere.
#[derive(Debug, Clone, Default)]
pub struct Ingredients {
    ints: Vec<i64>,
    floats: Vec<f64>,
    strings: Vec<String>,
    chars: Vec<char>,
}

/// Characters a string may gain besides its own and the ingredients'.
const ALPHABET: &str =
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,;:-_!?()[]{}'\"#";

impl Ingredients {
    /// The integers, floats, strings and characters anywhere in `values`.
    pub fn of(values: &[Value]) -> Ingredients {
        let mut out = Ingredients::default();
        let mut stack: Vec<&Value> = values.iter().collect();
        while let Some(v) = stack.pop() {
            match v {
                Value::Number(n) => match n.as_i64() {
                    Some(i) => out.ints.push(i),
                    None => out.floats.extend(n.as_f64()),
                },
                Value::String(s) => {
                    out.strings.push(s.clone());
                    out.chars.extend(s.chars());
                }
                Value::Array(items) => stack.extend(items),
                Value::Object(map) => stack.extend(map.values()),
                _ => {}
            }
        }
        out.tidy();
        out
    }

    /// Adds the constants a program's text holds (numbers, short string literals): where a
    /// reference compares with `2.7` or lists `'u'`, an input holding them tells a mutant of that
    /// comparison or list apart, and the tests may hold none.
    pub fn add_constants_of(&mut self, source: &str) {
        static NUMBER: LazyLock<Regex> =
            LazyLock::new(|| Regex::new(r"\b\d+(\.\d+)?\b").expect("a valid pattern"));
        static STRING: LazyLock<Regex> = LazyLock::new(|| {
            Regex::new(r#"'([^'\\\n]{1,20})'|"([^"\\\n]{1,20})""#).expect("a valid pattern")
        });
        for m in NUMBER.find_iter(source) {
            match m.as_str().parse::<i64>() {
                Ok(i) => self.ints.push(i),
                Err(_) => self.floats.extend(m.as_str().parse::<f64>().ok()),
            }
        }
        for c in STRING.captures_iter(source) {
            if let Some(text) = c.get(1).or_else(|| c.get(2)) {
                self.strings.push(text.as_str().to_string());
                self.chars.extend(text.as_str().chars());
            }
        }
        self.tidy();
    }

    fn tidy(&mut self) {
        self.ints.sort_unstable();
        self.ints.dedup();
        self.floats.sort_by(f64::total_cmp);
        self.floats.dedup();
        self.strings.sort();
        self.strings.dedup();
        self.chars.sort_unstable();
        self.chars.dedup();
    }

    /// A character from the string's own, the seeds', or the alphabet.
    fn char(&self, own: &[char], rng: &mut Rng) -> char {
        let alphabet: Vec<char> = ALPHABET.chars().collect();
        let pool: &[char] = match rng.below(3) {
            0 if !own.is_empty() => own,
            1 if !self.chars.is_empty() => &self.chars,
            _ => &alphabet,
        };
        pool[rng.below(pool.len())]
    }
}

/// `value` changed in one place, of the same type and shape (`None`: nothing to change, e.g.
/// `null` or an empty list, whose elements' type is unknown).
pub fn mutate_value(value: &Value, with: &Ingredients, rng: &mut Rng) -> Option<Value> {
    Some(match value {
        Value::Null => return None,
        Value::Bool(b) => Value::Bool(!b),
        Value::Number(n) => Value::Number(mutate_number(n, with, rng)?),
        Value::String(s) => Value::String(mutate_string(s, with, rng)),
        Value::Array(items) if items.is_empty() => return None,
        Value::Array(items) => {
            let mut items = items.clone();
            let k = rng.below(items.len());
            match rng.below(5) {
                0 => {
                    items.remove(k);
                }
                1 => items.insert(k, items[k].clone()),
                2 if items.len() > 1 => rng.shuffle(&mut items),
                // A new element: one of the list's own, mutated.
                3 => {
                    let new = mutate_value(&items[k], with, rng)?;
                    items.insert(rng.below(items.len() + 1), new);
                }
                _ => items[k] = mutate_value(&items[k], with, rng)?,
            }
            Value::Array(items)
        }
        Value::Object(map) => {
            let keys: Vec<&String> = map.keys().collect();
            if keys.is_empty() {
                return None;
            }
            let key = keys[rng.below(keys.len())].clone();
            let mut map = map.clone();
            let new = mutate_value(&map[&key], with, rng)?;
            map.insert(key, new);
            Value::Object(map)
        }
    })
}

fn mutate_number(n: &Number, with: &Ingredients, rng: &mut Rng) -> Option<Number> {
    if let Some(i) = n.as_i64() {
        let new = match rng.below(7) {
            0 => i.checked_add(1),
            1 => i.checked_sub(1),
            2 => i.checked_mul(2),
            3 => i.checked_neg(),
            4 if !with.ints.is_empty() => Some(with.ints[rng.below(with.ints.len())]),
            5 => Some(rng.below(201) as i64 - 100),
            _ => Some(if i == 0 { 1 } else { 0 }),
        }?;
        return Some(Number::from(new));
    }
    if n.is_u64() {
        // Above i64::MAX: one less stays an unsigned integer of the same size.
        return n.as_u64().map(|u| Number::from(u - 1));
    }
    let f = n.as_f64()?;
    let new = match rng.below(6) {
        0 => f * 2.0,
        1 => f / 2.0,
        2 => -f,
        3 => f + 1.0,
        4 if !with.floats.is_empty() => with.floats[rng.below(with.floats.len())],
        _ => (rng.below(2001) as f64 - 1000.0) / 100.0,
    };
    // Keeps a float a float (`1.0`, not `1`) when it goes back to Python.
    Number::from_f64(if new == 0.0 { 0.5 } else { new })
}

fn mutate_string(s: &str, with: &Ingredients, rng: &mut Rng) -> String {
    let mut chars: Vec<char> = s.chars().collect();
    let n = chars.len();
    match rng.below(7) {
        1 if n > 0 => {
            chars.remove(rng.below(n));
        }
        2 if n > 1 => {
            let k = rng.below(n - 1);
            chars.swap(k, k + 1);
        }
        3 if n > 0 => {
            let c = with.char(&chars, rng);
            chars[rng.below(n)] = c;
        }
        // Words (space-separated) swapped, dropped or repeated: sentences stay sentences.
        5 if s.contains(' ') => {
            let mut words: Vec<&str> = s.split(' ').collect();
            let k = rng.below(words.len());
            match rng.below(3) {
                0 => {
                    let j = rng.below(words.len());
                    words.swap(k, j);
                }
                1 => {
                    words.remove(k);
                }
                _ => words.insert(k, words[k]),
            }
            return words.join(" ");
        }
        // Another string of the seeds, whole or put inside this one.
        4 if !with.strings.is_empty() => {
            let other = &with.strings[rng.below(with.strings.len())];
            if rng.below(2) == 0 {
                return other.clone();
            }
            let at = rng.below(n + 1);
            chars.splice(at..at, other.chars());
        }
        _ => {
            let c = with.char(&chars, rng);
            chars.insert(rng.below(n + 1), c);
        }
    }
    chars.into_iter().collect()
}

/// An argument list with one argument mutated (`args` is a JSON array).
pub fn mutate_args(args: &Value, with: &Ingredients, rng: &mut Rng) -> Option<Value> {
    let items = args.as_array()?;
    if items.is_empty() {
        return None;
    }
    let mut items = items.clone();
    // A few tries: an argument may have nothing to change (`None`, `[]`).
    for _ in 0..4 {
        let k = rng.below(items.len());
        if let Some(new) = mutate_value(&items[k], with, rng) {
            items[k] = new;
            return Some(Value::Array(items));
        }
    }
    None
}

/// Whether argument-list text round-trips through `serde_json::Value` unchanged in meaning:
/// no integer literal beyond 64 bits (a `Value` would make it a float).
pub fn fits_json_values(text: &str) -> bool {
    let mut run = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for c in text.chars() {
        if in_string {
            in_string = c != '"' || escaped;
            escaped = c == '\\' && !escaped;
            continue;
        }
        if c == '"' {
            in_string = true;
            run = 0;
        } else if c.is_ascii_digit() {
            run += 1;
            if run > 18 {
                return false;
            }
        } else {
            run = 0;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn shape(v: &Value) -> String {
        match v {
            Value::Array(items) => format!("[{}]", items.first().map(shape).unwrap_or_default()),
            Value::Object(m) => format!("{{{}}}", m.keys().cloned().collect::<Vec<_>>().join(",")),
            Value::Number(n) if n.is_f64() => "float".into(),
            Value::Number(_) => "int".into(),
            other => other.as_str().map_or("bool", |_| "str").to_string(),
        }
    }

    #[test]
    fn mutations_keep_types_and_nesting_and_are_deterministic() {
        let seed = json!([[1, 2, 3], "abc", 2.5, {"k": [true]}, 7]);
        let (mut a, mut b) = (Rng::new("task"), Rng::new("task"));
        let mut changed = 0;
        for _ in 0..200 {
            let with = Ingredients::of(std::slice::from_ref(&seed));
            let x = mutate_args(&seed, &with, &mut a).unwrap();
            assert_eq!(x, mutate_args(&seed, &with, &mut b).unwrap());
            for (p, q) in x.as_array().unwrap().iter().zip(seed.as_array().unwrap()) {
                if !(p.as_array().is_some_and(Vec::is_empty)) {
                    assert_eq!(shape(p), shape(q), "{x}");
                }
            }
            changed += usize::from(x != seed);
        }
        assert!(changed > 150, "{changed} of 200 changed");
    }

    #[test]
    fn strings_gain_characters_the_seeds_lack() {
        // HumanEval/51's tests hold no `u`: a mutant that forgets it is a weakness only an input
        // with one can show.
        let seed = json!(["abcdef", "aaBAA"]);
        let with = Ingredients::of(std::slice::from_ref(&seed));
        let mut rng = Rng::new("strings");
        let mut gained = std::collections::BTreeSet::new();
        for _ in 0..300 {
            let x = mutate_args(&seed, &with, &mut rng).unwrap();
            for arg in x.as_array().unwrap() {
                gained.extend(
                    arg.as_str()
                        .unwrap()
                        .chars()
                        .filter(|c| !"abcdefAB".contains(*c)),
                );
            }
        }
        assert!(gained.len() > 20, "{gained:?}");
    }

    #[test]
    fn the_references_constants_reach_the_inputs() {
        // HumanEval/81 grades `gpa > 2.7`; its tests never pass 2.7.
        let seed = json!([3.5, "ab"]);
        let mut with = Ingredients::of(std::slice::from_ref(&seed));
        with.add_constants_of("if gpa > 2.7:\n    return 'B-' if s in ['a', 'u'] else 'C'\n");
        let mut rng = Rng::new("constants");
        let all: Vec<Value> = (0..400)
            .filter_map(|_| mutate_args(&seed, &with, &mut rng))
            .collect();
        assert!(all.iter().any(|x| x[0] == json!(2.7)), "2.7 never drawn");
        assert!(
            all.iter().any(|x| x[1].as_str().unwrap().contains('u')),
            "'u' never drawn"
        );
    }

    #[test]
    fn big_integers_are_not_values() {
        assert!(fits_json_values("[[1, 2], \"123456789012345678901234\"]"));
        assert!(!fits_json_values("[123456789012345678901234]"));
    }
}
