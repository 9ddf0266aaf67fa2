//! The stored format: the documents this component keeps in the host's rows, as types of its
//! own, apart from the WIT contract.
//!
//! The WIT types are the interface of one release; a stored document must be read by every later
//! one. So every document is written from the types here (explicit field names, a `format`
//! number) and converted to and from the WIT types in one place per document
//! ([`round`], [`execution`]).
//!
//! The rule for changing it (docs/decisions/0049-the-stored-format.md):
//! - Adding an optional field (`#[serde(default)]`) needs no new format: older documents read
//!   with the default, and older releases never see it (a database is not shared across
//!   downgrades).
//! - Renaming, removing or retyping a field, or changing what a value means, is a new format:
//!   raise [`FORMAT`], keep the old types as they are in a module of their own, and convert an
//!   old document in `upgrade` of the document's file. The committed fixture database
//!   (`tests/fixtures/`) must still read unchanged.
//! - A document of a format newer than [`FORMAT`] is refused (`corrupt-record`, naming the
//!   format), never guessed at.
//!
//! # Files
//!
//! The stored format, types of the component's own apart from the WIT contract.
//!
//! - `mod.rs`: `FORMAT`, the `Document` trait, `decode` (one pass, then the `format`: absent is 1,
//!   newer is refused by name) and `encode`, and the rule for changing the format.
//! - `round.rs`: `RoundDocument` and its conversion to and from `managed-input-record`.
//! - `execution.rs`: `ExecutionDocument` (submission, cancel flag, outcome, what the worker
//!   started, the lease token; the tool results an older build kept in it) and its conversions, and
//!   `ToolResultItem`, one tool result in a row of its own (an execution item of kind
//!   `tool-result`).
//! - `values.rs`: timestamps, operation kinds and failure codes shared by both.

pub mod execution;
pub mod round;
pub mod values;

/// The format this release writes. Documents without a `format` field were written before it
/// existed, in format 1.
pub const FORMAT: u32 = 1;

/// The `format` of a document that has none.
pub(crate) fn first_format() -> u32 {
    1
}

/// Why a stored document could not be read.
#[derive(Debug, Clone, PartialEq)]
pub enum Unreadable {
    /// It is not a document of any format this release knows.
    Malformed,
    /// It was written in a newer format than this release reads.
    Newer(u32),
}

impl Unreadable {
    /// A message naming the subject (never the document's content).
    pub fn describe(&self, subject: &str) -> String {
        match self {
            Unreadable::Malformed => format!("{subject}: stored document does not decode"),
            Unreadable::Newer(format) => format!(
                "{subject}: stored document is in format {format}, newer than this release \
                 reads (up to {FORMAT})"
            ),
        }
    }
}

#[derive(serde::Deserialize)]
struct FormatOnly {
    #[serde(default = "first_format")]
    format: u32,
}

/// A stored document: it says which format it was written in.
pub trait Document: serde::de::DeserializeOwned {
    /// The `format` it was read with (absent: 1).
    fn format(&self) -> u32;
}

/// A format this release reads, or why not.
fn readable(format: u32) -> Result<(), Unreadable> {
    match format {
        0 => Err(Unreadable::Malformed),
        f if f > FORMAT => Err(Unreadable::Newer(f)),
        _ => Ok(()),
    }
}

/// Decodes a stored document in one pass, then checks its format (a newer one is refused by
/// name; an older one would be upgraded here). A document that does not decode is read again
/// for its `format` alone, so that one of a newer format with fields this release does not know
/// is still refused by name rather than as malformed.
pub fn decode<T: Document>(text: &str) -> Result<T, Unreadable> {
    match serde_json::from_str::<T>(text) {
        // Format 1 is the only one so far: no upgrade step yet.
        Ok(document) => readable(document.format()).map(|()| document),
        Err(_) => {
            let FormatOnly { format } =
                serde_json::from_str(text).map_err(|_| Unreadable::Malformed)?;
            readable(format)?;
            Err(Unreadable::Malformed)
        }
    }
}

/// Encodes a document for storage.
pub fn encode<T: serde::Serialize>(document: &T) -> Result<String, Unreadable> {
    serde_json::to_string(document).map_err(|_| Unreadable::Malformed)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::execution::ExecutionDocument;
    use super::round::RoundDocument;
    use super::*;
    use crate::exports::m3::managed_input::runtime as rt;
    use crate::m3::managed_input::types as wit;

    fn ts(seconds: i64) -> wit::Timestamp {
        wit::Timestamp {
            seconds,
            nanoseconds: 7,
        }
    }

    fn context() -> wit::RequestContext {
        wit::RequestContext {
            meta: Some("{\"m\":1}".into()),
            task: Some("{\"t\":2}".into()),
            server: Some("other".into()),
            operation_kind: Some(wit::OperationKind::Resource),
            operation_name: Some("file:///a".into()),
        }
    }

    /// A record using every field and variant.
    /// A round with every field set (the other tests of the component use it too).
    pub(crate) fn record() -> wit::ManagedInputRecord {
        wit::ManagedInputRecord {
            pending: wit::PendingRound {
                round_id: "r1".into(),
                execution_id: "e1".into(),
                logical_operation_id: "op".into(),
                server: "shipping".into(),
                operation_kind: wit::OperationKind::Prompt,
                operation_name: "ask".into(),
                requests: vec![
                    (
                        "a".into(),
                        wit::ElicitationRequest::Form(wit::FormRequest {
                            message: "m".into(),
                            requested_schema: "{}".into(),
                            context: context(),
                        }),
                    ),
                    (
                        "b".into(),
                        wit::ElicitationRequest::Url(wit::UrlRequest {
                            message: "m".into(),
                            url: "https://example.com".into(),
                            elicitation_id: Some("el".into()),
                            context: context(),
                        }),
                    ),
                ],
                created_at: ts(1),
                request_state: Some("state".into()),
                deadline: Some(ts(9)),
            },
            round_index: 1,
            round_limit: 3,
            status: wit::Status::DeliveryStarted,
            lease: Some(wit::Lease {
                owner_id: "w".into(),
                lease_token: "t".into(),
                expires_at: ts(5),
            }),
            responses: Some(vec![
                (
                    "a".into(),
                    wit::ElicitationResponse {
                        action: wit::ElicitationAction::Accept,
                        content: Some("{\"x\":1}".into()),
                    },
                ),
                (
                    "b".into(),
                    wit::ElicitationResponse {
                        action: wit::ElicitationAction::Decline,
                        content: None,
                    },
                ),
            ]),
            idempotency_key: Some("k".into()),
            delivery_idempotency_key: Some("d".into()),
            harness: wit::HarnessMetadata {
                session_id: Some("s".into()),
                resume_token: Some("r".into()),
                turn_id: Some("u".into()),
            },
            operation_parameters: "{\"p\":1}".into(),
            delivery_attempts: 1,
            timestamps: wit::LifecycleTimestamps {
                created_at: ts(1),
                updated_at: ts(4),
                response_validated_at: Some(ts(2)),
                delivery_started_at: Some(ts(3)),
                delivered_at: None,
                resolved_at: None,
                failed_at: None,
            },
            failure: Some(wit::Failure {
                code: wit::FailureCode::RequestWithdrawn,
                message: "why".into(),
            }),
        }
    }

    /// Before documents had types of their own, the component stored `serde_json` of the WIT
    /// types, with no `format`: those documents are format 1 and read unchanged.
    #[test]
    fn documents_written_before_the_format_field_read_as_format_1() {
        let old = serde_json::to_string(&record()).unwrap();
        assert!(!old.contains("\"format\""));
        let document: RoundDocument = decode(&old).unwrap();
        assert_eq!(document.format, 1);
        assert_eq!(wit::ManagedInputRecord::from(document.clone()), record());
        // And the new writer writes the same document, with its format.
        let new = encode(&RoundDocument::from(&record())).unwrap();
        let mut value: serde_json::Value = serde_json::from_str(&new).unwrap();
        assert_eq!(value["format"], 1);
        value.as_object_mut().unwrap().remove("format");
        assert_eq!(
            value,
            serde_json::from_str::<serde_json::Value>(&old).unwrap()
        );
    }

    #[test]
    fn an_execution_document_round_trips_through_its_stored_form() {
        let spec = rt::ExecutionSpec {
            harness: "codex".into(),
            codex: Some(rt::CodexSettings {
                binary: "/bin/codex".into(),
                model_provider: Some(rt::ModelProvider {
                    name: "p".into(),
                    base_url: "http://127.0.0.1:1".into(),
                    wire_api: "responses".into(),
                    requires_openai_auth: true,
                    env_key: Some("KEY".into()),
                    http_headers: vec![("x-team".into(), "qa".into())],
                    env_http_headers: vec![("x-api-key".into(), "API_KEY".into())],
                    max_retries: Some(1),
                }),
                credentials_from: Some("/home/u/.codex".into()),
                permission_policy: rt::PermissionPolicy::Decline,
                turn_deadline_ms: 5,
                request_timeout_ms: 6,
            }),
            claude_code: Some(rt::ClaudeCodeSettings {
                binary: "/bin/claude".into(),
                base_url: Some("http://127.0.0.1:2".into()),
                credentials_from: Some("/home/u/.claude".into()),
                permission_policy: rt::PermissionPolicy::Decline,
                turn_deadline_ms: 7,
                request_timeout_ms: 8,
                max_retries: Some(0),
            }),
            model: Some("m".into()),
            prompt: "p".into(),
            script: "{}".into(),
            server: rt::ServerBinding {
                name: "s".into(),
                command: "/bin/s".into(),
                args: vec!["--x".into()],
                cwd: Some("/tmp".into()),
                era: rt::EraChoice::Modern,
                env_names: vec!["KEY".into()],
                url: None,
                header_names: Vec::new(),
                delivery_timeout_ms: None,
            },
            tools: vec!["s:t".into()],
            human_input: rt::HumanInputMode::Fail,
            plan: Some("[]".into()),
            round_limit: 2,
            lease_ttl_ms: 100,
            lease_renew_ms: 25,
            round_deadline_ms: Some(9),
        };
        let outcome = rt::ExecutionOutcome {
            kind: rt::OutcomeKind::Failed,
            failure: Some(rt::ExecutionFailure {
                kind: rt::FailureKind::OperationTimeout,
                code: Some(wit::FailureCode::DeadlineExceeded),
                message: "late".into(),
            }),
            tool_results: vec![rt::ToolResult {
                tool: "s:t".into(),
                result: "{}".into(),
                kind: Some(wit::OperationKind::Tool),
            }],
            final_message: Some("done".into()),
        };
        let document = ExecutionDocument {
            format: FORMAT,
            spec: (&spec).into(),
            cancel_requested: true,
            tool_results: outcome.tool_results.iter().map(Into::into).collect(),
            outcome: Some((&outcome).into()),
            spawned: None,
            lease_token: Some("t".into()),
            events: vec![],
            events_dropped: 0,
            stderr_tail: None,
        };
        let back: ExecutionDocument = decode(&encode(&document).unwrap()).unwrap();
        assert_eq!(back, document);
        assert_eq!(rt::ExecutionSpec::from(back.spec), spec);
        assert_eq!(rt::ExecutionOutcome::from(back.outcome.unwrap()), outcome);
        // Older documents had no lease token and no format.
        let mut old: serde_json::Value = serde_json::from_str(&encode(&document).unwrap()).unwrap();
        let object = old.as_object_mut().unwrap();
        object.remove("format");
        object.remove("lease_token");
        let read: ExecutionDocument = decode(&old.to_string()).unwrap();
        assert_eq!((read.format, read.lease_token), (1, None));
    }

    #[test]
    fn a_newer_or_unknown_format_is_refused_by_name() {
        let mut value: serde_json::Value =
            serde_json::from_str(&encode(&RoundDocument::from(&record())).unwrap()).unwrap();
        value["format"] = serde_json::json!(FORMAT + 1);
        let refused = decode::<RoundDocument>(&value.to_string()).unwrap_err();
        assert_eq!(refused, Unreadable::Newer(FORMAT + 1));
        assert!(
            refused
                .describe("round r1")
                .contains("newer than this release")
        );
        value["format"] = serde_json::json!(0);
        assert_eq!(
            decode::<RoundDocument>(&value.to_string()).unwrap_err(),
            Unreadable::Malformed
        );
        assert_eq!(
            decode::<RoundDocument>("{\"format\":1}").unwrap_err(),
            Unreadable::Malformed
        );
        // A newer format whose fields this release does not know is refused by name as well,
        // not as malformed (the one-pass decode fails; the format is read on its own).
        assert_eq!(
            decode::<RoundDocument>(&format!("{{\"format\":{},\"shape\":2}}", FORMAT + 1))
                .unwrap_err(),
            Unreadable::Newer(FORMAT + 1)
        );
        assert_eq!(
            decode::<RoundDocument>("not json").unwrap_err(),
            Unreadable::Malformed
        );
    }

    /// The record cache (`record_cache`) keeps a written record as what its document decodes
    /// to: that holds only while the stored format loses nothing of a record.
    #[test]
    fn a_round_document_decodes_to_the_record_it_was_encoded_from() {
        let text = encode(&RoundDocument::from(&record())).unwrap();
        let read: RoundDocument = decode(&text).unwrap();
        assert_eq!(wit::ManagedInputRecord::from(read), record());
    }
}
