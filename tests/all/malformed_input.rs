//! Generated malformed input (reliability catalogue item 5, issue 6), against a real store on a
//! real SQLite file.
//!
//! `malformed_submissions_are_refused_and_leave_every_round_pending`: 10,400 generated submissions
//! per run (times `M3_SOAK`), 2,600 in each of four categories, sent as raw JSON text through
//! `submit_responses_json` to three pending rounds (the address form, the every-kind form and a
//! URL request) on one store object:
//! 1. invalid JSON text: truncation, garbage characters, trailing commas, unquoted and
//!    single-quoted keys, NaN/Infinity and other non-JSON numbers, exponents outside a 64-bit
//!    integer (`1e99999999999999999999`; `1e400` and 400-digit integers are read exactly),
//!    duplicate keys at every depth (also spelled with escapes),
//!    nesting past the parser's depth limit (up to 200,000 levels), comments, trailing data, lone
//!    surrogates, raw control characters; about 1% of them (and the deepest nestings) are over
//!    the store's 1 MiB edge limit, which the host refuses before the component;
//! 2. wrong shapes: not an object, wrong/missing/extra request keys, values that are not objects,
//!    unknown fields in a response, unknown or missing actions, wrong types for `action` and
//!    `content`, and empty, over-long or control-character round ids and idempotency keys through
//!    the API (with otherwise valid answers);
//! 3. schema violations: one to three per answer among type errors for every field kind, bounds,
//!    lengths (in characters), formats, enum and `oneOf` misses, multi-select item and count
//!    violations, missing required fields and unknown fields;
//! 4. action/content mismatches: content on decline and cancel, content on a URL accept, a form
//!    accept without content.
//!
//! Every 200th case of each category (13 of its 2,600) is instead a large answer of 512 KiB to
//! just under the 1 MiB edge limit, which the component must still refuse with a typed error
//! within its memory and CPU budgets: ~100,000 members or items, or one very long string, that
//! is invalid at its very end, has many extra request keys or unknown fields, a huge `action`,
//! a multi-select with hundreds of thousands of invalid items, or not-allowed content (the
//! variant and the multi-select's item type rotate, so every run holds each one).
//!
//! Every case must be a `ManagedInputValidationError` with the code its generator expects (the
//! schema violations must also name the request key and one of the violated fields). After every
//! case the three rows are compared byte for byte with their snapshot (raw SQLite columns); every
//! 100 cases and at the end `get_round` and `redacted_responses` must show the same pending
//! records with no answer. At the end a valid answer with an idempotency key used by the cases is
//! accepted on each round (the keys were never consumed). A control group of generated valid
//! answers is accepted by the same rules, so the generators' bases are valid and the mutations are
//! what is refused.
//!
//! Whether a case reached the component is measured, not assumed: the store's clock counts its
//! calls, and the component reads the clock inside the transaction it opens for a submission, so
//! a case with valid ids reached the component exactly when the count moved. Cases with bad ids
//! are refused by the component's id checks before it opens a transaction; their codes are ones
//! the host never produces. Only answers over the edge limit are refused by the host (clock
//! untouched, the host's limit in the message).
//!
//! `generated_hostile_schemas_are_refused_at_create_round_in_bounded_time`: 1,200 generated hostile
//! `requestedSchema`s per run (times `M3_SOAK`): nested objects and arrays, nesting past the
//! parser's depth limit, `$ref`/`$defs`/`$dynamicRef`, enums over 1,024 choices, texts over
//! 16 KiB (a few over the component's 256 KiB schema limit and over the host's 4 MiB round
//! limit), keywords and formats outside the MCP form subset, invalid values for allowed keywords,
//! non-object `properties` and property schemas, some beside a valid request in the same round.
//! Each is refused with a typed validation error in bounded time (`unsupported_schema`;
//! `payload_too_large` over a size limit; `malformed_json` for nesting past the component
//! parser's 128 levels, which is how the component reports it), nothing is stored, and a refused
//! round id is not consumed.
//!
//! Printed (`--nocapture`): the seed with the command that replays it (`M3_SEED`), cases per
//! category and per generator kind, the codes seen, how many cases reached the component and how
//! many the host's edge refused (with the share per category), the slowest case, cases per
//! second and the total time.

use m3::{
    Clock, ElicitationRequest, ErrorCode, ManagedInputError, ManagedInputRecord,
    ManagedInputStatus, ManagedInputStore, ManualClock, NewRound, Policy, SqliteManagedInputStore,
    StoreOptions, Synchronous,
};
use m3_tests::replay::RandomTest;
use m3_tests::rng::Rng;
use m3_tests::{TempDb, address_schema, claim, every_kind_schema, open, soak_factor, t0};
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Submissions generated per category and run (times `M3_SOAK`).
const CASES_PER_CATEGORY: usize = 2_600;
/// Hostile schemas generated per run (times `M3_SOAK`).
const HOSTILE_SCHEMAS: usize = 1_200;
/// How often the records are read back through the component (raw rows are compared every case).
const RECORD_CHECK_EVERY: usize = 100;
/// Longest any single case may take: far above the component's CPU budget, so only a hang fails.
const CASE_TIME_LIMIT: Duration = Duration::from_secs(5);
const KIB: usize = 1024;
const MIB: usize = 1024 * 1024;

// ---------------------------------------------------------------------------------------------
// Seeded generation
// ---------------------------------------------------------------------------------------------

const TEXT_CHARS: &[char] = &[
    'a', 'b', 'c', 'x', 'y', 'z', 'A', 'M', 'Z', '0', '7', '9', ' ', '-', '.', '\'', '"', '\\',
    '/', 'é', 'ß', '日', '本', '😀', '\u{a0}',
];
const ALNUM: &[char] = &[
    'a', 'b', 'c', 'd', 'e', 'k', 'm', 'q', 'r', 's', 'x', 'z', '0', '1', '4', '7', '9',
];

/// `min..=max` characters (not bytes) drawn from `chars`.
fn text_of(rng: &mut Rng, chars: &[char], min: usize, max: usize) -> String {
    let n = rng.range(min, max);
    (0..n).map(|_| rng.pick(chars)).collect()
}

fn text(rng: &mut Rng, min: usize, max: usize) -> String {
    text_of(rng, TEXT_CHARS, min, max)
}

fn alnum(rng: &mut Rng, min: usize, max: usize) -> String {
    text_of(rng, ALNUM, min, max)
}

/// JSON text of a string.
fn quote(s: &str) -> String {
    Value::String(s.to_owned()).to_string()
}

/// Optional insignificant whitespace (mostly none).
fn ws(rng: &mut Rng) -> &'static str {
    match rng.below(16) {
        0 => " ",
        1 => "\n",
        2 => "\t",
        3 => "\r\n  ",
        _ => "",
    }
}

/// An object from already-encoded member keys and values, in the given order.
fn object_text(members: &[(String, String)], rng: &mut Rng) -> String {
    let mut out = String::from("{");
    for (i, (key, value)) in members.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(ws(rng));
        out.push_str(key);
        out.push_str(ws(rng));
        out.push(':');
        out.push_str(ws(rng));
        out.push_str(value);
        out.push_str(ws(rng));
    }
    out.push('}');
    out
}

/// A value as compact or pretty JSON text.
fn value_text(value: &Value, rng: &mut Rng) -> String {
    if rng.chance(25) {
        serde_json::to_string_pretty(value).expect("a Value encodes")
    } else {
        value.to_string()
    }
}

/// An `ElicitationResponse`-like object: `action` and `content` (raw text, each optional) and
/// `extra` members, in random order.
fn response_text(
    action: Option<String>,
    content: Option<String>,
    extra: Vec<(String, String)>,
    rng: &mut Rng,
) -> String {
    let mut members = Vec::new();
    if let Some(action) = action {
        members.push((quote("action"), action));
    }
    if let Some(content) = content {
        members.push((quote("content"), content));
    }
    members.extend(extra);
    rng.shuffle(&mut members);
    object_text(&members, rng)
}

/// A response map with one request key.
fn map_text(key: &str, response: String, rng: &mut Rng) -> String {
    object_text(&[(quote(key), response)], rng)
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Any JSON value that is not of type `kind` (integers count as numbers).
fn other_type(rng: &mut Rng, kind: &str) -> Value {
    loop {
        let value = match rng.below(8) {
            0 => json!(text(rng, 0, 8)),
            1 => json!(rng.range(0, 1000) as i64 - 500),
            2 => json!(rng.range(0, 100) as f64 + 0.5),
            3 => json!(rng.chance(50)),
            4 => Value::Null,
            5 => json!([text(rng, 0, 4)]),
            6 => json!({ "k": rng.below(10) }),
            _ => json!(["true", 1, null]),
        };
        if json_type(&value) != kind {
            return value;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The pending rounds and their valid answers
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Target {
    Address,
    EveryKind,
    Url,
}

const TARGETS: [Target; 3] = [Target::Address, Target::EveryKind, Target::Url];
const FORMS: [Target; 2] = [Target::Address, Target::EveryKind];
const ACTIONS: [&str; 3] = ["accept", "decline", "cancel"];

impl Target {
    fn round_id(self) -> &'static str {
        match self {
            Target::Address => "malformed-address",
            Target::EveryKind => "malformed-every-kind",
            Target::Url => "malformed-url",
        }
    }

    fn request_key(self) -> &'static str {
        match self {
            Target::Address => "shipping_address",
            Target::EveryKind => "profile",
            Target::Url => "login",
        }
    }

    fn is_form(self) -> bool {
        self != Target::Url
    }

    fn new_round(self) -> NewRound {
        let request = match self {
            Target::Address => ElicitationRequest::form("Where should we ship?", address_schema()),
            Target::EveryKind => ElicitationRequest::form("Who are you?", every_kind_schema()),
            Target::Url => ElicitationRequest::url("Sign in", "https://example.com/authorize"),
        };
        NewRound::new(
            self.round_id(),
            "exec-malformed",
            "malformed-server",
            "tool",
            BTreeMap::from([(self.request_key().to_string(), request)]),
        )
        .owned_by(claim("worker-1", Duration::from_secs(3600)))
    }

    /// The properties of the form, the required ones first.
    fn fields(self) -> &'static [&'static str] {
        match self {
            Target::Address => &["street", "city"],
            Target::EveryKind => &[
                "name", "age", "email", "site", "day", "at", "score", "agree", "color", "size",
                "tags",
            ],
            Target::Url => &[],
        }
    }

    fn required(self) -> &'static [&'static str] {
        &self.fields()[..2.min(self.fields().len())]
    }
}

/// Valid form content for `target` (a form), optional fields left out at random.
fn valid_content(target: Target, rng: &mut Rng) -> Map<String, Value> {
    let mut content = Map::new();
    match target {
        Target::Address | Target::Url => {
            content.insert("street".into(), json!(text(rng, 1, 100)));
            content.insert("city".into(), json!(text(rng, 1, 40)));
        }
        Target::EveryKind => {
            content.insert("name".into(), json!(text(rng, 2, 10)));
            content.insert("age".into(), json!(rng.range(0, 150)));
            for field in &Target::EveryKind.fields()[2..] {
                if rng.chance(25) {
                    continue;
                }
                let value = match *field {
                    "email" => json!(format!("{}@example.com", alnum(rng, 1, 12))),
                    "site" => json!(format!("https://example.com/{}", alnum(rng, 0, 12))),
                    "day" => json!(valid_date(rng)),
                    "at" => {
                        let date = valid_date(rng);
                        let fraction = rng.pick(&["", ".5", ".123456"]);
                        let offset = rng.pick(&["Z", "+05:30", "-08:00"]);
                        json!(format!(
                            "{date}T{:02}:{:02}:{:02}{fraction}{offset}",
                            rng.range(0, 23),
                            rng.range(0, 59),
                            rng.range(0, 59)
                        ))
                    }
                    "score" => json!(0.5 + 0.125 * rng.range(0, 72) as f64),
                    "agree" => json!(rng.chance(50)),
                    "color" => json!(rng.pick(&["red", "green"])),
                    "size" => json!(rng.pick(&["s", "l"])),
                    _ => {
                        let n = rng.range(1, 2);
                        json!(
                            (0..n)
                                .map(|_| rng.pick(&["a", "b", "c"]))
                                .collect::<Vec<_>>()
                        )
                    }
                };
                content.insert((*field).into(), value);
            }
        }
    }
    content
}

fn valid_date(rng: &mut Rng) -> String {
    format!(
        "{:04}-{:02}-{:02}",
        rng.range(1970, 2100),
        rng.range(1, 12),
        rng.range(1, 28)
    )
}

/// Content text that is never null: mostly a form's content, sometimes another JSON value.
fn some_content(target: Target, rng: &mut Rng) -> String {
    let form = if target.is_form() {
        target
    } else {
        Target::Address
    };
    match rng.below(10) {
        0..=3 => value_text(&Value::Object(valid_content(form, rng)), rng),
        4 => "{}".into(),
        5 => "[]".into(),
        6 => quote(&text(rng, 0, 12)),
        7 => rng.pick(&["0", "false", "true", "-1.5", "\"null\""]).into(),
        8 => json!([valid_content(form, rng)]).to_string(),
        _ => json!({"nested": {"deeper": [1, {"x": "y"}]}}).to_string(),
    }
}

/// A valid `ElicitationResponse` for `target`, as text.
fn valid_response(target: Target, rng: &mut Rng) -> String {
    let action = if rng.chance(60) {
        "accept"
    } else {
        rng.pick(&ACTIONS)
    };
    let content = if target.is_form() && action == "accept" {
        Some(value_text(&Value::Object(valid_content(target, rng)), rng))
    } else if rng.chance(20) {
        Some("null".to_string()) // `content: null` is the absence of content
    } else {
        None
    };
    response_text(Some(quote(action)), content, Vec::new(), rng)
}

/// A valid response map for `target`, as text.
fn valid_map(target: Target, rng: &mut Rng) -> String {
    let response = valid_response(target, rng);
    map_text(target.request_key(), response, rng)
}

// ---------------------------------------------------------------------------------------------
// Cases
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Category {
    InvalidJson,
    WrongShape,
    SchemaViolation,
    ActionContent,
}

const CATEGORIES: [Category; 4] = [
    Category::InvalidJson,
    Category::WrongShape,
    Category::SchemaViolation,
    Category::ActionContent,
];

impl Category {
    fn label(self) -> &'static str {
        match self {
            Category::InvalidJson => "invalid JSON text",
            Category::WrongShape => "wrong shapes",
            Category::SchemaViolation => "schema violations",
            Category::ActionContent => "action/content mismatches",
        }
    }

    /// The codes any case of the category may expect.
    fn codes(self) -> &'static [ErrorCode] {
        match self {
            Category::InvalidJson => &[ErrorCode::MalformedJson, ErrorCode::PayloadTooLarge],
            Category::WrongShape => &[
                ErrorCode::InvalidResponse,
                ErrorCode::ResponseKeysMismatch,
                ErrorCode::InvalidAction,
                ErrorCode::ContentRequired,
                ErrorCode::EmptyRoundId,
                ErrorCode::EmptyIdempotencyKey,
                ErrorCode::InvalidId,
            ],
            Category::SchemaViolation => &[ErrorCode::SchemaViolation],
            Category::ActionContent => &[ErrorCode::ContentNotAllowed, ErrorCode::ContentRequired],
        }
    }
}

/// Idempotency keys the cases use (the last is the longest accepted, 512 bytes).
fn idempotency_keys() -> Vec<String> {
    let mut keys: Vec<String> = (0..4).map(|i| format!("malformed-key-{i}")).collect();
    keys.push("ключ-🔑-4".into());
    keys.push("k".repeat(512));
    keys
}

struct Case {
    category: Category,
    kind: &'static str,
    target: Target,
    round_id: String,
    idempotency_key: String,
    text: String,
    expected: ErrorCode,
    /// For schema violations: the fields one of which the error must name.
    fields: Vec<String>,
    /// The answer has fields the form does not define: an error about them names no field
    /// (the name came with the answer and is never repeated).
    unknown_fields: bool,
}

impl Case {
    fn new(category: Category, target: Target, key: String) -> Self {
        Self {
            category,
            kind: "",
            target,
            round_id: target.round_id().to_string(),
            idempotency_key: key,
            text: String::new(),
            expected: ErrorCode::MalformedJson,
            fields: Vec::new(),
            unknown_fields: false,
        }
    }
}

fn generate(index: usize, seed: u64, limit: usize, keys: &[String]) -> Case {
    let mut rng = Rng::for_case(seed, index as u64);
    let category = CATEGORIES[index % CATEGORIES.len()];
    let key = keys[rng.below(keys.len())].clone();
    let target = match category {
        Category::SchemaViolation => rng.pick(&FORMS),
        _ => rng.pick(&TARGETS),
    };
    let mut case = Case::new(category, target, key);
    let nth = index / CATEGORIES.len();
    if nth % NEAR_LIMIT_EVERY == NEAR_LIMIT_EVERY - 1 {
        near_limit(&mut case, &mut rng, limit, nth / NEAR_LIMIT_EVERY);
        return case;
    }
    match category {
        Category::InvalidJson => invalid_json(&mut case, &mut rng, limit),
        Category::WrongShape => wrong_shape(&mut case, &mut rng),
        Category::SchemaViolation => schema_violation(&mut case, &mut rng),
        Category::ActionContent => action_content(&mut case, &mut rng),
    }
    case
}

// ---- large answers just under the edge limit, in every category -----------------------------

/// Every this many cases of each category, a large answer just under the edge limit (its
/// variant rotates, so that every run holds each variant).
const NEAR_LIMIT_EVERY: usize = 200;

/// `head`, then `item(i)` joined by commas while the text stays under `size` bytes, then `tail`;
/// returns the text and how many items it holds.
fn repeated(
    head: &str,
    item: impl Fn(usize) -> String,
    tail: &str,
    size: usize,
) -> (String, usize) {
    let mut text = String::with_capacity(size);
    text.push_str(head);
    let mut count = 0;
    loop {
        let next = item(count);
        if text.len() + next.len() + 1 + tail.len() > size {
            break;
        }
        if count > 0 {
            text.push(',');
        }
        text.push_str(&next);
        count += 1;
    }
    text.push_str(tail);
    (text, count)
}

/// A large answer (half the edge limit up to just under it) that the component must still refuse
/// with a typed error within its memory and CPU budgets: long texts, many members, many items.
fn near_limit(case: &mut Case, rng: &mut Rng, limit: usize, variant: usize) {
    let size = rng.range(limit / 2, limit - 256);
    if case.category == Category::SchemaViolation && variant.is_multiple_of(3) {
        // The multi-select variant needs the every-kind form.
        case.target = Target::EveryKind;
        case.round_id = Target::EveryKind.round_id().to_string();
    }
    let target = case.target;
    let key = quote(target.request_key());
    let member = |i: usize| format!("\"k{i}\":0");
    match case.category {
        Category::InvalidJson => {
            case.kind = "large, invalid at its very end";
            case.expected = ErrorCode::MalformedJson;
            case.text = match variant % 3 {
                0 => {
                    let head = format!("{{{key}:{{\"action\":\"decline\",\"content\":{{");
                    repeated(&head, member, ",\"k0\":1}}}", size).0
                }
                1 => {
                    let head = format!("{{{key}:{{\"action\":\"cancel\",\"content\":[");
                    repeated(&head, |i| (i % 10).to_string(), ",NaN]}}", size).0
                }
                _ => {
                    let head = format!("{{{key}:{{\"action\":\"accept\",\"content\":{{\"city\":\"");
                    let pad = "x".repeat(size.saturating_sub(head.len() + 8));
                    format!("{head}{pad}\"}}}}")
                }
            };
        }
        Category::WrongShape => match variant % 4 {
            0 => {
                case.kind = "large: many extra request keys";
                case.expected = ErrorCode::ResponseKeysMismatch;
                let head = format!("{{{key}:{},", valid_response(target, rng));
                case.text = repeated(&head, |i| format!("\"k{i}\":{{}}"), "}", size).0;
            }
            1 => {
                case.kind = "large: many unknown fields in a response";
                case.expected = ErrorCode::InvalidResponse;
                let head = format!("{{{key}:{{\"action\":\"decline\",");
                case.text = repeated(&head, member, "}}", size).0;
            }
            2 => {
                case.kind = "large: not an object";
                case.expected = ErrorCode::InvalidResponse;
                case.text = repeated("[", |i| (i % 10).to_string(), "]", size).0;
            }
            _ => {
                case.kind = "large: action of the wrong type";
                case.expected = ErrorCode::InvalidAction;
                let head = format!("{{{key}:{{\"action\":[");
                case.text = repeated(&head, |_| "\"accept\"".into(), "]}}", size).0;
            }
        },
        Category::SchemaViolation => {
            case.expected = ErrorCode::SchemaViolation;
            let content_head = match target {
                Target::EveryKind => "\"name\":\"Asha\",\"age\":30,",
                _ => "\"street\":\"1 Main Street\",\"city\":\"Pune\",",
            };
            let head = format!("{{{key}:{{\"action\":\"accept\",\"content\":{{{content_head}");
            match variant % 3 {
                0 => {
                    case.kind = "large: a multi-select with many invalid items";
                    let items = ["\"z\"", "\"\"", "1", "[]", "{}", "null", "true"];
                    let item = items[(variant / 3) % items.len()];
                    let head = format!("{head}\"tags\":[");
                    case.text = repeated(&head, |_| item.to_string(), "]}}}", size).0;
                    case.fields.push("tags".into());
                }
                1 => {
                    case.kind = "large: many unknown fields";
                    let (text, _) = repeated(&head, member, "}}}", size);
                    case.text = text;
                    case.unknown_fields = true;
                }
                _ => {
                    case.kind = "large: a string over its maxLength";
                    let (field, others) = if target == Target::EveryKind {
                        ("name", "\"age\":30")
                    } else {
                        ("street", "\"city\":\"Pune\"")
                    };
                    let head = format!(
                        "{{{key}:{{\"action\":\"accept\",\"content\":{{{others},\"{field}\":\""
                    );
                    let pad = rng.pick(&["x", "é", "日"]).repeat(size / 3);
                    case.text = format!("{head}{pad}\"}}}}}}");
                    case.fields.push(field.into());
                }
            }
        }
        Category::ActionContent => {
            case.kind = "large: content that is not allowed";
            case.expected = ErrorCode::ContentNotAllowed;
            let action = if target == Target::Url && rng.chance(50) {
                "accept"
            } else {
                rng.pick(&["decline", "cancel"])
            };
            let head = format!("{{{key}:{{\"action\":\"{action}\",\"content\":[");
            case.text = repeated(&head, |i| format!("{{\"k{i}\":[]}}"), "]}}", size).0;
        }
    }
}

// ---- 1. invalid JSON text -------------------------------------------------------------------

/// String literals (byte ranges with their quotes; whether each is a member key) and structural
/// characters outside strings, of a valid JSON text.
struct Scan {
    strings: Vec<(usize, usize, bool)>,
    structural: Vec<(usize, u8)>,
}

fn scan(text: &str) -> Scan {
    let bytes = text.as_bytes();
    let mut scan = Scan {
        strings: Vec::new(),
        structural: Vec::new(),
    };
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                let start = i;
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    if bytes[i] == b'\\' {
                        i += 1;
                    }
                    i += 1;
                }
                let end = (i + 1).min(bytes.len());
                let mut j = end;
                while j < bytes.len() && bytes[j].is_ascii_whitespace() {
                    j += 1;
                }
                let is_key = j < bytes.len() && bytes[j] == b':';
                scan.strings.push((start, end, is_key));
                i = end;
            }
            c @ (b'{' | b'}' | b'[' | b']' | b':' | b',') => {
                scan.structural.push((i, c));
                i += 1;
            }
            _ => i += 1,
        }
    }
    scan
}

fn splice(text: &str, at: usize, remove: usize, insert: &str) -> String {
    let mut out = String::with_capacity(text.len() + insert.len());
    out.push_str(&text[..at]);
    out.push_str(insert);
    out.push_str(&text[at + remove..]);
    out
}

fn char_boundary_at_or_before(text: &str, mut at: usize) -> usize {
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

/// Replaces a random value string (never a key: there is always the action) with `raw`.
fn replace_a_value(text: &str, raw: &str, rng: &mut Rng) -> String {
    let values: Vec<(usize, usize)> = scan(text)
        .strings
        .into_iter()
        .filter(|s| !s.2)
        .map(|s| (s.0, s.1))
        .collect();
    let (start, end) = values[rng.below(values.len())];
    splice(text, start, end - start, raw)
}

const GARBAGE: &[&str] = &[
    "\u{0}", "\u{1}", "\u{8}", "\u{b}", "\u{1b}", "\u{1f}", "\n", "\t", "\u{feff}", "\u{fffd}",
    "é", "€", "😀", "\u{2028}", "#", "@", "\\", "\"", "'", "}", "]", "{", "[", ":", ",", "x", "0",
    "-", "+", ".", "/", "*", "=", ";", "<", "nul", "tru", "\\u", "\\x",
];

const BAD_NUMBERS: &[&str] = &[
    "NaN",
    "-NaN",
    "nan",
    "Infinity",
    "-Infinity",
    "+Infinity",
    "inf",
    "∞",
    "+1",
    "01",
    "00",
    "-01",
    ".5",
    "5.",
    "1e",
    "1e+",
    "-",
    "--1",
    "0x1F",
    "1_000",
    "1,5",
    "True",
    "FALSE",
    "None",
    "NULL",
    "undefined",
    "'x'",
];

/// A number whose exponent is outside a 64-bit integer: past the parser's limit (every other
/// number is read exactly, whatever its size; `1e400` and 400-digit integers are answers).
fn huge_number(rng: &mut Rng) -> String {
    let sign = if rng.chance(30) { "-" } else { "" };
    let mantissa = match rng.below(3) {
        0 => rng.range(1, 9).to_string(),
        1 => format!("{}.{}", rng.range(0, 9), alnum_digits(rng, 1, 6)),
        _ => "0".to_string(),
    };
    let e = rng.pick(&["e", "E"]);
    let (exponent_sign, exponent) = if rng.chance(50) {
        (
            rng.pick(&["", "+"]),
            rng.pick(&[
                "9223372036854775808",
                "9223372036854775809",
                "18446744073709551616",
                "99999999999999999999",
            ]),
        )
    } else {
        (
            "-",
            rng.pick(&[
                "9223372036854775809",
                "18446744073709551616",
                "00000000000000000000099999999999999999999",
            ]),
        )
    };
    let mut number = format!("{sign}{mantissa}{e}{exponent_sign}{exponent}");
    if rng.chance(20) {
        number.push_str(&alnum_digits(rng, 1, 40));
    }
    number
}

fn alnum_digits(rng: &mut Rng, min: usize, max: usize) -> String {
    text_of(
        rng,
        &['0', '1', '2', '3', '4', '5', '6', '7', '8', '9'],
        min,
        max,
    )
}

/// `{"d":1,"d":2}`, or keys equal after unescaping, wrapped in up to 40 arrays and objects.
fn nested_duplicate(rng: &mut Rng) -> String {
    let name = if rng.chance(30) {
        format!(
            "{}{}",
            rng.pick(&["é", "ß", "日本", "😀", "\u{a0}", "\"", "\\"]),
            alnum(rng, 0, 4)
        )
    } else {
        alnum(rng, 1, 8)
    };
    let first = quote(&name);
    let second = if rng.chance(30) {
        escape_first_char(&name)
    } else {
        first.clone()
    };
    let mut inner = format!(
        "{{{first}:1,{}\"other\":true,{second}:{}}}",
        ws(rng),
        rng.below(3)
    );
    for _ in 0..rng.range(0, 40) {
        inner = if rng.chance(50) {
            format!("[{inner}]")
        } else {
            format!("{{\"w\":{inner},\"v\":0}}")
        };
    }
    inner
}

/// `"name"` with its first character written as `\u` escapes (a surrogate pair outside the
/// BMP): the same key once decoded.
fn escape_first_char(name: &str) -> String {
    let mut chars = name.chars();
    let first = chars.next().expect("a non-empty name");
    let mut units = [0u16; 2];
    let escaped: String = first
        .encode_utf16(&mut units)
        .iter()
        .map(|u| format!("\\u{u:04x}"))
        .collect();
    let rest = quote(chars.as_str());
    format!("\"{escaped}{}", &rest[1..])
}

fn deep_text(rng: &mut Rng) -> String {
    let depth = if rng.chance(5) {
        rng.range(50_000, 200_000)
    } else {
        rng.range(130, 3_000)
    };
    match rng.below(5) {
        0 => format!("{}{}", "[".repeat(depth), "]".repeat(depth)),
        1 => format!("{}0{}", "[".repeat(depth), "]".repeat(depth)),
        2 => format!("{}1{}", "{\"a\":".repeat(depth), "}".repeat(depth)),
        3 => "[".repeat(depth),
        _ => {
            let mut open = String::new();
            let mut close = String::new();
            for _ in 0..depth {
                if rng.chance(50) {
                    open.push('[');
                    close.insert(0, ']');
                } else {
                    open.push_str("{\"k\":");
                    close.insert(0, '}');
                }
            }
            format!("{open}null{close}")
        }
    }
}

fn duplicate_keys(case: &Case, rng: &mut Rng) -> String {
    let target = case.target;
    let key = target.request_key();
    match rng.below(4) {
        // The request key twice (also spelled with an escape).
        0 => {
            let second = if rng.chance(30) {
                escape_first_char(key)
            } else {
                quote(key)
            };
            let first_response = valid_response(target, rng);
            let second_response = if rng.chance(50) {
                first_response.clone()
            } else {
                valid_response(target, rng)
            };
            let mut members = vec![(quote(key), first_response), (second, second_response)];
            rng.shuffle(&mut members);
            object_text(&members, rng)
        }
        // `action` or `content` twice in a response.
        1 => {
            let action = quote(if target.is_form() {
                "accept"
            } else {
                rng.pick(&ACTIONS)
            });
            let content = target
                .is_form()
                .then(|| value_text(&Value::Object(valid_content(target, rng)), rng));
            let twice = if content.is_some() && rng.chance(50) {
                (quote("content"), content.clone().expect("form content"))
            } else {
                let name = if rng.chance(30) {
                    escape_first_char("action")
                } else {
                    quote("action")
                };
                (name, quote(rng.pick(&ACTIONS)))
            };
            let response = response_text(Some(action), content, vec![twice], rng);
            map_text(key, response, rng)
        }
        // A content field twice.
        2 => {
            let form = if target.is_form() {
                target
            } else {
                Target::Address
            };
            let content = valid_content(form, rng);
            let mut members: Vec<(String, String)> = content
                .iter()
                .map(|(k, v)| (quote(k), v.to_string()))
                .collect();
            let (name, value) = content.iter().nth(rng.below(content.len())).expect("field");
            let twice_key = if rng.chance(30) {
                escape_first_char(name)
            } else {
                quote(name)
            };
            let twice_value = if rng.chance(50) {
                value.to_string()
            } else {
                other_type(rng, "none").to_string()
            };
            members.push((twice_key, twice_value));
            rng.shuffle(&mut members);
            let content_text = object_text(&members, rng);
            let response = response_text(Some(quote("accept")), Some(content_text), vec![], rng);
            map_text(key, response, rng)
        }
        // Deeper: an object with a duplicate key nested anywhere a value may be.
        _ => {
            let base = valid_map(target, rng);
            replace_a_value(&base, &nested_duplicate(rng), rng)
        }
    }
}

fn other_syntax(base: &str, rng: &mut Rng) -> String {
    let found = scan(base);
    let structural = |rng: &mut Rng, which: &[u8]| -> Option<usize> {
        let at: Vec<usize> = found
            .structural
            .iter()
            .filter(|(_, c)| which.contains(c))
            .map(|(i, _)| *i)
            .collect();
        (!at.is_empty()).then(|| at[rng.below(at.len())])
    };
    match rng.below(13) {
        0 => rng.pick(&["", " ", "\n\t\r ", "\u{feff}"]).to_string(),
        1 => format!("\u{feff}{base}"),
        2 => format!(
            "{base}{}",
            rng.pick(&[
                "x", "{}", "]", "}", ",", "\u{0}", "null", " 1", "[]", ";", "\"\""
            ])
        ),
        3 => {
            let comment = rng.pick(&["/* note */", "// note\n", "#note\n"]);
            let at = structural(rng, b"{[,:").expect("structure") + 1;
            splice(base, at, 0, comment)
        }
        4 => base.replace('"', "'"),
        5 => match structural(rng, b":") {
            Some(at) => splice(base, at, 1, rng.pick(&["", "=", "::", " "])),
            None => format!("{base}:"),
        },
        6 => match structural(rng, b",") {
            Some(at) => splice(base, at, 1, rng.pick(&["", " ", ";"])),
            None => splice(base, base.len() - 1, 0, "\"extra\"}"),
        },
        7 | 8 => {
            // An invalid escape, a lone surrogate or a raw control character in a string.
            let (start, _, _) = found.strings[rng.below(found.strings.len())];
            let bad = rng.pick(&[
                "\\x41", "\\u12G4", "\\u12", "\\'", "\\a", "\\ud800", "\\udc00", "\\uD83D",
                "\u{0}", "\u{1}", "\n", "\t", "\u{1f}", "\\",
            ]);
            splice(base, start + 1, 0, bad)
        }
        9 => match structural(rng, b"}]") {
            Some(at) => splice(base, at, 1, ""),
            None => format!("{base}}}"),
        },
        10 => {
            let at = structural(rng, b"}]").expect("closers");
            let extra = rng.pick(&["}", "]", "}}", "]]"]);
            splice(base, at, 0, extra)
        }
        11 => base.replace("true", "True").replace("null", "Null") + "x",
        _ => {
            // Drop a closing quote.
            let (_, end, _) = found.strings[rng.below(found.strings.len())];
            splice(base, end - 1, 1, "")
        }
    }
}

fn invalid_json(case: &mut Case, rng: &mut Rng, limit: usize) {
    let target = case.target;
    let roll = rng.below(100);
    if roll == 0 {
        // Over the edge limit: the host refuses it before the component sees it.
        case.kind = "oversize";
        case.expected = ErrorCode::PayloadTooLarge;
        let size = limit + 1 + rng.below(64 * KIB);
        case.text = match rng.below(3) {
            0 => "[".repeat(size),
            1 => {
                let head = format!(
                    "{{\"{}\":{{\"action\":\"accept\",\"content\":{{\"street\":\"",
                    target.request_key()
                );
                format!("{head}{}", "x".repeat(size))
            }
            _ => format!("{}{}", " ".repeat(size), "{,}"),
        };
        return;
    }
    case.expected = ErrorCode::MalformedJson;
    let kind = match roll {
        1..=11 => "truncated",
        12..=22 => "garbage",
        23..=32 => "trailing comma",
        33..=42 => "unquoted key",
        43..=51 => "NaN, Infinity and non-JSON numbers",
        52..=60 => "exponent past the parser's limit",
        61..=73 => "duplicate key",
        74..=85 => "nesting past the depth limit",
        _ => "other syntax",
    };
    case.kind = kind;
    for _ in 0..1_000 {
        let base = valid_map(target, rng);
        let found = scan(&base);
        let text = match kind {
            "truncated" => {
                let cut = char_boundary_at_or_before(&base, rng.below(base.len()));
                base[..cut].to_string()
            }
            "garbage" => {
                let mut text = base;
                for _ in 0..rng.range(1, 3) {
                    let at = char_boundary_at_or_before(&text, rng.below(text.len() + 1));
                    let remove = if rng.chance(30) && at < text.len() {
                        text[at..].chars().next().map_or(0, char::len_utf8)
                    } else {
                        0
                    };
                    text = splice(&text, at, remove, rng.pick(GARBAGE));
                }
                text
            }
            "trailing comma" => match rng.below(3) {
                0 => {
                    let closers: Vec<usize> = found
                        .structural
                        .iter()
                        .filter(|(_, c)| *c == b'}' || *c == b']')
                        .map(|(i, _)| *i)
                        .collect();
                    let at = closers[rng.below(closers.len())];
                    splice(&base, at, 0, rng.pick(&[",", ", ", ",\n"]))
                }
                1 => {
                    let openers: Vec<usize> = found
                        .structural
                        .iter()
                        .filter(|(_, c)| *c == b'{' || *c == b'[')
                        .map(|(i, _)| *i)
                        .collect();
                    let at = openers[rng.below(openers.len())] + 1;
                    splice(&base, at, 0, ",")
                }
                _ => {
                    let commas: Vec<usize> = found
                        .structural
                        .iter()
                        .filter(|(_, c)| *c == b',' || *c == b':')
                        .map(|(i, _)| *i)
                        .collect();
                    let at = commas[rng.below(commas.len())];
                    splice(&base, at, 0, ",")
                }
            },
            "unquoted key" => {
                let keys: Vec<(usize, usize)> = found
                    .strings
                    .iter()
                    .filter(|s| s.2)
                    .map(|s| (s.0, s.1))
                    .collect();
                let (start, end) = keys[rng.below(keys.len())];
                let inner = &base[start + 1..end - 1];
                let replacement = if rng.chance(70) {
                    inner.to_string()
                } else {
                    format!("'{inner}'")
                };
                splice(&base, start, end - start, &replacement)
            }
            "NaN, Infinity and non-JSON numbers" => {
                replace_a_value(&base, rng.pick(BAD_NUMBERS), rng)
            }
            "exponent past the parser's limit" => replace_a_value(&base, &huge_number(rng), rng),
            "duplicate key" => duplicate_keys(case, rng),
            "nesting past the depth limit" => {
                let deep = deep_text(rng);
                if rng.chance(20) {
                    deep
                } else {
                    replace_a_value(&base, &deep, rng)
                }
            }
            _ => other_syntax(&base, rng),
        };
        // A mutation that lands harmlessly (garbage inside a string, `1,5` in an array) is found
        // with the parser the component builds on and redrawn. Duplicate keys and exponents past
        // the limit are invalid by construction: serde_json alone accepts them (the last key
        // wins; the exponent is kept as text); the component must not.
        if kind == "duplicate key"
            || kind == "exponent past the parser's limit"
            || serde_json::from_str::<Value>(&text).is_err()
        {
            // The deepest nestings can outgrow the edge limit: then the host refuses them first.
            if text.len() > limit {
                case.expected = ErrorCode::PayloadTooLarge;
            }
            case.text = text;
            return;
        }
    }
    panic!("generator {kind}: no invalid text in 1,000 draws");
}

// ---- 2. wrong shapes ------------------------------------------------------------------------

const UNKNOWN_FIELDS: &[&str] = &[
    "note",
    "Action",
    "ACTION",
    "Content",
    "contents",
    "actions",
    "_meta",
    "meta",
    "",
    " action",
    "action ",
    "content\u{0}",
    "reason",
    "value",
    "data",
    "status",
    "id",
    "action\u{200b}",
    "аction",
];

const UNKNOWN_ACTIONS: &[&str] = &[
    "Accept",
    "ACCEPT",
    " accept",
    "accept ",
    "accepted",
    "accept\u{0}",
    "acc",
    "",
    "approve",
    "reject",
    "deny",
    "ok",
    "yes",
    "dismiss",
    "submit",
    "accept\u{200b}",
    "аccept",
    "Decline",
    "CANCEL",
    "cancelled",
    "declined",
    "accept,decline",
];

fn mutated_key(key: &str, rng: &mut Rng) -> String {
    loop {
        let mutated = match rng.below(12) {
            0 => key.to_uppercase(),
            1 => {
                let mut chars = key.chars();
                let first = chars.next().expect("key").to_uppercase().to_string();
                first + chars.as_str()
            }
            2 => format!(" {key}"),
            3 => format!("{key} "),
            4 => format!("{key}s"),
            5 => key[..key.len() - 1].to_string(),
            6 => format!("{key}\u{200b}"),
            7 => key.replacen('a', "а", 1), // Cyrillic а
            8 => rng.pick(&TARGETS).request_key().to_string(),
            9 => String::new(),
            10 => format!("{key}\u{0}"),
            _ => alnum(rng, 1, 20),
        };
        if mutated != key {
            return mutated;
        }
    }
}

fn wrong_shape(case: &mut Case, rng: &mut Rng) {
    let target = case.target;
    let key = target.request_key();
    match rng.below(11) {
        0 => {
            case.kind = "not an object";
            case.expected = ErrorCode::InvalidResponse;
            let valid = valid_map(target, rng);
            case.text = match rng.below(9) {
                0 => "[]".into(),
                1 => format!("[{valid}]"),
                2 => quote(rng.pick(&ACTIONS)),
                3 => quote(&valid),
                4 => rng.pick(&["0", "-1.5", "1e300", "42"]).into(),
                5 => rng.pick(&["true", "false"]).into(),
                6 => "null".into(),
                7 => format!("[{}]", valid_response(target, rng)),
                _ => format!("{}\"\"{}", ws(rng), ws(rng)),
            };
        }
        1 => {
            case.kind = "wrong request key";
            case.expected = ErrorCode::ResponseKeysMismatch;
            let response = valid_response(target, rng);
            case.text = map_text(&mutated_key(key, rng), response, rng);
        }
        2 => {
            case.kind = "missing request key";
            case.expected = ErrorCode::ResponseKeysMismatch;
            case.text = object_text(&[], rng);
        }
        3 => {
            case.kind = "extra request keys";
            case.expected = ErrorCode::ResponseKeysMismatch;
            let mut members = vec![(quote(key), valid_response(target, rng))];
            for _ in 0..rng.range(1, 3) {
                let extra = mutated_key(key, rng);
                if members.iter().any(|(k, _)| *k == quote(&extra)) {
                    continue;
                }
                let value = if rng.chance(50) {
                    valid_response(rng.pick(&TARGETS), rng)
                } else {
                    other_type(rng, "none").to_string()
                };
                members.push((quote(&extra), value));
            }
            rng.shuffle(&mut members);
            case.text = object_text(&members, rng);
        }
        4 => {
            case.kind = "response not an object";
            case.expected = ErrorCode::InvalidResponse;
            let value = match rng.below(6) {
                0 => quote(rng.pick(&ACTIONS)),
                1 => format!("[{}]", valid_response(target, rng)),
                2 => "null".into(),
                3 => rng.pick(&["0", "1", "true", "false", "[]", "\"\""]).into(),
                4 => quote(&valid_response(target, rng)),
                _ => other_type(rng, "object").to_string(),
            };
            case.text = map_text(key, value, rng);
        }
        5 => {
            case.kind = "unknown field in a response";
            case.expected = ErrorCode::InvalidResponse;
            let action = rng.chance(80).then(|| quote(rng.pick(&ACTIONS)));
            let content = rng.chance(50).then(|| some_content(target, rng));
            let mut extra = Vec::new();
            for _ in 0..rng.range(1, 2) {
                let name = rng.pick(UNKNOWN_FIELDS);
                if extra.iter().any(|(k, _)| *k == quote(name)) {
                    continue;
                }
                extra.push((quote(name), other_type(rng, "none").to_string()));
            }
            let response = response_text(action, content, extra, rng);
            case.text = map_text(key, response, rng);
        }
        6 => {
            case.kind = "unknown action";
            case.expected = ErrorCode::InvalidAction;
            let content = rng.chance(50).then(|| some_content(target, rng));
            let response =
                response_text(Some(quote(rng.pick(UNKNOWN_ACTIONS))), content, vec![], rng);
            case.text = map_text(key, response, rng);
        }
        7 => {
            case.kind = "missing action";
            case.expected = ErrorCode::InvalidAction;
            let content = rng.chance(70).then(|| some_content(target, rng));
            let response = response_text(None, content, vec![], rng);
            case.text = map_text(key, response, rng);
        }
        8 => {
            case.kind = "action of the wrong type";
            case.expected = ErrorCode::InvalidAction;
            let action = match rng.below(4) {
                0 => format!("[{}]", quote(rng.pick(&ACTIONS))),
                1 => format!("{{{}:true}}", quote(rng.pick(&ACTIONS))),
                2 => rng.pick(&["null", "0", "1", "true", "false", "1.5"]).into(),
                _ => other_type(rng, "string").to_string(),
            };
            let content = rng.chance(50).then(|| some_content(target, rng));
            let response = response_text(Some(action), content, vec![], rng);
            case.text = map_text(key, response, rng);
        }
        9 => {
            case.kind = "form content of the wrong type";
            case.target = rng.pick(&FORMS);
            case.round_id = case.target.round_id().to_string();
            case.expected = ErrorCode::ContentRequired;
            let content = loop {
                let value = other_type(rng, "object");
                if !value.is_null() {
                    break value_text(&value, rng);
                }
            };
            let response = response_text(Some(quote("accept")), Some(content), vec![], rng);
            case.text = map_text(case.target.request_key(), response, rng);
        }
        _ => ids(case, rng),
    }
}

/// Empty, over-long and control-character ids through the API, with an otherwise valid answer.
fn ids(case: &mut Case, rng: &mut Rng) {
    case.text = valid_map(case.target, rng);
    let control = rng.pick(&[
        '\n', '\r', '\t', '\0', '\u{1b}', '\u{7f}', '\u{85}', '\u{9f}',
    ]);
    let with_control = |id: &str, rng: &mut Rng| {
        let at = char_boundary_at_or_before(id, rng.below(id.len() + 1));
        let mut id = id.to_string();
        id.insert(at, control);
        id
    };
    match rng.below(7) {
        0 => {
            case.kind = "empty round id";
            case.round_id = String::new();
            case.expected = ErrorCode::EmptyRoundId;
        }
        1 => {
            case.kind = "empty idempotency key";
            case.idempotency_key = String::new();
            case.expected = ErrorCode::EmptyIdempotencyKey;
        }
        2 => {
            case.kind = "empty round id and idempotency key";
            case.round_id = String::new();
            case.idempotency_key = String::new();
            case.expected = ErrorCode::EmptyRoundId;
        }
        3 => {
            case.kind = "control character in the round id";
            case.round_id = with_control(&case.round_id, rng);
            case.expected = ErrorCode::InvalidId;
        }
        4 => {
            case.kind = "control character in the idempotency key";
            case.idempotency_key = with_control(&case.idempotency_key, rng);
            case.expected = ErrorCode::InvalidId;
        }
        5 => {
            case.kind = "round id over 512 bytes";
            let pad = rng.range(513, 2_000) - case.round_id.len();
            case.round_id.push_str(&"r".repeat(pad));
            case.expected = ErrorCode::InvalidId;
        }
        _ => {
            case.kind = "idempotency key over 512 bytes";
            case.idempotency_key = "k".repeat(rng.range(513, 2_000));
            case.expected = ErrorCode::InvalidId;
        }
    }
}

// ---- 3. schema violations -------------------------------------------------------------------

/// A string whose length in characters is outside `min..=max` (`max` = `usize::MAX`: unbounded).
fn bad_length(rng: &mut Rng, min: usize, max: usize) -> Value {
    if max == usize::MAX || (min > 0 && rng.chance(50)) {
        json!(text(rng, 0, min - 1))
    } else {
        json!(text(rng, max + 1, max + 40))
    }
}

fn bad_value(field: &str, rng: &mut Rng) -> Value {
    let wrong_type = rng.chance(25);
    match field {
        "street" if wrong_type => other_type(rng, "string"),
        "street" => bad_length(rng, 1, 100),
        "city" if wrong_type => other_type(rng, "string"),
        "city" => bad_length(rng, 1, usize::MAX),
        "name" if wrong_type => other_type(rng, "string"),
        "name" => bad_length(rng, 2, 10),
        "email" if wrong_type => other_type(rng, "string"),
        "email" => json!(text_of(
            rng,
            &['a', 'x', '0', '.', '_', '-', '+', ' ', 'é'],
            0,
            20
        )),
        "site" if wrong_type => other_type(rng, "string"),
        "site" => json!(text_of(
            rng,
            &['a', 'x', '/', '.', '-', '?', '#', ' ', '0'],
            0,
            20
        )),
        "day" if wrong_type => other_type(rng, "string"),
        "day" => json!(match rng.below(6) {
            0 => format!("2026-{:02}-{:02}", rng.range(13, 99), rng.range(1, 28)),
            1 => format!("2026-{:02}-{:02}", rng.range(1, 12), rng.range(32, 99)),
            2 => rng
                .pick(&[
                    "yesterday",
                    "",
                    "2026/11/30",
                    "30-11-2026",
                    "20261130",
                    "2026-1-5"
                ])
                .to_string(),
            3 => "2026-11-30T12:00:00Z".to_string(),
            4 => format!("{}-11-30", rng.range(0, 999)),
            _ => alnum(rng, 1, 12),
        }),
        "at" if wrong_type => other_type(rng, "string"),
        "at" => json!(match rng.below(6) {
            0 => valid_date(rng),
            1 => format!("2026-11-30T{:02}:00:00Z", rng.range(25, 99)),
            2 => format!("2026-11-30T12:{:02}:00Z", rng.range(60, 99)),
            3 => format!("2026-{:02}-30T12:00:00Z", rng.range(13, 99)),
            4 => rng
                .pick(&["yesterday", "", "12:00:00Z", "2026-11-30T12:00Z", "now"])
                .to_string(),
            _ => alnum(rng, 1, 12),
        }),
        "age" => match rng.below(7) {
            0 => json!(-(rng.range(1, 1_000_000) as i64)),
            1 => json!(rng.range(151, 1_000_000_000)),
            2 => json!(rng.range(0, 149) as f64 + 0.5),
            3 => json!(rng.pick(&[1e300, -1e300, 150.0001, -0.5])),
            4 => json!(rng.range(0, 150).to_string()),
            _ => other_type(rng, "number"),
        },
        "score" => match rng.below(5) {
            0 => json!(rng.pick(&[0.0, 0.25, 0.4999, -1.0, -1e300])),
            1 => json!(rng.pick(&[9.5001, 9.75, 10.0, 1e9, 1e300])),
            2 => json!(-(rng.range(1, 1000) as i64)),
            3 => json!("2.5"),
            _ => other_type(rng, "number"),
        },
        "agree" => other_type(rng, "boolean"),
        "color" | "size" if wrong_type => other_type(rng, "string"),
        "color" | "size" => {
            let allowed: &[&str] = if field == "color" {
                &["red", "green"]
            } else {
                &["s", "l"]
            };
            loop {
                let candidate = match rng.below(3) {
                    0 => rng
                        .pick(&[
                            "Red", "RED", "red ", " green", "blue", "", "rouge", "gree", "redd",
                            "r", "S", "L", "m", "M", "small", "Small", "Large", "s ", "xs",
                        ])
                        .to_string(),
                    1 => format!("{}{}", rng.pick(allowed), rng.pick(&[" ", "\u{200b}", "x"])),
                    _ => text(rng, 0, 6),
                };
                if !allowed.contains(&candidate.as_str()) {
                    break json!(candidate);
                }
            }
        }
        _ => match rng.below(5) {
            0 => json!([]),
            1 => {
                let n = rng.range(3, 6);
                json!(
                    (0..n)
                        .map(|_| rng.pick(&["a", "b", "c"]))
                        .collect::<Vec<_>>()
                )
            }
            2 | 3 => {
                let bad = match rng.below(6) {
                    0 => json!(rng.pick(&["z", "A", "", "ab", "a ", "d"])),
                    1 => json!(rng.below(3)),
                    2 => Value::Null,
                    3 => json!(["a"]),
                    4 => json!({"a": 1}),
                    _ => json!(true),
                };
                if rng.chance(50) {
                    json!([bad])
                } else {
                    json!([rng.pick(&["a", "b", "c"]), bad])
                }
            }
            _ => other_type(rng, "array"),
        },
    }
}

const UNKNOWN_CONTENT_FIELDS: &[&str] = &[
    "Name",
    "NAME",
    "name ",
    "e-mail",
    "emails",
    "extra",
    "__proto__",
    "constructor",
    "",
    "tag",
    "agree?",
    "日本",
    "age2",
    "Street",
    "street\u{0}",
    "zip",
    "country",
];

fn schema_violation(case: &mut Case, rng: &mut Rng) {
    let target = case.target;
    case.expected = ErrorCode::SchemaViolation;
    let mut content = valid_content(target, rng);
    let fields = target.fields();
    let mut slots: Vec<&str> = fields.to_vec();
    slots.push("#unknown");
    slots.push("#missing");
    rng.shuffle(&mut slots);
    let count = match rng.below(100) {
        0..=59 => 1,
        60..=84 => 2,
        _ => 3,
    };
    let chosen: Vec<&str> = slots.into_iter().take(count).collect();
    let mut kinds = Vec::new();
    for slot in &chosen {
        match *slot {
            "#unknown" => {
                let name = if rng.chance(70) {
                    rng.pick(UNKNOWN_CONTENT_FIELDS).to_string()
                } else {
                    format!("x{}", alnum(rng, 0, 8))
                };
                if fields.contains(&name.as_str()) || content.contains_key(&name) {
                    continue;
                }
                content.insert(name.clone(), other_type(rng, "none"));
                case.unknown_fields = true;
                kinds.push("unknown field");
            }
            "#missing" => {
                let free: Vec<&str> = target
                    .required()
                    .iter()
                    .copied()
                    .filter(|f| !chosen.contains(f))
                    .collect();
                if free.is_empty() {
                    continue;
                }
                let name = rng.pick(&free);
                content.remove(name);
                case.fields.push(name.to_string());
                kinds.push("missing required");
            }
            field => {
                content.insert(field.to_string(), bad_value(field, rng));
                case.fields.push(field.to_string());
                kinds.push("field value");
            }
        }
    }
    if kinds.is_empty() {
        // Both draws collided (an unknown name that exists): fall back to one bad field.
        let field = fields[0];
        content.insert(field.to_string(), bad_value(field, rng));
        case.fields.push(field.to_string());
        kinds.push("field value");
    }
    case.kind = match (kinds.len(), kinds[0]) {
        (1, "unknown field") => "one unknown field",
        (1, "missing required") => "one missing required field",
        (1, _) => "one bad field value",
        (2, _) => "two violations",
        _ => "three violations",
    };
    let content = value_text(&Value::Object(content), rng);
    let response = response_text(Some(quote("accept")), Some(content), vec![], rng);
    case.text = map_text(target.request_key(), response, rng);
}

// ---- 4. action/content mismatches -----------------------------------------------------------

fn action_content(case: &mut Case, rng: &mut Rng) {
    match rng.below(10) {
        0..=3 => {
            case.kind = "content on decline or cancel";
            case.expected = ErrorCode::ContentNotAllowed;
            let content = some_content(case.target, rng);
            let action = quote(rng.pick(&["decline", "cancel"]));
            let response = response_text(Some(action), Some(content), vec![], rng);
            case.text = map_text(case.target.request_key(), response, rng);
        }
        4..=6 => {
            case.kind = "content on a URL accept";
            case.target = Target::Url;
            case.round_id = Target::Url.round_id().to_string();
            case.expected = ErrorCode::ContentNotAllowed;
            let content = some_content(Target::Url, rng);
            let response = response_text(Some(quote("accept")), Some(content), vec![], rng);
            case.text = map_text(Target::Url.request_key(), response, rng);
        }
        _ => {
            case.kind = "form accept without content";
            case.target = rng.pick(&FORMS);
            case.round_id = case.target.round_id().to_string();
            case.expected = ErrorCode::ContentRequired;
            let content = rng.chance(40).then(|| "null".to_string());
            let response = response_text(Some(quote("accept")), content, vec![], rng);
            case.text = map_text(case.target.request_key(), response, rng);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Checks and figures
// ---------------------------------------------------------------------------------------------

/// The system clock's stand-in: a manual clock (leases and deadlines never pass) that counts how
/// often the component asks it for the time.
struct CountingClock {
    inner: ManualClock,
    calls: AtomicU64,
}

impl Clock for CountingClock {
    fn now(&self) -> chrono::DateTime<chrono::Utc> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.now()
    }
}

type RawRow = Vec<rusqlite::types::Value>;

/// Every column of every round row and its version row, as SQLite stores them.
fn raw_rows(conn: &rusqlite::Connection) -> Vec<RawRow> {
    let mut statement = conn
        .prepare_cached(
            "SELECT * FROM managed_input_rounds LEFT JOIN managed_input_round_versions \
             USING (round_id) ORDER BY round_id",
        )
        .expect("prepare");
    let columns = statement.column_count();
    statement
        .query_map([], |row| {
            (0..columns)
                .map(|i| row.get::<_, rusqlite::types::Value>(i))
                .collect()
        })
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows")
}

/// The records read back through the component are the snapshot: pending, no answer, no key.
fn check_records(
    store: &SqliteManagedInputStore,
    snapshot: &BTreeMap<Target, ManagedInputRecord>,
    after: &str,
) {
    for (target, before) in snapshot {
        let id = target.round_id();
        let now = store
            .get_round(id)
            .unwrap_or_else(|e| panic!("get_round {id} {after}: {e}"))
            .unwrap_or_else(|| panic!("{id} vanished {after}"));
        assert_eq!(&now, before, "{id} changed {after}");
        assert_eq!(now.status, ManagedInputStatus::Pending, "{id} {after}");
        assert!(
            now.responses.is_none() && now.idempotency_key.is_none(),
            "{id} holds an answer {after}"
        );
        let redacted = store.redacted_responses(id).expect("redacted_responses");
        assert!(redacted.is_none(), "{id} has redacted answers {after}");
    }
}

fn excerpt(text: &str) -> String {
    const MAX: usize = 300;
    if text.len() <= MAX {
        return format!("{text:?}");
    }
    let end = char_boundary_at_or_before(text, MAX);
    format!("{:?}... ({} bytes)", &text[..end], text.len())
}

#[derive(Default)]
struct Tally {
    cases: usize,
    reached_guest: usize,
    clock_proven: usize,
    id_checks: usize,
    host_edge: usize,
    time: Duration,
    codes: BTreeMap<&'static str, usize>,
    kinds: BTreeMap<&'static str, usize>,
}

fn share(part: usize, whole: usize) -> f64 {
    if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}

/// What the figures report besides the tallies.
struct Run {
    started: Instant,
    limit: usize,
    failures: usize,
    record_checks: usize,
    control: usize,
    slowest: (Duration, String),
}

fn total_of(tallies: &BTreeMap<Category, Tally>) -> Tally {
    tallies.values().fold(Tally::default(), |mut sum, t| {
        sum.cases += t.cases;
        sum.reached_guest += t.reached_guest;
        sum.clock_proven += t.clock_proven;
        sum.id_checks += t.id_checks;
        sum.host_edge += t.host_edge;
        sum.time += t.time;
        sum
    })
}

fn print_figures(tallies: &BTreeMap<Category, Tally>, run: &Run) {
    let limit = run.limit;
    let elapsed = run.started.elapsed();
    let all = total_of(tallies);
    println!(
        "{:<27} {:>6} {:>14} {:>7} {:>10} {:>11}",
        "category", "cases", "reached guest", "share", "host edge", "submit time"
    );
    for (category, tally) in tallies {
        println!(
            "{:<27} {:>6} {:>14} {:>6.1}% {:>10} {:>10.2}s",
            category.label(),
            tally.cases,
            tally.reached_guest,
            share(tally.reached_guest, tally.cases),
            tally.host_edge,
            tally.time.as_secs_f64()
        );
    }
    println!(
        "{:<27} {:>6} {:>14} {:>6.1}% {:>10} {:>10.2}s",
        "total",
        all.cases,
        all.reached_guest,
        share(all.reached_guest, all.cases),
        all.host_edge,
        all.time.as_secs_f64()
    );
    println!(
        "reached the component: {} read the store's clock inside the transaction they opened, {} \
         were refused by the component's id checks (codes the host never produces); refused at \
         the host's edge (over {limit} bytes): {}",
        all.clock_proven, all.id_checks, all.host_edge
    );
    for (category, tally) in tallies {
        let codes: Vec<String> = tally
            .codes
            .iter()
            .map(|(c, n)| format!("{c}={n}"))
            .collect();
        println!("{}: codes {}", category.label(), codes.join(" "));
        let kinds: Vec<String> = tally
            .kinds
            .iter()
            .map(|(k, n)| format!("{k}={n}"))
            .collect();
        println!("  kinds: {}", kinds.join(", "));
    }
    println!(
        "{} of {} cases refused with a ManagedInputValidationError of the expected code; raw rows \
         unchanged after every case; records read back {} times; control group: {} generated \
         valid answers accepted",
        all.cases - run.failures,
        all.cases,
        run.record_checks,
        run.control
    );
    println!(
        "slowest case {:?} ({}); {:.0} cases/s; total time {:.1}s",
        run.slowest.0,
        run.slowest.1,
        all.cases as f64 / all.time.as_secs_f64(),
        elapsed.as_secs_f64()
    );
}

#[test]
fn malformed_submissions_are_refused_and_leave_every_round_pending() {
    let started = Instant::now();
    let seed = RandomTest::MalformedSubmissions.seed();
    let total = CASES_PER_CATEGORY * CATEGORIES.len() * soak_factor();

    let db = TempDb::new();
    let clock = Arc::new(CountingClock {
        inner: ManualClock::new(t0()),
        calls: AtomicU64::new(0),
    });
    let options = StoreOptions {
        synchronous: Synchronous::Normal,
        clock: clock.clone(),
        ..StoreOptions::default()
    };
    let limit = options.max_responses_bytes;
    let store = open(&db.path, options);
    let mut snapshot = BTreeMap::new();
    for target in TARGETS {
        let record = store
            .create_round(&target.new_round())
            .unwrap_or_else(|e| panic!("create {target:?}: {e}"));
        snapshot.insert(target, record);
    }
    let conn = rusqlite::Connection::open(&db.path).expect("a second connection");
    let rows = raw_rows(&conn);
    assert_eq!(rows.len(), TARGETS.len());

    // Control group: the generators' valid answers are accepted by the same rules.
    let policy = Policy::new().expect("policy");
    let mut control = 0;
    for i in 0..300u64 {
        let mut rng = Rng::for_case(seed ^ 0xC0_17_20_1C, i);
        let target = TARGETS[i as usize % TARGETS.len()];
        let text = valid_map(target, &mut rng);
        policy
            .validate_responses_json(&snapshot[&target].pending, &text)
            .unwrap_or_else(|e| panic!("control answer {} refused: {e}", excerpt(&text)));
        control += 1;
    }

    let keys = idempotency_keys();
    let mut used_keys: BTreeMap<Target, BTreeSet<String>> = BTreeMap::new();
    let mut tallies: BTreeMap<Category, Tally> = BTreeMap::new();
    let mut failures: Vec<String> = Vec::new();
    let mut slowest = (Duration::ZERO, String::new());
    let mut record_checks = 0;
    for index in 0..total {
        let case = generate(index, seed, limit, &keys);
        let what = format!(
            "case {index} (seed {seed:#x}) [{} / {}] round {:?} key {}: {}",
            case.category.label(),
            case.kind,
            case.round_id,
            excerpt(&case.idempotency_key),
            excerpt(&case.text)
        );
        let calls_before = clock.calls.load(Ordering::SeqCst);
        let case_started = Instant::now();
        let result = store.submit_responses_json(&case.round_id, &case.text, &case.idempotency_key);
        let elapsed = case_started.elapsed();
        let clock_calls = clock.calls.load(Ordering::SeqCst) - calls_before;
        let rows_unchanged = raw_rows(&conn) == rows;
        let error = match result {
            Ok(record) => panic!(
                "BUG: {what} was ACCEPTED: the round is now {:?} with key {:?}",
                record.status, record.idempotency_key
            ),
            Err(ManagedInputError::Validation(e)) => e,
            Err(other) => {
                assert!(rows_unchanged, "{what}: the stored rows changed ({other})");
                let tally = tallies.entry(case.category).or_default();
                tally.cases += 1;
                tally.reached_guest += 1;
                tally.time += elapsed;
                *tally.codes.entry(other.kind_name()).or_default() += 1;
                *tally.kinds.entry(case.kind).or_default() += 1;
                failures.push(format!(
                    "{what}: expected a ManagedInputValidationError ({}), got {} after {elapsed:?}: \
                     {}",
                    case.expected,
                    other.kind_name(),
                    other.to_string().lines().next().unwrap_or_default()
                ));
                continue;
            }
        };
        let code = error.code();
        assert!(
            rows_unchanged,
            "{what}: the stored rows changed (observed {code}: {error})"
        );
        assert!(elapsed < CASE_TIME_LIMIT, "{what}: took {elapsed:?}");
        if elapsed > slowest.0 {
            slowest = (
                elapsed,
                format!("{} / {}", case.category.label(), case.kind),
            );
        }

        let tally = tallies.entry(case.category).or_default();
        tally.cases += 1;
        tally.time += elapsed;
        *tally.codes.entry(code.as_str()).or_default() += 1;
        *tally.kinds.entry(case.kind).or_default() += 1;
        let at_the_edge = case.text.len() > limit;
        if at_the_edge {
            tally.host_edge += 1;
            if code != ErrorCode::PayloadTooLarge
                || clock_calls != 0
                || !error
                    .detail
                    .message
                    .contains(&format!("the limit is {limit}"))
            {
                failures.push(format!(
                    "{what}: expected the host's payload_too_large before the component, got \
                     {code}: {error} (clock calls {clock_calls})"
                ));
            }
        } else {
            tally.reached_guest += 1;
            let id_code = matches!(
                code,
                ErrorCode::EmptyRoundId | ErrorCode::EmptyIdempotencyKey | ErrorCode::InvalidId
            );
            if clock_calls > 0 {
                tally.clock_proven += 1;
            } else if id_code {
                tally.id_checks += 1;
            } else {
                failures.push(format!(
                    "{what}: under the edge limit but the component never read the clock \
                     ({code}: {error})"
                ));
            }
            if !id_code {
                used_keys
                    .entry(case.target)
                    .or_default()
                    .insert(case.idempotency_key.clone());
            }
        }
        assert!(
            case.category.codes().contains(&case.expected),
            "generator bug: {what} expects {}",
            case.expected
        );
        if code != case.expected {
            failures.push(format!(
                "{what}: expected {}, got {code}: {error}",
                case.expected
            ));
        } else if case.category == Category::SchemaViolation {
            let request_key = error.detail.request_key.as_deref();
            let field = error.detail.field.as_deref();
            let named = match field {
                Some(f) => case.fields.iter().any(|c| c == f),
                None => case.unknown_fields,
            };
            if request_key != Some(case.target.request_key()) || !named {
                failures.push(format!(
                    "{what}: schema_violation should name request {:?} and one of the fields \
                     {:?}, named request {request_key:?} field {field:?}: {error}",
                    case.target.request_key(),
                    case.fields
                ));
            }
        }
        if (index + 1) % RECORD_CHECK_EVERY == 0 {
            check_records(&store, &snapshot, &format!("after {what}"));
            record_checks += 1;
        }
    }
    check_records(&store, &snapshot, "after the last case");
    record_checks += 1;
    assert_eq!(raw_rows(&conn), rows, "the stored rows changed");

    let run = Run {
        started,
        limit,
        failures: failures.len(),
        record_checks,
        control,
        slowest,
    };
    print_figures(&tallies, &run);
    let all = total_of(&tallies);
    assert_eq!(all.cases, total);
    for (category, tally) in &tallies {
        assert!(
            tally.cases >= 1_000,
            "{}: {} cases",
            category.label(),
            tally.cases
        );
        assert!(
            share(tally.reached_guest, tally.cases) >= 90.0,
            "{}: only {:.1}% reached the component",
            category.label(),
            share(tally.reached_guest, tally.cases)
        );
    }
    if !failures.is_empty() {
        for failure in failures.iter().take(40) {
            println!("FAILED {failure}");
        }
        panic!(
            "{} of {total} malformed cases were not refused as expected (first: {})",
            failures.len(),
            failures[0]
        );
    }

    // No idempotency key was consumed: a valid answer with a key the cases used is accepted.
    let mut final_rng = Rng::for_case(seed ^ 0x000F_17A1, 0);
    for target in TARGETS {
        let key = used_keys
            .get(&target)
            .and_then(|keys| keys.iter().next())
            .unwrap_or_else(|| panic!("no case used a key on {target:?}"));
        let text = valid_map(target, &mut final_rng);
        let record = store
            .submit_responses_json(target.round_id(), &text, key)
            .unwrap_or_else(|e| panic!("valid answer {} with key {key:?}: {e}", excerpt(&text)));
        assert_eq!(record.status, ManagedInputStatus::ResponseValidated);
        assert_eq!(record.idempotency_key.as_deref(), Some(key.as_str()));
        let again = store
            .submit_responses_json(target.round_id(), &text, key)
            .expect("an idempotent retry");
        assert_eq!(again, record);
    }

    println!(
        "final valid answers with keys the cases used: accepted on all {} rounds (no key was \
         consumed)",
        TARGETS.len()
    );
}

/// A prepared round (the component's `prepared-round` resource, which keeps the round's requests
/// and compiled validators) decides every generated case exactly as the one-off call carrying the
/// round does: the same canonical answer or the same error, code, message and detail, on first
/// use, on reuse, and from several threads at once sharing one prepared round.
#[test]
fn a_prepared_round_decides_every_case_as_the_one_off_call_does() {
    let seed = RandomTest::PreparedRound.seed();
    let db = TempDb::new();
    let options = StoreOptions::default();
    let limit = options.max_responses_bytes;
    let store = open(&db.path, options);
    let policy = Arc::new(Policy::new().expect("policy"));
    let mut rounds = BTreeMap::new();
    for target in TARGETS {
        let record = store
            .create_round(&target.new_round())
            .unwrap_or_else(|e| panic!("create {target:?}: {e}"));
        let prepared = Arc::new(policy.prepare(&record.pending));
        rounds.insert(target, (record.pending, prepared));
    }
    let keys = idempotency_keys();
    let cases: Vec<(Target, String)> = (0..CATEGORIES.len() * 150)
        .map(|index| {
            let case = generate(index, seed ^ 0x9E_7A_2E, limit, &keys);
            (case.target, case.text)
        })
        .chain((0..150u64).map(|i| {
            let mut rng = Rng::for_case(seed ^ 0x9E_7A_2F, i);
            let target = TARGETS[i as usize % TARGETS.len()];
            (target, valid_map(target, &mut rng))
        }))
        .collect();
    let (mut accepted, mut refused) = (0, 0);
    for (target, text) in &cases {
        let (pending, prepared) = &rounds[target];
        let once = policy.validate_responses_json(pending, text);
        let first = policy.validate_prepared_json(prepared, text);
        let again = policy.validate_prepared_json(prepared, text);
        assert_eq!(
            first,
            once,
            "{target:?} {}: prepared differs",
            excerpt(text)
        );
        assert_eq!(again, once, "{target:?} {}: reuse differs", excerpt(text));
        match once {
            Ok(_) => accepted += 1,
            Err(_) => refused += 1,
        }
    }
    assert!(
        accepted >= 150 && refused >= 500,
        "{accepted} accepted, {refused} refused"
    );

    // Four threads share each prepared round: one uses its instance, the rest validate as
    // one-off calls meanwhile, and every result is still the one-off call's.
    let cases = Arc::new(cases);
    let rounds = Arc::new(rounds);
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let (cases, rounds, policy) = (cases.clone(), rounds.clone(), policy.clone());
            std::thread::spawn(move || {
                for (target, text) in cases.iter().skip(t).step_by(3) {
                    let (pending, prepared) = &rounds[target];
                    assert_eq!(
                        policy.validate_prepared_json(prepared, text),
                        policy.validate_responses_json(pending, text),
                        "thread {t}, {target:?} {}",
                        excerpt(text)
                    );
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("a validating thread");
    }
}

// ---------------------------------------------------------------------------------------------
// Hostile schemas at create_round
// ---------------------------------------------------------------------------------------------

fn valid_properties(rng: &mut Rng) -> Map<String, Value> {
    let all = every_kind_schema()["properties"]
        .as_object()
        .expect("properties")
        .clone();
    let mut chosen = Map::new();
    for (name, schema) in all {
        if rng.chance(20) {
            chosen.insert(name, schema);
        }
    }
    chosen
}

/// A top-level form around `properties`, with valid extras.
fn form(properties: Map<String, Value>, rng: &mut Rng) -> Value {
    let mut top = Map::new();
    top.insert("type".into(), json!("object"));
    if rng.chance(30) {
        top.insert(
            "$schema".into(),
            json!("https://json-schema.org/draft/2020-12/schema"),
        );
    }
    if rng.chance(30) {
        top.insert("title".into(), json!(text(rng, 0, 20)));
    }
    if rng.chance(20) {
        top.insert("additionalProperties".into(), json!(rng.chance(50)));
    }
    top.insert("properties".into(), Value::Object(properties));
    Value::Object(top)
}

/// A form with one hostile property among valid ones.
fn with_property(schema: Value, rng: &mut Rng) -> Value {
    let mut properties = valid_properties(rng);
    properties.insert(format!("hostile_{}", alnum(rng, 0, 4)), schema);
    form(properties, rng)
}

/// `{"type":"object","properties":{"p": ...}}` `depth` times around a string property.
fn nested_objects(depth: usize) -> Value {
    let mut inner = json!({"type": "string"});
    for _ in 0..depth {
        inner = json!({"type": "object", "properties": {"p": inner}});
    }
    inner
}

fn strings(rng: &mut Rng, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{}{i}", alnum(rng, 0, 6))).collect()
}

fn long_text(bytes: usize, rng: &mut Rng) -> String {
    let unit = rng.pick(&["d", "é", "日", "ab\"c"]);
    let mut s = unit.repeat(bytes / unit.len() + 1);
    s.truncate(char_boundary_at_or_before(&s, bytes.max(1)));
    while s.len() < bytes {
        s.push('d');
    }
    s
}

/// A generated hostile schema, its kind, and the code the component must refuse it with (texts
/// over the size limits are decided by the caller).
fn hostile_schema(rng: &mut Rng) -> (&'static str, Value, ErrorCode) {
    let unsupported = ErrorCode::UnsupportedSchema;
    match rng.below(100) {
        0..=14 => {
            let schema = match rng.below(6) {
                0 => with_property(nested_objects(rng.range(1, 50)), rng),
                1 => with_property(
                    json!({"type": "array", "items": {"type": "object",
                        "properties": {"a": {"type": "string"}}}}),
                    rng,
                ),
                2 => {
                    let mut items = json!({"type": "string", "enum": ["a"]});
                    for _ in 0..rng.range(1, 30) {
                        items = json!({"type": "array", "items": items});
                    }
                    with_property(json!({"type": "array", "items": items}), rng)
                }
                3 => with_property(
                    json!({"type": "string", "properties": {"x": nested_objects(rng.range(0, 20))}}),
                    rng,
                ),
                4 => with_property(json!({"type": "object"}), rng),
                _ => with_property(
                    json!({"anyOf": [{"type": "string"}, nested_objects(rng.range(1, 20))]}),
                    rng,
                ),
            };
            ("nested objects and arrays", schema, unsupported)
        }
        15..=22 => {
            let schema = match rng.below(3) {
                0 => with_property(nested_objects(rng.range(70, 200)), rng),
                1 => {
                    let mut deep = json!("x");
                    for _ in 0..rng.range(130, 400) {
                        deep = json!([deep]);
                    }
                    let mut top = form(valid_properties(rng), rng);
                    top["examples"] = json!([deep]);
                    top
                }
                _ => {
                    let mut deep = json!({"type": "string"});
                    for _ in 0..rng.range(130, 400) {
                        deep = json!({"not": deep});
                    }
                    with_property(deep, rng)
                }
            };
            (
                "nesting past the parser's depth limit",
                schema,
                ErrorCode::MalformedJson,
            )
        }
        23..=36 => {
            let schema = match rng.below(9) {
                0 => with_property(json!({"$ref": "#/properties/b"}), rng),
                1 => {
                    let mut top =
                        with_property(json!({"type": "string", "$ref": "#/$defs/x"}), rng);
                    top["$defs"] = json!({"x": {"type": "string"}});
                    top
                }
                2 => {
                    let mut top = form(valid_properties(rng), rng);
                    top["$ref"] = json!("#");
                    top
                }
                3 => {
                    let mut top = form(valid_properties(rng), rng);
                    top["definitions"] = json!({"n": {"$ref": "#/definitions/n"}});
                    top
                }
                4 => with_property(json!({"$dynamicRef": "#meta"}), rng),
                5 => with_property(json!({"type": "string", "$anchor": "a"}), rng),
                6 => with_property(json!({"$ref": "https://example.com/schema.json"}), rng),
                7 => with_property(json!({"type": "string", "$id": "https://e.x/s"}), rng),
                _ => {
                    let mut top = with_property(json!({"$ref": "#/$defs/n"}), rng);
                    top["$defs"] = json!({"n": {"$ref": "#/$defs/n"}});
                    top
                }
            };
            ("$ref, $defs, $dynamicRef", schema, unsupported)
        }
        37..=50 => {
            let n = rng.range(1_025, 3_000);
            let schema = match rng.below(9) {
                0 => with_property(json!({"type": "string", "enum": strings(rng, n)}), rng),
                1 => with_property(
                    json!({"type": "array", "items": {"type": "string", "enum": strings(rng, n)}}),
                    rng,
                ),
                2 => {
                    let choices: Vec<Value> = strings(rng, n)
                        .into_iter()
                        .map(|c| json!({"const": c, "title": c}))
                        .collect();
                    with_property(json!({"type": "string", "oneOf": choices}), rng)
                }
                3 => {
                    let choices: Vec<Value> = strings(rng, n)
                        .into_iter()
                        .map(|c| json!({"const": c}))
                        .collect();
                    with_property(json!({"type": "array", "items": {"anyOf": choices}}), rng)
                }
                4 => {
                    let m = rng.range(1, 10);
                    let more = m + rng.range(1, 3);
                    with_property(
                        json!({"type": "string", "enum": strings(rng, m),
                            "enumNames": strings(rng, more)}),
                        rng,
                    )
                }
                5 => with_property(json!({"type": "string", "enum": []}), rng),
                6 => with_property(
                    json!({"type": "string", "enum": rng.pick(&[json!([1, 2]), json!([null]),
                        json!([{"a": 1}]), json!(["a", 1])])}),
                    rng,
                ),
                7 => with_property(
                    json!({"type": "string", "enum": ["a", long_text(rng.range(16_385, 40_000), rng)]}),
                    rng,
                ),
                _ => with_property(
                    json!({"type": "string", "oneOf": rng.pick(&[
                        json!([{"const": "a", "title": "A", "extra": 1}]),
                        json!([{"title": "A"}]),
                        json!([{"const": 1}]),
                        json!([]),
                        json!("a"),
                    ])}),
                    rng,
                ),
            };
            (
                "enums over 1,024 choices and bad choices",
                schema,
                unsupported,
            )
        }
        51..=64 => {
            let bytes = match rng.below(100) {
                0..=1 => rng.range(4 * MIB + 64 * KIB, 4 * MIB + 512 * KIB),
                2..=9 => rng.range(260 * KIB, MIB),
                _ => rng.range(16 * KIB + 1, 128 * KIB),
            };
            let long = long_text(bytes, rng);
            let schema = match rng.below(8) {
                0 => {
                    let mut top = form(valid_properties(rng), rng);
                    top[rng.pick(&["description", "title", "$comment"])] = json!(long);
                    top
                }
                1 => with_property(json!({"type": "string", "description": long}), rng),
                2 => with_property(json!({"type": "boolean", "title": long}), rng),
                3 => with_property(
                    json!({"type": "string", "oneOf": [{"const": "a", "title": long}]}),
                    rng,
                ),
                4 => with_property(
                    json!({"type": "string", "enum": ["a"], "enumNames": [long]}),
                    rng,
                ),
                5 => with_property(json!({"type": "string", "default": long}), rng),
                6 => {
                    let mut top = form(valid_properties(rng), rng);
                    top["examples"] = json!([long]);
                    top
                }
                _ => with_property(
                    json!({"type": "array", "items": {"enum": ["a"], "description": long}}),
                    rng,
                ),
            };
            ("texts over 16 KiB", schema, unsupported)
        }
        65..=82 => {
            let schema = match rng.below(10) {
                0 => {
                    let keyword = rng.pick(&[
                        "allOf",
                        "anyOf",
                        "oneOf",
                        "not",
                        "if",
                        "then",
                        "else",
                        "patternProperties",
                        "propertyNames",
                        "minProperties",
                        "maxProperties",
                        "dependentRequired",
                        "dependentSchemas",
                        "unevaluatedProperties",
                        "$defs",
                        "definitions",
                        "const",
                        "enum",
                        "default",
                        "format",
                        "items",
                        "prefixItems",
                        "contains",
                        "x-custom",
                        "",
                        "Type",
                        "PROPERTIES",
                        "nullable",
                        "discriminator",
                    ]);
                    let mut top = form(valid_properties(rng), rng);
                    top[keyword] = rng.pick(&[json!({}), json!([]), json!(true), json!(1)]);
                    top
                }
                1 => {
                    let keyword = rng.pick(&[
                        "pattern",
                        "const",
                        "contentEncoding",
                        "contentMediaType",
                        "minimum",
                        "maximum",
                        "items",
                        "properties",
                        "additionalProperties",
                        "multipleOf",
                        "exclusiveMinimum",
                        "not",
                        "allOf",
                        "nullable",
                        "x-ui",
                    ]);
                    let mut property = json!({"type": "string"});
                    property[keyword] = json!("^(a+)+$");
                    with_property(property, rng)
                }
                2 => {
                    let (kind, keyword) = rng.pick(&[
                        ("number", "minLength"),
                        ("integer", "format"),
                        ("number", "enum"),
                        ("integer", "pattern"),
                        ("number", "exclusiveMaximum"),
                        ("integer", "multipleOf"),
                        ("number", "const"),
                        ("boolean", "enum"),
                        ("boolean", "const"),
                        ("boolean", "minimum"),
                        ("array", "contains"),
                        ("array", "prefixItems"),
                        ("array", "additionalItems"),
                        ("array", "unevaluatedItems"),
                        ("array", "minContains"),
                    ]);
                    let mut property = json!({"type": kind});
                    if kind == "array" {
                        property["items"] = json!({"type": "string", "enum": ["a"]});
                    }
                    property[keyword] = json!(1);
                    with_property(property, rng)
                }
                3 => with_property(
                    json!({"type": "string", "format": rng.pick(&["ipv4", "ipv6", "hostname",
                        "idn-email", "uuid", "regex", "time", "duration", "json-pointer", "iri",
                        "uri-reference", "EMAIL", "", "Date", "date-time "])}),
                    rng,
                ),
                4 => {
                    let (keyword, value) = rng.pick(&[
                        ("minLength", json!(-1)),
                        ("minLength", json!(1.5)),
                        ("maxLength", json!("3")),
                        ("maxLength", Value::Null),
                        ("format", json!(1)),
                        ("enumNames", json!("A")),
                        ("default", json!(1)),
                    ]);
                    let mut property = json!({"type": "string"});
                    if keyword == "enumNames" {
                        property["enum"] = json!(["a"]);
                    }
                    property[keyword] = value;
                    with_property(property, rng)
                }
                5 => with_property(
                    rng.pick(&[
                        json!({"type": "number", "minimum": "0"}),
                        json!({"type": "integer", "maximum": null}),
                        json!({"type": "integer", "default": 1.5}),
                        json!({"type": "number", "default": "1"}),
                        json!({"type": "boolean", "default": "true"}),
                        json!({"type": "array", "items": {"type": "string", "enum": ["a"]},
                            "uniqueItems": "yes"}),
                        json!({"type": "array", "items": {"type": "string", "enum": ["a"]},
                            "default": [1]}),
                        json!({"type": "array", "items": {"type": "string", "enum": ["a"]},
                            "minItems": -1}),
                    ]),
                    rng,
                ),
                6 => with_property(
                    rng.pick(&[
                        json!({"type": "array"}),
                        json!({"type": "array", "items": {"type": "string"}}),
                        json!({"type": "array", "items": {"type": "integer", "enum": ["a"]}}),
                        json!({"type": "array", "items": "string"}),
                        json!({"type": "array", "items": {"enum": ["a"], "pattern": "a"}}),
                    ]),
                    rng,
                ),
                7 => {
                    let mut top = form(valid_properties(rng), rng);
                    top["additionalProperties"] =
                        rng.pick(&[json!({}), json!({"type": "string"}), json!("no"), json!(0)]);
                    top
                }
                8 => {
                    let mut top = form(valid_properties(rng), rng);
                    top[rng.pick(&["$schema", "$id"])] =
                        rng.pick(&[json!(1), json!({}), json!(null)]);
                    top
                }
                _ => {
                    let mut top = with_property(json!({"type": "string"}), rng);
                    let name = top["properties"]
                        .as_object()
                        .and_then(|p| p.keys().next().cloned())
                        .expect("a property");
                    top["required"] = rng.pick(&[
                        json!(name),
                        json!([1]),
                        json!(["missing-property"]),
                        json!([name.clone(), name]),
                        json!({}),
                    ]);
                    top
                }
            };
            (
                "keywords and values outside the form subset",
                schema,
                unsupported,
            )
        }
        _ => {
            let schema = match rng.below(8) {
                0 => {
                    let mut top = form(Map::new(), rng);
                    top["properties"] = rng.pick(&[
                        json!([]),
                        json!("x"),
                        json!(1),
                        json!(true),
                        Value::Null,
                        json!([{"type": "string"}]),
                    ]);
                    top
                }
                1 => with_property(
                    rng.pick(&[
                        json!("string"),
                        json!(["string"]),
                        json!(1),
                        Value::Null,
                        json!(true),
                    ]),
                    rng,
                ),
                2 => with_property(
                    rng.pick(&[json!({}), json!({"title": "x"}), json!({"enum": ["a"]})]),
                    rng,
                ),
                3 => with_property(
                    json!({"type": rng.pick(&[json!(["string", "null"]), json!(1), Value::Null,
                        json!({"type": "string"}), json!("null"), json!("any"), json!(""),
                        json!("String"), json!("int")])}),
                    rng,
                ),
                4 => {
                    let mut top = form(valid_properties(rng), rng);
                    top["type"] = rng.pick(&[
                        json!(["object"]),
                        json!("array"),
                        json!("string"),
                        Value::Null,
                    ]);
                    top
                }
                5 => {
                    let mut top = form(valid_properties(rng), rng);
                    top.as_object_mut().expect("object").remove("type");
                    top
                }
                6 => {
                    let mut properties = valid_properties(rng);
                    let name = if rng.chance(50) {
                        String::new()
                    } else {
                        "p".repeat(rng.range(257, 1_000))
                    };
                    properties.insert(name, json!({"type": "string"}));
                    form(properties, rng)
                }
                _ => {
                    if rng.chance(50) {
                        rng.pick(&[
                            json!([]),
                            json!("object"),
                            Value::Null,
                            json!(1),
                            json!(true),
                            json!([{"type": "object"}]),
                        ])
                    } else {
                        let properties: Map<String, Value> = (0..rng.range(257, 700))
                            .map(|i| (format!("p{i}"), json!({"type": "boolean"})))
                            .collect();
                        form(properties, rng)
                    }
                }
            };
            (
                "non-object properties, property schemas and forms",
                schema,
                unsupported,
            )
        }
    }
}

#[test]
fn generated_hostile_schemas_are_refused_at_create_round_in_bounded_time() {
    let started = Instant::now();
    let seed = RandomTest::HostileSchemas.seed();
    let total = HOSTILE_SCHEMAS * soak_factor();
    let db = TempDb::new();
    let options = StoreOptions {
        synchronous: Synchronous::Normal,
        ..StoreOptions::default()
    };
    let round_limit = options.max_round_bytes;
    let store = open(&db.path, options);
    let conn = rusqlite::Connection::open(&db.path).expect("a second connection");
    let count_rows = || -> i64 {
        conn.query_row("SELECT count(*) FROM managed_input_rounds", [], |r| {
            r.get(0)
        })
        .expect("count")
    };
    let guest_schema_limit = 256 * KIB;
    let mut kinds: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut codes: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut samples: BTreeMap<String, String> = BTreeMap::new();
    let (mut host_edge, mut reached_guest) = (0usize, 0usize);
    let mut slowest = (Duration::ZERO, "");
    let mut failures = Vec::new();
    for index in 0..total {
        let mut rng = Rng::for_case(seed ^ 0x005C_4E3A, index as u64);
        let (kind, schema, by_kind) = hostile_schema(&mut rng);
        let schema_bytes = schema.to_string().len();
        let (expected, at_host) = if schema_bytes > round_limit {
            (ErrorCode::PayloadTooLarge, true)
        } else if schema_bytes > guest_schema_limit {
            (ErrorCode::PayloadTooLarge, false)
        } else {
            (by_kind, false)
        };
        let round_id = format!("hostile-{index}");
        let mut requests =
            BTreeMap::from([("q".to_string(), ElicitationRequest::form("hostile", schema))]);
        if rng.chance(30) {
            // A valid request beside it: the whole round is refused.
            requests.insert(
                "a_valid".to_string(),
                ElicitationRequest::form("fine", address_schema()),
            );
        }
        let round = NewRound::new(
            &round_id,
            "exec-hostile",
            "hostile-server",
            "tool",
            requests,
        );
        let case_started = Instant::now();
        let result = store.create_round(&round);
        let elapsed = case_started.elapsed();
        let what = format!("hostile case {index} (seed {seed:#x}) [{kind}], {schema_bytes} bytes");
        match result {
            Ok(_) => {
                let schema = match &round.requests["q"] {
                    ElicitationRequest::Form(form) => form.requested_schema.to_string(),
                    ElicitationRequest::Url(url) => url.url.clone(),
                };
                panic!("BUG: {what} was ACCEPTED: {}", excerpt(&schema))
            }
            Err(ManagedInputError::Validation(e)) => {
                let refused_by_host = e.code() == ErrorCode::PayloadTooLarge
                    && e.detail.message.starts_with("the round is");
                if refused_by_host {
                    host_edge += 1;
                } else {
                    reached_guest += 1;
                }
                *codes.entry(e.code().as_str()).or_default() += 1;
                let by = if refused_by_host { "host" } else { "component" };
                samples
                    .entry(format!("{} ({by})", e.code()))
                    .or_insert_with(|| format!("[{kind}] {}", e.detail.message));
                if e.code() != expected || refused_by_host != at_host {
                    failures.push(format!(
                        "{what}: expected {expected} ({}), got {}: {}",
                        if at_host { "host" } else { "component" },
                        e.code(),
                        e.detail.message
                    ));
                }
            }
            Err(other) => failures.push(format!(
                "{what}: expected a ManagedInputValidationError ({expected}), got {} {other}",
                other.kind_name()
            )),
        }
        *kinds.entry(kind).or_default() += 1;
        assert!(elapsed < CASE_TIME_LIMIT, "{what}: took {elapsed:?}");
        if elapsed > slowest.0 {
            slowest = (elapsed, kind);
        }
        if (index + 1) % RECORD_CHECK_EVERY == 0 {
            assert_eq!(count_rows(), 0, "after {what}: a refused round was stored");
            assert!(store.get_round(&round_id).expect("get_round").is_none());
        }
    }
    assert_eq!(count_rows(), 0, "a refused round was stored");
    if !failures.is_empty() {
        for failure in failures.iter().take(40) {
            println!("FAILED {failure}");
        }
        panic!(
            "{} of {total} hostile schemas were not refused as expected (first: {})",
            failures.len(),
            failures[0]
        );
    }
    // The refused ids were not consumed.
    let record = store
        .create_round(&NewRound::new(
            "hostile-0",
            "exec-hostile",
            "hostile-server",
            "tool",
            BTreeMap::from([(
                "q".to_string(),
                ElicitationRequest::form("fine", every_kind_schema()),
            )]),
        ))
        .expect("a valid round with a refused id");
    assert_eq!(record.status, ManagedInputStatus::Pending);

    let elapsed = started.elapsed();
    println!(
        "hostile schemas: {total} cases, {reached_guest} reached the component ({:.1}%), {host_edge} \
         refused at the host's edge (round over {round_limit} bytes); slowest {:?} ({}); total \
         time {:.1}s",
        share(reached_guest, total),
        slowest.0,
        slowest.1,
        elapsed.as_secs_f64()
    );
    let codes: Vec<String> = codes.iter().map(|(c, n)| format!("{c}={n}")).collect();
    println!("  codes: {}", codes.join(" "));
    for (code, message) in &samples {
        println!("  e.g. {code}: {}", excerpt(message));
    }
    let kinds: Vec<String> = kinds.iter().map(|(k, n)| format!("{k}={n}")).collect();
    println!("  kinds: {}", kinds.join(", "));
    assert!(total >= 1_000);
    assert!(share(reached_guest, total) >= 90.0);
}
