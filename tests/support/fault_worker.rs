//! What `m3-test-fault-worker` tells its parent (`fault_worker_main.rs`): the line
//! `pending ROUND EXECUTION` once its round is pending, read here once for every test that
//! starts one.

use anyhow::{Context, Result, bail};
use std::io::BufRead;
use std::process::Child;

/// The round a worker process waits on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    /// The round's id.
    pub round_id: String,
    /// Its execution's id.
    pub execution_id: String,
}

impl Pending {
    /// The ids a `pending ROUND EXECUTION` line names.
    pub fn parse(line: &str) -> Result<Self> {
        match line.split_whitespace().collect::<Vec<_>>()[..] {
            ["pending", round_id, execution_id] => Ok(Self {
                round_id: round_id.to_string(),
                execution_id: execution_id.to_string(),
            }),
            _ => bail!("expected `pending ROUND EXECUTION` from the worker process, got {line:?}"),
        }
    }

    /// Reads the first line of `child`'s standard output (piped), the worker's word that its
    /// round is pending; the process's end before it is an error.
    pub fn read(child: &mut Child) -> Result<Self> {
        let stdout = child
            .stdout
            .as_mut()
            .context("the worker's stdout is not piped")?;
        let mut line = String::new();
        std::io::BufReader::new(stdout).read_line(&mut line)?;
        if line.is_empty() {
            bail!("the worker process ended before its round was pending");
        }
        Self::parse(&line)
    }
}

#[cfg(test)]
mod tests {
    use super::Pending;

    #[test]
    fn a_pending_line_names_the_round_and_its_execution_and_nothing_else_passes() {
        assert_eq!(
            Pending::parse("pending r-1 e-1\n").unwrap(),
            Pending {
                round_id: "r-1".into(),
                execution_id: "e-1".into(),
            }
        );
        assert!(Pending::parse("pending r-1\n").is_err());
        assert!(Pending::parse("ended Completed\n").is_err());
        assert!(Pending::parse("").is_err());
    }
}
