//! Id resolution with Gymnasium's errors: `NameNotFound` (with a close-match suggestion) and
//! `VersionNotFound`.

use crate::{EnvError, EnvId, Result};

/// Resolves `wanted` against the registered ids: an exact match, or the latest version when `wanted`
/// has none (an unversioned registration wins, as in Gymnasium).
pub(super) fn resolve(wanted: &EnvId, registered: &[EnvId]) -> Result<EnvId> {
    let base = wanted.base();
    let same_name: Vec<&EnvId> = registered.iter().filter(|r| r.base() == base).collect();
    if same_name.is_empty() {
        return Err(EnvError::NameNotFound {
            name: base.clone(),
            suggestion: suggest(wanted, registered),
        });
    }
    match wanted.version {
        Some(v) => same_name
            .iter()
            .find(|r| r.version == Some(v))
            .map(|r| (*r).clone())
            .ok_or_else(|| EnvError::VersionNotFound {
                name: base,
                version: v,
                available: versions(&same_name),
            }),
        None => {
            let best = same_name
                .iter()
                .find(|r| r.version.is_none())
                .or_else(|| same_name.iter().max_by_key(|r| r.version));
            best.map(|r| (*r).clone())
                .ok_or(EnvError::UnregisteredEnv(base))
        }
    }
}

fn versions(ids: &[&EnvId]) -> Vec<u32> {
    let mut v: Vec<u32> = ids.iter().filter_map(|r| r.version).collect();
    v.sort_unstable();
    v
}

/// The closest registered base (`ns/Name`), if close enough to be a plausible typo. A name given
/// without namespace is also compared with the bare names, so `CartPole` suggests `classic/CartPole`.
fn suggest(wanted: &EnvId, registered: &[EnvId]) -> Option<String> {
    let wanted_base = wanted.base().to_lowercase();
    let wanted_name = wanted.name.to_lowercase();
    registered
        .iter()
        .map(|r| {
            let full = edit_distance(&wanted_base, &r.base().to_lowercase());
            let bare = if wanted.namespace.is_none() {
                edit_distance(&wanted_name, &r.name.to_lowercase())
            } else {
                usize::MAX
            };
            (full.min(bare), r.base())
        })
        .filter(|(d, _)| *d <= (wanted_name.chars().count() / 3).max(2))
        .min()
        .map(|(_, b)| b)
}

/// Levenshtein distance over chars.
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.chars().enumerate() {
        cur[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let subst = prev[j] + usize::from(ca != cb);
            cur[j + 1] = subst.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::edit_distance;

    #[test]
    fn levenshtein() {
        assert_eq!(edit_distance("", ""), 0);
        assert_eq!(edit_distance("abc", ""), 3);
        assert_eq!(edit_distance("", "ab"), 2);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("CartPoel", "CartPole"), 2);
        assert_eq!(edit_distance("ü", "u"), 1, "counts chars, not bytes");
    }
}
