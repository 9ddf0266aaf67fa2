//! `m3 serve --notify`, tested with real processes and a real webhook receiver
//! (`receiving/`): a round started by `m3 run` in another process produces one signed
//! notification whose link opens that round's page; a receiver that fails gets the same event
//! again; a server killed mid-queue and started again delivers what was left and nothing twice;
//! a hanging receiver delays neither the inbox nor other targets; several servers on one
//! database deliver each event once between them; the Slack body keeps to Slack's
//! incoming-webhook fields; no secret reaches a body; an `https` target gets TLS, never a
//! request in clear; bad flags are refused without quoting a target. SQLite and PostgreSQL
//! both.

mod common;
mod receiving;
mod serving;

use common::*;
use hmac::{Hmac, Mac};
use receiving::{Answer, Delivery, Receiver};
use serde_json::{Value, json};
use serving::*;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// How long a test waits for a notification it expects.
const WAIT: Duration = Duration::from_secs(90);
/// The signing secret the tests use.
const SECRET: &str = "notify-secret-0123456789";

/// `--notify URL --notify-secret-file FILE` plus `extra`, the file written in the sandbox.
fn notify_args(sb: &Sandbox, urls: &[String], extra: &[&str]) -> Vec<String> {
    let secret = sb.write("notify-secret", &format!("{SECRET}\n"));
    let mut args = Vec::new();
    for url in urls {
        args.extend(["--notify".to_string(), url.clone()]);
    }
    args.extend([
        "--notify-secret-file".to_string(),
        secret.display().to_string(),
    ]);
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

fn start(sb: &Sandbox, args: &[String]) -> Server {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Server::start(sb, &args, None)
}

/// The receiver's check of a delivery's signature: HMAC-SHA256 of `TIMESTAMP.BODY` with the
/// secret, the timestamp within five minutes of now.
fn verify(d: &Delivery) {
    let timestamp: i64 = d.header("x-m3-timestamp").parse().expect("a timestamp");
    let now = chrono::Utc::now().timestamp();
    assert!((now - timestamp).abs() < 300, "{timestamp} vs {now}");
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(format!("{timestamp}.").as_bytes());
    mac.update(&d.body);
    let expected = format!("v1={}", hex::encode(mac.finalize().into_bytes()));
    assert_eq!(d.header("x-m3-signature"), expected, "the signature checks");
    // A body changed by one byte no longer matches.
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(format!("{timestamp}.").as_bytes());
    mac.update(&d.body[1..]);
    assert_ne!(
        d.header("x-m3-signature"),
        format!("v1={}", hex::encode(mac.finalize().into_bytes()))
    );
}

/// The README's receiver check (`verify` of its notification section), run as printed by
/// `python3` on `body` with a delivery's headers.
fn readme_verify(d: &Delivery, body: &[u8]) -> bool {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))
        .expect("the README");
    let section = &readme[readme
        .find("### Telling people when an answer is needed")
        .expect("the README's notification section")..];
    let start = section.find("```python\n").expect("its Python") + "```python\n".len();
    let code = &section[start..start + section[start..].find("```").unwrap()];
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("body");
    std::fs::write(&file, body).unwrap();
    let script = format!(
        "{code}\nimport sys\nbody = open(sys.argv[1], 'rb').read()\n\
         print(verify(sys.argv[2].encode(), sys.argv[3], sys.argv[4], body))\n"
    );
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(&file)
        .arg(SECRET)
        .arg(d.header("x-m3-timestamp"))
        .arg(d.header("x-m3-signature"))
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim() == "True"
}

fn of_event<'a>(deliveries: &'a [Delivery], event: &str) -> Vec<&'a Delivery> {
    deliveries
        .iter()
        .filter(|d| d.header("x-m3-event") == event)
        .collect()
}

fn event_ids(deliveries: &[Delivery]) -> Vec<String> {
    deliveries
        .iter()
        .map(|d| d.header("x-m3-event-id").to_string())
        .collect()
}

/// A round started by `m3 run` in another process: one signed `round_waiting` whose link
/// opens that round's page, then (answered through the API) `execution_finished`; each event
/// once, nothing secret in either.
#[test]
fn a_waiting_round_is_notified_once_signed_with_a_link_to_its_form() {
    waiting_round_is_notified(Sandbox::new());
}

/// The same on PostgreSQL.
#[test]
fn a_waiting_round_is_notified_once_signed_with_a_link_to_its_form_on_postgres() {
    waiting_round_is_notified(Sandbox::postgres());
}

fn waiting_round_is_notified(sb: Sandbox) {
    sb.create_database();
    let receiver = Receiver::start(&[]);
    let url = format!("{}/hooks/m3?team=qa", receiver.base);
    let server = start(
        &sb,
        &notify_args(&sb, &[url], &["--notify-on", "waiting,failed,finished"]),
    );
    let run = sb.spawn_run("legacy", &[], &[]);
    let round = server.wait_pending();
    let (round_id, execution_id) = ids(&round);

    let got = receiver.wait_for(WAIT, "round_waiting", |d| {
        !of_event(d, "round_waiting").is_empty()
    });
    let d = of_event(&got, "round_waiting")[0];
    assert_eq!(d.path, "/hooks/m3?team=qa");
    assert_eq!(d.header("content-type"), "application/json");
    assert_eq!(d.header("x-m3-delivery-attempt"), "1");
    verify(d);
    assert!(readme_verify(d, &d.body), "the README's check takes it");
    assert!(
        !readme_verify(d, &d.body[1..]),
        "and refuses a changed body"
    );
    let body = d.json();
    assert_eq!(body["version"], 1);
    assert_eq!(body["event"], "round_waiting");
    assert_eq!(body["event_id"], d.header("x-m3-event-id"));
    assert_eq!(body["round"]["round_id"], round_id.as_str());
    assert_eq!(body["round"]["execution_id"], execution_id.as_str());
    assert_eq!(body["round"]["server"], round["server"]);
    assert_eq!(body["round"]["operation"]["name"], "book_shipment");
    assert_eq!(body["round"]["status"], "pending");
    let request = &body["round"]["requests"][0];
    assert_eq!(request["key"], "shipping_address");
    assert_eq!(request["mode"], "form");
    let fields: Vec<&str> = request["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert!(
        fields.contains(&"street") && fields.contains(&"city"),
        "{body}"
    );
    timestamp(&body["occurred_at"], "occurred_at");
    // The link opens the round's page on this server.
    let link = body["link"].as_str().unwrap();
    assert_eq!(link, format!("{}/rounds/{round_id}", server.base));
    let page = server.exchange("GET", &link[server.base.len()..], &[], None);
    assert_eq!(page.status, 200);
    assert_eq!(page.media_type(), "text/html");

    let answered = server.answer(&round_id, &answer("notify-key-1"));
    assert_eq!(answered.status, 200, "{}", answered.body);
    let (out, lines) = run.finish();
    check_run_stdout(&out, &lines);
    let got = receiver.wait_for(WAIT, "execution_finished", |d| {
        !of_event(d, "execution_finished").is_empty()
    });
    let finished = of_event(&got, "execution_finished")[0].json();
    assert_eq!(finished["execution"]["execution_id"], execution_id.as_str());
    assert_eq!(finished["execution"]["outcome"], "succeeded");
    assert_eq!(
        finished["link"],
        format!("{}/executions/{execution_id}", server.base)
    );
    // Nothing more, nothing twice; no answer, key or lease in any body.
    std::thread::sleep(Duration::from_secs(2));
    let all = receiver.deliveries();
    assert_eq!(
        event_ids(&all),
        [
            format!("round_waiting:{round_id}"),
            format!("execution_finished:{execution_id}")
        ]
    );
    for d in &all {
        let text = String::from_utf8_lossy(&d.body);
        for secret in [STREET, CITY, "notify-key-1", "lease_token", SECRET] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        verify(d);
    }
    let (_, stderr) = server.stop();
    assert!(stderr.contains("notifying 1 target(s)"), "{stderr}");
    assert!(
        !stderr.contains("/hooks/m3"),
        "the target's path is never logged"
    );
}

/// A receiver that fails twice (500, then a redirect, which is not followed) gets the event a
/// second and a third time, with the same id and body, and then no more; the server's log says
/// the target failed and then that it is delivered again, without the target's path.
#[test]
fn a_receiver_that_fails_twice_gets_the_same_event_again() {
    let sb = Sandbox::new();
    sb.create_database();
    let receiver = Receiver::start(&[Answer::Status(500), Answer::Redirect]);
    let url = format!("{}/secret-path", receiver.base);
    let server = start(
        &sb,
        &notify_args(&sb, &[url], &["--notify-retry-secs", "0.05"]),
    );
    let _run = sb.spawn_run("legacy", &[], &[]);
    let got = receiver.wait_for(WAIT, "three tries", |d| d.len() >= 3);
    std::thread::sleep(Duration::from_secs(2));
    let all = receiver.deliveries();
    assert_eq!(all.len(), 3, "{:?}", event_ids(&all));
    let answers: Vec<Answer> = all.iter().map(|d| d.answer).collect();
    assert_eq!(answers, [Answer::Status(500), Answer::Redirect, Answer::Ok]);
    let ids: BTreeSet<String> = event_ids(&all).into_iter().collect();
    assert_eq!(ids.len(), 1, "one event: {ids:?}");
    let attempts: Vec<&str> = all
        .iter()
        .map(|d| d.header("x-m3-delivery-attempt"))
        .collect();
    assert_eq!(attempts, ["1", "2", "3"]);
    assert!(all.iter().all(|d| d.body == got[0].body), "the same body");
    for d in &all {
        verify(d);
    }
    let (_, stderr) = server.stop();
    assert!(
        stderr.contains("failed (attempt 1): answered 500"),
        "{stderr}"
    );
    assert!(stderr.contains("are delivered again"), "{stderr}");
    assert!(!stderr.contains("secret-path"), "{stderr}");
}

/// `m3 serve` killed (SIGKILL) while its queue holds events that failed, a round started while
/// no server runs, then `m3 serve` started again: every event is delivered, none twice.
#[test]
fn a_server_killed_mid_queue_delivers_what_was_left_after_a_restart() {
    let sb = Sandbox::new();
    sb.create_database();
    let receiver = Receiver::start(&[]);
    receiver.answer_with(Answer::Status(500));
    let args = notify_args(
        &sb,
        std::slice::from_ref(&receiver.base),
        &["--notify-retry-secs", "0.05", "--notify-timeout-secs", "2"],
    );
    let server = start(&sb, &args);
    let _first = sb.spawn_run("legacy", &[], &[]);
    let _second = sb.spawn_run("legacy", &[], &[]);
    receiver.wait_for(WAIT, "both events refused three times", |d| {
        event_ids(d).into_iter().collect::<BTreeSet<_>>().len() == 2 && d.len() >= 6
    });
    // `m3 doctor` says the target is failing, by its origin alone.
    let doctor = sb.command(&["doctor", "--json"]).output().unwrap();
    assert_eq!(
        doctor.status.code(),
        Some(1),
        "a failing target is a problem"
    );
    let report: Value = serde_json::from_slice(&doctor.stdout).unwrap();
    let targets = report["database"]["notifications"].as_array().unwrap();
    assert_eq!(targets.len(), 1, "{report}");
    assert_eq!(targets[0]["target"], receiver.base.as_str());
    assert_eq!(targets[0]["failing"], true, "{report}");
    assert_eq!(targets[0]["last_error"], "answered 500", "{report}");
    assert_eq!(report["healthy"], false);
    let human = sb.command(&["doctor"]).output().unwrap();
    let human = String::from_utf8_lossy(&human.stdout);
    assert!(
        human.contains(&format!("PROBLEM  notifications to {}", receiver.base)),
        "{human}"
    );
    server.crash();
    receiver.answer_with(Answer::Ok);
    let _third = sb.spawn_run("legacy", &[], &[]);
    // The third round waits before any server runs again.
    let start_wait = Instant::now();
    while sb
        .m3(&["pending", "--json"])
        .json()
        .as_array()
        .unwrap()
        .len()
        < 3
    {
        assert!(start_wait.elapsed() < WAIT, "three rounds never waited");
        std::thread::sleep(Duration::from_millis(100));
    }
    let server = start(&sb, &args);
    let accepted = |d: &[Delivery]| {
        d.iter()
            .filter(|d| d.answer == Answer::Ok)
            .map(|d| d.header("x-m3-event-id").to_string())
            .collect::<Vec<_>>()
    };
    receiver.wait_for(WAIT, "three events accepted", |d| {
        accepted(d).into_iter().collect::<BTreeSet<_>>().len() == 3
    });
    std::thread::sleep(Duration::from_secs(2));
    let accepted = accepted(&receiver.deliveries());
    assert_eq!(accepted.len(), 3, "nothing accepted twice: {accepted:?}");
    let pending: BTreeSet<String> = sb
        .m3(&["pending", "--json"])
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|r| format!("round_waiting:{}", r["round_id"].as_str().unwrap()))
        .collect();
    assert_eq!(accepted.into_iter().collect::<BTreeSet<_>>(), pending);
    let report = sb.m3(&["doctor", "--json"]).json();
    let target = &report["database"]["notifications"][0];
    assert_eq!(target["failing"], false, "{report}");
    assert_eq!(
        (target["queued"].as_u64(), target["delivered"].as_u64()),
        (Some(0), Some(3))
    );
    server.stop();
}

/// An `https` target is spoken to in TLS: a plain-HTTP receiver behind an `https://` address
/// gets a handshake, never a request in clear, and the failure is retried and reported (the
/// tests cannot present a certificate the Mozilla roots trust, so a delivery over TLS is not
/// shown here).
#[test]
fn an_https_target_gets_tls_never_a_request_in_clear() {
    let sb = Sandbox::new();
    sb.create_database();
    let receiver = Receiver::start(&[]);
    let url = format!("{}/hook", receiver.base.replace("http://", "https://"));
    let server = start(
        &sb,
        &notify_args(
            &sb,
            &[url],
            &["--notify-retry-secs", "0.05", "--notify-timeout-secs", "1"],
        ),
    );
    let _run = sb.spawn_run("legacy", &[], &[]);
    let waited = Instant::now();
    let target = loop {
        let out = sb.command(&["doctor", "--json"]).output().unwrap();
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        let target = report["database"]["notifications"][0].clone();
        if target["failing"] == true {
            break target;
        }
        assert!(waited.elapsed() < WAIT, "never failing: {report}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let error = target["last_error"].as_str().unwrap();
    assert!(
        error.starts_with("TLS failed") || error.starts_with("no response within"),
        "{error}"
    );
    assert!(receiver.deliveries().is_empty(), "no request in clear");
    let (_, stderr) = server.stop();
    assert!(!stderr.contains("/hook"), "{stderr}");
}

/// One target that never answers: the other target gets the event long before the hanging
/// one's timeout, and the inbox answers meanwhile.
#[test]
fn a_hanging_receiver_delays_neither_the_inbox_nor_other_targets() {
    let sb = Sandbox::new();
    sb.create_database();
    let hanging = Receiver::start(&[]);
    hanging.answer_with(Answer::Hang);
    let fine = Receiver::start(&[]);
    let server = start(
        &sb,
        &notify_args(
            &sb,
            &[hanging.base.clone(), fine.base.clone()],
            &["--notify-timeout-secs", "120"],
        ),
    );
    let _run = sb.spawn_run("legacy", &[], &[]);
    hanging.wait_for(WAIT, "the hanging target's request", |d| !d.is_empty());
    let got = fine.wait_for(WAIT, "the other target's event", |d| !d.is_empty());
    assert_eq!(got.len(), 1);
    // The hanging one still has not answered (its timeout is two minutes away), and the inbox
    // answers.
    let asked = Instant::now();
    let pending = server.get("/api/rounds/pending");
    assert_eq!(pending.status, 200);
    assert!(asked.elapsed() < Duration::from_secs(30));
    assert_eq!(pending.body.as_array().unwrap().len(), 1);
    assert_eq!(hanging.deliveries().len(), 1);
    server.stop();
}

/// Two servers on one PostgreSQL database with the same target: each event reaches it once
/// between them.
#[test]
fn several_servers_on_one_database_deliver_each_event_once() {
    let sb = Sandbox::postgres();
    sb.create_database();
    let receiver = Receiver::start(&[]);
    let args = notify_args(&sb, std::slice::from_ref(&receiver.base), &[]);
    let one = start(&sb, &args);
    let two = start(&sb, &args);
    let _first = sb.spawn_run("legacy", &[], &[]);
    let _second = sb.spawn_run("legacy", &[], &[]);
    receiver.wait_for(WAIT, "two events", |d| d.len() >= 2);
    std::thread::sleep(Duration::from_secs(3));
    let ids = event_ids(&receiver.deliveries());
    assert_eq!(ids.len(), 2, "each event once: {ids:?}");
    assert_ne!(ids[0], ids[1]);
    one.stop();
    two.stop();
}

/// `--notify-format slack`: the body is a Slack incoming-webhook message within Slack's
/// documented fields and limits (`text`, `blocks` of at most 50; a section's `mrkdwn` text of
/// at most 3,000 characters; a button's `plain_text` label of at most 75 and its `url` of at
/// most 3,000; an `action_id` of at most 255), with the button leading to the round's page.
#[test]
fn the_slack_format_is_an_incoming_webhook_message_with_a_button_to_the_form() {
    let sb = Sandbox::new();
    sb.create_database();
    let receiver = Receiver::start(&[]);
    let server = start(
        &sb,
        &notify_args(
            &sb,
            std::slice::from_ref(&receiver.base),
            &["--notify-format", "slack"],
        ),
    );
    let _run = sb.spawn_run("legacy", &[], &[]);
    let round = server.wait_pending();
    let (round_id, _) = ids(&round);
    let got = receiver.wait_for(WAIT, "the Slack message", |d| !d.is_empty());
    verify(&got[0]);
    let body = got[0].json();
    check_slack(&body);
    assert_eq!(
        body["blocks"][1]["elements"][0]["url"],
        format!("{}/rounds/{round_id}", server.base)
    );
    assert!(
        body["text"].as_str().unwrap().contains("asks for input"),
        "{body}"
    );
    server.stop();
}

/// Slack's incoming-webhook message fields (api.slack.com/messaging/webhooks and the Block
/// Kit reference): only the keys Slack reads, each block of a known type within its limits.
fn check_slack(body: &Value) {
    let keys: BTreeSet<&str> = body
        .as_object()
        .expect("an object")
        .keys()
        .map(String::as_str)
        .collect();
    assert!(
        keys.is_subset(&BTreeSet::from([
            "text",
            "blocks",
            "attachments",
            "mrkdwn",
            "thread_ts"
        ])),
        "{keys:?}"
    );
    let text = body["text"].as_str().expect("a text fallback");
    assert!(!text.is_empty() && text.chars().count() <= 40_000);
    let blocks = body["blocks"].as_array().expect("blocks");
    assert!(!blocks.is_empty() && blocks.len() <= 50);
    for block in blocks {
        match block["type"].as_str() {
            Some("section") => {
                assert_eq!(block["text"]["type"], "mrkdwn");
                let t = block["text"]["text"].as_str().unwrap();
                assert!(!t.is_empty() && t.chars().count() <= 3000);
            }
            Some("actions") => {
                let elements = block["elements"].as_array().unwrap();
                assert!(!elements.is_empty() && elements.len() <= 25);
                for e in elements {
                    assert_eq!(e["type"], "button");
                    assert_eq!(e["text"]["type"], "plain_text");
                    let label = e["text"]["text"].as_str().unwrap();
                    assert!(!label.is_empty() && label.chars().count() <= 75);
                    let url = e["url"].as_str().unwrap();
                    assert!(url.starts_with("http") && url.chars().count() <= 3000);
                    assert!(e["action_id"].as_str().unwrap().len() <= 255);
                }
            }
            Some("context") => {
                let elements = block["elements"].as_array().unwrap();
                assert!(!elements.is_empty() && elements.len() <= 10);
                for e in elements {
                    assert_eq!(e["type"], "mrkdwn");
                    assert!(e["text"].as_str().unwrap().chars().count() <= 3000);
                }
            }
            other => panic!("a block Slack does not take here: {other:?}"),
        }
    }
}

/// Secrets planted where a round keeps them (the operation's arguments, a URL-mode request's
/// address, the server's request state, the harness's resume token, an answer, its
/// idempotency key, a lease token): no notification body carries any, in either format, for
/// a waiting round or a failed one.
#[test]
fn no_secret_reaches_a_notification() {
    use m3::{ElicitationRequest, ManagedInputStore, NewRound, OwnerClaim};
    let sb = Sandbox::new();
    let store = m3::SqliteManagedInputStore::open(&sb.db, m3::StoreOptions::default()).unwrap();
    let requests = std::collections::BTreeMap::from([
        (
            "address".to_string(),
            ElicitationRequest::form(
                "Where to?",
                json!({"type": "object", "properties": {"street": {"type": "string",
                       "title": "Street", "default": "PLANTED-DEFAULT"}}}),
            ),
        ),
        (
            "sign_in".to_string(),
            ElicitationRequest::url("Sign in", "https://auth.example/PLANTED-URL"),
        ),
    ]);
    let mut round = NewRound::new(
        "round-planted",
        "exec-planted",
        "shipping",
        "book",
        requests,
    )
    .owned_by(OwnerClaim {
        owner_id: "test-worker".into(),
        lease_ttl: Duration::from_secs(600),
    });
    round.request_state = Some("PLANTED-STATE".into());
    round.harness.resume_token = Some("PLANTED-RESUME".into());
    round
        .operation_parameters
        .insert("password".into(), json!("PLANTED-PARAM"));
    let json_receiver = Receiver::start(&[]);
    let slack_receiver = Receiver::start(&[]);
    let file = sb.write(
        "targets",
        &format!(
            "# both formats\njson {}/j\nslack {}/s\n",
            json_receiver.base, slack_receiver.base
        ),
    );
    let server = start(
        &sb,
        &notify_args(
            &sb,
            &[],
            &[
                "--notify-file",
                file.to_str().unwrap(),
                "--notify-on",
                "waiting,failed",
            ],
        ),
    );
    // Created after the server started: a target's events start when it is first
    // registered.
    let record = store.create_round(&round).unwrap();
    let lease = record.lease.clone().unwrap();
    for r in [&json_receiver, &slack_receiver] {
        r.wait_for(WAIT, "the waiting event", |d| !d.is_empty());
    }
    store
        .submit_responses_json(
            "round-planted",
            r#"{"address": {"action": "accept", "content": {"street": "PLANTED-ANSWER"}},
                "sign_in": {"action": "accept"}}"#,
            "PLANTED-KEY",
        )
        .unwrap();
    store
        .fail(
            "round-planted",
            &lease,
            m3::FailureCode::ServerError,
            "the server said PLANTED-MESSAGE",
        )
        .unwrap();
    for r in [&json_receiver, &slack_receiver] {
        r.wait_for(WAIT, "the failed event", |d| d.len() >= 2);
    }
    let failed = json_receiver.deliveries()[1].json();
    assert_eq!(failed["event"], "round_failed");
    assert_eq!(failed["round"]["failure"]["code"], "server_error");
    check_slack(&slack_receiver.deliveries()[1].json());
    for d in json_receiver
        .deliveries()
        .iter()
        .chain(slack_receiver.deliveries().iter())
    {
        let text = String::from_utf8_lossy(&d.body);
        for planted in [
            "PLANTED-DEFAULT",
            "PLANTED-URL",
            "PLANTED-STATE",
            "PLANTED-RESUME",
            "PLANTED-PARAM",
            "PLANTED-ANSWER",
            "PLANTED-KEY",
            "PLANTED-MESSAGE",
            &lease.lease_token,
            SECRET,
        ] {
            assert!(!text.contains(planted), "{planted} in {text}");
        }
    }
    server.stop();
}

/// Bad notification flags are refused before anything listens, typed, without quoting a
/// target's address or the secret.
#[test]
fn bad_notification_flags_are_refused_without_quoting_them() {
    let sb = Sandbox::new();
    sb.create_database();
    let short = sb.write("short", "tiny-SECRET\n");
    let bad_file = sb.write(
        "targets",
        "https://ok.example/x\nftp://files.example/PATH-2\n",
    );
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["--notify", "http://example.com/PATH-1"],
            "--notify-insecure",
        ),
        (
            vec!["--notify", "https://user:PASS@example.com/"],
            "user name",
        ),
        (vec!["--notify", "gopher://x/PATH-3"], "https://"),
        (
            vec![
                "--notify",
                "https://ok.example/",
                "--notify-secret-file",
                short.to_str().unwrap(),
            ],
            "at least 16",
        ),
        (vec!["--notify-file", bad_file.to_str().unwrap()], "line 2"),
        (
            vec!["--notify-secret-file", short.to_str().unwrap()],
            "no --notify",
        ),
        (
            vec!["--notify", "https://ok.example/", "--public-url", "ftp://x"],
            "--public-url",
        ),
    ];
    for (args, says) in cases {
        let mut all = vec!["serve", "--listen", "127.0.0.1:0"];
        all.extend(&args);
        let out = sb.m3(&all);
        let line = out.fails_with("ManagedInputValidationError");
        assert!(line.contains(says), "{args:?}: {line}");
        for hidden in ["PATH-1", "PASS", "PATH-2", "PATH-3", "tiny-SECRET"] {
            assert!(!out.stderr.contains(hidden), "{hidden}: {}", out.stderr);
        }
    }
    // With --notify-insecure, plain http to another host is taken.
    let server = Server::start(
        &sb,
        &["--notify", "http://192.0.2.1:9/x", "--notify-insecure"],
        None,
    );
    server.stop();
}
