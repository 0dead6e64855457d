//! Words and numbers as the text reports write them: counts with their noun, durations.

/// "1 function", "3 functions": a count and its noun, in the number the count needs. Every
/// count printed before a noun goes through here (see [`noun`] for the rules).
pub fn count<N: std::fmt::Display + PartialEq + From<u8>>(n: N, singular: &str) -> String {
    let word = noun(n == N::from(1), singular);
    format!("{n} {word}")
}

/// The noun, `singular` for one of it; else its plural: "-es" after s, x, ch and sh, "-ies" for a
/// consonant then "y" ("libraries"), "-s" otherwise ("functions", "bytes").
pub fn noun(one: bool, singular: &str) -> String {
    if one {
        return singular.to_string();
    }
    let consonant_y = singular.strip_suffix('y').filter(|stem| {
        stem.chars()
            .last()
            .is_some_and(|c| !"aeiou".contains(c.to_ascii_lowercase()))
    });
    if let Some(stem) = consonant_y {
        format!("{stem}ies")
    } else if ["s", "x", "ch", "sh"]
        .iter()
        .any(|end| singular.ends_with(end))
    {
        format!("{singular}es")
    } else {
        format!("{singular}s")
    }
}

/// "812us", "1.25ms", "2.10s": wrk's style.
pub fn duration(us: f64) -> String {
    if us < 1000.0 {
        format!("{us:.0}us")
    } else if us < 1_000_000.0 {
        format!("{:.2}ms", us / 1000.0)
    } else {
        format!("{:.2}s", us / 1_000_000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_of_one_takes_the_singular() {
        assert_eq!(count(1u32, "function"), "1 function");
        assert_eq!(count(0u32, "function"), "0 functions");
        assert_eq!(count(2u64, "process"), "2 processes");
        assert_eq!(count(3u64, "library"), "3 libraries");
        assert_eq!(count(1u64, "library"), "1 library");
        assert_eq!(count(4u8, "key"), "4 keys");
        assert_eq!(noun(false, "byte"), "bytes");
        assert_eq!(count(1usize, "frame"), "1 frame");
    }

    #[test]
    fn durations_read_like_wrk() {
        assert_eq!(duration(812.0), "812us");
        assert_eq!(duration(1250.0), "1.25ms");
        assert_eq!(duration(2_100_000.0), "2.10s");
    }
}
