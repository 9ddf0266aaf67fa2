//! A webhook receiver written for the tests: a real HTTP/1.1 server on a loopback port (one
//! thread per connection) that records every request it reads whole (path, headers, body) and
//! answers each as its plan says: 200, another status, a redirect, or never (a hanging
//! receiver). After the plan it answers 200.

#![allow(dead_code)]

use std::collections::{BTreeMap, VecDeque};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How the receiver answers one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// `200 OK`.
    Ok,
    /// That status.
    Status(u16),
    /// `302 Found` to another loopback address.
    Redirect,
    /// Nothing, ever (the connection is held open).
    Hang,
}

/// One request the receiver read.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// The request's path and query.
    pub path: String,
    /// Its headers, names lowercased.
    pub headers: BTreeMap<String, String>,
    /// Its body's bytes.
    pub body: Vec<u8>,
    /// How it was answered.
    pub answer: Answer,
    /// When it arrived.
    pub at: Instant,
}

impl Delivery {
    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("a JSON body")
    }

    /// A header's value.
    pub fn header(&self, name: &str) -> &str {
        self.headers.get(name).map_or("", String::as_str)
    }
}

/// The receiver; it stops accepting when dropped (held connections close with the process).
pub struct Receiver {
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    deliveries: Arc<Mutex<Vec<Delivery>>>,
    plan: Arc<Mutex<VecDeque<Answer>>>,
    /// After the plan: how requests are answered.
    then: Arc<Mutex<Answer>>,
}

impl Receiver {
    /// Starts a receiver answering `plan` in order, then `Ok`.
    pub fn start(plan: &[Answer]) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("binding the receiver");
        let base = format!("http://{}", listener.local_addr().unwrap());
        let deliveries = Arc::new(Mutex::new(Vec::new()));
        let plan = Arc::new(Mutex::new(plan.iter().copied().collect::<VecDeque<_>>()));
        let then = Arc::new(Mutex::new(Answer::Ok));
        let (d, p, t) = (deliveries.clone(), plan.clone(), then.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let (d, p, t) = (d.clone(), p.clone(), t.clone());
                std::thread::spawn(move || serve(stream, &d, &p, &t));
            }
        });
        Self {
            base,
            deliveries,
            plan,
            then,
        }
    }

    /// From now on (after what is left of the plan), answer every request with `answer`.
    pub fn answer_with(&self, answer: Answer) {
        *self.then.lock().unwrap() = answer;
    }

    /// Every request read so far.
    pub fn deliveries(&self) -> Vec<Delivery> {
        self.deliveries.lock().unwrap().clone()
    }

    /// The requests answered 200 so far.
    pub fn accepted(&self) -> Vec<Delivery> {
        self.deliveries()
            .into_iter()
            .filter(|d| d.answer == Answer::Ok)
            .collect()
    }

    /// Waits until `done` holds for the requests read so far (at most `timeout`).
    pub fn wait_for(
        &self,
        timeout: Duration,
        what: &str,
        done: impl Fn(&[Delivery]) -> bool,
    ) -> Vec<Delivery> {
        let start = Instant::now();
        loop {
            let now = self.deliveries();
            if done(&now) {
                return now;
            }
            assert!(
                start.elapsed() < timeout,
                "the receiver waited {timeout:?} for {what}; it read {:?}",
                now.iter()
                    .map(|d| (d.header("x-m3-event-id").to_string(), d.answer))
                    .collect::<Vec<_>>()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn serve(
    stream: TcpStream,
    deliveries: &Mutex<Vec<Delivery>>,
    plan: &Mutex<VecDeque<Answer>>,
    then: &Mutex<Answer>,
) {
    let mut reader = BufReader::new(stream.try_clone().expect("cloning a socket"));
    let mut writer = stream;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let path = line
            .split_whitespace()
            .nth(1)
            .unwrap_or_default()
            .to_string();
        let mut headers = BTreeMap::new();
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
                headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_string());
            }
        }
        let length: usize = headers
            .get("content-length")
            .and_then(|l| l.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let answer = plan
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or(*then.lock().unwrap());
        deliveries.lock().unwrap().push(Delivery {
            path,
            headers,
            body,
            answer,
            at: Instant::now(),
        });
        let reply = match answer {
            Answer::Ok => "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok".to_string(),
            Answer::Status(code) => {
                format!("HTTP/1.1 {code} No\r\ncontent-length: 2\r\n\r\nno")
            }
            Answer::Redirect => "HTTP/1.1 302 Found\r\nlocation: http://127.0.0.1:9/\r\n\
                 content-length: 0\r\n\r\n"
                .to_string(),
            Answer::Hang => {
                // Held open, never answered, until the client gives up.
                let mut rest = Vec::new();
                let _ = reader.read_to_end(&mut rest);
                return;
            }
        };
        if writer.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}
