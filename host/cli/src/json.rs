//! The JSON the command prints: the contract scripts rely on. Snake-case field names from the
//! specification, every field always present (`null` when absent), RFC 3339 UTC timestamps.

use anyhow::{Context, Result, anyhow, bail};
use chrono::{DateTime, SecondsFormat, Utc};
use m3::{
    ElicitationRequest, ElicitationResponse, ExecutionResult, ExecutionState,
    FormElicitationRequest, ManagedInputRecord, OperationKind, PendingElicitationRound,
    RedactedResponse, RequestContext, UrlElicitationRequest,
};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

/// An RFC 3339 UTC timestamp (`...Z`).
pub fn time(t: DateTime<Utc>) -> Value {
    Value::String(t.to_rfc3339_opts(SecondsFormat::AutoSi, true))
}

fn opt_time(t: Option<DateTime<Utc>>) -> Value {
    t.map_or(Value::Null, time)
}

/// `tool`, `prompt` or `resource`.
pub fn operation_kind(kind: OperationKind) -> &'static str {
    match kind {
        OperationKind::Tool => "tool",
        OperationKind::Prompt => "prompt",
        OperationKind::Resource => "resource",
    }
}

/// One request of a round.
pub fn request(r: &ElicitationRequest) -> Value {
    let (mode, message, schema, url, elicitation_id, context) = match r {
        ElicitationRequest::Form(f) => (
            "form",
            &f.message,
            f.requested_schema.clone(),
            Value::Null,
            Value::Null,
            &f.context,
        ),
        ElicitationRequest::Url(u) => (
            "url",
            &u.message,
            Value::Null,
            json!(u.url),
            json!(u.elicitation_id),
            &u.context,
        ),
    };
    json!({
        "mode": mode,
        "message": message,
        "requested_schema": schema,
        "url": url,
        "elicitation_id": elicitation_id,
        "meta": context.meta,
        "task": context.task,
        "server": context.server,
        "operation_kind": context.operation_kind.map(operation_kind),
        "operation_name": context.operation_name,
    })
}

/// A pending round.
pub fn pending_round(p: &PendingElicitationRound) -> Value {
    let requests: Map<String, Value> = p
        .requests
        .iter()
        .map(|(k, r)| (k.clone(), request(r)))
        .collect();
    json!({
        "round_id": p.round_id,
        "execution_id": p.execution_id,
        "logical_operation_id": p.logical_operation_id,
        "server": p.server,
        "operation_kind": operation_kind(p.operation_kind),
        "operation_name": p.operation_name,
        "requests": requests,
        "created_at": time(p.created_at),
        "request_state": p.request_state,
        "deadline": opt_time(p.deadline),
    })
}

fn text(v: &Value, field: &str) -> Result<String> {
    v.get(field)
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| anyhow!("`{field}` must be a string"))
}

fn opt_text(v: &Value, field: &str) -> Result<Option<String>> {
    match v.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => bail!("`{field}` must be a string or null"),
    }
}

fn kind_from(text: &str) -> Result<OperationKind> {
    Ok(match text {
        "tool" => OperationKind::Tool,
        "prompt" => OperationKind::Prompt,
        "resource" => OperationKind::Resource,
        other => bail!("`operation_kind` must be tool, prompt or resource, not {other:?}"),
    })
}

fn time_from(v: &Value, field: &str) -> Result<Option<DateTime<Utc>>> {
    match opt_text(v, field)? {
        None => Ok(None),
        Some(t) => Ok(Some(
            DateTime::parse_from_rfc3339(&t)
                .with_context(|| format!("`{field}` must be an RFC 3339 timestamp"))?
                .with_timezone(&Utc),
        )),
    }
}

fn request_from(v: &Value) -> Result<ElicitationRequest> {
    let context = RequestContext {
        meta: v.get("meta").filter(|m| !m.is_null()).cloned(),
        task: v.get("task").filter(|t| !t.is_null()).cloned(),
        server: opt_text(v, "server")?,
        operation_kind: opt_text(v, "operation_kind")?
            .map(|k| kind_from(&k))
            .transpose()?,
        operation_name: opt_text(v, "operation_name")?,
    };
    let message = text(v, "message")?;
    match text(v, "mode")?.as_str() {
        "form" => Ok(ElicitationRequest::Form(FormElicitationRequest {
            message,
            requested_schema: v
                .get("requested_schema")
                .cloned()
                .ok_or_else(|| anyhow!("a form request needs `requested_schema`"))?,
            context,
        })),
        "url" => Ok(ElicitationRequest::Url(UrlElicitationRequest {
            message,
            url: text(v, "url")?,
            elicitation_id: opt_text(v, "elicitation_id")?,
            context,
        })),
        other => bail!("`mode` must be form or url, not {other:?}"),
    }
}

/// Reads a pending round exactly as [`pending_round`] prints it.
pub fn pending_round_from(v: &Value) -> Result<PendingElicitationRound> {
    let requests = v
        .get("requests")
        .and_then(Value::as_object)
        .ok_or_else(|| anyhow!("`requests` must be an object"))?
        .iter()
        .map(|(k, r)| {
            request_from(r)
                .with_context(|| format!("request `{k}`"))
                .map(|r| (k.clone(), r))
        })
        .collect::<Result<BTreeMap<_, _>>>()?;
    Ok(PendingElicitationRound {
        round_id: text(v, "round_id")?,
        execution_id: text(v, "execution_id")?,
        logical_operation_id: text(v, "logical_operation_id")?,
        server: text(v, "server")?,
        operation_kind: kind_from(&text(v, "operation_kind")?)?,
        operation_name: text(v, "operation_name")?,
        requests,
        created_at: time_from(v, "created_at")?
            .ok_or_else(|| anyhow!("`created_at` must be a timestamp"))?,
        request_state: opt_text(v, "request_state")?,
        deadline: time_from(v, "deadline")?,
    })
}

/// One stored answer.
pub fn response(r: &ElicitationResponse) -> Value {
    json!({"action": r.action, "content": r.content})
}

/// A stored round: the pending round's fields, then its state. Lease tokens never appear;
/// `redacted` replaces the answers by their projection (and drops the idempotency keys).
pub fn record(r: &ManagedInputRecord, redacted: Option<&[RedactedResponse]>) -> Value {
    let mut v = pending_round(&r.pending);
    let object = v.as_object_mut().expect("an object");
    let t = &r.timestamps;
    let (responses, key, delivery_key) = match redacted {
        Some(_) if r.responses.is_none() => (Value::Null, Value::Null, Value::Null),
        Some(projection) => (
            Value::Object(
                projection
                    .iter()
                    .map(|p| {
                        (
                            p.request_key.clone(),
                            json!({
                                "action": p.action,
                                "content_fields": p.content_fields,
                                "content_bytes": p.content_bytes,
                            }),
                        )
                    })
                    .collect(),
            ),
            Value::Null,
            Value::Null,
        ),
        None => (
            r.responses.as_ref().map_or(Value::Null, |map| {
                Value::Object(map.iter().map(|(k, a)| (k.clone(), response(a))).collect())
            }),
            json!(r.idempotency_key),
            json!(r.delivery_idempotency_key),
        ),
    };
    let fields = json!({
        "round_index": r.round_index,
        "round_limit": r.round_limit,
        "status": r.status.as_str(),
        "owner_id": r.lease.as_ref().map(|l| l.owner_id.clone()),
        "lease_expires_at": opt_time(r.lease.as_ref().map(|l| l.expires_at)),
        "responses": responses,
        "redacted": redacted.is_some(),
        "idempotency_key": key,
        "delivery_idempotency_key": delivery_key,
        "delivery_attempts": r.delivery_attempts,
        "updated_at": time(t.updated_at),
        "response_validated_at": opt_time(t.response_validated_at),
        "delivery_started_at": opt_time(t.delivery_started_at),
        "delivered_at": opt_time(t.delivered_at),
        "resolved_at": opt_time(t.resolved_at),
        "failed_at": opt_time(t.failed_at),
        "failure_code": r.failure.as_ref().map(|f| f.code),
        "failure_message": r.failure.as_ref().map(|f| f.message.clone()),
    });
    if let Value::Object(extra) = fields {
        object.extend(extra);
    }
    v
}

/// An execution (its rounds are added by `status`).
pub fn execution(s: &ExecutionState) -> Value {
    let failure = s.outcome.as_ref().and_then(|o| o.failure.as_ref());
    json!({
        "execution_id": s.execution_id,
        "lifecycle": s.lifecycle.as_str(),
        "outcome": s.outcome.as_ref().map(|o| o.kind.as_str()),
        "failure_kind": failure.map(|f| f.kind.as_str()),
        "failure_code": failure.and_then(|f| f.code),
        "failure_message": failure.map(|f| f.message.clone()),
        "cancel_requested": s.cancel_requested,
        "created_at": time(s.created_at),
        "updated_at": time(s.updated_at),
    })
}

/// One tool call with its full output text.
pub fn tool_call(t: &m3::ToolResult) -> Value {
    json!({
        "tool": t.tool,
        "kind": operation_kind(t.kind),
        "output": t.text(),
        "is_error": t.result.get("isError").and_then(Value::as_bool).unwrap_or(false),
        "result": t.result,
    })
}

/// A finished execution's result, with every tool call and its full output text.
pub fn result(r: &ExecutionResult) -> Value {
    let failure = r.outcome.failure.as_ref();
    let calls: Vec<Value> = r.outcome.tool_results.iter().map(tool_call).collect();
    json!({
        "execution_id": r.execution_id,
        "lifecycle": "finished",
        "outcome": r.outcome.kind.as_str(),
        "failure_kind": failure.map(|f| f.kind.as_str()),
        "failure_code": failure.and_then(|f| f.code),
        "failure_message": failure.map(|f| f.message.clone()),
        "tool_calls": calls,
        "final_message": r.outcome.final_message,
    })
}
