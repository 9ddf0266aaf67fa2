//! Ids by prefix: the rounds or executions whose id starts with what a person typed, read with
//! one indexed range query (`id >= prefix AND id < successor(prefix)`) on the primary key
//! (`statements/ids.rs`), so no input (`%`, `_`, anything) widens it and nothing is listed in
//! full. Both backends compare ids byte by byte, so the bound is the same on each.

/// The ids that start with a prefix (see [`crate::DatabaseStore::round_ids_with_prefix`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IdMatches {
    /// The prefix is itself a stored id (then `ids` is exactly that id and `total` is 1).
    pub exact: bool,
    /// The first matching ids in id order, at most the limit asked for.
    pub ids: Vec<String>,
    /// How many ids match in all.
    pub total: u64,
}

/// Which table's ids.
#[derive(Debug, Clone, Copy)]
pub(crate) enum IdTable {
    /// `managed_input_rounds.round_id`.
    Rounds,
    /// `executions.execution_id`.
    Executions,
}

/// The smallest string greater than every string that starts with `prefix`, if there is one:
/// the prefix with its last character incremented (UTF-8 byte order is code point order).
pub(crate) fn successor(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        let mut next = last as u32 + 1;
        if (0xD800..0xE000).contains(&next) {
            next = 0xE000;
        }
        if let Some(c) = char::from_u32(next) {
            chars.push(c);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::successor;

    #[test]
    fn the_successor_bounds_exactly_the_strings_with_the_prefix() {
        assert_eq!(successor("exec-4").as_deref(), Some("exec-5"));
        assert_eq!(successor("a%").as_deref(), Some("a&"));
        assert_eq!(successor("a\u{D7FF}").as_deref(), Some("a\u{E000}"));
        assert_eq!(successor("a\u{10FFFF}").as_deref(), Some("b"));
        assert_eq!(successor("\u{10FFFF}"), None);
    }
}
