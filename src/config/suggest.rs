//! Which known name an unknown one was probably meant to be.

/// The known name nearest `unknown` by edit distance, if it is near enough to be a typo (at most a
/// third of its length, at least one edit) or differs only in case or separators.
pub fn closest<'a>(unknown: &str, known: &[&'a str]) -> Option<&'a str> {
    let fold = |s: &str| {
        s.chars()
            .filter(|c| c.is_alphanumeric())
            .flat_map(char::to_lowercase)
            .collect::<String>()
    };
    if let Some(same) = known.iter().find(|k| fold(k) == fold(unknown)) {
        return Some(same);
    }
    let budget = (unknown.chars().count() / 3).max(1);
    known
        .iter()
        .map(|k| (edit_distance(unknown, k), *k))
        .filter(|(distance, _)| *distance <= budget)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, k)| k)
}

/// Edit distance over characters, a swap of two neighbours counting as one edit (optimal string
/// alignment): `prot` is one edit from `port`.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    // Rows i-2, i-1 and i of the table.
    let mut before: Vec<usize> = vec![0; b.len() + 1];
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for i in 1..=a.len() {
        let mut row = vec![i; b.len() + 1];
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            row[j] = (previous[j] + 1)
                .min(row[j - 1] + 1)
                .min(previous[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                row[j] = row[j].min(before[j - 2] + 1);
            }
        }
        before = std::mem::replace(&mut previous, row);
    }
    previous[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typos_find_their_key_and_strangers_find_none() {
        let known = ["port", "bind", "mappings", "enabled"];
        assert_eq!(closest("prot", &known), Some("port"));
        assert_eq!(closest("mapings", &known), Some("mappings"));
        assert_eq!(closest("Enabled", &known), Some("enabled"));
        assert_eq!(closest("tailscale", &known), None);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }
}
