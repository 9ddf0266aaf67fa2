//! How `m3 serve` holds its connections: each on a task of its own (a slow client holds up only
//! itself), HTTP/1.1 by hyper, and none kept by a client that sends nothing: a connection that
//! takes longer than the request timeout to send a request's head (an idle keep-alive
//! connection included) is closed, so clients that open connections and never finish a request
//! cannot use up the process's file descriptors. (A request's body has the same timeout, in
//! `api.rs`; an event stream, once its response has begun, has none.) On stop, no connection is
//! taken any more and the requests in flight finish.

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::time::Duration;

/// Serves `app` on `listener` until `stop` resolves, then waits for the requests in flight.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    head_timeout: Duration,
    stop: impl Future<Output = ()>,
) {
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut stop = std::pin::pin!(stop);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut stop => break,
        };
        let Ok((connection, _)) = accepted else {
            // Out of file descriptors, or a connection gone before it was taken: accept again
            // after a breath (a connection may have closed meanwhile).
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        // Each event goes out at once, not held back for the previous one's acknowledgement.
        let _ = connection.set_nodelay(true);
        let mut http = hyper::server::conn::http1::Builder::new();
        http.timer(TokioTimer::new())
            .header_read_timeout(head_timeout);
        let served = graceful.watch(http.serve_connection(
            TokioIo::new(connection),
            TowerToHyperService::new(app.clone()),
        ));
        tokio::spawn(async move {
            // A connection's end (a reset, a timeout, a malformed request) is its client's alone.
            let _ = served.await;
        });
    }
    graceful.shutdown().await;
}
