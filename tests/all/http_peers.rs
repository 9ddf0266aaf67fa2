//! Servers reached over Streamable HTTP: the pinned Python SDK's `booking_server.py` and
//! `server-everything`, each started in its HTTP mode on loopback, driven through the execution
//! API exactly as their stdio selves are (`executions_peers`), with every round in a real
//! SQLite file.

use super::executions_peers::{
    BOOKED, LEGACY_KEY, MRTR_KEY, Run, book_table, booking_answer, check_booking_form, only_text,
};
use anyhow::Result;
use m3::*;
use m3_tests::http_server::HttpServer as HttpPeer;
use m3_tests::peers;

/// `booking_server.py` over HTTP (with an event store: resumable streams).
fn booking_http(event_store: bool) -> Result<HttpPeer> {
    HttpPeer::start(
        "booking_server.py over HTTP",
        peers::booking_http_server(event_store, 300)?,
        &[],
        "/mcp",
    )
}

/// The binding of a server at `url`, named `booking`.
fn booking_binding(peer: &HttpPeer, era: McpEra) -> HttpServer {
    HttpServer::new("booking", peer.url()).era(era)
}

#[test]
fn python_sdk_over_http_legacy_rounds_are_answered_declined_and_cancelled() -> Result<()> {
    let peer = booking_http(false)?;
    for (response, expected) in [
        (ElicitationResponse::accept(booking_answer()), BOOKED),
        (ElicitationResponse::decline(), "not booked: decline"),
        (ElicitationResponse::cancel(), "not booked: cancel"),
    ] {
        let run = Run::start(booking_binding(&peer, McpEra::Legacy), book_table())?;
        let round = run
            .pending()
            .map_err(|e| anyhow::anyhow!("{e}\n{}", peer.log()))?;
        check_booking_form(&round, LEGACY_KEY)?;
        assert_eq!(round.request_state, None);
        run.answer(&round, LEGACY_KEY, response)?;
        let result = run.succeeded()?;
        assert_eq!(only_text(&result)?, expected);
        run.assert_resolved(&round.round_id)?;
        run.close();
    }
    Ok(())
}

#[test]
fn python_sdk_over_http_modern_round_keeps_its_request_state_and_resolves() -> Result<()> {
    let peer = booking_http(false)?;
    let run = Run::start(booking_binding(&peer, McpEra::Auto), book_table())?;
    let round = run.pending()?;
    check_booking_form(&round, MRTR_KEY)?;
    assert!(round.request_state.is_some(), "{round:?}");
    run.answer(
        &round,
        MRTR_KEY,
        ElicitationResponse::accept(booking_answer()),
    )?;
    let result = run.succeeded()?;
    assert_eq!(only_text(&result)?, BOOKED);
    run.assert_resolved(&round.round_id)?;
    run.close();
    Ok(())
}
