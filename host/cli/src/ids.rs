//! Ids as people type and read them: a round or execution id may be given by any unique prefix
//! (resolved in the store with an indexed range query, never by listing everything), and tables
//! show ids shortened to their shortest unique prefix among the ids listed (at least
//! [`MIN_SHORT`] characters). A round id `EXEC-rN` is shown as `SHORT-rN`, `SHORT` being its
//! execution's short id, and that form is accepted back.

use anyhow::Result;
use m3::Executions;
use m3::operations::IdMatches;
use std::collections::HashMap;

/// The fewest characters a shortened id keeps (`exec-` and three hex digits).
pub const MIN_SHORT: usize = 8;
/// How many candidates an ambiguous prefix's error lists.
const CANDIDATES: u32 = 10;
/// The longest prefix an error quotes back (longer ones are cut).
const QUOTED: usize = 80;

/// What kind of id.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Round,
    Execution,
}

impl Kind {
    fn noun(self) -> &'static str {
        match self {
            Self::Round => "round",
            Self::Execution => "execution",
        }
    }

    fn matches(self, executions: &Executions, prefix: &str, limit: u32) -> Result<IdMatches> {
        Ok(match self {
            Self::Round => executions.store().round_ids_with_prefix(prefix, limit)?,
            Self::Execution => executions.execution_ids_with_prefix(prefix, limit)?,
        })
    }
}

/// The typed error of a prefix that matches several ids: nothing was done.
fn ambiguous(kind: Kind, given: &str, matches: &IdMatches) -> anyhow::Error {
    let quoted: String = given.chars().take(QUOTED).collect();
    let more = matches.total.saturating_sub(matches.ids.len() as u64);
    let mut listed = matches.ids.join(", ");
    if more > 0 {
        listed.push_str(&format!(" and {more} more"));
    }
    crate::invalid_input(format!(
        "the {noun} id `{quoted}` is ambiguous: {total} {noun}s start with it: {listed}; give \
         more of the id; nothing was done (ambiguous_id)",
        noun = kind.noun(),
        total = matches.total,
    ))
}

/// The one id `given` stands for; `None` when no id starts with it.
fn unique(executions: &Executions, kind: Kind, given: &str) -> Result<Option<String>> {
    let matches = kind.matches(executions, given, CANDIDATES)?;
    match matches.total {
        0 => Ok(None),
        1 => Ok(matches.ids.into_iter().next()),
        _ => Err(ambiguous(kind, given, &matches)),
    }
}

/// The execution id `given` stands for (itself, or the one id it is a unique prefix of). An
/// unknown id is returned as given, so the store says it is not found in its own typed words.
pub fn execution(executions: &Executions, given: &str) -> Result<String> {
    Ok(unique(executions, Kind::Execution, given)?.unwrap_or_else(|| given.to_string()))
}

/// The round id `given` stands for: itself, the one id it is a unique prefix of, or for
/// `PREFIX-rN` the round N of the one execution `PREFIX` stands for. An unknown id is returned
/// as given (the store's typed not-found error follows).
pub fn round(executions: &Executions, given: &str) -> Result<String> {
    if let Some(id) = unique(executions, Kind::Round, given)? {
        return Ok(id);
    }
    if let Some((execution_prefix, index)) = given.rsplit_once("-r")
        && !index.is_empty()
        && index.bytes().all(|b| b.is_ascii_digit())
        && let Some(execution_id) = unique(executions, Kind::Execution, execution_prefix)?
    {
        let round_id = format!("{execution_id}-r{index}");
        if Kind::Round.matches(executions, &round_id, 1)?.exact {
            return Ok(round_id);
        }
    }
    Ok(given.to_string())
}

/// An optional `--execution` filter, resolved like [`execution`].
pub fn execution_filter(executions: &Executions, given: Option<&str>) -> Result<Option<String>> {
    given.map(|g| execution(executions, g)).transpose()
}

/// The shortest prefix of each id that no other of `ids` shares, at least [`MIN_SHORT`]
/// characters (the whole id when shorter).
pub fn shortest_unique(ids: &[&str]) -> HashMap<String, String> {
    let mut sorted: Vec<&str> = ids.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let common = |a: &str, b: &str| a.chars().zip(b.chars()).take_while(|(x, y)| x == y).count();
    let mut out = HashMap::new();
    for (i, id) in sorted.iter().enumerate() {
        let before = i.checked_sub(1).map_or(0, |j| common(sorted[j], id));
        let after = sorted.get(i + 1).map_or(0, |next| common(next, id));
        let keep = (before.max(after) + 1).max(MIN_SHORT);
        out.insert(id.to_string(), id.chars().take(keep).collect());
    }
    out
}

/// How ids show in one table: shortened among the ids listed, or in full with `--wide`.
#[derive(Debug, Default)]
pub struct ShortIds {
    executions: Option<HashMap<String, String>>,
}

impl ShortIds {
    /// Short forms for these execution ids (and the rounds of them); `wide` keeps ids whole.
    pub fn new<'a>(execution_ids: impl IntoIterator<Item = &'a str>, wide: bool) -> Self {
        if wide {
            return Self::default();
        }
        let ids: Vec<&str> = execution_ids.into_iter().collect();
        Self {
            executions: Some(shortest_unique(&ids)),
        }
    }

    /// An execution id as shown.
    pub fn execution(&self, id: &str) -> String {
        self.executions
            .as_ref()
            .and_then(|short| short.get(id))
            .cloned()
            .unwrap_or_else(|| id.to_string())
    }

    /// A round id of `execution_id` as shown: `SHORT-rN` for the rounds a worker names.
    pub fn round(&self, round_id: &str, execution_id: &str) -> String {
        match round_id
            .strip_prefix(execution_id)
            .and_then(|rest| rest.strip_prefix("-r"))
        {
            Some(index) if self.executions.is_some() => {
                format!("{}-r{index}", self.execution(execution_id))
            }
            _ => round_id.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shortest_unique_prefixes_keep_at_least_eight_characters() {
        let short = shortest_unique(&["exec-aaaa1111", "exec-aaab2222", "exec-b", "x"]);
        assert_eq!(short["exec-aaaa1111"], "exec-aaaa");
        assert_eq!(short["exec-aaab2222"], "exec-aaab");
        assert_eq!(short["exec-b"], "exec-b");
        assert_eq!(short["x"], "x");
        let ids = ShortIds::new(["exec-0123456789abcdef"], false);
        assert_eq!(
            ids.round("exec-0123456789abcdef-r2", "exec-0123456789abcdef"),
            "exec-012-r2"
        );
        let wide = ShortIds::new(["exec-0123456789abcdef"], true);
        assert_eq!(
            wide.execution("exec-0123456789abcdef"),
            "exec-0123456789abcdef"
        );
    }
}
