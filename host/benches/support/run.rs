//! How a benchmark binary was started: a full run or a smoke pass.

/// How a benchmark binary was started. A full run is `cargo bench` (which passes `--bench`);
/// anything else is a smoke pass: one small repetition of every part, figures printed but not
/// judged, no report written. `cargo test --workspace` runs every benchmark that way, so a
/// benchmark that no longer runs fails the tests. `--smoke` (or `M3_BENCH_SMOKE=1`) asks for a
/// smoke pass under `cargo bench` too.
#[derive(Debug, Clone)]
pub struct RunArgs {
    /// The arguments after the program name.
    pub args: Vec<String>,
    /// A full run (`false`: a smoke pass).
    pub full: bool,
}

impl RunArgs {
    /// This process's arguments and environment.
    pub fn from_env() -> Self {
        let smoke_env = std::env::var_os("M3_BENCH_SMOKE");
        Self::parse(
            std::env::args().skip(1).collect(),
            smoke_env.as_deref().and_then(|v| v.to_str()),
        )
    }

    /// `args` (after the program name) with `M3_BENCH_SMOKE` set to `smoke_env`.
    pub fn parse(args: Vec<String>, smoke_env: Option<&str>) -> Self {
        let smoke = args.iter().any(|a| a == "--smoke")
            || smoke_env.is_some_and(|v| !v.is_empty() && v != "0");
        let full = args.iter().any(|a| a == "--bench") && !smoke;
        Self { args, full }
    }

    /// "full run" or "smoke pass", as the tables' titles say it.
    pub fn mode(&self) -> &'static str {
        if self.full { "full run" } else { "smoke pass" }
    }

    /// The `--only=NAME` argument, which must be one of `names` (`what` names them in the
    /// message; an unknown one exits with status 2).
    pub fn only(&self, names: &[&'static str], what: &str) -> Option<&'static str> {
        self.args.iter().find_map(|a| {
            let name = a.strip_prefix("--only=")?;
            let known = names.iter().find(|n| **n == name);
            if known.is_none() {
                eprintln!("unknown {what} `{name}`; expected one of {names:?}");
                std::process::exit(2);
            }
            known.copied()
        })
    }

    /// The whole number of the `--NAME=N` argument (`_` may group its digits: `10_000`); exits
    /// with status 2 when it is not one.
    pub fn number(&self, name: &str) -> Option<u64> {
        let prefix = format!("--{name}=");
        self.args.iter().find_map(|a| {
            let text = a.strip_prefix(&prefix)?;
            match text.replace('_', "").parse() {
                Ok(value) => Some(value),
                Err(_) => {
                    eprintln!("--{name} takes a whole number, not `{text}`");
                    std::process::exit(2);
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::RunArgs;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn cargo_bench_is_a_full_run_and_everything_else_a_smoke_pass() {
        assert!(RunArgs::parse(args(&["--bench"]), None).full);
        assert!(
            !RunArgs::parse(args(&[]), None).full,
            "cargo test runs it bare"
        );
        assert!(!RunArgs::parse(args(&["--bench", "--smoke"]), None).full);
        assert!(!RunArgs::parse(args(&["--bench"]), Some("1")).full);
        assert!(RunArgs::parse(args(&["--bench"]), Some("0")).full);
        assert!(RunArgs::parse(args(&["--bench"]), Some("")).full);
    }

    #[test]
    fn a_number_argument_is_parsed() {
        let run = RunArgs::parse(args(&["--bench", "--steps=30", "--calls=10_000"]), None);
        assert_eq!(run.number("steps"), Some(30));
        assert_eq!(run.number("calls"), Some(10_000));
        assert_eq!(run.number("rounds"), None);
    }
}
