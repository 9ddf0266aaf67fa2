//! `m3 events`' history: what happened to an execution and its rounds, in time order, read from
//! the store (the execution's `created_at` and outcome, each round's lifecycle timestamps and
//! failure) and merged with the harness's own events.

use crate::human::Look;
use crate::ids::ShortIds;
use chrono::{DateTime, SecondsFormat, Utc};
use m3::{ExecutionDiagnostics, ExecutionState, ExecutionStatus, FailureCode, ManagedInputRecord};
use serde_json::{Value, json};

/// One thing that happened.
#[derive(Debug, Clone)]
pub struct Happening {
    /// When.
    pub at: DateTime<Utc>,
    /// What, as a word: `execution_created`, `round_created`, `round_answered`,
    /// `round_delivery_started`, `round_delivered`, `round_resolved`, `round_failed`,
    /// `execution_finished`, or `harness` (one of the harness's events).
    pub kind: &'static str,
    /// The round it happened to.
    pub round_id: Option<String>,
    /// The failure code (a failed round, or a failed execution's).
    pub code: Option<String>,
    /// What happened, in words (ids in full).
    pub message: String,
}

impl Happening {
    fn new(at: DateTime<Utc>, kind: &'static str, round_id: Option<&str>, message: String) -> Self {
        Self {
            at,
            kind,
            round_id: round_id.map(str::to_string),
            code: None,
            message,
        }
    }

    /// `{at, kind, round_id, code, message}` (RFC 3339 UTC `at`).
    pub fn to_json(&self) -> Value {
        json!({
            "at": self.at.to_rfc3339_opts(SecondsFormat::AutoSi, true),
            "kind": self.kind,
            "round_id": self.round_id,
            "code": self.code,
            "message": self.message,
        })
    }
}

/// The words for a round that failed with `code`.
fn failed_words(code: FailureCode, message: &str) -> String {
    match code {
        FailureCode::RecoveryUnavailable => {
            format!("recovered: its worker was gone, so it failed ({code}): {message}")
        }
        FailureCode::RequestWithdrawn => {
            format!("withdrawn: the server stopped waiting for it ({code}): {message}")
        }
        _ => format!("failed ({code}): {message}"),
    }
}

/// Everything that happened to `state`'s execution and `rounds` (its rounds), oldest first;
/// things at the same instant keep their logical order (a round's steps, the end last).
pub fn history(
    state: &ExecutionState,
    rounds: &[ManagedInputRecord],
    diagnostics: &ExecutionDiagnostics,
) -> Vec<Happening> {
    let mut out = vec![Happening::new(
        state.created_at,
        "execution_created",
        None,
        "execution created".into(),
    )];
    for record in rounds {
        let id = record.pending.round_id.as_str();
        let t = &record.timestamps;
        let keys: Vec<&str> = record.pending.requests.keys().map(String::as_str).collect();
        out.push(Happening::new(
            t.created_at,
            "round_created",
            Some(id),
            format!(
                "round created: {}:{} asks for {}",
                record.pending.server,
                record.pending.operation_name,
                keys.join(", ")
            ),
        ));
        let steps = [
            (
                t.response_validated_at,
                "round_answered",
                "answered: the answers are valid and stored",
            ),
            (
                t.delivery_started_at,
                "round_delivery_started",
                "delivery started",
            ),
            (t.delivered_at, "round_delivered", "delivered to the server"),
            (
                t.resolved_at,
                "round_resolved",
                "resolved: the server went on",
            ),
        ];
        for (at, kind, words) in steps {
            if let Some(at) = at {
                out.push(Happening::new(at, kind, Some(id), words.into()));
            }
        }
        if let (Some(at), Some(failure)) = (t.failed_at, &record.failure) {
            let mut failed = Happening::new(
                at,
                "round_failed",
                Some(id),
                failed_words(failure.code, &failure.message),
            );
            failed.code = Some(failure.code.as_str().to_string());
            out.push(failed);
        }
    }
    if state.lifecycle == ExecutionStatus::Finished
        && let Some(outcome) = &state.outcome
    {
        let mut end = Happening::new(
            state.updated_at,
            "execution_finished",
            None,
            format!("execution finished: {outcome}"),
        );
        end.code = outcome
            .failure
            .as_ref()
            .and_then(|f| f.code)
            .map(|c| c.as_str().to_string());
        out.push(end);
    }
    // The end is last even if a harness event was stamped later by another clock read.
    let end = out.pop_if(|h| h.kind == "execution_finished");
    for event in &diagnostics.events {
        out.push(Happening::new(
            event.at,
            "harness",
            None,
            format!("{}: {}", event.kind, event.message),
        ));
    }
    out.sort_by_key(|h| h.at);
    out.extend(end);
    out
}

/// Prints the history for people: one line each, round ids shortened unless `--wide`.
pub fn print(happenings: &[Happening], state: &ExecutionState, look: &Look) {
    let ids = ShortIds::new([state.execution_id.as_str()], look.wide);
    for h in happenings {
        let at = if look.wide {
            h.at.to_rfc3339_opts(SecondsFormat::AutoSi, true)
        } else {
            h.at.format("%Y-%m-%dT%H:%M:%SZ").to_string()
        };
        let word = h.kind.rsplit('_').next().unwrap_or(h.kind);
        let kind = format!("{:<22}", h.kind);
        let round = h
            .round_id
            .as_deref()
            .map(|r| format!("{}: ", ids.round(r, &state.execution_id)))
            .unwrap_or_default();
        let line = look.fit(&format!("{at}  {kind}  {round}{}", h.message));
        // Colour the kind only once the line is cut (escapes take no columns).
        let line = line.replacen(&kind, &look.paint_like(&kind, word), 1);
        println!("{line}");
    }
}
