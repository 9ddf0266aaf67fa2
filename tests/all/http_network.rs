//! What crosses the network for a server reached over HTTP: the component may send requests to
//! the server's origin alone (the host refuses every other destination, redirects included, and
//! the refusal fails the execution where everyone can see it), and the binding's headers reach
//! that origin without ever being stored. A witness server on loopback records what arrives.

use anyhow::{Context, Result, ensure};
use m3::*;
use m3_tests::TempDb;
use m3_tests::http_probe::{Answer, HttpProbe};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);

/// A kit over a fresh database, with an empty environment.
fn kit(db: &TempDb) -> Result<(Arc<SqliteExecutionStore>, McpTestKit)> {
    let store = Arc::new(SqliteExecutionStore::open(&db.path)?);
    let kit = McpTestKit::new(store.clone(), BTreeMap::<String, String>::new())?;
    Ok((store, kit))
}

/// Submits one call of `remote:lookup` against `server`.
fn submit(kit: &McpTestKit, server: HttpServer) -> Result<ExecutionHandle, ExecutionError> {
    kit.agents([AgentSpec::scripted(Script::call(
        "remote:lookup",
        json!({}),
    ))])?
    .remove(0)
    .submit(
        Submission::new("Look it up.", server)
            .tools(["remote:lookup"])
            .human_input(HumanInput::Managed),
    )
}

/// Every byte the database's files hold.
fn database_bytes(db: &TempDb) -> Result<Vec<u8>> {
    let mut bytes = Vec::new();
    for entry in std::fs::read_dir(db.dir.path())? {
        let path = entry?.path();
        if path.is_file() {
            bytes.extend(std::fs::read(&path)?);
        }
    }
    Ok(bytes)
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

#[test]
fn a_server_that_redirects_to_another_origin_is_refused_by_the_host_and_fails_the_execution()
-> Result<()> {
    // The other origin: it must never see a connection.
    let elsewhere = HttpProbe::start(|_| Answer {
        status: 200,
        headers: vec![("content-type".into(), "application/json".into())],
        body: br#"{"jsonrpc":"2.0","id":1,"result":{}}"#.to_vec(),
    })?;
    let target = elsewhere.url("/mcp");
    let redirecting = HttpProbe::start(move |_| Answer {
        status: 307,
        headers: vec![("location".into(), target.clone())],
        body: Vec::new(),
    })?;
    let secret = format!("Bearer m3-secret-{}", std::process::id());
    let db = TempDb::new();
    let (store, kit) = kit(&db)?;
    let handle = submit(
        &kit,
        HttpServer::new("remote", redirecting.url("/mcp"))
            .header("Authorization", &secret)
            .era(McpEra::Legacy),
    )?;
    let result = handle.result(Some(WAIT))?;
    ensure!(!result.succeeded(), "{}", result.outcome);
    let failure = result.outcome.failure.clone().context("a failure")?;
    assert_eq!(failure.kind, FailureKind::ServerError, "{failure:?}");
    let other_origin = elsewhere.url("");
    assert!(
        failure.message.contains("redirected the kit to")
            && failure.message.contains(&other_origin)
            && failure.message.contains("does not grant"),
        "{failure:?}"
    );
    // Recorded with the execution, for whoever looks later.
    let diagnostics = handle.diagnostics()?;
    assert!(
        diagnostics
            .events
            .iter()
            .any(|e| e.kind == "network" && e.message.contains(&other_origin)),
        "{:?}",
        diagnostics.events
    );
    // The host refused before connecting: the other origin saw nothing.
    assert_eq!(elsewhere.connections(), 0);
    // The server's own origin got the request, with the binding's header.
    let received = redirecting.received();
    let first = received.first().context("the server got the request")?;
    assert_eq!(first.method, "POST");
    assert_eq!(first.path, "/mcp");
    assert_eq!(first.header("authorization"), Some(secret.as_str()));
    assert_eq!(
        first.header("accept"),
        Some("application/json, text/event-stream")
    );
    assert_eq!(first.header("content-type"), Some("application/json"));
    // The header's value is never stored, nor said.
    drop(handle);
    drop(kit);
    store.close();
    ensure!(
        !contains(&database_bytes(&db)?, &secret),
        "the header's value reached the database"
    );
    assert!(!format!("{failure:?}").contains(&secret));
    Ok(())
}

#[test]
fn an_unreachable_server_fails_the_execution_saying_where_and_why() -> Result<()> {
    let port = m3_tests::http_server::free_port()?;
    let db = TempDb::new();
    let (_store, kit) = kit(&db)?;
    let url = format!("http://127.0.0.1:{port}/mcp");
    let handle = submit(&kit, HttpServer::new("remote", &url))?;
    let result = handle.result(Some(WAIT))?;
    let failure = result.outcome.failure.clone().context("a failure")?;
    assert_eq!(failure.kind, FailureKind::ServerError, "{failure:?}");
    assert!(
        failure.message.contains(&url) && failure.message.contains("connection refused"),
        "{failure:?}"
    );
    Ok(())
}

#[test]
fn bindings_the_host_cannot_grant_are_refused_at_submission_and_store_nothing() -> Result<()> {
    let db = TempDb::new();
    let (store, kit) = kit(&db)?;
    for (server, expected) in [
        (
            HttpServer::new("remote", "ftp://127.0.0.1/mcp"),
            "http:// or https://",
        ),
        (
            HttpServer::new("remote", "127.0.0.1:8000/mcp"),
            "http:// or https://",
        ),
        (
            HttpServer::new("remote", "http://user:pw@127.0.0.1/mcp"),
            "user information",
        ),
        (
            HttpServer::new("remote", "http://127.0.0.1/mcp").header("bad name", "x"),
            "not an HTTP header name",
        ),
        (
            HttpServer::new("remote", "http://127.0.0.1/mcp").header("Mcp-Session-Id", "x"),
            "set by the MCP transport",
        ),
        (
            HttpServer::new("remote", "http://127.0.0.1/mcp").header("X-Key", "se\ncret"),
            "cannot carry",
        ),
    ] {
        match submit(&kit, server) {
            Err(ExecutionError::ModelValidation(e)) => {
                assert!(e.message.contains(expected), "{expected:?} in {e}");
                assert!(!e.message.contains("se\ncret") && !e.message.contains(":pw@"));
            }
            other => panic!("expected ModelValidationError ({expected}), got {other:?}"),
        }
    }
    // The Codex harness connects to servers itself, outside the grant: refused too.
    let codex = kit
        .agents([AgentSpec::codex(["m"], CodexOptions::default())])?
        .remove(0)
        .submit(
            Submission::new("x", HttpServer::new("remote", "http://127.0.0.1:9/mcp"))
                .tools(["remote:lookup"]),
        );
    assert!(
        matches!(&codex, Err(ExecutionError::ModelValidation(e)) if e.message.contains("stdio")),
        "{codex:?}"
    );
    assert!(
        store.executions()?.states(None)?.is_empty(),
        "nothing stored"
    );
    Ok(())
}

/// The bounds of a binding's headers (`HttpServer::MAX_HEADERS` and the sizes beside it), and
/// names that are not header names, are refused at submission: a typed `ModelValidationError`
/// naming the limit or what is wrong, never a value nor a name that is not a valid one, and
/// nothing is stored. (100 headers used to be granted, and a request with more headers than
/// `http` holds panicked the host.)
#[test]
fn headers_beyond_the_bounds_are_refused_at_submission_naming_the_limit_and_store_nothing()
-> Result<()> {
    let secret = "sk-live-SECRET123";
    let db = TempDb::new();
    let (store, kit) = kit(&db)?;
    let server = || HttpServer::new("remote", "http://127.0.0.1:9/mcp");
    let many = (0..100).fold(server(), |s, i| s.header(format!("X-H-{i}"), secret));
    let long_value = server().header("X-Key", format!("{secret}{}", "a".repeat(100 * 1024)));
    let long_name = server().header("X".repeat(300), secret);
    let large = (0..10).fold(server(), |s, i| {
        s.header(
            format!("X-Part-{i}"),
            format!("{secret}{}", "b".repeat(7 * 1024)),
        )
    });
    let line_break = server().header(format!("X-Evil\r\n{secret}"), "v");
    let nul = server().header("X-Key", format!("{secret}\0"));
    for (server, expected) in [
        (many, "100 headers, more than the 64"),
        (long_value, "is 102417 bytes long, more than the 8192"),
        (
            long_name,
            "a header name is 300 bytes long, more than the 256",
        ),
        (large, "bytes together, more than the 65536"),
        (line_break, "it holds a line break at byte 7"),
        (nul, "holds a NUL byte at byte 18"),
    ] {
        match submit(&kit, server) {
            Err(ExecutionError::ModelValidation(e)) => {
                assert!(e.message.contains(expected), "{expected:?} in {e}");
                assert!(
                    !e.message.contains(secret) && !e.message.contains(['\r', '\n', '\0']),
                    "{e:?}"
                );
            }
            other => panic!("expected ModelValidationError ({expected}), got {other:?}"),
        }
    }
    // At the bounds exactly: granted.
    let at_bounds = (0..8).fold(server(), |s, i| {
        s.header(format!("X-Part-{i}"), "c".repeat(8 * 1024 - 8))
    });
    assert!(at_bounds.check_headers().is_ok());
    assert_eq!(HttpServer::MAX_HEADERS, 64);
    assert!(
        store.executions()?.states(None)?.is_empty(),
        "nothing stored"
    );
    drop(kit);
    store.close();
    ensure!(
        !contains(&database_bytes(&db)?, secret),
        "a refused header's value reached the database"
    );
    Ok(())
}
