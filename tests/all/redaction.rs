//! Catalogue item 9 of `reliability.md` (library half; the CLI half is
//! `host/cli/tests/redaction.rs`): random secrets placed in responses, idempotency keys and
//! lease tokens never appear in any error text, `Debug` output or output stream.
//!
//! Secrets are a recognizable prefix ([`PREFIX`]) and 24 random alphanumerics, from a fresh seed
//! each run (printed; `M3_SEED` replays one).
//! Each case puts fresh secrets in every place a caller can put one: answer content values (as
//! the invalid value of every schema keyword, inside malformed JSON, as an action, as content
//! where none is allowed, in oversized answers), idempotency keys (of rejected, accepted,
//! conflicting and late submissions, over-long and with control characters), delivery keys, and
//! forged lease tokens; the real lease tokens the store grants (create, claim, rotation, renew)
//! are collected as secrets too. Then it provokes every error it can: schema violations,
//! malformed JSON, wrong keys, payload too large, invalid ids, a conflicting idempotent repeat,
//! submits after the answer and after the end, stale and forged leases, live leases held by
//! another, expired leases (on an injected clock), reclaims, recovery, deadlines, missing rounds.
//!
//! Every error's `Display`, alternate `Display`, `Debug`, pretty `Debug`, detail fields and its
//! `anyhow` rendering, and the `Debug` of every `ManagedInputRecord`, its responses, each
//! `ElicitationResponse`, every `ManagedInputLease`, the `PendingElicitationRound`, the listing
//! and the `redacted_responses` projection (also as JSON) are scanned: none may contain the
//! prefix (so even a truncated secret counts) or any 12-character piece of a lease token.
//! Positive controls check that the secrets really are stored (the record's serialised form
//! holds them), so a clean scan means something.
//!
//! "Log lines": the host has no logging and the guest no output streams, so the only place a
//! stray line could go is the process's stdout or stderr. The test therefore runs its scenario
//! in a child process (this same test binary, filtered to this test) and scans everything the
//! child wrote to both; the child hands its secrets, lease tokens included, to the parent through
//! a side file.

use chrono::TimeDelta;
use m3::*;
use m3_tests::replay::{RandomTest, SEED_VARIABLE};
use m3_tests::rng::Rng;
use m3_tests::*;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// Every generated secret starts with this (and nothing else the store sees does).
const PREFIX: &str = "zqxSECRET";
/// Cases at soak factor 1 (each places about 40 secrets).
const CASES: usize = 16;
/// Fewest generated secrets the run must place (at soak factor 1).
const MIN_SECRETS: usize = 300;
/// Set in the child process: where it writes its secrets for the parent.
const CHILD_ENV: &str = "M3_REDACTION_SECRETS_FILE";
/// The worker that owns each case's main round; its leases last far longer than any case.
const OWNER: &str = "worker-redaction";
/// The main round's lease.
const LONG_TTL: Duration = Duration::from_secs(3600);

/// The secrets placed so far, and the scanner that looks for them.
struct Secrets {
    rng: Rng,
    generated: Vec<String>,
    tokens: Vec<String>,
    by_place: BTreeMap<&'static str, usize>,
    texts_scanned: usize,
    errors_by_code: BTreeMap<String, usize>,
}

impl Secrets {
    fn new(seed: u64) -> Self {
        Self {
            rng: Rng::new(seed),
            generated: Vec::new(),
            tokens: Vec::new(),
            by_place: BTreeMap::new(),
            texts_scanned: 0,
            errors_by_code: BTreeMap::new(),
        }
    }

    /// A fresh secret, counted under `place`.
    fn secret(&mut self, place: &'static str) -> String {
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
        let body: String = (0..24)
            .map(|_| ALPHABET[(self.rng.next_u64() % ALPHABET.len() as u64) as usize] as char)
            .collect();
        let secret = format!("{PREFIX}{body}");
        self.generated.push(secret.clone());
        *self.by_place.entry(place).or_default() += 1;
        secret
    }

    /// Notes the token of a lease the store granted.
    fn lease(&mut self, lease: &ManagedInputLease, place: &'static str) {
        assert!(lease.lease_token.len() >= 24, "short token");
        if !self.tokens.contains(&lease.lease_token) {
            self.tokens.push(lease.lease_token.clone());
            *self.by_place.entry(place).or_default() += 1;
        }
        self.scan(&format!("{place}: lease Debug"), &format!("{lease:?}"));
        self.scan(
            &format!("{place}: lease pretty Debug"),
            &format!("{lease:#?}"),
        );
    }

    /// Panics if `text` holds a secret or a piece of one.
    fn scan(&mut self, what: &str, text: &str) {
        self.texts_scanned += 1;
        let leak = |needle: &str| text.contains(needle);
        assert!(
            !leak(PREFIX),
            "{what}: a generated secret appears in:\n{text}"
        );
        for token in &self.tokens {
            let n = token.len();
            for piece in [token.as_str(), &token[..12], &token[n - 12..]] {
                assert!(!leak(piece), "{what}: a lease token appears in:\n{text}");
            }
        }
    }

    /// Scans every rendering of an error.
    fn scan_error(&mut self, what: &str, e: &ManagedInputError) {
        let code = e.code().map_or("engine".to_string(), |c| c.to_string());
        *self.errors_by_code.entry(code).or_default() += 1;
        let detail = match e {
            ManagedInputError::Validation(v) => Some(&v.detail),
            ManagedInputError::Conflict(v) => Some(&v.detail),
            ManagedInputError::State(v) => Some(&v.detail),
            ManagedInputError::Recovery(v) => Some(&v.detail),
            ManagedInputError::Storage(v) => Some(&v.detail),
            ManagedInputError::Engine(_) => None,
        };
        let mut texts = vec![
            format!("{e}"),
            format!("{e:#}"),
            format!("{e:?}"),
            format!("{e:#?}"),
            format!("{:?}", anyhow::Error::from(e.clone())),
            format!("{:#}", anyhow::Error::from(e.clone())),
        ];
        if let Some(d) = detail {
            texts.push(d.message.clone());
            texts.push(format!("{d:?}"));
            texts.push(serde_json::to_string(d).expect("detail serialises"));
            texts.extend(d.request_key.clone());
            texts.extend(d.field.clone());
        }
        for text in texts {
            self.scan(&format!("{what}: error"), &text);
        }
    }

    /// Scans every `Debug` view of a record.
    fn scan_record(&mut self, what: &str, record: &ManagedInputRecord) {
        if let Some(lease) = &record.lease {
            self.lease(lease, "lease tokens (granted)");
        }
        self.scan(&format!("{what}: record Debug"), &format!("{record:?}"));
        self.scan(
            &format!("{what}: record pretty Debug"),
            &format!("{record:#?}"),
        );
        self.scan(
            &format!("{what}: PendingElicitationRound Debug"),
            &format!("{:#?}", record.pending),
        );
        if let Some(responses) = &record.responses {
            self.scan(
                &format!("{what}: responses Debug"),
                &format!("{responses:?}"),
            );
            for response in responses.values() {
                self.scan(
                    &format!("{what}: ElicitationResponse Debug"),
                    &format!("{response:#?}"),
                );
            }
        }
    }

    /// Scans the redacted projection of a round (Debug and JSON).
    fn scan_projection(&mut self, what: &str, store: &SqliteManagedInputStore, round_id: &str) {
        let projection = store
            .redacted_responses(round_id)
            .unwrap_or_else(|e| panic!("{what}: redacted_responses: {e}"));
        self.scan(
            &format!("{what}: projection Debug"),
            &format!("{projection:#?}"),
        );
        self.scan(
            &format!("{what}: projection JSON"),
            &serde_json::to_string(&projection).expect("projection serialises"),
        );
    }

    /// Expects `result` to be refused as `kind(code)`, and scans the error.
    fn refused<T>(&mut self, what: &str, result: StoreResult<T>, kind: &str, code: ErrorCode) {
        let e = match result {
            Ok(_) => panic!("{what}: accepted, expected {kind}({code})"),
            Err(e) => e,
        };
        self.scan_error(what, &e);
        assert_eq!(
            (e.kind_name(), e.code()),
            (kind, Some(code)),
            "{what}: wrong error: {e}"
        );
    }

    /// Expects `result` to succeed, and scans the record.
    fn accepted(
        &mut self,
        what: &str,
        result: StoreResult<ManagedInputRecord>,
    ) -> ManagedInputRecord {
        let record = result.unwrap_or_else(|e| {
            self.scan_error(what, &e);
            panic!("{what}: refused: {e}")
        });
        self.scan_record(what, &record);
        record
    }
}

const VALIDATION: &str = "ManagedInputValidationError";
const CONFLICT: &str = "ManagedInputConflict";
const STATE: &str = "ManagedInputStateError";
const RECOVERY: &str = "ManagedInputRecoveryError";

/// A form with one field per kind of check, and a URL consent.
fn requests() -> BTreeMap<String, ElicitationRequest> {
    let schema = json!({
        "type": "object",
        "properties": {
            "email": {"type": "string", "format": "email"},
            "age": {"type": "integer", "minimum": 0, "maximum": 150},
            "name": {"type": "string", "minLength": 1, "maxLength": 8},
            "color": {"type": "string", "enum": ["red", "green"]},
            "size": {"type": "string", "oneOf": [{"const": "s", "title": "Small"}, {"const": "l", "title": "Large"}]},
            "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}, "maxItems": 2},
            "site": {"type": "string", "format": "uri"},
            "day": {"type": "string", "format": "date"},
            "note": {"type": "string", "maxLength": 200}
        },
        "required": ["email", "age"]
    });
    BTreeMap::from([
        (
            "profile".to_string(),
            ElicitationRequest::form("Who are you?", schema),
        ),
        (
            "consent".to_string(),
            ElicitationRequest::url("Open the consent page", "https://example.com/consent"),
        ),
    ])
}

fn round(id: &str, owner: Option<OwnerClaim>) -> NewRound {
    let mut round = NewRound::new(id, "exec-redaction", "profiles", "register", requests());
    round.owner = owner;
    round
}

/// A valid answer whose `note` is `note`.
fn valid(note: &str) -> String {
    json!({
        "profile": {"action": "accept", "content": {"email": "asha@example.com", "age": 30, "note": note}},
        "consent": {"action": "accept"}
    })
    .to_string()
}

/// An answer whose profile content is the valid one with `field` set to `value`.
fn with_field(field: &str, value: Value) -> String {
    let mut content = json!({"email": "asha@example.com", "age": 30});
    content[field] = value;
    json!({"profile": {"action": "accept", "content": content}, "consent": {"action": "accept"}})
        .to_string()
}

/// Invalid submissions with secret content, and the code each must get.
fn invalid_answers(s: &mut Secrets) -> Vec<(String, ErrorCode, &'static str)> {
    use ErrorCode::*;
    let mut cases = Vec::new();
    let mut add =
        |text: String, code: ErrorCode, label: &'static str| cases.push((text, code, label));
    for (field, label) in [
        ("email", "format email"),
        ("age", "integer type"),
        ("name", "maxLength"),
        ("color", "enum"),
        ("size", "oneOf const"),
        ("site", "format uri"),
        ("day", "format date"),
        ("unknown", "unknown field"),
    ] {
        add(
            with_field(field, json!(s.secret("answer content (invalid value)"))),
            SchemaViolation,
            label,
        );
    }
    add(
        with_field("tags", json!([s.secret("answer content (invalid value)")])),
        SchemaViolation,
        "array item enum",
    );
    add(
        with_field(
            "note",
            json!(s.secret("answer content (invalid value)").repeat(8)),
        ),
        SchemaViolation,
        "maxLength 200",
    );
    let secret = s.secret("answer content (misplaced)");
    add(
        json!({"profile": {"action": "accept", "content": {"email": "a@b.co", "age": 1}},
               "consent": {"action": "accept", "content": {"token": secret}}})
        .to_string(),
        ContentNotAllowed,
        "URL accept with content",
    );
    let secret = s.secret("answer content (misplaced)");
    add(
        json!({"profile": {"action": "decline", "content": {"email": secret}},
               "consent": {"action": "accept"}})
        .to_string(),
        ContentNotAllowed,
        "decline with content",
    );
    let secret = s.secret("answer content (misplaced)");
    add(
        json!({"profile": {"action": "accept", "content": secret}, "consent": {"action": "accept"}})
            .to_string(),
        ContentRequired,
        "string content",
    );
    let secret = s.secret("answer content (misplaced)");
    add(
        json!({"profile": {"action": secret}, "consent": {"action": "accept"}}).to_string(),
        InvalidAction,
        "secret action",
    );
    let secret = s.secret("answer content (misplaced)");
    add(
        json!({"profile": secret, "consent": {"action": "accept"}}).to_string(),
        InvalidResponse,
        "response is a string",
    );
    let secret = s.secret("answer content (misplaced)");
    add(json!([secret]).to_string(), InvalidResponse, "array map");
    let secret = s.secret("answer content (misplaced)");
    add(
        json!({"profile": {"action": "accept", "content": {"email": "a@b.co", "age": 1, "note": secret}}})
            .to_string(),
        ResponseKeysMismatch,
        "missing consent",
    );
    let secret = s.secret("answer content (malformed JSON)");
    add(
        format!(r#"{{"profile":{{"action":"accept","content":{{"note":"{secret}"#),
        MalformedJson,
        "truncated",
    );
    let secret = s.secret("answer content (malformed JSON)");
    add(
        format!(r#"{{"profile":{{"action":"accept","content":{{"note":{secret}}}}}}}"#),
        MalformedJson,
        "unquoted",
    );
    let (a, b) = (
        s.secret("answer content (malformed JSON)"),
        s.secret("answer content (malformed JSON)"),
    );
    add(
        format!(
            r#"{{"profile":{{"action":"accept","content":{{"email":"a@b.co","age":1,"note":"{a}","note":"{b}"}}}},"consent":{{"action":"accept"}}}}"#
        ),
        MalformedJson,
        "duplicate key",
    );
    let secret = s.secret("answer content (malformed JSON)");
    add(
        format!("{} {secret}", valid("x")),
        MalformedJson,
        "trailing data",
    );
    let secret = s.secret("answer content (malformed JSON)");
    add(
        format!(r#"{{"profile":{{"action":"accept","content":{{"note":"{secret}\q"}}}}}}"#),
        MalformedJson,
        "bad escape",
    );
    let secret = s.secret("answer content (malformed JSON)");
    add(
        format!(
            "{{\"profile\":{{\"action\":\"accept\",\"content\":{{\"note\":\"{secret}\n\"}}}}}}"
        ),
        MalformedJson,
        "raw control character",
    );
    let secret = s.secret("answer content (malformed JSON)");
    add(
        format!(r#"{{"profile":{{"action":"accept","content":{{"note":"\ud800{secret}"}}}}}}"#),
        MalformedJson,
        "lone surrogate",
    );
    let secret = s.secret("answer content (malformed JSON)");
    add(
        format!(r#"{{"profile":{{"action":"accept","content":{{"note":"{secret}","age":NaN}}}}}}"#),
        MalformedJson,
        "NaN",
    );
    cases
}

/// One case: a main round taken through every error, plus rounds whose lease or deadline
/// lapsed.
fn run_case(s: &mut Secrets, store: &SqliteManagedInputStore, clock: &ManualClock, case: usize) {
    let id = format!("case-{case}-main");
    let created = s.accepted(
        &format!("{id}: create"),
        store.create_round(&round(&id, Some(claim(OWNER, LONG_TTL)))),
    );
    let lease = created.lease.clone().expect("owned");
    s.lease(&lease, "lease tokens (granted)");

    // Rejected submissions: nothing stored, the key not consumed.
    for (text, code, label) in invalid_answers(s) {
        let key = s.secret("idempotency keys (rejected submissions)");
        let what = format!("{id}: {label}");
        s.refused(
            &what,
            store.submit_responses_json(&id, &text, &key),
            VALIDATION,
            code,
        );
    }
    let key = s.secret("idempotency keys (invalid)");
    s.refused(
        &format!("{id}: over-long key"),
        store.submit_responses_json(&id, &valid("x"), &key.repeat(20)),
        VALIDATION,
        ErrorCode::InvalidId,
    );
    let key = s.secret("idempotency keys (invalid)");
    s.refused(
        &format!("{id}: key with a control character"),
        store.submit_responses_json(&id, &valid("x"), &format!("{key}\n")),
        VALIDATION,
        ErrorCode::InvalidId,
    );
    let big = s.secret("answer content (oversized)").repeat(40_000);
    let key = s.secret("idempotency keys (rejected submissions)");
    s.refused(
        &format!("{id}: oversized"),
        store.submit_responses_json(&id, &valid(&big), &key),
        VALIDATION,
        ErrorCode::PayloadTooLarge,
    );
    let (note, key) = (
        s.secret("answer content (valid)"),
        s.secret("idempotency keys (rejected submissions)"),
    );
    s.refused(
        &format!("case-{case}-missing: submit"),
        store.submit_responses_json(&format!("case-{case}-missing"), &valid(&note), &key),
        STATE,
        ErrorCode::RoundNotFound,
    );
    let unchanged = store.get_round(&id).unwrap().unwrap();
    assert_eq!(
        unchanged, created,
        "{id}: a rejected submission changed the round"
    );
    s.scan_projection(&format!("{id}: before any answer"), store, &id);

    // The accepted answer, by typed map.
    let (note, key) = (
        s.secret("answer content (valid)"),
        s.secret("idempotency keys (accepted)"),
    );
    let answer = BTreeMap::from([
        (
            "profile".to_string(),
            ElicitationResponse::accept(
                json!({"email": "asha@example.com", "age": 30, "note": note}),
            ),
        ),
        ("consent".to_string(), ElicitationResponse::accept_url()),
    ]);
    let answered = s.accepted(
        &format!("{id}: submit"),
        store.submit_responses(&id, &answer, &key),
    );
    // Positive controls: the secrets are really there, only never shown.
    let stored = serde_json::to_string(&answered).expect("record serialises");
    assert!(stored.contains(&note) && stored.contains(&key) && stored.contains(&lease.lease_token));
    assert!(
        format!(
            "{:?}",
            answered.responses.as_ref().unwrap()["profile"].content
        )
        .contains(&note)
    );
    s.scan_projection(&format!("{id}: answered"), store, &id);

    let other = s.secret("answer content (valid)");
    s.refused(
        &format!("{id}: conflicting repeat"),
        store.submit_responses_json(&id, &valid(&other), &key),
        CONFLICT,
        ErrorCode::IdempotencyConflict,
    );
    let bad = s.secret("answer content (invalid value)");
    s.refused(
        &format!("{id}: invalid repeat of the key"),
        store.submit_responses_json(&id, &with_field("email", json!(bad)), &key),
        VALIDATION,
        ErrorCode::SchemaViolation,
    );
    let (late, late_key) = (
        s.secret("answer content (valid)"),
        s.secret("idempotency keys (late)"),
    );
    s.refused(
        &format!("{id}: second answer"),
        store.submit_responses_json(&id, &valid(&late), &late_key),
        STATE,
        ErrorCode::InvalidTransition,
    );
    let again = s.accepted(
        &format!("{id}: identical repeat"),
        store.submit_responses(&id, &answer, &key),
    );
    assert_eq!(again, answered);

    // Leases: forged, held by another, superseded.
    let forged_token = s.secret("lease tokens (forged)");
    let forged = ManagedInputLease {
        lease_token: forged_token,
        ..lease.clone()
    };
    let stolen = ManagedInputLease {
        owner_id: "intruder".into(),
        ..lease.clone()
    };
    for (name, bad) in [("forged token", &forged), ("stolen token", &stolen)] {
        let what = format!("{id}: {name}");
        s.refused(
            &what,
            store.start_delivery(&id, bad, "d"),
            CONFLICT,
            ErrorCode::LeaseMismatch,
        );
        s.refused(
            &what,
            store.renew(&id, bad, LONG_TTL),
            CONFLICT,
            ErrorCode::LeaseMismatch,
        );
        s.refused(
            &what,
            store.fail(&id, bad, FailureCode::Cancelled, "cancelled"),
            CONFLICT,
            ErrorCode::LeaseMismatch,
        );
        s.refused(
            &what,
            store.fail_recovery(&id, Some(bad), ""),
            CONFLICT,
            ErrorCode::LeaseMismatch,
        );
    }
    s.refused(
        &format!("{id}: recovery of a live lease"),
        store.fail_recovery(&id, None, ""),
        CONFLICT,
        ErrorCode::LeaseHeld,
    );
    s.refused(
        &format!("{id}: claim by another"),
        store.claim_round(&id, &claim("intruder", LONG_TTL)),
        CONFLICT,
        ErrorCode::LeaseHeld,
    );
    let rotated = store
        .claim_round(&id, &claim(OWNER, LONG_TTL))
        .unwrap_or_else(|e| panic!("{id}: rotate: {e}"));
    s.lease(&rotated, "lease tokens (granted)");
    let delivery_key = s.secret("delivery keys");
    s.refused(
        &format!("{id}: superseded token"),
        store.start_delivery(&id, &lease, &delivery_key),
        CONFLICT,
        ErrorCode::LeaseMismatch,
    );
    let renewed = store
        .renew(&id, &rotated, LONG_TTL)
        .unwrap_or_else(|e| panic!("{id}: renew: {e}"));
    s.lease(&renewed, "lease tokens (granted)");
    let started = s.accepted(
        &format!("{id}: start delivery"),
        store.start_delivery(&id, &renewed, &delivery_key),
    );
    assert_eq!(
        started.delivery_idempotency_key.as_deref(),
        Some(delivery_key.as_str())
    );
    let second_key = s.secret("delivery keys");
    s.refused(
        &format!("{id}: second delivery"),
        store.start_delivery(&id, &renewed, &second_key),
        STATE,
        ErrorCode::InvalidTransition,
    );

    let (late, late_key) = (
        s.secret("answer content (valid)"),
        s.secret("idempotency keys (late)"),
    );
    if case.is_multiple_of(2) {
        // The round ends resolved; everything after is refused.
        s.accepted(
            &format!("{id}: delivered"),
            store.mark_delivered(&id, &renewed),
        );
        s.accepted(&format!("{id}: resolve"), store.resolve(&id, &renewed));
        let what = format!("{id}: after resolve");
        s.refused(
            &what,
            store.submit_responses_json(&id, &valid(&late), &late_key),
            STATE,
            ErrorCode::RoundTerminal,
        );
        s.refused(
            &what,
            store.resolve(&id, &renewed),
            STATE,
            ErrorCode::RoundTerminal,
        );
        s.refused(
            &what,
            store.renew(&id, &renewed, LONG_TTL),
            STATE,
            ErrorCode::RoundTerminal,
        );
        s.refused(
            &what,
            store.claim_round(&id, &claim(OWNER, LONG_TTL)),
            STATE,
            ErrorCode::RoundTerminal,
        );
        s.refused(
            &what,
            store.fail_recovery(&id, None, ""),
            STATE,
            ErrorCode::RoundTerminal,
        );
        s.refused(
            &what,
            store.fail(&id, &renewed, FailureCode::Cancelled, "late"),
            STATE,
            ErrorCode::RoundTerminal,
        );
    } else {
        // The worker pauses past its lease; the round is recovered; everything after is refused.
        clock.advance(TimeDelta::from_std(LONG_TTL).unwrap() + TimeDelta::seconds(1));
        let what = format!("{id}: expired lease");
        s.refused(
            &what,
            store.mark_delivered(&id, &renewed),
            CONFLICT,
            ErrorCode::LeaseExpired,
        );
        s.refused(
            &what,
            store.renew(&id, &renewed, LONG_TTL),
            CONFLICT,
            ErrorCode::LeaseExpired,
        );
        s.refused(
            &what,
            store.claim_round(&id, &claim("replacement", LONG_TTL)),
            RECOVERY,
            ErrorCode::ReclaimUnsafe,
        );
        s.accepted(
            &format!("{id}: recover"),
            store.fail_recovery(&id, None, ""),
        );
        let what = format!("{id}: after recovery");
        s.refused(
            &what,
            store.submit_responses_json(&id, &valid(&late), &late_key),
            RECOVERY,
            ErrorCode::RecoveryUnavailable,
        );
        s.refused(
            &what,
            store.mark_delivered(&id, &renewed),
            RECOVERY,
            ErrorCode::RecoveryUnavailable,
        );
        s.refused(
            &what,
            store.fail_recovery(&id, None, ""),
            STATE,
            ErrorCode::RoundTerminal,
        );
    }
    let last = s.accepted(
        &format!("{id}: identical repeat after the end"),
        store.submit_responses(&id, &answer, &key),
    );
    s.scan_projection(&format!("{id}: ended"), store, &id);
    assert!(
        serde_json::to_string(&last)
            .unwrap()
            .contains(&delivery_key)
    );

    // A pending round whose worker's lease lapsed: a late answer is refused.
    let lapsed = format!("case-{case}-lapsed");
    let record = s.accepted(
        &format!("{lapsed}: create"),
        store.create_round(&round(
            &lapsed,
            Some(claim(OWNER, Duration::from_millis(1))),
        )),
    );
    s.lease(
        record.lease.as_ref().expect("owned"),
        "lease tokens (granted)",
    );
    clock.advance(TimeDelta::seconds(1));
    let (note, key) = (
        s.secret("answer content (valid)"),
        s.secret("idempotency keys (late)"),
    );
    s.refused(
        &format!("{lapsed}: answer after the lease lapsed"),
        store.submit_responses_json(&lapsed, &valid(&note), &key),
        RECOVERY,
        ErrorCode::RecoveryUnavailable,
    );

    // An unowned round whose deadline passed.
    let late_round = format!("case-{case}-deadline");
    let mut new = round(&late_round, None);
    new.deadline = Deadline::At(clock.now() + TimeDelta::seconds(1));
    s.accepted(&format!("{late_round}: create"), store.create_round(&new));
    clock.advance(TimeDelta::seconds(2));
    let (note, key) = (
        s.secret("answer content (valid)"),
        s.secret("idempotency keys (late)"),
    );
    s.refused(
        &format!("{late_round}: answer after the deadline"),
        store.submit_responses_json(&late_round, &valid(&note), &key),
        STATE,
        ErrorCode::DeadlineExceeded,
    );
}

/// The scenario proper (in the child process).
fn scenario(secrets_file: &Path) {
    let db = TempDb::new();
    let clock = manual_clock();
    let store = open(
        &db.path,
        StoreOptions {
            clock: clock.clone(),
            synchronous: Synchronous::Normal,
            ..StoreOptions::default()
        },
    );
    // The parent chose the seed and passes it on as `M3_SEED` (the child is the same test).
    let mut s = Secrets::new(RandomTest::Redaction.seed());
    let cases = CASES * soak_factor();
    for case in 0..cases {
        run_case(&mut s, &store, &clock, case);
    }
    let all = store.list_rounds(&RoundFilter::default()).expect("list");
    assert_eq!(all.len(), cases * 3);
    s.scan("list_rounds Debug", &format!("{all:#?}"));
    for record in &all {
        s.scan_record(&record.pending.round_id, record);
    }
    s.scan("store Debug", &format!("{store:?}"));
    assert!(
        s.generated.len() >= MIN_SECRETS * soak_factor(),
        "only {} secrets placed",
        s.generated.len()
    );
    let mut lines = s.generated.clone();
    lines.extend(s.tokens.iter().cloned());
    std::fs::write(secrets_file, lines.join("\n")).expect("write the secrets file");
    println!(
        "redaction (library): {cases} cases, {} generated secrets and {} granted lease tokens; \
         {} texts scanned, {} errors provoked; none leaked",
        s.generated.len(),
        s.tokens.len(),
        s.texts_scanned,
        s.errors_by_code.values().sum::<usize>()
    );
    println!("  secrets by place: {:?}", s.by_place);
    println!("  errors by code: {:?}", s.errors_by_code);
}

#[test]
fn secrets_never_appear_in_errors_debug_output_or_streams() {
    if let Some(file) = std::env::var_os(CHILD_ENV) {
        scenario(Path::new(&file));
        return;
    }
    // The parent: run the scenario in a child and scan everything it printed.
    let dir = tempfile::tempdir().expect("temp dir");
    let secrets_file = dir.path().join("secrets.txt");
    let seed = RandomTest::Redaction.seed();
    let test = RandomTest::Redaction.filter(None);
    let output = Command::new(std::env::current_exe().expect("test binary"))
        .args([test.as_str(), "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, &secrets_file)
        .env(SEED_VARIABLE, format!("{seed:x}"))
        .env("RUST_BACKTRACE", "1")
        .output()
        .expect("run the child");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the child failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        output.status
    );
    assert!(
        stdout.contains("1 passed"),
        "the child ran no test:\n{stdout}"
    );
    let listed = std::fs::read_to_string(&secrets_file).expect("the child's secrets");
    let secrets: Vec<&str> = listed.lines().collect();
    let generated = secrets.iter().filter(|s| s.starts_with(PREFIX)).count();
    let tokens = secrets.len() - generated;
    assert!(
        generated >= MIN_SECRETS && tokens >= CASES * 3,
        "{generated} / {tokens}"
    );
    for (stream, text) in [("stdout", &stdout), ("stderr", &stderr)] {
        assert!(
            !text.contains(PREFIX),
            "child {stream} holds a secret:\n{text}"
        );
        for secret in &secrets {
            let n = secret.len();
            for piece in [*secret, &secret[..12], &secret[n - 12..]] {
                assert!(
                    !text.contains(piece),
                    "child {stream} holds a secret:\n{text}"
                );
            }
        }
    }
    // The child's figures (libtest prints them after its "test ... " prefix).
    for line in stdout.lines() {
        if let Some(at) = line.find("redaction (library)") {
            println!("{}", &line[at..]);
        } else if line.starts_with("  ") {
            println!("{line}");
        }
    }
    println!(
        "redaction (streams): the child's stdout ({} bytes) and stderr ({} bytes) hold none of \
         its {} secrets",
        stdout.len(),
        stderr.len(),
        secrets.len()
    );
}
