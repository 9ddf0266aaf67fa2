//! The web inbox of `m3 serve` in a real browser: headless Chromium driven through its
//! WebDriver (`chromedriver`, Debian's packages, installed on first use by
//! `m3_tests::peers::browser`), against the real `m3 serve` and `m3 run --no-prompt` processes on
//! one SQLite file. Nothing is reloaded by hand: what appears, appears through the page's event
//! stream. With `M3_SCREENSHOTS=DIR` the first test also writes `inbox.png` and `form.png` there
//! (the README's pictures).

mod common;
mod receiving;
mod serving;

use common::*;
use fantoccini::elements::Element;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};
use serving::Server;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long a page may take to show what a test waits for.
const PAGE_TIMEOUT: Duration = Duration::from_secs(60);

/// A running `chromedriver` and the browser sessions it opened.
struct Driver {
    guard: ChildGuard,
    url: String,
    chromium: std::path::PathBuf,
    profiles: Vec<tempfile::TempDir>,
}

/// A free loopback port (bound, then released for a child to take).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

impl Driver {
    /// Starts Debian's `chromedriver` (installing Chromium first if needed) and waits until it
    /// is ready.
    fn start() -> Self {
        let browser =
            m3_tests::peers::browser().expect("installing Chromium for the browser tests");
        let port = free_port();
        let child = Command::new(&browser.chromedriver)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting chromedriver");
        let driver = Self {
            guard: ChildGuard { child },
            url: format!("http://127.0.0.1:{port}"),
            chromium: browser.chromium,
            profiles: Vec::new(),
        };
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let until = Instant::now() + COMMAND_TIMEOUT;
        loop {
            let ready = agent
                .get(format!("{}/status", driver.url))
                .call()
                .ok()
                .and_then(|mut r| r.body_mut().read_json::<Value>().ok())
                .is_some_and(|status| status["value"]["ready"] == true);
            if ready {
                return driver;
            }
            assert!(Instant::now() < until, "chromedriver did not become ready");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A new browser session with a profile of its own (its own cookies).
    async fn session(&mut self) -> Client {
        let profile = tempfile::tempdir().expect("a browser profile directory");
        let args = json!([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--window-size=1100,1000",
            format!("--user-data-dir={}", profile.path().display()),
        ]);
        self.profiles.push(profile);
        let mut capabilities = serde_json::Map::new();
        capabilities.insert(
            "goog:chromeOptions".into(),
            json!({"binary": self.chromium, "args": args}),
        );
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        ClientBuilder::new(connector)
            .capabilities(capabilities)
            .connect(&self.url)
            .await
            .expect("a Chromium session")
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        self.guard.kill();
    }
}

/// The element matching `css`, waited for.
async fn find(client: &Client, css: &str) -> Element {
    client
        .wait()
        .at_most(PAGE_TIMEOUT)
        .for_element(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("no `{css}` on the page within the timeout: {e}"))
}

/// Waits until the text of `css` satisfies `ok`; returns it.
async fn text_until(client: &Client, css: &str, ok: impl Fn(&str) -> bool) -> String {
    let until = Instant::now() + PAGE_TIMEOUT;
    let mut last = String::new();
    loop {
        if let Ok(element) = client.find(Locator::Css(css)).await
            && let Ok(text) = element.text().await
        {
            if ok(&text) {
                return text;
            }
            last = text;
        }
        assert!(
            Instant::now() < until,
            "`{css}` never showed what was expected; last: {last:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The value of `attribute` of `css`, waited for until it is `want`.
async fn attribute_until(client: &Client, css: &str, attribute: &str, want: &str) {
    let until = Instant::now() + PAGE_TIMEOUT;
    loop {
        if let Ok(element) = client.find(Locator::Css(css)).await
            && element.attr(attribute).await.ok().flatten().as_deref() == Some(want)
        {
            return;
        }
        assert!(
            Instant::now() < until,
            "`{css}` never had {attribute}={want:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Clicks the element matching `css`, finding it again if the page re-rendered it in between
/// (the live pages replace elements when a change arrives).
async fn click(client: &Client, css: &str) {
    let until = Instant::now() + PAGE_TIMEOUT;
    loop {
        let element = find(client, css).await;
        match element.click().await {
            Ok(()) => return,
            Err(e) => assert!(Instant::now() < until, "cannot click `{css}`: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The attribute `name` of the element matching `css`, waited for (and found again if the page
/// re-rendered it).
async fn attr_of(client: &Client, css: &str, name: &str) -> String {
    let until = Instant::now() + PAGE_TIMEOUT;
    loop {
        if let Ok(element) = client.find(Locator::Css(css)).await
            && let Ok(Some(value)) = element.attr(name).await
        {
            return value;
        }
        assert!(Instant::now() < until, "`{css}` never had `{name}`");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Types `text` into the field `name` of the round's form, replacing what is there.
async fn type_into(client: &Client, name: &str, text: &str) {
    let input = find(client, &format!("[data-field=\"{name}\"] input")).await;
    input.clear().await.expect("clearing a field");
    input.send_keys(text).await.expect("typing");
}

/// Sets a date or date-time input `name` the way its picker would (typing into a native date
/// picker depends on the locale), and tells the page.
async fn pick(client: &Client, name: &str, value: &str) {
    let input = find(client, &format!("[data-field=\"{name}\"] input")).await;
    client
        .execute(
            "arguments[0].value = arguments[1]; \
             arguments[0].dispatchEvent(new Event('input', {bubbles: true}));",
            vec![
                serde_json::to_value(&input).expect("an element"),
                json!(value),
            ],
        )
        .await
        .expect("setting a picker's value");
}

/// The error shown under field `name`.
async fn field_error(client: &Client, name: &str) -> String {
    find(client, &format!("p.error[data-error-for=\"{name}\"]"))
        .await
        .text()
        .await
        .unwrap_or_default()
}

/// Writes the page's screenshot to `$M3_SCREENSHOTS/<name>` when that variable is set.
async fn screenshot(client: &Client, name: &str) {
    if let Some(dir) = std::env::var_os("M3_SCREENSHOTS") {
        client
            .execute(
                "window.scrollTo(0, 0); document.activeElement.blur();",
                vec![],
            )
            .await
            .expect("scrolling to the top");
        let png = client.screenshot().await.expect("a screenshot");
        std::fs::create_dir_all(&dir).expect("the screenshot directory");
        std::fs::write(std::path::Path::new(&dir).join(name), png).expect("writing a screenshot");
    }
}

/// The finished run's result (`m3 run --json`'s last line), off the async threads.
async fn result_of(run: Running) -> Value {
    tokio::task::spawn_blocking(move || {
        let (out, lines) = run.finish();
        check_run_stdout(&out, &lines)
    })
    .await
    .expect("the run's result")
}

/// The finished run's result without the bundled server's checks: the last JSON line of
/// `m3 run --json`, which must have exited 0.
async fn plain_result_of(run: Running) -> Value {
    tokio::task::spawn_blocking(move || {
        let (out, lines) = run.finish();
        out.ok();
        let last = lines.last().expect("`m3 run --json` printed its result");
        let line: Value = serde_json::from_str(last).expect("a JSON result line");
        assert_eq!(line["event"], "result", "{line}");
        line["result"].clone()
    })
    .await
    .expect("the run's result")
}

/// An execution started with `m3 run --no-prompt` appears in the open inbox without a reload; a
/// form with every MCP field kind shows titles, defaults and required marks, refuses bad values
/// as they are typed and the component's refusal next to its field, and delivers exactly the
/// answer given; the round's progress reaches resolved live.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inbox_shows_a_new_round_live_and_a_form_of_every_kind_delivers_exactly_its_answer() {
    let sb = Sandbox::new();
    sb.create_database();
    let server = Server::start(&sb, &[], None);
    let mut driver = Driver::start();
    let browser = driver.session().await;
    browser.goto(&server.base).await.expect("opening the inbox");
    text_until(&browser, "#inbox", |t| t.contains("Nothing waits")).await;

    let run = sb.spawn_run("modern", &["--every-field"], &[]);
    let round_id = attr_of(&browser, "tr.round", "data-round-id").await;
    text_until(&browser, "tr.round", |t| t.contains("book_shipment")).await;
    screenshot(&browser, "inbox.png").await;
    click(&browser, "tr.round td a[href^=\"/rounds/\"]").await;
    find(&browser, "form#answer").await;
    attribute_until(&browser, "#progress", "data-status", "pending").await;

    // Required marks, titles, defaults.
    for name in ["street", "city", "email", "quantity", "speed", "carrier"] {
        find(&browser, &format!("[data-field=\"{name}\"] .required")).await;
    }
    for name in ["website", "note", "gift", "extras", "labels"] {
        let marks = browser
            .find_all(Locator::Css(&format!("[data-field=\"{name}\"] .required")))
            .await
            .expect("a query");
        assert!(marks.is_empty(), "{name} is optional");
    }
    let quantity = find(&browser, "[data-field=quantity] input").await;
    assert_eq!(quantity.prop("value").await.unwrap().as_deref(), Some("1"));
    let speed = find(&browser, "[data-field=speed] select").await;
    let chosen = speed
        .find(Locator::Css("option:checked"))
        .await
        .expect("a chosen speed");
    assert_eq!(chosen.text().await.unwrap(), "Standard (3-5 days)");
    let carrier = text_until(&browser, "[data-field=carrier] select", |t| {
        t.contains("National post")
    })
    .await;
    assert!(carrier.contains("Courier"), "{carrier}");
    let extras = text_until(&browser, "[data-field=extras]", |t| t.contains("Insurance")).await;
    assert!(extras.contains("Signature on delivery") && extras.contains("SMS updates"));
    let fragile = find(&browser, "[data-field=labels] input[value=\"0\"]").await;
    assert!(fragile.is_selected().await.unwrap(), "the default label");
    let types = [
        ("email", "email"),
        ("website", "url"),
        ("deliver_on", "date"),
        ("call_time", "datetime-local"),
        ("weight_kg", "number"),
        ("gift", "checkbox"),
    ];
    for (name, kind) in types {
        let input = find(&browser, &format!("[data-field=\"{name}\"] input")).await;
        assert_eq!(input.attr("type").await.unwrap().as_deref(), Some(kind));
    }

    // Checked in the browser as the user types.
    type_into(&browser, "street", STREET).await;
    type_into(&browser, "city", CITY).await;
    type_into(&browser, "email", "not-an-email").await;
    assert_eq!(
        field_error(&browser, "email").await,
        "Not an email address."
    );
    type_into(&browser, "quantity", "500").await;
    assert_eq!(field_error(&browser, "quantity").await, "At most 99.");
    type_into(&browser, "quantity", "3").await;
    assert_eq!(field_error(&browser, "quantity").await, "");
    type_into(&browser, "note", "x").await;
    assert_eq!(
        field_error(&browser, "note").await,
        "At least 2 characters."
    );
    type_into(&browser, "note", "Ring twice").await;
    type_into(&browser, "website", "https://example.com/asha").await;
    type_into(&browser, "weight_kg", "2.5").await;
    pick(&browser, "deliver_on", "2026-12-24").await;
    pick(&browser, "call_time", "2026-12-24T09:30").await;
    click(&browser, "[data-field=gift] input").await;
    speed.select_by_label("Express (next day)").await.unwrap();
    find(&browser, "[data-field=carrier] select")
        .await
        .select_by_label("Courier")
        .await
        .unwrap();
    for label in ["Insurance", "SMS updates"] {
        let boxes = browser
            .find_all(Locator::Css("[data-field=extras] label"))
            .await
            .unwrap();
        for b in boxes {
            if b.text().await.unwrap().trim() == label {
                b.find(Locator::Css("input"))
                    .await
                    .unwrap()
                    .click()
                    .await
                    .unwrap();
            }
        }
    }
    click(&browser, "[data-field=labels] input[value=\"1\"]").await;
    // An address the browser's check lets through but the component's `format` refuses: the
    // component's error appears next to the field, nothing is stored.
    type_into(&browser, "email", "asha..k@example.com").await;
    assert_eq!(field_error(&browser, "email").await, "");
    screenshot(&browser, "form.png").await;
    click(&browser, "#submit").await;
    let refused = text_until(&browser, "p.error[data-error-for=email]", |t| !t.is_empty()).await;
    assert!(refused.contains("format"), "{refused}");
    assert_eq!(sb.show(&round_id)["status"], "pending");

    type_into(&browser, "email", "asha@example.com").await;
    let call_time = browser
        .execute("return new Date('2026-12-24T09:30').toISOString();", vec![])
        .await
        .unwrap();
    click(&browser, "#submit").await;
    text_until(&browser, "#notice", |t| t.contains("Answer taken")).await;
    attribute_until(&browser, "#progress", "data-status", "resolved").await;

    let result = result_of(run).await;
    assert_eq!(result["outcome"], "succeeded", "{result}");
    let expected = json!({
        "street": STREET, "city": CITY, "email": "asha@example.com",
        "website": "https://example.com/asha", "deliver_on": "2026-12-24", "call_time": call_time,
        "note": "Ring twice", "quantity": 3, "weight_kg": 2.5, "gift": true,
        "speed": "express", "carrier": "courier", "extras": ["insurance", "sms"],
        "labels": ["fragile", "upright"],
    });
    assert_eq!(
        result["tool_calls"][0]["result"]["structuredContent"]["answer"], expected,
        "the server received exactly the answer given"
    );
    browser.close().await.unwrap();
}

/// The inbox opened before its database exists says which database it waits for (so a typo
/// shows), and shows the first round live once `m3 run` creates the database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inbox_before_its_database_names_it_then_shows_the_first_round() {
    let sb = Sandbox::new();
    let server = Server::start(&sb, &[], None);
    let mut driver = Driver::start();
    let browser = driver.session().await;
    browser.goto(&server.base).await.expect("opening the inbox");
    let path = sb.db.display().to_string();
    let said = text_until(&browser, "main", |t| {
        t.contains("database_waiting") || t.contains(&path)
    })
    .await;
    assert!(said.contains(&path), "{said}");
    assert!(!sb.db.exists());
    let run = sb.spawn_run("legacy", &[], &[]);
    let round_id = attr_of(&browser, "tr.round", "data-round-id").await;
    assert!(round_id.starts_with("exec-"), "{round_id}");
    drop(run);
}

/// Opens the one pending round of the inbox in `browser` (waiting for it to appear) and returns
/// its id.
async fn open_the_round(browser: &Client, base: &str) -> String {
    browser.goto(base).await.expect("opening the inbox");
    let round_id = attr_of(browser, "tr.round", "data-round-id").await;
    browser
        .goto(&format!("{base}/rounds/{round_id}"))
        .await
        .expect("opening the round");
    find(browser, "form#answer").await;
    round_id
}

/// A Claude Code execution (`m3 run --harness claude-code`, the real pinned CLI and a loopback
/// Messages API) answered from the inbox: the round Claude Code forwarded is a form like any
/// other, and the address typed into it books the shipment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claude_code_round_is_answered_from_the_inbox() {
    let sb = Sandbox::new();
    sb.create_database();
    let server = Server::start(&sb, &[], None);
    let mut driver = Driver::start();
    let browser = driver.session().await;
    let run = sb.spawn_claude_code_run();
    open_the_round(&browser, &server.base).await;
    type_into(&browser, "street", STREET).await;
    type_into(&browser, "city", CITY).await;
    click(&browser, "#submit").await;
    text_until(&browser, "#notice", |t| t.contains("Answer taken")).await;
    attribute_until(&browser, "#progress", "data-status", "resolved").await;
    let result = plain_result_of(run).await;
    assert_eq!(result["outcome"], "succeeded", "{result}");
    let output = result["tool_calls"][0]["output"].as_str().unwrap_or("");
    assert!(output.contains(STREET), "{result}");
}

/// The link of a round's notification (`m3 serve --notify`) opens that round's form; decline
/// answers the server with a decline; a URL-mode request shows its URL as text (never a link,
/// never opened), refuses accept without the consent box and, with it, sends consent only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decline_and_url_consent() {
    let sb = Sandbox::new();
    sb.create_database();
    let receiver = receiving::Receiver::start(&[]);
    let server = Server::start(&sb, &["--notify", &receiver.base], None);
    let mut driver = Driver::start();
    let browser = driver.session().await;

    let run = sb.spawn_run("legacy", &[], &[]);
    let told = tokio::task::block_in_place(|| {
        receiver.wait_for(PAGE_TIMEOUT, "the round's notification", |d| !d.is_empty())
    });
    let link = told[0].json()["link"].as_str().unwrap().to_string();
    let round_id = told[0].json()["round"]["round_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(link, format!("{}/rounds/{round_id}", server.base));
    browser.goto(&link).await.expect("opening the link");
    find(&browser, "form#answer").await;
    let title = text_until(&browser, "main", |t| t.contains("book_shipment")).await;
    assert!(
        title.contains("Where should the shipment be delivered?"),
        "{title}"
    );
    click(&browser, "#decline").await;
    text_until(&browser, "#notice", |t| t.contains("Answer taken")).await;
    attribute_until(&browser, "#progress", "data-status", "resolved").await;
    let result = result_of(run).await;
    assert_eq!(
        result["tool_calls"][0]["output"], "Shipment not booked: the address was declined",
        "{result}"
    );
    // The execution's page: its outcome, its round and its history, reached from the round.
    click(&browser, ".crumbs a[href^=\"/executions/\"]").await;
    find(&browser, "#facts [data-outcome=succeeded]").await;
    let rounds = text_until(&browser, "#rounds", |t| t.contains("resolved")).await;
    assert!(rounds.contains("book_shipment"), "{rounds}");
    let history = text_until(&browser, "#history", |t| t.contains("round_resolved")).await;
    assert!(history.contains("execution_finished"), "{history}");

    // Cancel from an execution's page: the run ends cancelled, its round failed.
    let run = sb.spawn_run("legacy", &[], &[]);
    browser.goto(&server.base).await.unwrap();
    click(&browser, "tr.round td a[href^=\"/executions/\"]").await;
    click(&browser, "#cancel-execution").await;
    find(&browser, "#facts [data-outcome=cancelled]").await;
    text_until(&browser, "#rounds", |t| t.contains("failed")).await;
    let result = result_of(run).await;
    assert_eq!(result["outcome"], "cancelled", "{result}");

    let everything = m3_tests::peers::server_everything().expect("installing server-everything");
    let url = "https://example.com/consent";
    let script = sb.write(
        "url.json",
        &json!({"steps": [{"tool": "everything:trigger-url-elicitation",
                           "arguments": {"url": url}}]})
        .to_string(),
    );
    let mut args: Vec<String> = [
        "run",
        "--no-prompt",
        "--json",
        "--server-name",
        "everything",
        "--server-command",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.push(everything.program.display().to_string());
    for arg in &everything.args {
        args.push("--server-arg".into());
        args.push(arg.to_string_lossy().into_owned());
    }
    args.extend(
        [
            "--tool",
            "everything:trigger-url-elicitation",
            "--human-input",
            "managed",
            "--script",
        ]
        .map(String::from),
    );
    args.push(script.display().to_string());
    args.push("Ask for consent at a URL.".into());
    let run = sb.spawn(&args);
    let round_id = open_the_round(&browser, &server.base).await;
    let shown = text_until(&browser, "code.url", |t| !t.is_empty()).await;
    assert_eq!(shown, url);
    let links = browser
        .find_all(Locator::Css(&format!("a[href=\"{url}\"]")))
        .await
        .unwrap();
    assert!(links.is_empty(), "the URL is text, not a link");
    click(&browser, "#submit").await;
    let refused = text_until(&browser, "p.error[data-error-for=\"\"]", |t| !t.is_empty()).await;
    assert!(refused.contains("consent"), "{refused}");
    assert_eq!(sb.show(&round_id)["status"], "pending");
    click(&browser, "input.consent").await;
    click(&browser, "#submit").await;
    text_until(&browser, "#notice", |t| t.contains("Answer taken")).await;
    let result = plain_result_of(run).await;
    assert_eq!(result["outcome"], "succeeded", "{result}");
    let output = result["tool_calls"][0]["output"]
        .as_str()
        .unwrap_or_default();
    assert!(output.contains(url), "{output}");
    let stored = sb.m3(&["show", &round_id, "--json"]).json();
    assert_eq!(
        stored["responses"],
        json!({"elicitation": {"action": "accept", "content": null}}),
        "consent only, no content"
    );
    // The browser stayed on the inbox's page: nothing opened the URL.
    assert_eq!(browser.windows().await.unwrap().len(), 1);
    let here = browser.current_url().await.unwrap();
    assert!(here.as_str().starts_with(&server.base), "{here}");
    browser.close().await.unwrap();
}

/// Two browser sessions answer the same round at once: one answer is taken and delivered once,
/// the other session is told of the conflict and its answer is not stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sessions_answering_one_round_one_wins_the_other_sees_the_conflict() {
    let sb = Sandbox::new();
    sb.create_database();
    let server = Server::start(&sb, &[], None);
    let mut driver = Driver::start();
    let first = driver.session().await;
    let second = driver.session().await;
    let run = sb.spawn_run("legacy", &[], &[]);
    let round_id = open_the_round(&first, &server.base).await;
    open_the_round(&second, &server.base).await;
    for (browser, city) in [(&first, CITY), (&second, "Shelbyville")] {
        type_into(browser, "street", STREET).await;
        type_into(browser, "city", city).await;
    }
    let one = find(&first, "#submit").await;
    let two = find(&second, "#submit").await;
    // The two clicks race: a page that hears of the other answer before its own click lands has
    // already swapped its form for the conflict notice, so that click finds its button gone. At
    // most one click can miss so (some answer was taken first), and the notices below still
    // hold for both pages.
    let (a, b) = tokio::join!(one.click(), two.click());
    let mut missed = 0;
    for click in [a, b] {
        match click {
            Ok(()) => {}
            Err(error) if error.is_stale_element_reference() => missed += 1,
            Err(error) => panic!("clicking submit: {error}"),
        }
    }
    assert!(
        missed <= 1,
        "both pages lost their form before either answer was taken"
    );
    let mut taken = Vec::new();
    let mut conflicts = 0;
    for (browser, city) in [(&first, CITY), (&second, "Shelbyville")] {
        let (class, text) = notice_of(browser).await;
        if class.contains("ok") {
            assert!(text.contains("Answer taken"), "{text}");
            taken.push(city);
        } else {
            assert!(
                text.contains("Not taken") || text.contains("answered this round first"),
                "{text}"
            );
            conflicts += 1;
        }
    }
    assert_eq!(taken.len(), 1, "exactly one answer is taken: {taken:?}");
    assert_eq!(conflicts, 1);
    let result = result_of(run).await;
    assert_eq!(
        result["tool_calls"][0]["output"],
        format!("Booked shipment to {STREET}, {}", taken[0]),
        "the taken answer is the one delivered"
    );
    let execution_id = sb.show(&round_id)["execution_id"]
        .as_str()
        .expect("an execution id")
        .to_string();
    let events = sb.m3(&["events", &execution_id, "--json"]).json();
    let delivered = events["history"]
        .as_array()
        .expect("a history")
        .iter()
        .filter(|h| h["kind"] == "round_delivered")
        .count();
    assert_eq!(delivered, 1, "delivered exactly once: {events}");
    first.close().await.unwrap();
    second.close().await.unwrap();
}

/// The class and text of the page's answer notice (taken or conflict). A page that hears of the
/// other answer while its own is in flight writes its notice twice, so a notice that goes stale
/// while being read is looked up again.
async fn notice_of(client: &Client) -> (String, String) {
    let until = Instant::now() + PAGE_TIMEOUT;
    loop {
        let notice = find(client, "#notice .notice.ok, #notice .notice.conflict").await;
        let read = async {
            let class = notice.attr("class").await?.unwrap_or_default();
            Ok::<_, fantoccini::error::CmdError>((class, notice.text().await?))
        };
        match read.await {
            Ok(read) => return read,
            Err(error) if error.is_stale_element_reference() && Instant::now() < until => {}
            Err(error) => panic!("reading the notice: {error}"),
        }
    }
}

/// A static web server on another origin (Python's `http.server` on `host:port`), serving `dir`.
fn other_origin(dir: &std::path::Path, host: &str) -> (ChildGuard, String) {
    let port = free_port();
    let child = Command::new("python3")
        .args([
            "-m",
            "http.server",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
        ])
        .arg("--directory")
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting python3 -m http.server");
    let guard = ChildGuard { child };
    let until = Instant::now() + COMMAND_TIMEOUT;
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < until, "http.server did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    (guard, format!("http://{host}:{port}"))
}

/// A page that, once loaded, posts a form to `action` (a cross-site request forgery attempt:
/// `text/plain` shaped like a JSON answer, the most a form can do).
fn forging_page(action: &str) -> String {
    format!(
        "<!doctype html><html><body onload=\"document.forms[0].submit()\">\
         <form method=\"post\" enctype=\"text/plain\" action=\"{action}\">\
         <input name='{{\"responses\":{{\"shipping_address\":{{\"action\":\"decline\"}}}},\
         \"idempotency_key\":\"forged\",\"x\":\"' value='\"}}'></form></body></html>"
    )
}

/// Loads `page` and waits until the forged post's answer is shown; returns its text.
async fn forged(browser: &Client, page: &str, target: &str) -> String {
    browser.goto(page).await.expect("opening the forging page");
    let until = Instant::now() + PAGE_TIMEOUT;
    loop {
        let here = browser.current_url().await.expect("the current URL");
        if here.as_str().starts_with(target) {
            let body = find(browser, "body").await;
            let text = body.text().await.unwrap_or_default();
            if !text.is_empty() {
                return text;
            }
        }
        assert!(Instant::now() < until, "the forged post was never answered");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// With a token, every page and API call needs it: pages send a browser to the login form, a
/// wrong token is refused, the right one sets an HttpOnly, SameSite=Strict cookie and leads back.
/// Forms posted from other origins (another site, and the same site on another port, which does
/// get the cookie) change nothing; nor does one posted to a server without a token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_guards_every_page_and_cross_site_posts_change_nothing() {
    let sb = Sandbox::new();
    sb.create_database();
    let token = "correct horse battery staple";
    let server = Server::start(&sb, &["--token", token], None);
    let run = sb.spawn_run("legacy", &[], &[]);
    let round = tokio::task::spawn_blocking({
        let db = sb.db.clone();
        let dir = sb.dir.path().to_path_buf();
        move || {
            let out = Command::new(M3)
                .current_dir(dir)
                .arg("--db")
                .arg(db)
                .args(["pending", "--wait", "60", "--json"])
                .output()
                .expect("m3 pending --wait");
            serde_json::from_slice::<Value>(&out.stdout).expect("pending --json")[0].clone()
        }
    })
    .await
    .unwrap();
    let round_id = round["round_id"].as_str().unwrap().to_string();
    let execution_id = round["execution_id"].as_str().unwrap().to_string();

    // Without the token: a page goes to the login form, the API answers 401, as does a forged
    // cookie.
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .build()
        .into();
    let page = agent
        .get(format!("{}/rounds/{round_id}", server.base))
        .call()
        .unwrap();
    assert_eq!(page.status().as_u16(), 303);
    let location = page.headers().get("location").unwrap().to_str().unwrap();
    assert!(
        location == format!("/login?next=/rounds/{round_id}"),
        "{location}"
    );
    for cookie in [None, Some("m3_session=0123456789abcdef")] {
        let mut call = agent.get(format!("{}/api/rounds/pending", server.base));
        if let Some(cookie) = cookie {
            call = call.header("Cookie", cookie);
        }
        assert_eq!(call.call().unwrap().status().as_u16(), 401);
    }

    // The login form.
    let mut driver = Driver::start();
    let browser = driver.session().await;
    browser
        .goto(&format!("{}/rounds/{round_id}", server.base))
        .await
        .unwrap();
    find(&browser, "form#login").await;
    find(&browser, "#token")
        .await
        .send_keys("wrong")
        .await
        .unwrap();
    click(&browser, "form#login button").await;
    text_until(&browser, "#login-error", |t| t.contains("not the token")).await;
    find(&browser, "#token")
        .await
        .send_keys(token)
        .await
        .unwrap();
    click(&browser, "form#login button").await;
    find(&browser, "form#answer").await;
    let here = browser.current_url().await.unwrap();
    assert_eq!(here.path(), format!("/rounds/{round_id}"));
    let cookies = browser.get_all_cookies().await.unwrap();
    let session = cookies
        .iter()
        .find(|c| c.name() == "m3_session")
        .expect("the session cookie");
    assert_eq!(session.http_only(), Some(true));
    assert_eq!(session.same_site(), Some(cookie::SameSite::Strict));
    assert!(!session.value().contains(token));

    // Forged posts from other origins, while this browser is logged in.
    let pages = tempfile::tempdir().unwrap();
    let answer = format!("{}/api/rounds/{round_id}/responses", server.base);
    let cancel = format!("{}/api/executions/{execution_id}/cancel", server.base);
    std::fs::write(pages.path().join("answer.html"), forging_page(&answer)).unwrap();
    std::fs::write(pages.path().join("cancel.html"), forging_page(&cancel)).unwrap();
    let (_other_site, other_site) = other_origin(pages.path(), "localhost");
    let (_same_site, same_site) = other_origin(pages.path(), "127.0.0.1");
    for (origin, refusal) in [(&other_site, "unauthorized"), (&same_site, "csrf_refused")] {
        for (page, target) in [("answer.html", &answer), ("cancel.html", &cancel)] {
            let shown = forged(&browser, &format!("{origin}/{page}"), target).await;
            assert!(shown.contains(refusal), "{origin}/{page}: {shown}");
        }
    }
    assert_eq!(sb.show(&round_id)["status"], "pending");
    assert_eq!(sb.status(&execution_id)["cancel_requested"], false);

    // The logged-in browser itself can answer (its script sends the CSRF value).
    browser
        .goto(&format!("{}/rounds/{round_id}", server.base))
        .await
        .unwrap();
    click(&browser, "#decline").await;
    text_until(&browser, "#notice", |t| t.contains("Answer taken")).await;
    let result = result_of(run).await;
    assert_eq!(
        result["tool_calls"][0]["output"],
        "Shipment not booked: the address was declined"
    );

    // A server without a token (loopback only) refuses the same forgery.
    let open = Server::start(&sb, &[], None);
    let cancel = format!("{}/api/executions/{execution_id}/cancel", open.base);
    std::fs::write(pages.path().join("open.html"), forging_page(&cancel)).unwrap();
    let shown = forged(&browser, &format!("{same_site}/open.html"), &cancel).await;
    assert!(shown.contains("csrf_refused"), "{shown}");
    browser.close().await.unwrap();
}
