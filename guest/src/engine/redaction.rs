//! The diagnostic projection of answers: actions, field names and sizes, never values (and no
//! digest of them: a short answer's hash is reversed by guessing).

use crate::m3::managed_input::types::{ElicitationResponse, RedactedResponse};

/// The redacted view of stored responses.
pub fn redact(responses: &[(String, ElicitationResponse)]) -> Vec<RedactedResponse> {
    responses
        .iter()
        .map(|(key, response)| {
            let parsed = response
                .content
                .as_deref()
                .and_then(|c| crate::strict_json::parse(c).ok());

            let mut content_fields: Vec<String> = parsed
                .as_ref()
                .and_then(|v| v.as_object())
                .map(|o| o.keys().cloned().collect())
                .unwrap_or_default();
            content_fields.sort();
            RedactedResponse {
                request_key: key.clone(),
                action: response.action,
                content_fields,
                content_bytes: response.content.as_ref().map_or(0, |c| c.len() as u32),
            }
        })
        .collect()
}
