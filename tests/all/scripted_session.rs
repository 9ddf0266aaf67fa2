//! The scripted harness's session machine (guest `runtime::scripted`) driven against the real
//! bundled shipping server over real pipes, through the host's process capability. The test's
//! driver stands in for the runtime: it answers each opened round and performs the actions.

use m3::testing::process::{ChildProcess, ProcessEvent, ProcessSpec, ScratchDir};
use m3_guest::m3::managed_input::types::{ElicitationAction, ElicitationResponse, FailureCode};
use m3_guest::mcp::era::{Era, EraChoice};
use m3_guest::mcp::framing::LineBuffer;
use m3_guest::runtime::scripted::{ScriptedSession, SessionConfig, Step};
use m3_guest::runtime::session::{Action, Finished, Input, Mode};
use serde_json::{Value, json};
use std::time::Duration;
use tokio::time::timeout;

const SHIPPING_SERVER: &str = env!("CARGO_BIN_EXE_m3-test-shipping-server");

/// What happened in one session.
#[derive(Debug, Default)]
struct Transcript {
    opened: Vec<(u32, Vec<String>)>,
    delivered: usize,
    resolved: usize,
    failed: Vec<FailureCode>,
    results: Vec<Value>,
    finished: Option<Finished>,
}

fn address_answer(keys: &[String]) -> Vec<(String, ElicitationResponse)> {
    keys.iter()
        .map(|k| {
            let content = if k == "contact_email" {
                json!({"email": "asha@example.com"})
            } else {
                json!({"street": "1 Main Street", "city": "Pune"})
            };
            (
                k.clone(),
                ElicitationResponse {
                    action: ElicitationAction::Accept,
                    content: Some(content.to_string()),
                },
            )
        })
        .collect()
}

/// Runs a session against the shipping server started with `args`, answering every round with
/// `answer` (or nothing in mode `fail`).
async fn run(
    args: &[&str],
    era: EraChoice,
    mode: Mode,
    answer: fn(&[String]) -> Vec<(String, ElicitationResponse)>,
) -> (Transcript, Era) {
    let scratch = ScratchDir::create("m3-session").unwrap();
    let spec = ProcessSpec {
        command: SHIPPING_SERVER.into(),
        args: args.iter().map(|a| a.to_string()).collect(),
        env: Default::default(),
        cwd: None,
    };
    let (mut child, mut events) = ChildProcess::spawn(&spec, &scratch).unwrap();
    let steps = vec![Step::tool(
        "book_shipment",
        json!({"item": "book", "weight_kg": 2}),
    )];
    let mut session = ScriptedSession::new(SessionConfig {
        era,
        steps,
        round_limit: 4,
        mode,
    });
    let mut transcript = Transcript::default();
    let mut buffer = LineBuffer::default();
    let mut queue = vec![Input::Start];
    let mut probe_armed = false;
    while transcript.finished.is_none() {
        while let Some(input) = queue.pop() {
            for action in session.handle(input) {
                match action {
                    Action::Send(line) => child.write_line(&line.to_string()).await.unwrap(),
                    Action::Deliver(line) => {
                        transcript.delivered += 1;
                        child.write_line(&line.to_string()).await.unwrap();
                    }
                    Action::StartProbeTimer | Action::ArmTimer(_) => probe_armed = true,
                    Action::FinalMessage(_) | Action::Event { .. } => {}
                    Action::OpenRound {
                        round_index,
                        requests,
                        ..
                    } => {
                        let keys: Vec<String> = requests.iter().map(|(k, _)| k.clone()).collect();
                        transcript.opened.push((round_index, keys.clone()));
                        if mode == Mode::Managed {
                            queue.insert(0, Input::Answer(answer(&keys)));
                        }
                    }
                    Action::ResolveRound => transcript.resolved += 1,
                    Action::FailRound { code, .. } => transcript.failed.push(code),
                    Action::ToolResult { result, .. } => transcript.results.push(result),
                    Action::Finish(finished) => transcript.finished = Some(finished),
                }
            }
        }
        if transcript.finished.is_some() {
            break;
        }
        let wait = if probe_armed {
            Duration::from_secs(2)
        } else {
            Duration::from_secs(10)
        };
        match timeout(wait, events.recv()).await {
            Ok(Some(ProcessEvent::Stdout(bytes))) => {
                probe_armed = false;
                queue.extend(
                    buffer
                        .push(&bytes)
                        .unwrap()
                        .into_iter()
                        .rev()
                        .map(Input::Line),
                );
            }
            Ok(Some(ProcessEvent::StdoutClosed)) | Ok(None) => {
                queue.push(Input::ServerExited("closed its output".into()))
            }
            Ok(Some(ProcessEvent::Exited(_))) => {}
            Err(_) if probe_armed => {
                probe_armed = false;
                queue.push(Input::ProbeTimedOut);
            }
            Err(_) => panic!("the session stalled: {transcript:?}"),
        }
    }
    child.close_stdin();
    let exit = timeout(Duration::from_secs(10), child.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        exit,
        ProcessEvent::Exited(Some(0)),
        "the server ends when the session closes its stdin"
    );
    (transcript, session.era())
}

fn booked_text(transcript: &Transcript) -> String {
    transcript.results[0]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn the_probe_picks_each_era_of_the_bundled_server_and_the_round_resolves() {
    for (server_era, expected) in [
        ("legacy", Era::Legacy),
        ("modern", Era::Modern),
        ("auto", Era::Modern),
    ] {
        let (t, era) = run(
            &["--era", server_era],
            EraChoice::Auto,
            Mode::Managed,
            address_answer,
        )
        .await;
        assert_eq!(era, expected, "{server_era}");
        assert_eq!(
            t.opened,
            vec![(0, vec!["shipping_address".to_string()])],
            "{server_era}"
        );
        assert_eq!((t.delivered, t.resolved), (1, 1), "{server_era}");
        assert_eq!(
            booked_text(&t),
            "Booked shipment to 1 Main Street, Pune",
            "{server_era}"
        );
        assert_eq!(t.finished, Some(Finished::Succeeded));
    }
}

#[tokio::test]
async fn a_forced_legacy_era_commits_a_dual_era_server_to_legacy() {
    let (t, era) = run(
        &["--era", "auto"],
        EraChoice::Legacy,
        Mode::Managed,
        address_answer,
    )
    .await;
    assert_eq!(era, Era::Legacy);
    assert_eq!(booked_text(&t), "Booked shipment to 1 Main Street, Pune");
}

#[tokio::test]
async fn every_round_of_a_multi_round_operation_resolves_its_predecessor() {
    for server_era in ["legacy", "modern"] {
        let (t, _) = run(
            &["--era", server_era, "--ask-rounds", "3"],
            EraChoice::Auto,
            Mode::Managed,
            address_answer,
        )
        .await;
        let indexes: Vec<u32> = t.opened.iter().map(|(i, _)| *i).collect();
        assert_eq!(indexes, [0, 1, 2], "{server_era}");
        assert_eq!((t.delivered, t.resolved), (3, 3), "{server_era}");
        assert_eq!(t.finished, Some(Finished::Succeeded), "{server_era}");
    }
}

#[tokio::test]
async fn two_keys_are_one_modern_round() {
    let (t, _) = run(
        &["--era", "modern", "--two-keys"],
        EraChoice::Auto,
        Mode::Managed,
        address_answer,
    )
    .await;
    assert_eq!(
        t.opened[0],
        (
            0,
            vec!["contact_email".to_string(), "shipping_address".to_string()]
        )
    );
    assert_eq!(t.finished, Some(Finished::Succeeded));
}

#[tokio::test]
async fn a_server_that_asks_forever_is_stopped_at_the_round_limit() {
    for server_era in ["legacy", "modern"] {
        let (t, _) = run(
            &["--era", server_era, "--ask-forever"],
            EraChoice::Auto,
            Mode::Managed,
            address_answer,
        )
        .await;
        assert_eq!(t.opened.len(), 4, "{server_era}: round_limit 4");
        assert_eq!(t.failed, [FailureCode::RoundLimitExceeded], "{server_era}");
        assert!(matches!(
            t.finished,
            Some(Finished::Failed {
                code: Some(FailureCode::RoundLimitExceeded),
                ..
            })
        ));
    }
}

#[tokio::test]
async fn a_server_error_after_the_answer_fails_the_round_with_server_error() {
    for server_era in ["legacy", "modern"] {
        let (t, _) = run(
            &["--era", server_era, "--fail-after-answer"],
            EraChoice::Auto,
            Mode::Managed,
            address_answer,
        )
        .await;
        assert_eq!(t.failed, [FailureCode::ServerError], "{server_era}");
        assert_eq!(t.resolved, 0);
    }
}

#[tokio::test]
async fn fail_mode_records_the_round_answers_cancel_and_fails_the_execution() {
    for server_era in ["legacy", "modern"] {
        let (t, _) = run(
            &["--era", server_era],
            EraChoice::Auto,
            Mode::Fail,
            address_answer,
        )
        .await;
        assert_eq!(t.opened.len(), 1, "{server_era}: the round is recorded");
        assert_eq!(
            t.failed,
            [FailureCode::ElicitationUnhandled],
            "{server_era}"
        );
        assert!(matches!(
            t.finished,
            Some(Finished::Failed {
                code: Some(FailureCode::ElicitationUnhandled),
                ..
            })
        ));
    }
}

#[tokio::test]
async fn a_declined_round_is_delivered_and_the_tool_reports_it() {
    let decline = |keys: &[String]| -> Vec<(String, ElicitationResponse)> {
        keys.iter()
            .map(|k| {
                (
                    k.clone(),
                    ElicitationResponse {
                        action: ElicitationAction::Decline,
                        content: None,
                    },
                )
            })
            .collect()
    };
    for server_era in ["legacy", "modern"] {
        let (t, _) = run(
            &["--era", server_era],
            EraChoice::Auto,
            Mode::Managed,
            decline,
        )
        .await;
        assert_eq!(t.resolved, 1);
        assert_eq!(
            booked_text(&t),
            "Shipment not booked: the address was declined",
            "{server_era}"
        );
    }
}
