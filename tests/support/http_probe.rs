//! A tiny HTTP/1.1 server on loopback for the tests of what the kit sends and where: it records
//! every request it gets (method, path, headers, body) and answers each with what its handler
//! returns, one request per connection. Not an MCP server: a witness and a prop (its handler
//! may speak enough MCP to be a hostile server: an answer that never comes, a stream held open,
//! a connection reset).

use anyhow::{Context, Result};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One request as received.
#[derive(Debug, Clone)]
pub struct Received {
    /// `GET`, `POST`, ...
    pub method: String,
    /// The request target.
    pub path: String,
    /// Header names (lowercase) and values, in order.
    pub headers: Vec<(String, String)>,
    /// The body (by `Content-Length`).
    pub body: Vec<u8>,
}

impl Received {
    /// The value of header `name` (lowercase), if present.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// An answer: status line's code and reason, headers, body, and how the exchange ends.
pub struct Answer {
    /// `307`, ...
    pub status: u16,
    /// Extra headers.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
    /// What happens on the connection.
    pub then: Then,
}

/// How the probe answers on the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Then {
    /// The head (with `Content-Length`) and the body, then the connection closed.
    #[default]
    Close,
    /// The head (without a length) and the body so far, then the connection held open and
    /// silent until the probe is dropped: an event stream that waits.
    Hold,
    /// Nothing at all, the connection held open until the probe is dropped: a request
    /// accepted and never answered.
    Silent,
    /// The connection reset (TCP RST) once the request was read, without a response.
    Reset,
    /// As [`Then::Hold`], until [`release`] is called with this key (or the probe is dropped):
    /// then the connection is closed, ending the body (an event stream the server ended).
    HoldUntilReleased(u64),
}

/// The keys [`release`]d: connections held with [`Then::HoldUntilReleased`] of one end.
static RELEASED: Mutex<Vec<u64>> = Mutex::new(Vec::new());

/// Ends the connections held with [`Then::HoldUntilReleased`]`(key)`.
pub fn release(key: u64) {
    RELEASED.lock().unwrap_or_else(|e| e.into_inner()).push(key);
}

/// A key for [`Then::HoldUntilReleased`] no other probe of this process uses.
pub fn release_key() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::SeqCst)
}

fn released(key: u64) -> bool {
    RELEASED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .contains(&key)
}

/// The longest a held connection is kept (a test that forgets its probe leaks no thread).
const HOLD_AT_MOST: Duration = Duration::from_secs(600);

type Handler = dyn Fn(&Received) -> Answer + Send + Sync;

/// The server; stops accepting when dropped.
pub struct HttpProbe {
    port: u16,
    received: Arc<Mutex<Vec<Received>>>,
    connections: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl HttpProbe {
    /// Listens on a free loopback port, answering with `handler`.
    pub fn start(handler: impl Fn(&Received) -> Answer + Send + Sync + 'static) -> Result<Self> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("binding")?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        let received = Arc::new(Mutex::new(Vec::new()));
        let connections = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let handler: Arc<Handler> = Arc::new(handler);
        let (kept, count, stopped) = (received.clone(), connections.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stopped.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        count.fetch_add(1, Ordering::SeqCst);
                        let (kept, handler) = (kept.clone(), handler.clone());
                        let stopped = stopped.clone();
                        std::thread::spawn(move || serve(stream, &kept, &*handler, &stopped));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        Ok(Self {
            port,
            received,
            connections,
            stop,
        })
    }

    /// `http://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// The requests received so far.
    pub fn received(&self) -> Vec<Received> {
        self.received
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// How many connections were accepted (a request or not).
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

impl Drop for HttpProbe {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn serve(stream: TcpStream, kept: &Mutex<Vec<Received>>, handler: &Handler, stop: &AtomicBool) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let mut reader = BufReader::new(match stream.try_clone() {
        Ok(s) => s,
        Err(_) => return,
    });
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_string();
    let path = parts.next().unwrap_or_default().to_string();
    let mut headers = Vec::new();
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).unwrap_or(0) == 0 {
            return;
        }
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
        }
    }
    let length = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse::<usize>().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let request = Received {
        method,
        path,
        headers,
        body,
    };
    let answer = handler(&request);
    kept.lock().unwrap_or_else(|e| e.into_inner()).push(request);
    let mut stream = stream;
    if answer.then == Then::Reset {
        reset(stream);
        return;
    }
    if answer.then != Then::Silent {
        let mut out = format!("HTTP/1.1 {} Probe\r\n", answer.status);
        for (name, value) in &answer.headers {
            out.push_str(&format!("{name}: {value}\r\n"));
        }
        if answer.then == Then::Close {
            out.push_str(&format!("content-length: {}\r\n", answer.body.len()));
        }
        out.push_str("connection: close\r\n\r\n");
        let _ = stream.write_all(out.as_bytes());
        let _ = stream.write_all(&answer.body);
        let _ = stream.flush();
    }
    if answer.then != Then::Close {
        let since = std::time::Instant::now();
        while !stop.load(Ordering::SeqCst) && since.elapsed() < HOLD_AT_MOST {
            if let Then::HoldUntilReleased(key) = answer.then
                && released(key)
            {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Closes `stream` with a TCP reset (linger on, for no time), not an orderly close.
fn reset(stream: TcpStream) {
    use std::os::fd::AsRawFd;
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: the descriptor is the open socket `stream` owns, and `linger` is a valid
    // `struct linger` of the size given; setsockopt reads it and keeps nothing.
    unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&raw const linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
    drop(stream);
}
