//! `m3 serve` survives what the CLI survives, tested with real processes on one database:
//! several servers and `m3 respond` answering one round at once (one wins, the answer is
//! delivered once), a server killed and restarted while a round waits, a neighbour holding the
//! database's write lock, slow clients, a SIGTERM the moment it has started, and nothing secret
//! in the server's output. The
//! contract of each endpoint is in `serve.rs`.

mod common;
mod serving;

use common::*;
use serde_json::{Value, json};
use serving::*;
use std::io::{Read, Write};
use std::sync::mpsc;
use std::sync::{Arc, Barrier};
use std::time::Duration;

/// `POST /api/rounds/{round}/responses` on the server at `base` with a client of its own.
fn answer_at(base: &str, round_id: &str, body: &str) -> Reply {
    Server::reply(
        agent()
            .post(format!("{base}/api/rounds/{round_id}/responses"))
            .header("Content-Type", "application/json")
            .send(body),
    )
}

/// The lines of the server's transcript that deliver an accepted answer.
fn deliveries(transcript: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(transcript)
        .expect("the server's transcript")
        .lines()
        .filter(|l| l.contains(r#""action":"accept""#))
        .map(str::to_string)
        .collect()
}

/// A SIGTERM sent the moment the server's address is read (as a service manager or a test
/// may) stops it as any other does, exit status 0, with and without notification targets:
/// its handler is installed before the address is printed, never left to the signal's
/// default. Twenty times each, since the window it closes was short.
#[test]
fn a_sigterm_right_after_the_address_is_a_clean_stop() {
    let sb = Sandbox::new();
    sb.create_database();
    for extra in [&[][..], &["--notify", "http://127.0.0.1:9/x"][..]] {
        for _ in 0..20 {
            // `stop` sends SIGTERM at once and asserts exit status 0.
            Server::start(&sb, extra, None).stop();
        }
    }
}

/// Three `m3 serve` processes and `m3 respond` answer the same round at the same instant, each
/// with its own key and address, while the worker is stopped (so every loser meets the round
/// answered, not ended): exactly one wins; the others get 409 `invalid_transition` (`m3
/// respond`: the same typed error), and the winner's retry through any server is 200. The
/// next round is answered by all four with the same key and answers: all succeed. Each round's
/// answer is delivered exactly once, the first round's being the winner's.
#[test]
fn servers_and_respond_race_for_one_round_and_one_wins() {
    let sb = Sandbox::new();
    sb.create_database();
    let transcript = sb.dir.path().join("received.jsonl");
    let servers: Vec<Server> = (0..3).map(|_| Server::start(&sb, &[], None)).collect();
    let bases: Vec<String> = servers.iter().map(|s| s.base.clone()).collect();
    let run = sb.spawn_run(
        "legacy",
        &[
            "--ask-rounds",
            "2",
            "--transcript",
            transcript.to_str().expect("a UTF-8 path"),
        ],
        &["--lease", "300"],
    );
    let (first_round, execution_id) = ids(&servers[0].wait_pending());
    for server in &servers[1..] {
        assert_eq!(ids(&server.wait_pending()).0, first_round);
    }
    let pid = run.guard.child.id();
    signal(pid, libc::SIGSTOP);

    // Round one: four contenders, four keys, four addresses.
    let street = |i: usize| format!("{i} Race Street");
    let outcomes = race(&sb, &bases, &first_round, |i| {
        (street(i), format!("race-key-{i}"))
    });
    let winners: Vec<usize> = (0..4).filter(|i| outcomes[*i].is_ok()).collect();
    assert_eq!(winners.len(), 1, "exactly one wins: {outcomes:?}");
    let winner = winners[0];
    for (i, outcome) in outcomes.iter().enumerate() {
        if let Err(code) = outcome {
            assert_eq!(
                code, "ManagedInputStateError/invalid_transition",
                "contender {i}"
            );
        }
    }
    for base in &bases {
        let retry = answer_at(
            base,
            &first_round,
            &answer_street(&street(winner), &format!("race-key-{winner}")),
        );
        assert_eq!(retry.status, 200, "the winner's retry: {}", retry.body);
    }
    signal(pid, libc::SIGCONT);

    // Round two: all four with the same key and answers.
    let until = std::time::Instant::now() + RUN_TIMEOUT;
    let second_round = loop {
        let pending = servers[1].get("/api/rounds/pending").body;
        if let Some(round) = pending.as_array().and_then(|a| a.first()) {
            break ids(round).0;
        }
        assert!(std::time::Instant::now() < until, "no second round");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_ne!(second_round, first_round);
    let outcomes = race(&sb, &bases, &second_round, |_| {
        (STREET.to_string(), "same-key".to_string())
    });
    assert!(
        outcomes.iter().all(Result::is_ok),
        "the same key and answers succeed everywhere: {outcomes:?}"
    );

    let (out, lines) = run.finish();
    let result = check_run_stdout(&out, &lines);
    assert_eq!(result["outcome"], "succeeded", "{result}");
    let delivered = deliveries(&transcript);
    assert_eq!(delivered.len(), 2, "one delivery per round: {delivered:?}");
    assert!(delivered[0].contains(&street(winner)), "{}", delivered[0]);
    assert!(delivered[1].contains(STREET), "{}", delivered[1]);
    for round_id in [&first_round, &second_round] {
        let record = servers[2].round(round_id);
        assert_eq!(record["status"], "resolved", "{record}");
        assert_eq!(record["delivery_attempts"], 1, "{record}");
    }
    let status = servers[0].get(&format!("/api/executions/{execution_id}"));
    assert_eq!(status.body["outcome"], "succeeded");
}

/// Contenders 0..3 answer `round_id` through `bases[i]`, contender 3 with `m3 respond`, all
/// released at once; `answer(i)` is `(street, key)`. Each outcome: `Ok(())` or `Err("Type/code")`.
fn race(
    sb: &Sandbox,
    bases: &[String],
    round_id: &str,
    answer: impl Fn(usize) -> (String, String),
) -> Vec<Result<(), String>> {
    let start = Arc::new(Barrier::new(4));
    std::thread::scope(|scope| {
        let mut contenders = Vec::new();
        for (i, base) in bases.iter().enumerate() {
            let (street, key) = answer(i);
            let start = start.clone();
            contenders.push(scope.spawn(move || {
                let body = answer_street(&street, &key);
                start.wait();
                let reply = answer_at(base, round_id, &body);
                match reply.status {
                    200 => Ok(()),
                    409 => {
                        let (kind, code) = error_of(&reply);
                        Err(format!("{kind}/{code}"))
                    }
                    other => panic!("contender {i}: {other} {}", reply.body),
                }
            }));
        }
        let (street, key) = answer(3);
        let cmd = sb.command(&[
            "--json",
            "respond",
            round_id,
            "--idempotency-key",
            &key,
            "--accept",
            &format!(r#"shipping_address={{"street":"{street}","city":"{CITY}"}}"#),
        ]);
        let start = start.clone();
        contenders.push(scope.spawn(move || {
            start.wait();
            let out = finish(cmd, None, COMMAND_TIMEOUT);
            if out.status.success() {
                return Ok(());
            }
            let error: Value = serde_json::from_str(out.first_stderr_line()).expect("a JSON error");
            Err(format!(
                "{}/{}",
                error["error"]["type"].as_str().unwrap_or_default(),
                error["error"]["code"].as_str().unwrap_or_default()
            ))
        }));
        contenders
            .into_iter()
            .map(|c| c.join().expect("a contender"))
            .collect()
    })
}

/// A server killed while a round waits leaves nothing behind that matters: a new one on the
/// same database lists the round, takes its answer, and the worker in the `m3 run` process
/// delivers it; the new server's stream says so; SIGTERM stops it with its stream still open.
#[test]
fn a_restarted_server_answers_a_round_that_waited() {
    let sb = Sandbox::new();
    sb.create_database();
    let first = Server::start(&sb, &[], None);
    let _first_stream = first.subscribe();
    let run = sb.spawn_run("modern", &[], &[]);
    let (round_id, execution_id) = ids(&first.wait_pending());
    first.crash();

    let second = Server::start(&sb, &[], None);
    let stream = second.subscribe();
    assert_eq!(ids(&second.wait_pending()).0, round_id);
    let answered = second.answer(&round_id, &answer("after-restart"));
    assert_eq!(answered.status, 200, "{}", answered.body);
    let (out, lines) = run.finish();
    let result = check_run_stdout(&out, &lines);
    assert_eq!(
        result["tool_calls"][0]["output"],
        format!("Booked shipment to {STREET}, {CITY}")
    );
    let life = stream.life_of(&execution_id);
    assert_eq!(
        kinds(&life),
        ["round_answered", "round_resolved", "execution_finished"],
        "{life:?}"
    );
    let (stdout, _) = second.stop();
    assert_eq!(stdout, "", "nothing on stdout but the address");
}

/// A neighbour holding the database's write lock past the busy timeout makes an answer 503
/// `storage_busy` (nothing stored) while reads go on; once it lets go, the answer is taken.
#[test]
fn a_locked_database_makes_answers_wait_and_reads_go_on() {
    let sb = Sandbox::new();
    sb.create_database();
    let server = Server::start(&sb, &[], None);
    let run = sb.spawn_run("legacy", &[], &["--lease", "300"]);
    let (round_id, execution_id) = ids(&server.wait_pending());
    let neighbour = rusqlite::Connection::open(&sb.db).expect("opening the database");
    neighbour
        .execute_batch("BEGIN IMMEDIATE")
        .expect("taking the write lock");
    let busy = server.answer(&round_id, &answer("k"));
    assert_eq!(busy.status, 503, "{}", busy.body);
    assert_eq!(
        error_of(&busy),
        ("StorageError".into(), "storage_busy".into())
    );
    assert_eq!(server.round(&round_id)["status"], "pending");
    let events = server.get(&format!("/api/executions/{execution_id}/events"));
    assert_eq!(events.status, 200, "{}", events.body);
    neighbour.execute_batch("ROLLBACK").expect("letting go");
    let answered = server.answer(&round_id, &answer("k"));
    assert_eq!(answered.status, 200, "{}", answered.body);
    let (out, lines) = run.finish();
    assert_eq!(check_run_stdout(&out, &lines)["outcome"], "succeeded");
}

/// Clients that stall (a hundred connections that sent half a request head; one sending a
/// body a kilobyte at a time) block no other: meanwhile a run is answered through the API and
/// delivered. A stalled head completed later is answered; the slow body, once past the limit,
/// is refused (413) without having been kept whole.
#[test]
fn slow_clients_do_not_block_others() {
    let sb = Sandbox::new();
    sb.create_database();
    let server = Server::start(&sb, &[], None);
    let mut halves: Vec<std::net::TcpStream> = (0..100)
        .map(|_| {
            raw(
                &server.address,
                b"GET /api/executions HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n",
            )
        })
        .collect();

    let run = sb.spawn_run("legacy", &[], &[]);
    let (round_id, _) = ids(&server.wait_pending());
    let (faster, fast) = mpsc::channel::<()>();
    let slow_body = {
        let mut socket = raw(
            &server.address,
            format!(
                "POST /api/rounds/{round_id}/responses HTTP/1.1\r\nHost: localhost\r\n\
                 Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\
                 Connection: close\r\n\r\n"
            )
            .as_bytes(),
        );
        let mut reader = socket.try_clone().expect("a second handle");
        let answer = std::thread::spawn(move || raw_answer(&mut reader));
        std::thread::spawn(move || {
            let frame = |size: usize| {
                let mut frame = format!("{size:x}\r\n").into_bytes();
                frame.extend(std::iter::repeat_n(b' ', size));
                frame.extend_from_slice(b"\r\n");
                frame
            };
            // A kilobyte every 20 ms until told to hurry, then past the limit.
            while fast.try_recv().is_err() {
                if socket.write_all(&frame(1024)).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            for _ in 0..(9 * 16) {
                if socket.write_all(&frame(64 * 1024)).is_err() {
                    return;
                }
            }
            let _ = socket.write_all(b"0\r\n\r\n");
        });
        answer
    };

    // Everyone else is served meanwhile.
    let answered = server.answer(&round_id, &answer("k"));
    assert_eq!(answered.status, 200, "{}", answered.body);
    let (out, lines) = run.finish();
    assert_eq!(check_run_stdout(&out, &lines)["outcome"], "succeeded");
    assert_eq!(server.get("/api/executions").status, 200);

    let mut half = halves.pop().expect("a stalled connection");
    half.write_all(b"\r\n").expect("completing the head");
    let (status, body) = raw_answer(&mut half);
    assert_eq!(status, 200, "{body}");
    let listed: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");

    faster.send(()).expect("the slow body's sender");
    let (status, body) = slow_body.join().expect("the slow body's answer");
    assert_eq!(status, 413, "{body}");
    assert_eq!(server.round(&round_id)["status"], "resolved");
    drop(halves);
}

/// A client that holds a connection without finishing its request loses it after the request
/// timeout (`--request-timeout-secs`, hidden, 30 s by default; 1 s here), so idle clients cannot
/// use up the server's file descriptors: a half-sent head and an idle keep-alive connection are
/// closed, a body that does not arrive in time is refused (408 `request_timeout`). An event
/// stream, whose response has begun, outlives the timeout, and other clients are served
/// throughout.
#[test]
fn stalled_requests_are_dropped_after_the_request_timeout() {
    let sb = Sandbox::new();
    sb.create_database();
    let server = Server::start(
        &sb,
        &["--request-timeout-secs", "1", "--keep-alive-secs", "0.1"],
        None,
    );
    let stream = server.subscribe();
    let mut half = raw(
        &server.address,
        b"GET /api/executions HTTP/1.1\r\nHost: localhost\r\n",
    );
    let mut idle = raw(
        &server.address,
        b"GET /api/executions HTTP/1.1\r\nHost: localhost\r\n\r\n",
    );
    let mut slow = raw(
        &server.address,
        b"POST /api/rounds/r/responses HTTP/1.1\r\nHost: localhost\r\n\
          Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{",
    );
    assert_eq!(server.get("/api/executions").status, 200);

    // Closed by the server: reading ends (a client reading for ever would time out instead).
    let mut seen = Vec::new();
    half.read_to_end(&mut seen)
        .expect("the server closes a half-sent head");
    assert!(seen.is_empty() || String::from_utf8_lossy(&seen).contains(" 408 "));
    let mut seen = Vec::new();
    idle.read_to_end(&mut seen)
        .expect("the server closes an idle connection");
    let answered = String::from_utf8_lossy(&seen);
    assert!(answered.starts_with("HTTP/1.1 200"), "{answered}");
    let (status, body) = raw_answer(&mut slow);
    assert_eq!(status, 408, "{body}");
    assert!(body.contains("request_timeout"), "{body}");

    // The stream outlived them all: still sending keep-alives, then events.
    for _ in 0..5 {
        assert_eq!(stream.next_item(RUN_TIMEOUT), Some(Item::Comment));
    }
    let run = sb.spawn_run("legacy", &[], &[]);
    let (round_id, _) = ids(&server.wait_pending());
    assert_eq!(stream.next_event().0, "round_created");
    assert_eq!(server.answer(&round_id, &answer("k")).status, 200);
    let (out, lines) = run.finish();
    assert_eq!(check_run_stdout(&out, &lines)["outcome"], "succeeded");
}

/// What `m3 serve` prints, from start to SIGTERM (an event stream still open), holds no
/// answer, no idempotency key and no token (right or wrong), whatever was answered, refused,
/// retried or conflicted, or given to the login form; no error body, login page or cookie,
/// stream event, round record or history quotes them either. (An execution's status shows its tool calls' output, which is the server's to
/// word: this one's echoes the address, to callers with the token.)
#[test]
fn nothing_secret_reaches_the_output_of_serve() {
    let sb = Sandbox::new();
    sb.create_database();
    let token = "tok-Secret-8d1b6f";
    let file = sb.write("token", token);
    let server = Server::start(
        &sb,
        &["--token-file", file.to_str().expect("a UTF-8 path")],
        Some(token),
    );
    let stream = server.subscribe();
    let run = sb.spawn_run("legacy", &[], &[]);
    let (round_id, execution_id) = ids(&server.wait_pending());
    let key = "idem-Secret-31c4";
    let wrong = "wrong-Secret-0a9e";
    let secrets = [token, key, wrong, STREET, CITY, "Refused-Secret-77"];

    let good = json!({"responses": {"shipping_address": address_answer()},
                      "idempotency_key": key});
    let mut bodies = Vec::new();
    let unauthorized = Server::reply(
        agent()
            .post(format!("{}/api/rounds/{round_id}/responses", server.base))
            .header("Authorization", format!("Bearer {wrong}"))
            .send(good.to_string()),
    );
    assert_eq!(unauthorized.status, 401);
    bodies.push(unauthorized.body);
    let refused = server.answer(
        &round_id,
        &json!({"responses": {"shipping_address": {"action": "accept",
                    "content": {"street": "Refused-Secret-77", "city": 5}}},
                "idempotency_key": key})
        .to_string(),
    );
    assert_eq!(refused.status, 400);
    bodies.push(refused.body);
    let answered = server.answer(&round_id, &good.to_string());
    assert_eq!(answered.status, 200, "{}", answered.body);
    bodies.push(answered.body);
    let retried = server.answer(&round_id, &good.to_string());
    bodies.push(retried.body);
    let conflict = server.answer(&round_id, &answer_street("Refused-Secret-77 Road", key));
    assert_eq!(conflict.status, 409);
    bodies.push(conflict.body);
    let (out, lines) = run.finish();
    assert_eq!(check_run_stdout(&out, &lines)["outcome"], "succeeded");
    let life = stream.life_of(&execution_id);
    bodies.extend(life.into_iter().map(|(_, data)| data));
    bodies.push(
        server
            .get(&format!("/api/executions/{execution_id}/events"))
            .body,
    );
    bodies.push(server.round(&round_id));

    // The login form, with a wrong token and then the right one: the page and the cookie
    // quote neither.
    let mut pages = Vec::new();
    for (given, status) in [(wrong, 401), (token, 303)] {
        let mut socket = raw(
            &server.address,
            format!(
                "POST /login HTTP/1.1\r\nHost: {address}\r\nOrigin: http://{address}\r\n\
                 Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\ntoken={given}&next=%2F",
                "token=&next=%2F".len() + given.len(),
                address = server.address
            )
            .as_bytes(),
        );
        let mut page = Vec::new();
        socket.read_to_end(&mut page).expect("the login's answer");
        let page = String::from_utf8_lossy(&page).into_owned();
        assert!(
            page.starts_with(&format!("HTTP/1.1 {status}")),
            "{given}: {page}"
        );
        pages.push(page);
    }
    assert!(pages[1].contains("set-cookie"), "{}", pages[1]);

    let (stdout, stderr) = server.stop();
    for secret in secrets {
        for page in &pages {
            assert!(
                !page.contains(secret),
                "a login answer holds {secret:?}: {page}"
            );
        }
        assert!(
            !stdout.contains(secret),
            "stdout holds {secret:?}:\n{stdout}"
        );
        assert!(
            !stderr.contains(secret),
            "stderr holds {secret:?}:\n{stderr}"
        );
        for body in &bodies {
            assert!(
                !body.to_string().contains(secret),
                "an API answer holds {secret:?}: {body}"
            );
        }
    }
    assert!(stderr.contains("listening on"), "{stderr}");
}
