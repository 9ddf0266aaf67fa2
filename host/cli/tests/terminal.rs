//! The terminal form (`src/form.rs`) driven through a real pseudo-terminal, as a person at a
//! keyboard would: `m3` runs with stdin, stdout and stderr on a pty (rexpect), the test reads
//! what the terminal shows (ANSI escapes stripped) and types keys (Enter is `\r`, the down arrow
//! `ESC [ B`).
//!
//! - `m3 demo` without `--answer`: the action choice (accept first), the required `Street *` and
//!   `City *` prompts, a re-prompt with "this field is required" on an empty value, and the
//!   booking of the typed address (exit 0).
//! - `m3 run` against the bundled server with `--rich-form`: an integer with bounds and a
//!   default, an enum with labels and a preselected default, an optional boolean (no `*`), a
//!   re-prompt on a value that is not an integer or is below the minimum, a choice moved with the
//!   arrow keys, defaults accepted with Enter, and a result that echoes the chosen values.
//!
//! - `m3 respond ROUND` with no answer flags, against a background `run --no-prompt` whose
//!   server asks with `--contact-form`: the fields in the schema's order (not alphabetical), a
//!   bad email re-asked alone with the reason, the other values kept, the generated idempotency
//!   key printed and stored, and the run's success with the typed values.
//! - Ctrl-C in `m3 run`: in the form it cancels the execution (the round fails `cancelled`) and
//!   shows the cursor again (`ESC [ ? 25 h`, read from the raw output); while a cancel cannot
//!   finish (the test holds the database's write lock), a second Ctrl-C ends `m3` at once (130).
//!
//! The pty is 80 columns by 24 lines: `COLUMNS` / `LINES` are set, and the pty's window size
//! (`TIOCSWINSZ` on its master) as soon as `m3` is started, before it draws anything.
//!
//! The rich-form tests wait for whichever of the remaining fields' prompts comes first; the
//! `respond` test asserts the exact order.

mod common;

use rexpect::error::Error;
use rexpect::process::WaitStatus;
use rexpect::reader::{Options, ReadUntil};
use rexpect::session::{PtySession, spawn_with_options};
use serde_json::Value;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::Command;

/// How long each expectation waits for the terminal to show its text.
const TIMEOUT_MS: u64 = 30_000;
/// How many timeouts the first prompt may take: the first run of a build may compile the
/// component (then cached under `~/.cache/m3`).
const FIRST_PROMPT_TRIES: u32 = 6;
/// Enter as a terminal sends it.
const ENTER: &str = "\r";
/// The down arrow as a terminal sends it.
const DOWN: &str = "\x1b[B";
/// Ctrl-C as a terminal sends it.
const CTRL_C: &str = "\x03";
/// The escape sequence that shows the cursor.
const SHOW_CURSOR: &str = "\x1b[?25h";
/// The pty's size.
const COLUMNS: u16 = 80;
const LINES: u16 = 24;

/// `m3` on a pseudo-terminal, with everything read so far kept for failure messages.
struct Terminal {
    session: PtySession,
    seen: String,
}

impl Terminal {
    /// Starts `m3 ARGS` on a fresh pty, with its database in `dir`.
    fn start(dir: &tempfile::TempDir, args: &[&str]) -> Self {
        Self::start_on(&dir.path().join("x.sqlite"), args, true)
    }

    /// Starts `m3 --db DB ARGS` on a fresh pty of 80 columns; `strip`: read the output with its
    /// escape sequences removed (else raw).
    fn start_on(db: &Path, args: &[&str], strip: bool) -> Self {
        let mut command = Command::new(env!("CARGO_BIN_EXE_m3"));
        command
            .arg("--db")
            .arg(db)
            .args(args)
            .env_remove("M3_DB")
            .env("TERM", "xterm")
            .env("COLUMNS", COLUMNS.to_string())
            .env("LINES", LINES.to_string());
        let options = Options::new()
            .timeout_ms(Some(TIMEOUT_MS))
            .strip_ansi_escape_codes(strip);
        let session = spawn_with_options(command, options).expect("start m3 on a pty");
        let pty = session
            .process()
            .get_file_handle()
            .expect("the pty's master");
        let size = libc::winsize {
            ws_row: LINES,
            ws_col: COLUMNS,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: TIOCSWINSZ reads one `winsize` through a valid pointer; the fd is open.
        let set = unsafe { libc::ioctl(pty.as_raw_fd(), libc::TIOCSWINSZ, &size) };
        assert_eq!(set, 0, "setting the pty's window size");
        Self {
            session,
            seen: String::new(),
        }
    }

    /// Fails the test with what the terminal showed.
    fn fail(&self, what: &str, error: &Error) -> ! {
        panic!(
            "{what}: {error}\n--- the terminal showed so far ---\n{}\n---",
            self.seen
        );
    }

    /// Waits (up to `tries` timeouts) for the first of `needles`; returns its index and the text
    /// shown before it.
    fn expect_any_patiently(&mut self, needles: &[String], tries: u32) -> (usize, String) {
        let mut left = tries;
        loop {
            let anys = needles.iter().cloned().map(ReadUntil::String).collect();
            match self.session.exp_any(anys) {
                Ok((before, matched)) => {
                    self.seen.push_str(&before);
                    self.seen.push_str(&matched);
                    let index = needles
                        .iter()
                        .position(|n| *n == matched)
                        .expect("the match is one of the needles");
                    return (index, before);
                }
                Err(Error::Timeout { .. }) if left > 1 => left -= 1,
                Err(error) => self.fail(&format!("waiting for one of {needles:?}"), &error),
            }
        }
    }

    /// Waits for the first of `needles`; returns its index.
    fn expect_any(&mut self, needles: &[String]) -> usize {
        self.expect_any_patiently(needles, 1).0
    }

    /// Waits for `needle`; returns the text shown before it.
    fn expect(&mut self, needle: &str) -> String {
        self.expect_any_patiently(&[needle.to_string()], 1).1
    }

    /// Types `keys`.
    fn send(&mut self, keys: &str) {
        let sent = self
            .session
            .send(keys)
            .and_then(|_| self.session.flush())
            .map(|_| ());
        if let Err(error) = sent {
            self.fail(&format!("typing {keys:?}"), &error);
        }
    }

    /// Waits for the first of `needles` and checks it is `needles[0]`.
    fn expect_first(&mut self, needles: &[&str]) {
        let all: Vec<String> = needles.iter().map(|n| n.to_string()).collect();
        let shown = self.expect_any(&all);
        assert_eq!(
            shown, 0,
            "asked {:?} before {:?}\n--- the terminal showed ---\n{}",
            needles[shown], needles[0], self.seen
        );
    }

    /// Waits for `m3` to end; returns the rest of its output and its exit code.
    fn finish(mut self) -> (String, i32) {
        let rest = match self.session.exp_eof() {
            Ok(rest) => rest,
            Err(error) => self.fail("waiting for m3 to end", &error),
        };
        self.seen.push_str(&rest);
        match self.session.process().wait() {
            Ok(WaitStatus::Exited(_, code)) => (rest, code),
            other => panic!(
                "m3 did not exit normally: {other:?}\n--- the terminal showed ---\n{}",
                self.seen
            ),
        }
    }

    /// The action choice of a form request: accept is listed first and preselected, decline
    /// and cancel follow; Enter accepts.
    fn accept_the_request(&mut self, message: &str) {
        let request = format!("[shipping_address] {message}");
        self.expect_any_patiently(&[request], FIRST_PROMPT_TRIES);
        self.expect("answer:");
        self.expect("> accept (fill in the form)");
        self.expect("decline");
        self.expect("cancel");
        self.send(ENTER);
    }

    /// A required text field without a default: an empty value is refused with "this field is
    /// required" and the prompt asks again; then `value` is typed.
    fn fill_required_text(&mut self, label: &str, value: &str) {
        let prompt = format!("{label}: ");
        self.send(ENTER);
        self.expect("error: this field is required");
        self.expect(&prompt);
        self.send(&format!("{value}{ENTER}"));
        self.expect(&format!("{label}: {value}"));
    }
}

const MESSAGE: &str = "Where should the shipment be delivered?";

#[test]
fn demo_asks_for_the_address_on_the_terminal_and_books_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut term = Terminal::start(&dir, &["demo"]);
    term.accept_the_request(MESSAGE);
    let mut fields = vec![("Street *", "12 Harbour Road"), ("City *", "Bergen")];
    while !fields.is_empty() {
        let prompts: Vec<String> = fields.iter().map(|(l, _)| format!("{l}: ")).collect();
        let (label, value) = fields.remove(term.expect_any(&prompts));
        term.fill_required_text(label, value);
    }
    let booked = term.expect("Booked shipment to 12 Harbour Road, Bergen");
    assert!(
        booked.to_lowercase().contains("succeeded"),
        "the execution did not succeed: {booked}"
    );
    let (_, code) = term.finish();
    assert_eq!(code, 0);
}

#[test]
fn run_form_has_typed_fields_an_enum_a_boolean_and_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let m3 = env!("CARGO_BIN_EXE_m3");
    let mut term = Terminal::start(
        &dir,
        &[
            "run",
            "--server-name",
            "shipping",
            "--server-command",
            m3,
            "--server-arg",
            "shipping-server",
            "--server-arg",
            "--rich-form",
            "--tool",
            "shipping:book_shipment",
            "--human-input",
            "managed",
            "Book",
        ],
    );
    term.accept_the_request(MESSAGE);
    // The optional boolean has no `*`; the integer shows its default in brackets.
    let mut fields = vec![
        "Street *: ",
        "City *: ",
        "Quantity * [1]: ",
        "Speed *:",
        "Gift wrap:",
    ];
    while !fields.is_empty() {
        let prompts: Vec<String> = fields.iter().map(|p| p.to_string()).collect();
        match fields.remove(term.expect_any(&prompts)) {
            "Street *: " => term.fill_required_text("Street *", "12 Harbour Road"),
            "City *: " => term.fill_required_text("City *", "Bergen"),
            "Quantity * [1]: " => {
                term.send(&format!("abc{ENTER}"));
                term.expect("error: enter a");
                term.expect("Quantity * [1]: ");
                term.send(&format!("0{ENTER}"));
                term.expect("error: at least 1");
                term.expect("Quantity * [1]: ");
                term.send(&format!("3{ENTER}"));
                term.expect("Quantity *: 3");
            }
            "Speed *:" => {
                // The labels are listed, the default preselected; the arrow moves to express.
                term.expect("> Standard (3-5 days)");
                term.expect("Express (next day)");
                term.send(DOWN);
                term.expect("> Express (next day)");
                term.send(ENTER);
                term.expect("Speed *: Express (next day)");
            }
            "Gift wrap:" => {
                // yes / no / (leave empty), with the default `false` preselected: Enter keeps it.
                let before = term.expect("> no");
                assert!(before.contains("yes"), "no `yes` choice: {before:?}");
                term.expect("(leave empty)");
                term.send(ENTER);
                term.expect("Gift wrap: no");
            }
            other => unreachable!("{other}"),
        }
    }
    let booked = term.expect(
        "Booked shipment to 12 Harbour Road, Bergen (quantity 3, express delivery, gift wrap no)",
    );
    assert!(
        booked.to_lowercase().contains("succeeded"),
        "the execution did not succeed: {booked}"
    );
    let (_, code) = term.finish();
    assert_eq!(code, 0);
}

#[test]
fn run_form_accepts_every_default_with_enter() {
    let dir = tempfile::tempdir().unwrap();
    let m3 = env!("CARGO_BIN_EXE_m3");
    let mut term = Terminal::start(
        &dir,
        &[
            "run",
            "--server-name",
            "shipping",
            "--server-command",
            m3,
            "--server-arg",
            "shipping-server",
            "--server-arg",
            "--rich-form",
            "--tool",
            "shipping:book_shipment",
            "--human-input",
            "managed",
            "Book",
        ],
    );
    term.accept_the_request(MESSAGE);
    let mut fields = vec![
        "Street *: ",
        "City *: ",
        "Quantity * [1]: ",
        "Speed *:",
        "Gift wrap:",
    ];
    while !fields.is_empty() {
        let prompts: Vec<String> = fields.iter().map(|p| p.to_string()).collect();
        match fields.remove(term.expect_any(&prompts)) {
            "Street *: " => {
                term.send(&format!("1 Main Street{ENTER}"));
                term.expect("Street *: 1 Main Street");
            }
            "City *: " => {
                term.send(&format!("Pune{ENTER}"));
                term.expect("City *: Pune");
            }
            "Quantity * [1]: " => {
                term.send(ENTER);
                term.expect("Quantity *: 1");
            }
            "Speed *:" => {
                term.expect("> Standard (3-5 days)");
                term.send(ENTER);
                term.expect("Speed *: Standard (3-5 days)");
            }
            "Gift wrap:" => {
                term.expect("> no");
                term.send(ENTER);
                term.expect("Gift wrap: no");
            }
            other => unreachable!("{other}"),
        }
    }
    term.expect(
        "Booked shipment to 1 Main Street, Pune (quantity 1, standard delivery, gift wrap no)",
    );
    let (_, code) = term.finish();
    assert_eq!(code, 0);
}

/// The arguments of `run` against the bundled server asking with `--contact-form`.
fn contact_form_run(no_prompt: bool) -> Vec<String> {
    let mut args = common::run_args("legacy", &["--contact-form"], &[]);
    // `run_args` is for scripts (`--no-prompt --json`); the terminal form needs neither.
    args.retain(|a| a != "--json" && (no_prompt || a != "--no-prompt"));
    args
}

#[test]
fn respond_asks_the_form_in_schema_order_and_re_asks_only_a_bad_email() {
    let sb = common::Sandbox::new();
    let run = sb.spawn_run("legacy", &["--contact-form"], &[]);
    let round = sb.wait_pending();
    let (round_id, execution_id) = common::ids(&round);
    // The host keeps the server's order of the properties (not alphabetical).
    let schema = &round["requests"]["shipping_address"]["requested_schema"];
    let order: Vec<&str> = schema["properties"]
        .as_object()
        .expect("properties")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(order, ["street", "city", "email", "deliver_on"]);

    let mut term = Terminal::start_on(&sb.db, &["respond", &round_id], true);
    term.accept_the_request(MESSAGE);
    let street = "Street *: ";
    let city = "City *: ";
    let email = "Email * (an email address): ";
    let date = "Delivery date (YYYY-MM-DD): ";
    term.expect_first(&[street, city, email, date]);
    term.send(&format!("12 Harbour Road{ENTER}"));
    term.expect_first(&[city, email, date]);
    term.send(&format!("Bergen{ENTER}"));
    term.expect_first(&[email, date]);
    term.send(&format!("ada.example.com{ENTER}"));
    term.expect("error: enter an email address, like name@example.com");
    // Only the email is asked again: street and city keep their values.
    term.expect_first(&[email, street, city, date]);
    term.send(&format!("ada@example.com{ENTER}"));
    term.expect("Email * (an email address): ada@example.com");
    term.expect_first(&[date]);
    term.send(&format!("2026-13-40{ENTER}"));
    term.expect("error: enter a date as YYYY-MM-DD");
    term.expect_first(&[date, email]);
    term.send(&format!("2026-12-24{ENTER}"));
    term.expect("submitted with idempotency key ");
    let key = term.expect(" (the same key with the same answers repeats safely)");
    assert!(
        key.starts_with("form-") && key.len() > 20,
        "the key: {key:?}"
    );
    let (_, code) = term.finish();
    assert_eq!(code, 0, "respond exits 0");

    let (out, lines) = run.finish();
    out.ok();
    let result = common::check_run_stdout(&out, &lines);
    assert_eq!(result["outcome"], "succeeded", "{result}");
    assert_eq!(
        result["tool_calls"][0]["output"],
        "Booked shipment to 12 Harbour Road, Bergen \
         (updates to ada@example.com, delivery on 2026-12-24)"
    );
    let shown = sb.show(&round_id);
    assert_eq!(
        shown["idempotency_key"],
        key.as_str(),
        "the printed key is stored"
    );
    assert_eq!(
        shown["responses"]["shipping_address"]["content"],
        serde_json::json!({
            "street": "12 Harbour Road",
            "city": "Bergen",
            "email": "ada@example.com",
            "deliver_on": "2026-12-24"
        })
    );
    assert_eq!(sb.status(&execution_id)["outcome"], "succeeded");
}

#[test]
fn ctrl_c_in_the_run_form_cancels_the_execution_and_shows_the_cursor() {
    let sb = common::Sandbox::new();
    let args = contact_form_run(false);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut term = Terminal::start_on(&sb.db, &args, false);
    term.expect_any_patiently(
        &["accept (fill in the form)".to_string()],
        FIRST_PROMPT_TRIES,
    );
    term.expect("cancel");
    term.send(CTRL_C);
    term.expect(SHOW_CURSOR);
    term.expect("interrupted: the execution was cancelled");
    let (_, code) = term.finish();
    assert_eq!(code, 130, "an interrupted run exits 130");

    let executions = sb.m3(&["executions", "--json"]).json();
    assert_eq!(executions[0]["lifecycle"], "finished", "{executions}");
    assert_eq!(executions[0]["outcome"], "cancelled", "{executions}");
    let rounds = sb.m3(&["rounds", "--json"]).json();
    assert_eq!(rounds[0]["status"], "failed", "{rounds}");
    assert_eq!(rounds[0]["failure_code"], "cancelled", "{rounds}");
}

#[test]
fn a_second_ctrl_c_ends_run_at_once() {
    let sb = common::Sandbox::new();
    let args = contact_form_run(true);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut term = Terminal::start_on(&sb.db, &args, true);
    term.expect_any_patiently(&["{\"event\":\"pending\"".to_string()], FIRST_PROMPT_TRIES);
    // While the test holds the database's write lock, the cancel cannot be written, so the run
    // cannot end by itself: only the second Ctrl-C can end it.
    let lock = rusqlite::Connection::open(&sb.db).expect("opening the database");
    lock.execute_batch("BEGIN IMMEDIATE")
        .expect("taking the write lock");
    term.send(CTRL_C);
    term.expect("interrupted: cancelling");
    term.send(CTRL_C);
    let (rest, code) = term.finish();
    assert_eq!(code, 130, "the second Ctrl-C exits 130");
    assert!(
        !rest.contains("the execution was cancelled"),
        "the run ended by itself: {rest}"
    );
    lock.execute_batch("ROLLBACK").expect("releasing the lock");
}

/// What the form lets through but the component refuses (a fraction too small for a double in
/// an integer field): `respond` says why and asks again, every value typed before offered
/// again (Enter keeps it, or it is edited).
#[test]
fn respond_asks_again_with_the_typed_values_when_the_component_refuses() {
    let sb = common::Sandbox::new();
    let run = sb.spawn_run("legacy", &["--rich-form"], &[]);
    let (round_id, _) = common::ids(&sb.wait_pending());
    let mut term = Terminal::start_on(&sb.db, &["respond", &round_id], true);
    term.accept_the_request(MESSAGE);
    term.expect_first(&["Street *: "]);
    term.send(&format!("12 Harbour Road{ENTER}"));
    term.expect_first(&["City *: "]);
    term.send(&format!("Bergen{ENTER}"));
    term.expect_first(&["Quantity * [1]: "]);
    let almost_one = "1.0000000000000000001";
    term.send(&format!("{almost_one}{ENTER}"));
    term.expect_first(&["Speed *:"]);
    term.expect("> Standard (3-5 days)");
    term.send(DOWN);
    term.expect("> Express (next day)");
    term.send(ENTER);
    term.expect_first(&["Gift wrap:"]);
    term.expect("> no");
    term.send(ENTER);
    let refused = term.expect("; asking again with your values");
    assert!(
        refused.contains("ManagedInputValidationError: ") && !refused.contains(almost_one),
        "the refusal says why, without the value: {refused:?}"
    );
    // The second try starts from the first one's values.
    term.accept_the_request(MESSAGE);
    term.expect("Street *: 12 Harbour Road");
    term.send(ENTER);
    term.expect("City *: Bergen");
    term.send(ENTER);
    term.expect(&format!("Quantity *: {almost_one}"));
    term.send(&"\x7f".repeat(almost_one.len()));
    term.send(&format!("2{ENTER}"));
    term.expect("Quantity *: 2");
    term.expect("> Express (next day)");
    term.send(ENTER);
    term.expect("> no");
    term.send(ENTER);
    term.expect("submitted with idempotency key ");
    let (_, code) = term.finish();
    assert_eq!(code, 0, "respond exits 0");
    let (out, lines) = run.finish();
    out.ok();
    let result = common::check_run_stdout(&out, &lines);
    assert_eq!(
        result["tool_calls"][0]["output"],
        "Booked shipment to 12 Harbour Road, Bergen (quantity 2, express delivery, gift wrap no)"
    );
}

/// Ctrl-C in `demo`'s form cancels its execution (kept on `--db`), shows the cursor and exits
/// 130; nothing is left waiting for an answer.
#[test]
fn ctrl_c_in_the_demo_form_cancels_and_shows_the_cursor() {
    let sb = common::Sandbox::new();
    let mut term = Terminal::start_on(&sb.db, &["demo"], false);
    term.expect_any_patiently(
        &["accept (fill in the form)".to_string()],
        FIRST_PROMPT_TRIES,
    );
    term.expect("cancel");
    term.send(CTRL_C);
    term.expect(SHOW_CURSOR);
    term.expect("interrupted: the execution was cancelled");
    let (_, code) = term.finish();
    assert_eq!(code, 130, "an interrupted demo exits 130");
    let executions = sb.m3(&["executions", "--json"]).json();
    assert_eq!(executions[0]["lifecycle"], "finished", "{executions}");
    assert_eq!(executions[0]["outcome"], "cancelled", "{executions}");
    let rounds = sb.m3(&["rounds", "--json"]).json();
    assert_eq!(rounds[0]["failure_code"], "cancelled", "{rounds}");
}

/// Ctrl-C in `respond`'s form submits nothing: the round stays pending for someone else, the
/// cursor is shown again, and the command exits 130 saying so.
#[test]
fn ctrl_c_in_the_respond_form_submits_nothing() {
    let sb = common::Sandbox::new();
    let _run = sb.spawn_run("legacy", &[], &[]);
    let (round_id, _) = common::ids(&sb.wait_pending());
    let mut term = Terminal::start_on(&sb.db, &["respond", &round_id], false);
    term.expect_any_patiently(
        &["accept (fill in the form)".to_string()],
        FIRST_PROMPT_TRIES,
    );
    term.expect("cancel");
    term.send(CTRL_C);
    term.expect(SHOW_CURSOR);
    term.expect("interrupted: nothing was submitted");
    let (_, code) = term.finish();
    assert_eq!(code, 130, "an interrupted respond exits 130");
    let round = sb.show(&round_id);
    assert_eq!(round["status"], "pending", "{round}");
    assert!(
        round.get("responses").is_some_and(Value::is_null),
        "no answers stored: {round}"
    );
}

/// The raw sequences of the shipping server's `--hostile-text` (`shipping::HOSTILE_TEXT`):
/// each must never reach a terminal as it is.
const HOSTILE_RAW: [&str; 6] = [
    "\u{1b}]0;PWNED",
    "\u{1b}[2J",
    "\u{1b}[31mRED",
    "\u{1b}]52;c;",
    "\rType your password",
    "\u{202e}gnp",
];
/// How the start of the hostile text is shown instead.
const HOSTILE_SHOWN: &str = "\\x1b]0;PWNED\\x07\\x1b[2J\\x1b[31mRED\\x1b]52;c;cHduZWQ=\\x07\\rType your password: \\x9b0m\\u{202e}gnp.exe";

/// Asserts that none of the hostile sequences is in `text` as it is.
fn assert_no_hostile_raw(text: &str, what: &str) {
    for raw in HOSTILE_RAW {
        assert!(
            !text.contains(raw),
            "{what} sent {raw:?} to the terminal:\n{text:?}"
        );
    }
    assert!(!text.contains('\u{9b}'), "{what} sent a C1 CSI:\n{text:?}");
}

/// A server whose words carry terminal escape sequences (a window title, a cleared screen,
/// colour, an OSC 52 clipboard write, a carriage return with a made-up question, a C1 control,
/// a right-to-left override) in its elicitation message, a field's title and description, its
/// error and its stderr: the terminal form, `m3 run`'s result and stderr tail, `m3 status` and
/// `m3 events` show each as a visible escape, and none reaches the terminal raw.
#[test]
fn a_server_s_escape_sequences_are_shown_never_sent_to_the_terminal() {
    let sb = common::Sandbox::new();
    let mut args = common::run_args("legacy", &["--hostile-text", "--fail-after-answer"], &[]);
    args.retain(|a| a != "--json" && a != "--no-prompt");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut term = Terminal::start_on(&sb.db, &args, false);
    let message =
        format!("[shipping_address] Where should the shipment be delivered?{HOSTILE_SHOWN}");
    term.expect_any_patiently(&[message], FIRST_PROMPT_TRIES);
    term.expect("accept (fill in the form)");
    term.expect("cancel");
    term.send(ENTER);
    term.expect(&format!("Street{HOSTILE_SHOWN}"));
    term.send(&format!("1 Main Street{ENTER}"));
    term.expect("City");
    term.send(&format!("Pune{ENTER}"));
    term.expect("its stderr ended with:");
    term.expect(&format!("shipping-server: {HOSTILE_SHOWN}"));
    let shown = term.seen.clone();
    let (rest, code) = term.finish();
    assert_ne!(code, 0, "the server failed the call");
    assert_no_hostile_raw(&format!("{shown}{rest}"), "m3 run on a terminal");

    let execution = sb.m3(&["executions", "--json"]).json()[0]["execution_id"]
        .as_str()
        .expect("an execution id")
        .to_string();
    for command in ["status", "events"] {
        let out = sb.m3(&[command, &execution]);
        out.ok();
        assert_no_hostile_raw(&out.stdout, command);
        assert!(
            out.stdout.contains("\\x1b]0;PWNED"),
            "{command} shows the escapes:\n{}",
            out.stdout
        );
    }
    // Wide output shows whole lines: the same.
    let out = sb.m3(&["--wide", "events", &execution]);
    assert_no_hostile_raw(&out.stdout, "events --wide");
    assert!(out.stdout.contains(HOSTILE_SHOWN), "{}", out.stdout);
    // JSON output holds the same value, and nothing a terminal obeys.
    let rounds = sb.m3(&["rounds", "--json"]);
    assert_no_hostile_raw(&rounds.stdout, "rounds --json");
    let round = &rounds.json()[0];
    let shown = sb.m3(&["show", round["round_id"].as_str().expect("an id"), "--json"]);
    assert_no_hostile_raw(&shown.stdout, "show --json");
    let message = shown.json()["requests"]["shipping_address"]["message"].clone();
    assert_eq!(
        message.as_str().map(|m| m.ends_with("\u{202e}gnp.exe")),
        Some(true),
        "the message's value is kept: {message}"
    );
    for command in ["status", "events"] {
        let out = sb.m3(&[command, &execution, "--json"]);
        assert_no_hostile_raw(&out.stdout, command);
        out.json();
    }
}
