//! Elicitation plans: an agent's ordered answers for human input mode `fail`.
//!
//! A plan is a JSON array of entries `{"match": {"server"?, "operation_name"?, "request_key"?},
//! "response": {"action", "content"?}}`. For each request key of a round, the first unused
//! entry whose given match fields all equal the round's answers it; a round is answered by the
//! plan only when every key finds an entry. The answer then goes through the same validation as
//! any other (`submit-responses`).

use serde_json::{Map, Value};

/// One plan entry.
#[derive(Debug, Clone, PartialEq)]
struct Entry {
    server: Option<String>,
    operation_name: Option<String>,
    request_key: Option<String>,
    response: Value,
}

/// A plan with the entries already used.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    entries: Vec<Entry>,
    used: Vec<bool>,
}

/// Why a plan is not usable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanError(pub String);

fn optional_text(object: &Map<String, Value>, key: &str) -> Result<Option<String>, PlanError> {
    match object.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(PlanError(format!(
            "plan match field `{key}` must be a string"
        ))),
    }
}

impl Plan {
    /// Parses a plan (JSON text of an array of entries).
    pub fn parse(text: &str) -> Result<Self, PlanError> {
        let value = crate::strict_json::parse(text)
            .map_err(|_| PlanError("the elicitation plan is not valid JSON".into()))?;
        let Value::Array(items) = value else {
            return Err(PlanError(
                "the elicitation plan must be a JSON array".into(),
            ));
        };
        let mut entries = Vec::with_capacity(items.len());
        for (i, item) in items.into_iter().enumerate() {
            let Value::Object(mut object) = item else {
                return Err(PlanError(format!("plan entry {i} must be an object")));
            };
            let matcher = match object.remove("match") {
                None => Map::new(),
                Some(Value::Object(m)) => m,
                Some(_) => {
                    return Err(PlanError(format!(
                        "plan entry {i}: `match` must be an object"
                    )));
                }
            };
            if let Some(unknown) = matcher
                .keys()
                .find(|k| !["server", "operation_name", "request_key"].contains(&k.as_str()))
            {
                return Err(PlanError(format!(
                    "plan entry {i}: unknown match field `{unknown}`"
                )));
            }
            let Some(response @ Value::Object(_)) = object.remove("response") else {
                return Err(PlanError(format!(
                    "plan entry {i} needs a `response` object"
                )));
            };
            if let Some(unknown) = object.keys().next() {
                return Err(PlanError(format!(
                    "plan entry {i}: unknown field `{unknown}`"
                )));
            }
            entries.push(Entry {
                server: optional_text(&matcher, "server")?,
                operation_name: optional_text(&matcher, "operation_name")?,
                request_key: optional_text(&matcher, "request_key")?,
                response,
            });
        }
        let used = vec![false; entries.len()];
        Ok(Self { entries, used })
    }

    /// The answers for a round of `server`/`operation_name` with these request keys, as a JSON
    /// response map, marking the entries used; `None` (nothing used) unless every key matches.
    pub fn answer(
        &mut self,
        server: &str,
        operation_name: &str,
        keys: &[String],
    ) -> Option<String> {
        let mut chosen = Vec::with_capacity(keys.len());
        let mut map = Map::new();
        for key in keys {
            let found = self.entries.iter().enumerate().find(|(i, e)| {
                !self.used[*i]
                    && !chosen.contains(i)
                    && e.server.as_deref().is_none_or(|s| s == server)
                    && e.operation_name
                        .as_deref()
                        .is_none_or(|o| o == operation_name)
                    && e.request_key.as_deref().is_none_or(|k| k == key)
            })?;
            chosen.push(found.0);
            map.insert(key.clone(), found.1.response.clone());
        }
        for i in chosen {
            self.used[i] = true;
        }
        Some(Value::Object(map).to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_unused_matching_entry_answers_each_key() {
        let mut plan = Plan::parse(
            r#"[{"match": {"request_key": "shipping_address"}, "response": {"action": "decline"}},
                {"match": {}, "response": {"action": "cancel"}}]"#,
        )
        .unwrap();
        let keys = vec!["shipping_address".to_string()];
        assert_eq!(
            plan.answer("shipping", "book_shipment", &keys).unwrap(),
            r#"{"shipping_address":{"action":"decline"}}"#
        );
        assert_eq!(
            plan.answer("shipping", "book_shipment", &keys).unwrap(),
            r#"{"shipping_address":{"action":"cancel"}}"#
        );
        assert_eq!(plan.answer("shipping", "book_shipment", &keys), None);
    }

    #[test]
    fn a_round_is_answered_only_when_every_key_matches() {
        let mut plan = Plan::parse(
            r#"[{"match": {"request_key": "a", "server": "s"}, "response": {"action": "decline"}}]"#,
        )
        .unwrap();
        let keys = vec!["a".to_string(), "b".to_string()];
        assert_eq!(plan.answer("s", "t", &keys), None);
        assert!(plan.answer("other", "t", &keys[..1]).is_none());
        assert!(plan.answer("s", "t", &keys[..1]).is_some(), "still unused");
    }

    #[test]
    fn malformed_plans_are_refused() {
        for bad in [
            "{}",
            "[1]",
            r#"[{"response": 1}]"#,
            r#"[{"match": {"tool": "x"}, "response": {}}]"#,
            r#"[{"match": {}, "response": {}, "extra": 1}]"#,
            r#"[{"match": {"server": 1}, "response": {}}]"#,
        ] {
            assert!(Plan::parse(bad).is_err(), "{bad}");
        }
    }
}
