//! Catalogue item 9 of `reliability.md`, the command's half (the library's is
//! `tests/all/redaction.rs`): secrets placed in answers, idempotency keys, delivery keys and
//! lease tokens never appear in the `m3` command's stderr, nor in the stdout of the commands that
//! list or summarise rounds (`show --redacted`, `rounds`, `pending`, `status`, `executions`,
//! `recover`, and `respond` without `--json`).
//!
//! Rounds are created through the library on a real database file, with a queued execution
//! submitted through the library for them to belong to (so `status` has something to show).
//! Secrets are a recognizable prefix ([`PREFIX`]) and 24 random alphanumerics from a fixed seed;
//! the lease tokens the store grants count as secrets too. Then the real binary is run: answers
//! whose secret violates the schema (`format: email`, an integer field, `maxLength`), malformed
//! JSON with secrets (caught by the command itself and by the component's parser), content where
//! none is allowed, an over-long secret key, a missing round, a round whose worker's lease
//! lapsed, a conflicting repeat of a secret key, a second answer, an answer to a resolved round,
//! and `validate` with no database. Every stderr must hold no secret (and start with the typed
//! error's name and code where one is expected); so must the listed stdouts. `show` without
//! `--redacted` is an operator's explicit read of the answers: it is the positive control (it
//! does print the answer and its key, so the scan can see them) and must still hold no lease
//! token.

use m3::{
    ElicitationRequest, ElicitationResponse, ManagedInputLease, ManagedInputStore, NewRound,
    OwnerClaim, SqliteExecutionStore,
};
use m3_tests::rng::Rng;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The binary under test.
const M3: &str = env!("CARGO_BIN_EXE_m3");
/// Every generated secret starts with this.
const PREFIX: &str = "zqxSECRET";
/// The seed of the secrets.
const SEED: u64 = 0x636c_6953_6563_7265;
/// The longest one command may take.
const TIMEOUT: Duration = Duration::from_secs(60);
/// The worker that owns the rounds (its leases outlive the test).
const OWNER: &str = "worker-cli-redaction";

/// What one command did.
struct Run {
    what: String,
    success: bool,
    stdout: String,
    stderr: String,
}

/// The sandbox, the secrets and the scanner.
struct Fixture {
    dir: tempfile::TempDir,
    db: PathBuf,
    rng: Rng,
    generated: usize,
    tokens: Vec<String>,
    commands: usize,
    streams_scanned: usize,
}

impl Fixture {
    fn secret(&mut self) -> String {
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
        let body: String = (0..24)
            .map(|_| ALPHABET[(self.rng.next_u64() % ALPHABET.len() as u64) as usize] as char)
            .collect();
        self.generated += 1;
        format!("{PREFIX}{body}")
    }

    fn token(&mut self, lease: &ManagedInputLease) {
        assert!(lease.lease_token.len() >= 24);
        self.tokens.push(lease.lease_token.clone());
    }

    fn write(&self, name: &str, contents: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, contents).expect("write a test file");
        path
    }

    /// Runs `m3 --db <db> ARGS...` to its end, scanning its stderr.
    fn m3(&mut self, args: &[&str]) -> Run {
        let mut cmd = Command::new(M3);
        cmd.current_dir(self.dir.path())
            .env_remove("M3_DB")
            .env("RUST_BACKTRACE", "1")
            .arg("--db")
            .arg(&self.db)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let what = format!("m3 {}", args.join(" "));
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("{what}: {e}"));
        let read = |mut pipe: Box<dyn Read + Send>| {
            let (tx, rx) = mpsc::channel();
            std::thread::spawn(move || {
                let mut bytes = Vec::new();
                let _ = pipe.read_to_end(&mut bytes);
                let _ = tx.send(String::from_utf8_lossy(&bytes).into_owned());
            });
            rx
        };
        let stdout = read(Box::new(child.stdout.take().expect("stdout")));
        let stderr = read(Box::new(child.stderr.take().expect("stderr")));
        let until = Instant::now() + TIMEOUT;
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait") {
                break status;
            }
            if Instant::now() >= until {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{what} did not finish within {TIMEOUT:?}");
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let stdout = stdout.recv_timeout(TIMEOUT).expect("stdout closed");
        let stderr = stderr.recv_timeout(TIMEOUT).expect("stderr closed");
        self.commands += 1;
        assert!(!stderr.contains("panicked"), "{what} panicked:\n{stderr}");
        self.scan(&format!("{what}: stderr"), &stderr, true);
        Run {
            what,
            success: status.success(),
            stdout,
            stderr,
        }
    }

    /// Panics if `text` holds a generated secret (`generated`) or a piece of a lease token.
    fn scan(&mut self, what: &str, text: &str, generated: bool) {
        self.streams_scanned += 1;
        if generated {
            assert!(!text.contains(PREFIX), "{what} holds a secret:\n{text}");
        }
        for token in &self.tokens {
            let n = token.len();
            for piece in [token.as_str(), &token[..12], &token[n - 12..]] {
                assert!(!text.contains(piece), "{what} holds a lease token:\n{text}");
            }
        }
    }

    /// Runs a listing command: it must succeed with no secret in stdout either.
    fn listing(&mut self, args: &[&str]) -> Run {
        let run = self.m3(args);
        assert!(run.success, "{} failed:\n{}", run.what, run.stderr);
        self.scan(&format!("{}: stdout", run.what), &run.stdout, true);
        run
    }

    /// Runs a command that must fail with `kind` and `code` on the first stderr line.
    fn refused(&mut self, args: &[&str], kind: &str, code: &str) -> Run {
        let run = self.m3(args);
        assert!(
            !run.success,
            "{} should have failed:\n{}",
            run.what, run.stdout
        );
        let first = run.stderr.lines().next().unwrap_or_default();
        assert!(
            first.starts_with(&format!("{kind}: ")) && first.contains(code),
            "{}: expected {kind} ({code}), got:\n{}",
            run.what,
            run.stderr
        );
        self.scan(&format!("{}: stdout", run.what), &run.stdout, true);
        run
    }
}

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "email": {"type": "string", "format": "email"},
            "age": {"type": "integer", "minimum": 0},
            "note": {"type": "string", "maxLength": 200}
        },
        "required": ["email", "age"]
    })
}

fn new_round(round_id: &str, execution_id: &str, ttl: Duration) -> NewRound {
    let requests = BTreeMap::from([(
        "profile".to_string(),
        ElicitationRequest::form("Who are you?", schema()),
    )]);
    NewRound::new(round_id, execution_id, "profiles", "register", requests).owned_by(OwnerClaim {
        owner_id: OWNER.into(),
        lease_ttl: ttl,
    })
}

/// `--accept profile=<content>`.
fn accept(content: &Value) -> String {
    format!("profile={content}")
}

fn valid(note: &str) -> Value {
    json!({"email": "asha@example.com", "age": 30, "note": note})
}

/// A queued execution for the rounds to belong to (never run: no worker is started).
fn submit_execution(db: &Path) -> String {
    let store = std::sync::Arc::new(SqliteExecutionStore::open(db).expect("open the executions"));
    // Queued for the whole test: its submitter's hold must not expire meanwhile.
    let kit = m3::McpTestKit::with_options(
        store,
        BTreeMap::<String, String>::new(),
        m3::KitOptions {
            lease_ttl: Duration::from_secs(3_600),
            lease_renew: Duration::from_secs(5),
        },
    )
    .expect("a kit");
    let agent = kit
        .agents([m3::AgentSpec::scripted(m3::Script::call(
            "profiles:register",
            json!({}),
        ))])
        .expect("an agent")
        .remove(0);
    m3::testing::submit_without_running(
        &agent,
        m3::Submission::new(
            "register a profile",
            m3::StdioServer::new("profiles", M3).args(["shipping-server"]),
        )
        .tools(["profiles:register"])
        .human_input(m3::HumanInput::Managed),
    )
    .unwrap_or_else(|e| panic!("submit: {e:?}"))
}

#[test]
fn the_command_never_prints_secrets_on_stderr_or_in_listings() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("x.sqlite");
    let mut f = Fixture {
        dir,
        db,
        rng: Rng::new(SEED),
        generated: 0,
        tokens: Vec::new(),
        commands: 0,
        streams_scanned: 0,
    };
    let exec = submit_execution(&f.db);
    let store = m3::SqliteManagedInputStore::open(&f.db, m3::StoreOptions::default())
        .expect("open the store");
    let long = Duration::from_secs(3600);

    // The round the command answers.
    let main = store
        .create_round(&new_round("round-main", &exec, long))
        .expect("create");
    f.token(main.lease.as_ref().expect("owned"));
    // A round that stays pending (for `validate`'s round file).
    let spare = store
        .create_round(&new_round("round-spare", &exec, long))
        .expect("create");
    f.token(spare.lease.as_ref().expect("owned"));
    // A round whose worker's lease lapsed at once (system clock, 1 ms lease).
    let lapsed = store
        .create_round(&new_round("round-lapsed", &exec, Duration::from_millis(1)))
        .expect("create");
    f.token(lapsed.lease.as_ref().expect("owned"));
    // A resolved round and one mid-delivery, answered through the library with secrets.
    let mut ended = Vec::new();
    for (id, finish) in [("round-done", true), ("round-delivering", false)] {
        let record = store
            .create_round(&new_round(id, &exec, long))
            .expect("create");
        let lease = record.lease.expect("owned");
        f.token(&lease);
        let (note, key, delivery) = (f.secret(), f.secret(), f.secret());
        let answer = BTreeMap::from([(
            "profile".to_string(),
            ElicitationResponse::accept(valid(&note)),
        )]);
        store.submit_responses(id, &answer, &key).expect("submit");
        store.start_delivery(id, &lease, &delivery).expect("start");
        if finish {
            store.mark_delivered(id, &lease).expect("delivered");
            store.resolve(id, &lease).expect("resolve");
        }
        ended.push((id, note, key));
    }
    std::thread::sleep(Duration::from_millis(5)); // past the 1 ms lease (system clock)
    let validation = "ManagedInputValidationError";

    // Answers whose secret breaks the schema; each with a secret key.
    for (field, value) in [
        ("email", json!(f.secret())),
        ("age", json!(f.secret())),
        ("note", json!(f.secret().repeat(8))),
        ("unknown", json!(f.secret())),
    ] {
        let mut content = valid("fine");
        content[field] = value;
        let key = f.secret();
        f.refused(
            &[
                "respond",
                "round-main",
                "--idempotency-key",
                &key,
                "--accept",
                &accept(&content),
            ],
            validation,
            "schema_violation",
        );
    }
    // Malformed content: the command's own check, then the component's parser.
    let (secret, key) = (f.secret(), f.secret());
    f.refused(
        &[
            "respond",
            "round-main",
            "--idempotency-key",
            &key,
            "--accept",
            &format!(r#"profile={{"email":"{secret}""#),
        ],
        validation,
        "malformed_json",
    );
    let malformed = [
        format!(
            r#"{{"profile":{{"action":"accept","content":{{"email":"a@b.co","age":1,"note":"{}"}}}}}} {}"#,
            f.secret(),
            f.secret()
        ),
        format!(
            r#"{{"profile":{{"action":"accept","content":{{"email":"a@b.co","age":1,"note":"{}","note":"{}"}}}}}}"#,
            f.secret(),
            f.secret()
        ),
        format!(
            r#"{{"profile":{{"action":"accept","content":{{"note":{}}}}}}}"#,
            f.secret()
        ),
    ];
    for (i, text) in malformed.iter().enumerate() {
        let file = f.write(&format!("malformed-{i}.json"), text);
        let key = f.secret();
        f.refused(
            &[
                "respond",
                "round-main",
                "--idempotency-key",
                &key,
                "--responses",
                file.to_str().expect("utf-8 path"),
            ],
            validation,
            "malformed_json",
        );
    }
    let declined = json!({"profile": {"action": "decline", "content": {"email": f.secret()}}});
    let file = f.write("decline.json", &declined.to_string());
    let key = f.secret();
    f.refused(
        &[
            "respond",
            "round-main",
            "--idempotency-key",
            &key,
            "--responses",
            file.to_str().expect("utf-8 path"),
        ],
        validation,
        "content_not_allowed",
    );
    let (note, key) = (f.secret(), f.secret());
    f.refused(
        &[
            "respond",
            "round-main",
            "--idempotency-key",
            &key.repeat(20),
            "--accept",
            &accept(&valid(&note)),
        ],
        validation,
        "invalid_id",
    );
    let (note, key) = (f.secret(), f.secret());
    f.refused(
        &[
            "respond",
            "round-missing",
            "--idempotency-key",
            &key,
            "--accept",
            &accept(&valid(&note)),
        ],
        "ManagedInputStateError",
        "round_not_found",
    );
    let (note, key) = (f.secret(), f.secret());
    f.refused(
        &[
            "respond",
            "round-lapsed",
            "--idempotency-key",
            &key,
            "--accept",
            &accept(&valid(&note)),
        ],
        "ManagedInputRecoveryError",
        "recovery_unavailable",
    );

    // The accepted answer, its conflicting repeat, a second answer.
    let (note, key) = (f.secret(), f.secret());
    let accepted = f.m3(&[
        "respond",
        "round-main",
        "--idempotency-key",
        &key,
        "--accept",
        &accept(&valid(&note)),
    ]);
    assert!(accepted.success, "respond failed:\n{}", accepted.stderr);
    assert!(
        accepted.stdout.contains("response_validated"),
        "{}",
        accepted.stdout
    );
    f.scan("respond: stdout", &accepted.stdout, true);
    let other = f.secret();
    f.refused(
        &[
            "respond",
            "round-main",
            "--idempotency-key",
            &key,
            "--accept",
            &accept(&valid(&other)),
        ],
        "ManagedInputConflict",
        "idempotency_conflict",
    );
    let (late, late_key) = (f.secret(), f.secret());
    f.refused(
        &[
            "respond",
            "round-main",
            "--idempotency-key",
            &late_key,
            "--accept",
            &accept(&valid(&late)),
        ],
        "ManagedInputStateError",
        "invalid_transition",
    );
    let (late, late_key) = (f.secret(), f.secret());
    f.refused(
        &[
            "respond",
            "round-done",
            "--idempotency-key",
            &late_key,
            "--accept",
            &accept(&valid(&late)),
        ],
        "ManagedInputStateError",
        "round_terminal",
    );

    // `validate`, with no database: a pending round as `pending --json` prints it.
    let pending = f.listing(&["--json", "pending"]);
    let rounds: Value = serde_json::from_str(&pending.stdout).expect("pending JSON");
    let round = rounds
        .as_array()
        .and_then(|a| a.iter().find(|r| r["round_id"] == "round-spare"))
        .expect("the spare round is pending")
        .clone();
    let round_file = f.write("round.json", &round.to_string());
    let mut content = valid("fine");
    content["email"] = json!(f.secret());
    let answers_file = f.write(
        "answers.json",
        &json!({"profile": {"action": "accept", "content": content}}).to_string(),
    );
    f.refused(
        &[
            "validate",
            "--round",
            round_file.to_str().expect("utf-8 path"),
            "--responses",
            answers_file.to_str().expect("utf-8 path"),
        ],
        validation,
        "schema_violation",
    );

    // Listings and summaries.
    for args in [
        &["show", "round-main", "--redacted"][..],
        &["--json", "show", "round-main", "--redacted"],
        &["show", "round-done", "--redacted"],
        &["--json", "show", "round-delivering", "--redacted"],
        &["rounds"],
        &["--json", "rounds"],
        &["--json", "rounds", "--status", "delivery_started"],
        &["pending"],
        &["status", &exec],
        &["--json", "status", &exec],
        &["executions"],
        &["--json", "executions"],
    ] {
        f.listing(args);
    }
    let redacted = f.listing(&["--json", "show", "round-main", "--redacted"]);
    let redacted: Value = serde_json::from_str(&redacted.stdout).expect("show JSON");
    assert_eq!(redacted["redacted"], json!(true));
    assert_eq!(redacted["status"], json!("response_validated"));
    assert!(
        redacted["responses"]["profile"]
            .get("content_sha256")
            .is_none()
    );

    // The positive control: the explicit read shows the answer and its key (so the scan can
    // see them), and still no lease token.
    for (id, note, key) in ended
        .iter()
        .map(|(id, n, k)| (*id, n.as_str(), k.as_str()))
        .chain([("round-main", note.as_str(), key.as_str())])
    {
        let shown = f.m3(&["--json", "show", id]);
        assert!(shown.success, "{}", shown.stderr);
        assert!(
            shown.stdout.contains(note) && shown.stdout.contains(key),
            "{id}: the explicit read should show the stored answer and key"
        );
        f.scan(&format!("show {id}: stdout"), &shown.stdout, false);
    }

    // The listings recovered the lapsed round before listing it (`recover` finds nothing left);
    // the listings stay clean afterwards.
    let recovered = f.listing(&["--json", "recover"]);
    let report: Value = serde_json::from_str(&recovered.stdout).expect("recover JSON");
    assert_eq!(report["rounds_failed"], json!(0), "{report}");
    let lapsed: Value = serde_json::from_str(
        &f.listing(&["--json", "show", "round-lapsed", "--redacted"])
            .stdout,
    )
    .expect("show JSON");
    assert_eq!(lapsed["status"], json!("failed"));
    assert_eq!(lapsed["failure_code"], json!("recovery_unavailable"));
    f.listing(&["--json", "status", &exec]);
    f.listing(&["rounds", "--status", "failed"]);

    assert!(f.generated >= 40, "only {} secrets", f.generated);
    println!(
        "redaction (CLI): {} commands run, {} generated secrets and {} lease tokens, {} streams \
         scanned; no secret in any stderr or listing",
        f.commands,
        f.generated,
        f.tokens.len(),
        f.streams_scanned
    );
}
