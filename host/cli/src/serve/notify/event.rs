//! The events `m3 serve --notify` sends, built from what the store holds: a round that waits
//! for an answer (`round_waiting`), a round that failed (`round_failed`) and an execution that
//! finished (`execution_finished`). Each has a stable id (its kind and its round's or
//! execution's id), so every server that sees it queues the same event and a receiver can drop
//! a repeat. The body (`version` 1) names the round, its execution, server, operation, the
//! requests (mode, key, message, each field's name, title, type and whether it is required),
//! the deadline and the link to the round's form; never an answer, a lease token, an
//! idempotency key, a URL-mode request's address, the operation's arguments or a header value.

use m3::operations::NotificationEvent;
use m3::{
    ElicitationRequest, ExecutionState, ExecutionStatus, ManagedInputRecord, ManagedInputStatus,
};
use serde_json::{Value, json};

/// The body's shape version.
pub const VERSION: u64 = 1;

/// What can be notified (`--notify-on`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Kind {
    /// A round starts waiting for an answer.
    Waiting,
    /// A round failed.
    Failed,
    /// An execution finished.
    Finished,
}

impl Kind {
    /// The event's name in a body and its headers.
    pub fn name(self) -> &'static str {
        match self {
            Self::Waiting => "round_waiting",
            Self::Failed => "round_failed",
            Self::Finished => "execution_finished",
        }
    }
}

/// An event's id: its kind and its round's or execution's id.
pub fn event_id(kind: Kind, id: &str) -> String {
    format!("{}:{id}", kind.name())
}

/// The events the store's state holds now, of the kinds wanted, that happened at `since` or
/// later, but those `known` says were queued before (whose bodies are not built again);
/// `public_url` is the inbox's address the links start with.
pub fn events(
    records: &[ManagedInputRecord],
    states: &[ExecutionState],
    kinds: &[Kind],
    since: chrono::DateTime<chrono::Utc>,
    public_url: &str,
    known: &dyn Fn(&str) -> bool,
) -> Vec<NotificationEvent> {
    let new = |kind: Kind, id: &str| kinds.contains(&kind) && !known(&event_id(kind, id));
    let mut events = Vec::new();
    for r in records {
        let id = &r.pending.round_id;
        if r.status == ManagedInputStatus::Pending
            && r.timestamps.created_at >= since
            && new(Kind::Waiting, id)
        {
            let at = r.timestamps.created_at;
            events.push(round_event(Kind::Waiting, r, at, public_url));
        }
        if r.status == ManagedInputStatus::Failed
            && let Some(at) = r.timestamps.failed_at
            && at >= since
            && new(Kind::Failed, id)
        {
            // After the round's own waiting event, even at the same instant.
            let at = at.max(r.timestamps.created_at + chrono::TimeDelta::nanoseconds(1));
            events.push(round_event(Kind::Failed, r, at, public_url));
        }
    }
    for s in states {
        if s.lifecycle == ExecutionStatus::Finished
            && s.updated_at >= since
            && new(Kind::Finished, &s.execution_id)
        {
            events.push(execution_event(s, public_url));
        }
    }
    events
}

/// The fields a form asks for: name, title, type, whether required (nothing else of the
/// schema: defaults and examples may be anything).
fn fields(schema: &Value) -> Vec<Value> {
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return Vec::new();
    };
    properties
        .iter()
        .map(|(name, p)| {
            json!({
                "name": name,
                "title": p.get("title").and_then(Value::as_str),
                "type": p.get("type").and_then(Value::as_str),
                "required": required.contains(&name.as_str()),
            })
        })
        .collect()
}

fn round_event(
    kind: Kind,
    r: &ManagedInputRecord,
    at: chrono::DateTime<chrono::Utc>,
    public_url: &str,
) -> NotificationEvent {
    let p = &r.pending;
    let requests: Vec<Value> = p
        .requests
        .iter()
        .map(|(key, request)| match request {
            ElicitationRequest::Form(f) => json!({
                "key": key,
                "mode": "form",
                "message": f.message,
                "fields": fields(&f.requested_schema),
            }),
            ElicitationRequest::Url(u) => json!({
                "key": key,
                "mode": "url",
                "message": u.message,
                "fields": [],
            }),
        })
        .collect();
    let event_id = event_id(kind, &p.round_id);
    let link = format!("{public_url}/rounds/{}", p.round_id);
    let body = json!({
        "version": VERSION,
        "event": kind.name(),
        "event_id": event_id,
        "occurred_at": crate::json::time(at),
        "link": link,
        "round": {
            "round_id": p.round_id,
            "execution_id": p.execution_id,
            "server": p.server,
            "operation": {
                "kind": crate::json::operation_kind(p.operation_kind),
                "name": p.operation_name,
            },
            "round_index": r.round_index,
            "status": r.status.as_str(),
            "deadline": p.deadline.map(crate::json::time),
            "requests": requests,
            "failure": r.failure.as_ref().map(|f| json!({"code": f.code.as_str()})),
        },
    });
    NotificationEvent {
        event_id,
        at,
        round_id: Some(p.round_id.clone()),
        document: body.to_string(),
    }
}

fn execution_event(s: &ExecutionState, public_url: &str) -> NotificationEvent {
    let kind = Kind::Finished;
    let event_id = event_id(kind, &s.execution_id);
    let outcome = s.outcome.as_ref();
    let body = json!({
        "version": VERSION,
        "event": kind.name(),
        "event_id": event_id,
        "occurred_at": crate::json::time(s.updated_at),
        "link": format!("{public_url}/executions/{}", s.execution_id),
        "execution": {
            "execution_id": s.execution_id,
            "outcome": outcome.map(|o| o.kind.as_str()),
            "failure": outcome
                .and_then(|o| o.failure.as_ref())
                .map(|f| json!({"kind": f.kind.as_str(), "code": f.code.map(|c| c.as_str())})),
        },
    });
    NotificationEvent {
        event_id,
        at: s.updated_at,
        round_id: None,
        document: body.to_string(),
    }
}

/// Escapes Slack's three control characters in text it formats (`&`, `<`, `>`).
fn slack_escaped(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// At most `max` characters of `text` (Slack refuses longer fields), with `…` when cut.
fn slack_cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut cut: String = text.chars().take(max - 1).collect();
    cut.push('…');
    cut
}

/// A Slack incoming-webhook body for an event's document: `text` (the notification's line),
/// `blocks` (a section with what is asked, a button to the form, a context line with the
/// event id), within Slack's documented limits (3,000 characters a section's text, 75 a
/// button's label, 3,000 a link, 50 blocks).
pub fn slack(document: &Value) -> Value {
    let event = document["event"].as_str().unwrap_or_default();
    let link = document["link"].as_str().unwrap_or_default();
    let (headline, detail, button) = match event {
        "execution_finished" => {
            let e = &document["execution"];
            let outcome = e["outcome"].as_str().unwrap_or("unknown");
            (
                format!(
                    "Execution {} finished: {outcome}",
                    e["execution_id"].as_str().unwrap_or_default()
                ),
                String::new(),
                "Open the execution",
            )
        }
        _ => {
            let r = &document["round"];
            let operation = format!(
                "{} {}",
                r["operation"]["kind"].as_str().unwrap_or_default(),
                r["operation"]["name"].as_str().unwrap_or_default()
            );
            let server = r["server"].as_str().unwrap_or_default();
            let headline = if event == "round_failed" {
                let code = r["failure"]["code"].as_str().unwrap_or("failed");
                format!("A round of {server} ({operation}) failed: {code}")
            } else {
                format!("{server} asks for input ({operation})")
            };
            let mut detail = String::new();
            for request in r["requests"].as_array().into_iter().flatten() {
                detail.push_str(&format!(
                    "• {}\n",
                    request["message"].as_str().unwrap_or_default()
                ));
            }
            if let Some(deadline) = r["deadline"].as_str() {
                detail.push_str(&format!("Answer before {deadline}\n"));
            }
            let button = if event == "round_failed" {
                "Open the round"
            } else {
                "Answer"
            };
            (headline, detail, button)
        }
    };
    let mut section = format!("*{}*", slack_escaped(&headline));
    if !detail.is_empty() {
        section.push('\n');
        section.push_str(&slack_escaped(detail.trim_end()));
    }
    json!({
        "text": slack_cut(&slack_escaped(&headline), 3000),
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": slack_cut(&section, 3000)}},
            {"type": "actions", "elements": [{
                "type": "button",
                "text": {"type": "plain_text", "text": slack_cut(button, 75)},
                "url": slack_cut(link, 3000),
                "action_id": "m3_open",
            }]},
            {"type": "context", "elements": [{
                "type": "mrkdwn",
                "text": slack_cut(&format!("m3 event {}", slack_escaped(
                    document["event_id"].as_str().unwrap_or_default())), 3000),
            }]},
        ],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server's message cannot ping a channel or forge a link in Slack (`<!channel>`,
    /// `<https://x|y>` are escaped), and a long one is cut within Slack's limit.
    #[test]
    fn a_slack_message_escapes_what_a_server_wrote_and_keeps_to_the_limits() {
        let document = json!({
            "event": "round_waiting",
            "event_id": "round_waiting:r1",
            "link": "https://inbox.example/rounds/r1",
            "round": {
                "server": "s<!channel>",
                "operation": {"kind": "tool", "name": "book"},
                "requests": [{"message": format!("<https://evil.example|click> & {}", "x".repeat(5000))}],
                "deadline": null,
            },
        });
        let body = slack(&document);
        let section = body["blocks"][0]["text"]["text"].as_str().unwrap();
        assert!(!section.contains("<!channel>") && !section.contains("<https://evil"));
        assert!(section.contains("&lt;!channel&gt;") && section.contains("&amp;"));
        assert_eq!(section.chars().count(), 3000);
        assert!(section.ends_with('…'));
        assert_eq!(
            body["blocks"][1]["elements"][0]["url"],
            "https://inbox.example/rounds/r1"
        );
        assert_eq!(body["blocks"][1]["elements"][0]["text"]["text"], "Answer");
        let text = body["text"].as_str().unwrap();
        assert!(
            text.contains("asks for input") && !text.contains("<!channel>"),
            "{text}"
        );
    }
}
