//! The JSON form of an [`AgentSpec`], the specification's dict form:
//! `{"harness": "codex", "models": ["m1", "m2"]}`, or `{"harness": "scripted", "script":
//! {"steps": [..]}}`, each with an optional `"elicitation_plan": [..]`; the `codex` harness's
//! settings under `"codex"`: `binary`, `model_provider` (`name`, `base_url`, `wire_api`,
//! `requires_openai_auth`), `turn_deadline_secs`, `request_timeout_secs`,
//! `permission_policy`; the `claude-code` harness's under `"claude_code"`: `binary`, `base_url`,
//! `turn_deadline_secs`, `request_timeout_secs`, `permission_policy`, `credentials`,
//! `max_retries`. Unknown keys
//! are refused; a missing `harness` is the default one.
//! Errors name keys and types, never the values given (a plan holds answers).

use super::agent::{
    AgentSpec, ClaudeCodeCredentials, ClaudeCodeOptions, CodexCredentials, CodexOptions, Harness,
    ModelProvider, PermissionPolicy, PlanEntry, Script,
};
use crate::api::submission::ModelValidationError;
use serde::de::value::MapAccessDeserializer;
use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use std::marker::PhantomData;
use std::time::Duration;

/// Reads `T` from a JSON object only (serde would also take a struct from an array, by
/// position).
struct ObjectOnly<T>(PhantomData<T>);

impl<'de, T: Deserialize<'de>> Visitor<'de> for ObjectOnly<T> {
    type Value = T;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an object")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
        T::deserialize(MapAccessDeserializer::new(map))
    }
}

fn object<'de, D: Deserializer<'de>, T: Deserialize<'de>>(deserializer: D) -> Result<T, D::Error> {
    deserializer.deserialize_map(ObjectOnly(PhantomData))
}

fn some_object<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    deserializer: D,
) -> Result<Option<T>, D::Error> {
    object(deserializer).map(Some)
}

/// The dict form as read.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AgentSpecJson {
    #[serde(default)]
    harness: Harness,
    #[serde(default)]
    models: Vec<String>,
    #[serde(default, deserialize_with = "some_object")]
    script: Option<Script>,
    #[serde(default)]
    elicitation_plan: Option<Vec<PlanEntry>>,
    #[serde(default, deserialize_with = "some_object")]
    codex: Option<CodexJson>,
    #[serde(default, deserialize_with = "some_object")]
    claude_code: Option<ClaudeCodeJson>,
}

/// `"claude_code": {..}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ClaudeCodeJson {
    #[serde(default)]
    binary: Option<String>,
    #[serde(default)]
    base_url: Option<String>,
    #[serde(default)]
    turn_deadline_secs: Option<f64>,
    #[serde(default)]
    request_timeout_secs: Option<f64>,
    #[serde(default)]
    permission_policy: Option<PermissionPolicy>,
    /// `"user_config"` (the default), `"none"`, or a configuration directory to copy the
    /// sign-in from.
    #[serde(default)]
    credentials: Option<String>,
    #[serde(default)]
    max_retries: Option<u32>,
}

/// `"codex": {..}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CodexJson {
    #[serde(default)]
    binary: Option<String>,
    #[serde(default, deserialize_with = "some_object")]
    model_provider: Option<ModelProviderJson>,
    #[serde(default)]
    turn_deadline_secs: Option<f64>,
    #[serde(default)]
    request_timeout_secs: Option<f64>,
    #[serde(default)]
    permission_policy: Option<PermissionPolicy>,
    /// `"user_home"` (the default), `"none"`, or a Codex home directory to copy the sign-in from.
    #[serde(default)]
    credentials: Option<String>,
}

/// `"model_provider": {..}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelProviderJson {
    name: String,
    base_url: String,
    #[serde(default)]
    wire_api: Option<String>,
    #[serde(default)]
    requires_openai_auth: bool,
    #[serde(default)]
    env_key: Option<String>,
    #[serde(default)]
    http_headers: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    env_http_headers: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    max_retries: Option<u32>,
}

fn invalid(message: impl std::fmt::Display) -> ModelValidationError {
    ModelValidationError {
        message: format!("agent spec: {message}"),
    }
}

/// A positive, finite number of seconds (`key` names it, e.g. `codex.turn_deadline_secs`).
fn secs(key: &str, value: f64) -> Result<Duration, ModelValidationError> {
    if value > 0.0
        && let Ok(duration) = Duration::try_from_secs_f64(value)
    {
        return Ok(duration);
    }
    Err(invalid(format!(
        "`{key}` must be a positive, finite number of seconds"
    )))
}

fn codex_options(json: CodexJson) -> Result<CodexOptions, ModelValidationError> {
    let mut options = CodexOptions::default();
    if let Some(binary) = json.binary {
        if binary.is_empty() {
            return Err(invalid("`codex.binary` is empty"));
        }
        options.binary = binary;
    }
    if let Some(provider) = json.model_provider {
        let mut built = ModelProvider::responses(provider.name, provider.base_url);
        if let Some(wire_api) = provider.wire_api {
            built.wire_api = wire_api;
        }
        built.requires_openai_auth = provider.requires_openai_auth;
        built.env_key = provider.env_key;
        built.http_headers = provider.http_headers;
        built.env_http_headers = provider.env_http_headers;
        built.max_retries = provider.max_retries;
        options.model_provider = Some(built);
    }
    if let Some(value) = json.turn_deadline_secs {
        options.turn_deadline = secs("codex.turn_deadline_secs", value)?;
    }
    if let Some(value) = json.request_timeout_secs {
        options.request_timeout = secs("codex.request_timeout_secs", value)?;
    }
    if let Some(policy) = json.permission_policy {
        options.permission_policy = policy;
    }
    options.credentials = match json.credentials.as_deref() {
        None | Some("user_home") => CodexCredentials::UserHome,
        Some("none") => CodexCredentials::None,
        Some("") => return Err(invalid("`codex.credentials` is empty")),
        Some(dir) => CodexCredentials::From(dir.into()),
    };
    Ok(options)
}

fn claude_code_options(json: ClaudeCodeJson) -> Result<ClaudeCodeOptions, ModelValidationError> {
    let mut options = ClaudeCodeOptions::default();
    if let Some(binary) = json.binary {
        if binary.is_empty() {
            return Err(invalid("`claude_code.binary` is empty"));
        }
        options.binary = binary;
    }
    if let Some(url) = json.base_url {
        if url.is_empty() {
            return Err(invalid("`claude_code.base_url` is empty"));
        }
        options.base_url = Some(url);
    }
    if let Some(value) = json.turn_deadline_secs {
        options.turn_deadline = secs("claude_code.turn_deadline_secs", value)?;
    }
    if let Some(value) = json.request_timeout_secs {
        options.request_timeout = secs("claude_code.request_timeout_secs", value)?;
    }
    if let Some(policy) = json.permission_policy {
        options.permission_policy = policy;
    }
    options.credentials = match json.credentials.as_deref() {
        None | Some("user_config") => ClaudeCodeCredentials::UserConfig,
        Some("none") => ClaudeCodeCredentials::None,
        Some("") => return Err(invalid("`claude_code.credentials` is empty")),
        Some(dir) => ClaudeCodeCredentials::From(dir.into()),
    };
    options.max_retries = json.max_retries;
    Ok(options)
}

/// The dict form -> an [`AgentSpec`]: settings of one harness given to another are refused
/// rather than ignored (the model list is checked by `agents`).
fn spec_from(json: AgentSpecJson) -> Result<AgentSpec, ModelValidationError> {
    if json.models.iter().any(String::is_empty) {
        return Err(invalid("a model name is empty"));
    }
    let harness = json.harness.as_str();
    let codex = match (json.harness, json.codex) {
        (Harness::Codex, Some(codex)) => codex_options(codex)?,
        (_, Some(_)) => {
            return Err(invalid(format!(
                "`codex` settings are for the codex harness, not the {harness} one"
            )));
        }
        (_, None) => CodexOptions::default(),
    };
    let claude_code = match (json.harness, json.claude_code) {
        (Harness::ClaudeCode, Some(claude)) => claude_code_options(claude)?,
        (_, Some(_)) => {
            return Err(invalid(format!(
                "`claude_code` settings are for the claude-code harness, not the {harness} one"
            )));
        }
        (_, None) => ClaudeCodeOptions::default(),
    };
    if json.harness.has_models() && json.script.is_some() {
        return Err(invalid(format!(
            "a `script` is for the scripted harness; the {harness} harness's model decides the \
             calls"
        )));
    }
    Ok(AgentSpec {
        harness: json.harness,
        models: json.models,
        script: json.script.unwrap_or_default(),
        elicitation_plan: json.elicitation_plan,
        codex,
        claude_code,
    })
}

/// serde_json's message without the value it quotes: `invalid type: string "..", expected ..`
/// becomes `invalid type: string, expected ..`, and `unknown variant `..`, expected ..`
/// becomes `unknown variant, expected ..` (the value may be an answer of a plan).
fn describe(e: &serde_json::Error) -> String {
    let text = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    let message = text.strip_suffix(&suffix).unwrap_or(&text);
    let redacted = ["invalid type: ", "invalid value: ", "unknown variant "]
        .iter()
        .find_map(|head| {
            let rest = message.strip_prefix(head)?;
            let at = rest.rfind(", expected ")?;
            let kind = rest[..at].split(['"', '`']).next().unwrap_or("").trim();
            Some(format!(
                "{}{}",
                format!("{head}{kind}").trim_end(),
                &rest[at..]
            ))
        })
        .unwrap_or_else(|| message.to_string());
    if e.line() == 0 {
        redacted
    } else {
        format!("{redacted}{suffix}")
    }
}

impl AgentSpec {
    /// Reads an agent spec from its JSON form, the specification's dict form (see the module
    /// documentation): `{"harness": "codex", "models": ["m1", "m2"], "codex": {..}}`. Unknown
    /// keys, wrong types and settings for another harness are a [`ModelValidationError`] naming
    /// the key, never the value given.
    pub fn from_json(text: &str) -> Result<Self, ModelValidationError> {
        let mut deserializer = serde_json::Deserializer::from_str(text);
        let json: AgentSpecJson = object(&mut deserializer)
            .and_then(|json| deserializer.end().map(|()| json))
            .map_err(|e| invalid(describe(&e)))?;
        spec_from(json)
    }
}

/// Deserialises the dict form, with the checks of [`AgentSpec::from_json`].
impl<'de> Deserialize<'de> for AgentSpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let json: AgentSpecJson = object(deserializer)?;
        spec_from(json).map_err(|e| serde::de::Error::custom(e.message))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::response::ElicitationResponse;
    use crate::kit::agent::{PlanMatch, ScriptStep};
    use serde_json::json;

    #[test]
    fn the_dict_form_with_two_models() {
        let spec = AgentSpec::from_json(
            r#"{"harness": "codex", "models": ["model-a", "model-b"],
                "codex": {"binary": "/opt/codex", "turn_deadline_secs": 1.5,
                          "request_timeout_secs": 30, "permission_policy": "decline",
                          "model_provider": {"name": "fake",
                                             "base_url": "http://127.0.0.1:1/v1"}}}"#,
        )
        .unwrap();
        assert_eq!(spec.harness, Harness::Codex);
        assert_eq!(spec.models, ["model-a", "model-b"]);
        assert_eq!(spec.codex.binary, "/opt/codex");
        assert_eq!(spec.codex.turn_deadline, Duration::from_millis(1500));
        assert_eq!(spec.codex.request_timeout, Duration::from_secs(30));
        let provider = spec.codex.model_provider.as_ref().unwrap();
        assert_eq!(
            (
                provider.name.as_str(),
                provider.base_url.as_str(),
                provider.wire_api.as_str(),
                provider.requires_openai_auth
            ),
            ("fake", "http://127.0.0.1:1/v1", "responses", false)
        );
        assert_eq!(spec.elicitation_plan, None);
        assert_eq!(spec.script, Script::default());

        // Only the models: every setting is the default.
        let bare = AgentSpec::from_json(r#"{"harness": "codex", "models": ["m"]}"#).unwrap();
        assert_eq!(bare, AgentSpec::codex(["m"], CodexOptions::default()));
        // The same through serde, as a list.
        let list: Vec<AgentSpec> = serde_json::from_value(json!([
            {"harness": "codex", "models": ["a", "b"]},
            {"script": {"steps": []}}
        ]))
        .unwrap();
        assert_eq!(list[0].models, ["a", "b"]);
        assert_eq!(list[1].harness, Harness::default());
    }

    #[test]
    fn credentials_and_provider_keys_read_from_the_dict_form() {
        let spec = AgentSpec::from_json(
            r#"{"harness": "codex", "models": ["m"],
                "codex": {"credentials": "/home/u/.codex",
                          "model_provider": {"name": "p", "base_url": "https://h/v1",
                                             "env_key": "MY_KEY", "max_retries": 1,
                                             "env_http_headers": {"x-api-key": "API_KEY"}}}}"#,
        )
        .unwrap();
        assert_eq!(
            spec.codex.credentials,
            CodexCredentials::From("/home/u/.codex".into())
        );
        let provider = spec.codex.model_provider.unwrap();
        assert_eq!(provider.env_key.as_deref(), Some("MY_KEY"));
        assert_eq!(provider.max_retries, Some(1));
        assert_eq!(provider.env_http_headers["x-api-key"], "API_KEY");
        let none = AgentSpec::from_json(
            r#"{"harness": "codex", "models": ["m"], "codex": {"credentials": "none"}}"#,
        )
        .unwrap();
        assert_eq!(none.codex.credentials, CodexCredentials::None);
    }

    #[test]
    fn scripted_with_a_script_and_a_plan() {
        let spec = AgentSpec::from_json(
            r#"{"harness": "scripted",
                "script": {"steps": [{"tool": "shipping:book_shipment", "arguments": {"item": "book"}},
                                     {"resource": "shipping:shipping://quote"}]},
                "elicitation_plan": [{"match": {"request_key": "shipping_address"},
                                      "response": {"action": "decline"}}]}"#,
        )
        .unwrap();
        let expected = AgentSpec::scripted(
            Script::call("shipping:book_shipment", json!({"item": "book"}))
                .then_resource("shipping:shipping://quote"),
        )
        .with_plan(vec![PlanEntry {
            matcher: PlanMatch {
                request_key: Some("shipping_address".into()),
                ..PlanMatch::default()
            },
            response: ElicitationResponse::decline(),
        }]);
        assert_eq!(spec, expected);
        assert!(matches!(spec.script.steps[1], ScriptStep::Resource { .. }));
        // No harness: the default one.
        let default = AgentSpec::from_json(r#"{"script": {"steps": []}}"#).unwrap();
        assert_eq!(default.harness, Harness::Scripted);
    }

    #[test]
    fn unknown_keys_are_refused_by_name() {
        for (text, key) in [
            (
                r#"{"harness": "codex", "models": ["m"], "modle": 1}"#,
                "modle",
            ),
            (
                r#"{"harness": "codex", "models": ["m"], "codex": {"bin": "x"}}"#,
                "bin",
            ),
            (
                r#"{"harness": "codex", "models": ["m"], "codex": {"model_provider":
                    {"name": "n", "base_url": "u", "api_key": "k"}}}"#,
                "api_key",
            ),
            (r#"{"script": {"steps": [], "extra": true}}"#, "extra"),
        ] {
            let e = AgentSpec::from_json(text).unwrap_err();
            assert!(e.message.contains("unknown field"), "{e}");
            assert!(e.message.contains(&format!("`{key}`")), "{e}");
            assert!(
                e.to_string()
                    .starts_with("ModelValidationError: agent spec: ")
            );
        }
        // Through serde too.
        let e = serde_json::from_value::<AgentSpec>(json!({"harnes": "codex"})).unwrap_err();
        assert!(e.to_string().contains("unknown field `harnes`"), "{e}");
    }

    #[test]
    fn bad_types_and_values_are_refused() {
        for (text, words) in [
            (
                r#"{"harness": "codex", "models": "m1"}"#,
                &["invalid type"][..],
            ),
            (
                r#"{"harness": 3, "models": ["m"]}"#,
                &["expected value at line 1 column 13"][..],
            ),
            (
                r#"{"harness": "gpt", "models": ["m"]}"#,
                &["unknown variant", "`codex`"][..],
            ),
            (
                r#"{"harness": "codex", "models": ["m"], "codex": {"turn_deadline_secs": "1"}}"#,
                &["invalid type"][..],
            ),
            (
                r#"{"harness": "codex", "models": ["m"], "codex": {"turn_deadline_secs": 0}}"#,
                &["turn_deadline_secs", "positive"][..],
            ),
            (
                r#"{"harness": "codex", "models": ["m"], "codex": {"request_timeout_secs": -1}}"#,
                &["request_timeout_secs", "positive"][..],
            ),
            (r#"{"harness": "codex", "models": [""]}"#, &["empty"][..]),
            (
                r#"{"harness": "codex", "models": ["m"], "script": {"steps": []}}"#,
                &["script"][..],
            ),
            (r#"{"harness": "scripted", "codex": {}}"#, &["codex"][..]),
            (
                r#"["codex"]"#,
                &["invalid type: sequence, expected an object"][..],
            ),
            (
                r#"{"harness": "codex", "models": ["m"], "codex": ["/bin/codex"]}"#,
                &["invalid type: sequence, expected an object"][..],
            ),
            (
                r#"{"harness": "codex", "models": ["m"], "codex": {"model_provider": ["n", "u"]}}"#,
                &["invalid type: sequence, expected an object"][..],
            ),
            (
                r#"{"script": [[]]}"#,
                &["invalid type: sequence, expected an object"][..],
            ),
            (
                r#"{"harness": "codex", "harness": "codex"}"#,
                &["duplicate field"][..],
            ),
            (r#"{"models": ["m"]} {}"#, &["trailing characters"][..]),
            (r#"{"harness": "codex""#, &["EOF"][..]),
        ] {
            let e = AgentSpec::from_json(text).expect_err(text);
            for word in words {
                assert!(e.message.contains(word), "{text}: {e}");
            }
        }
    }

    #[test]
    fn errors_never_quote_the_values_given() {
        let secret = "Hunter2-1-Main-Street";
        for text in [
            format!(r#"{{"elicitation_plan": [{{"match": {{}}, "response": "{secret}"}}]}}"#),
            format!(r#"{{"elicitation_plan": "{secret}"}}"#),
            format!(r#"{{"script": "{secret}"}}"#),
        ] {
            let e = AgentSpec::from_json(&text).unwrap_err();
            assert!(!e.message.contains(secret), "{e}");
            assert!(e.message.contains("invalid type: string, expected"), "{e}");
        }
        let text = format!(
            r#"{{"elicitation_plan": [{{"match": {{}}, "response": {{"action": "{secret}"}}}}]}}"#
        );
        let e = AgentSpec::from_json(&text).unwrap_err();
        assert!(!e.message.contains(secret), "{e}");
        assert!(
            e.message
                .contains("unknown variant, expected one of `accept`"),
            "{e}"
        );
        let e = AgentSpec::from_json(r#"{"models": [1]}"#).unwrap_err();
        assert!(
            e.message
                .contains("invalid type: integer, expected a string"),
            "{e}"
        );
    }

    #[test]
    fn the_claude_code_harness_reads_its_own_settings_and_refuses_another_s() {
        let spec = AgentSpec::from_json(
            r#"{"harness": "claude-code", "models": ["claude-sonnet-4-5"],
                "claude_code": {"binary": "/opt/claude", "base_url": "http://127.0.0.1:9",
                    "turn_deadline_secs": 90, "credentials": "none", "max_retries": 1}}"#,
        )
        .unwrap();
        assert_eq!(spec.harness, Harness::ClaudeCode);
        assert_eq!(spec.claude_code.binary, "/opt/claude");
        assert_eq!(
            spec.claude_code.base_url.as_deref(),
            Some("http://127.0.0.1:9")
        );
        assert_eq!(spec.claude_code.turn_deadline, Duration::from_secs(90));
        assert_eq!(spec.claude_code.credentials, ClaudeCodeCredentials::None);
        assert_eq!(spec.claude_code.max_retries, Some(1));
        let alias = AgentSpec::from_json(r#"{"harness": "claude_code", "models": ["m"]}"#).unwrap();
        assert_eq!(alias.harness, Harness::ClaudeCode);
        for (json, says) in [
            (
                r#"{"harness": "codex", "models": ["m"], "claude_code": {}}"#,
                "not the codex one",
            ),
            (
                r#"{"harness": "claude-code", "models": ["m"], "codex": {}}"#,
                "not the claude-code one",
            ),
            (
                r#"{"harness": "claude-code", "models": ["m"], "script": {"steps": []}}"#,
                "the claude-code harness's model decides",
            ),
            (
                r#"{"harness": "claude-code", "models": ["m"], "claude_code": {"turn_deadline_secs": 0}}"#,
                "`claude_code.turn_deadline_secs`",
            ),
        ] {
            let e = AgentSpec::from_json(json).unwrap_err();
            assert!(e.message.contains(says), "{json}: {}", e.message);
        }
    }
}
