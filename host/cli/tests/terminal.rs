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
//! The form asks the fields in the order of the schema as the host holds it, which these tests do
//! not assume: each step waits for whichever of the remaining fields' prompts comes first.

use rexpect::error::Error;
use rexpect::process::WaitStatus;
use rexpect::reader::{Options, ReadUntil};
use rexpect::session::{PtySession, spawn_with_options};
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

/// `m3` on a pseudo-terminal, with everything read so far kept for failure messages.
struct Terminal {
    session: PtySession,
    seen: String,
}

impl Terminal {
    /// Starts `m3 ARGS` on a fresh pty, with its database in `dir`.
    fn start(dir: &tempfile::TempDir, args: &[&str]) -> Self {
        let mut command = Command::new(env!("CARGO_BIN_EXE_m3"));
        command
            .arg("--db")
            .arg(dir.path().join("x.sqlite"))
            .args(args)
            .env_remove("M3_DB")
            .env("TERM", "xterm");
        let options = Options::new()
            .timeout_ms(Some(TIMEOUT_MS))
            .strip_ansi_escape_codes(true);
        let session = spawn_with_options(command, options).expect("start m3 on a pty");
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
