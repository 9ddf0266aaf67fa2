//! Server-Sent Events framing (the `text/event-stream` of Streamable HTTP): bytes in, events
//! out, as the HTML living standard's "event stream interpretation" describes, with bounds.
//!
//! Lines end in `\n`, `\r\n` or `\r`; a blank line dispatches the event collected so far. Fields:
//! `data` (joined with `\n` when repeated), `event` (the type; `message` when absent), `id` (the
//! stream's last event id from then on, kept for resumption; an id holding NUL is ignored) and
//! `retry` (digits only: the reconnection delay in milliseconds). A line starting with `:` is a
//! comment (servers send them as keep-alives). An event without a `data` field is not
//! dispatched, though its `id` still counts.
//!
//! What the server controls is bounded: an event (its lines together) at [`MAX_EVENT_BYTES`],
//! an `id` (echoed back as `Last-Event-ID` on resumption) at [`MAX_EVENT_ID_BYTES`], a `retry`
//! at [`MAX_RETRY_MS`]. A stream past a bound is refused as a whole ([`SseError`]), never cut
//! or clamped.

/// Most bytes of one event (its lines together) before the stream is refused.
pub const MAX_EVENT_BYTES: usize = 8 * 1024 * 1024;
/// Most bytes of an event id: a resumption sends it back as a header (`Last-Event-ID`), and
/// servers' ids are short (a UUID, a stream id and a counter).
pub const MAX_EVENT_ID_BYTES: usize = 1024;
/// The longest resumption delay a server may ask for (`retry`), in milliseconds: a broken
/// stream is resumed within a minute or not waited for.
pub const MAX_RETRY_MS: u64 = 60_000;

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The event type (`message` when the server named none).
    pub event: String,
    /// The data lines, joined with `\n`.
    pub data: String,
    /// The id this event carried (its own `id` field), if any.
    pub id: Option<String>,
}

/// Why a stream could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SseError {
    /// One event grew past [`MAX_EVENT_BYTES`].
    EventTooLong,
    /// A line is not UTF-8.
    NotUtf8,
    /// An `id` field longer than [`MAX_EVENT_ID_BYTES`]: its length in bytes.
    IdTooLong(usize),
    /// A `retry` field over [`MAX_RETRY_MS`].
    RetryTooLong,
}

impl std::fmt::Display for SseError {
    /// What the server did, as a phrase after "the server" (never the offending value).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::EventTooLong => {
                write!(f, "sent an event longer than {} MiB", MAX_EVENT_BYTES >> 20)
            }
            Self::NotUtf8 => write!(f, "sent an event stream that is not UTF-8"),
            Self::IdTooLong(bytes) => write!(
                f,
                "sent an event id of {bytes} bytes, over the {MAX_EVENT_ID_BYTES}-byte limit"
            ),
            Self::RetryTooLong => write!(
                f,
                "asked for a resumption delay (`retry`) over the {MAX_RETRY_MS} ms limit"
            ),
        }
    }
}

/// Decodes one event stream, fed in chunks of any size.
#[derive(Debug, Default)]
pub struct SseDecoder {
    /// Bytes of a line not yet ended.
    line: Vec<u8>,
    /// The previous chunk ended in `\r`: a `\n` starting the next one belongs to it.
    after_cr: bool,
    /// The first bytes were checked for a byte-order mark.
    started: bool,
    event: String,
    data: String,
    /// Data lines of the event being collected (to join with `\n`).
    data_lines: usize,
    /// Bytes of the event being collected.
    event_bytes: usize,
    /// The event being collected carried an `id` field.
    has_id: bool,
    last_event_id: Option<String>,
    retry_ms: Option<u64>,
}

impl SseDecoder {
    /// Feeds bytes; returns the events they complete, in order.
    pub fn push(&mut self, mut bytes: &[u8]) -> Result<Vec<SseEvent>, SseError> {
        let mut events = Vec::new();
        if !self.started && !bytes.is_empty() {
            self.line.extend_from_slice(bytes);
            if self.line.len() < 3 && b"\xEF\xBB\xBF".starts_with(&self.line) {
                return Ok(events);
            }
            self.started = true;
            let pending = std::mem::take(&mut self.line);
            let rest = pending.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(&pending);
            return self.push_started(rest, events);
        }
        if self.after_cr && bytes.first() == Some(&b'\n') {
            bytes = &bytes[1..];
        }
        self.after_cr = false;
        self.push_started(bytes, std::mem::take(&mut events))
    }

    fn push_started(
        &mut self,
        bytes: &[u8],
        mut events: Vec<SseEvent>,
    ) -> Result<Vec<SseEvent>, SseError> {
        let mut rest = bytes;
        while let Some(end) = rest.iter().position(|b| *b == b'\n' || *b == b'\r') {
            let (head, tail) = rest.split_at(end);
            self.line.extend_from_slice(head);
            let crlf = tail[0] == b'\r';
            rest = &tail[1..];
            if crlf {
                match rest.first() {
                    Some(b'\n') => rest = &rest[1..],
                    None => self.after_cr = true,
                    Some(_) => {}
                }
            }
            let line = std::mem::take(&mut self.line);
            if let Some(event) = self.line_done(&line)? {
                events.push(event);
            }
        }
        self.line.extend_from_slice(rest);
        if self.line.len() + self.event_bytes > MAX_EVENT_BYTES {
            self.line.clear();
            return Err(SseError::EventTooLong);
        }
        Ok(events)
    }

    fn line_done(&mut self, line: &[u8]) -> Result<Option<SseEvent>, SseError> {
        if line.is_empty() {
            return Ok(self.dispatch());
        }
        self.event_bytes += line.len();
        if self.event_bytes > MAX_EVENT_BYTES {
            return Err(SseError::EventTooLong);
        }
        let line = std::str::from_utf8(line).map_err(|_| SseError::NotUtf8)?;
        if line.starts_with(':') {
            return Ok(None);
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "data" => {
                if self.data_lines > 0 {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.data_lines += 1;
            }
            "event" => self.event = value.to_string(),
            "id" if value.len() > MAX_EVENT_ID_BYTES => {
                return Err(SseError::IdTooLong(value.len()));
            }
            "id" if !value.contains('\0') => {
                self.last_event_id = Some(value.to_string());
                self.has_id = true;
            }
            "retry" if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => {
                match value.parse::<u64>() {
                    Ok(ms) if ms <= MAX_RETRY_MS => self.retry_ms = Some(ms),
                    _ => return Err(SseError::RetryTooLong),
                }
            }
            _ => {}
        }
        Ok(None)
    }

    fn dispatch(&mut self) -> Option<SseEvent> {
        let event = std::mem::take(&mut self.event);
        let data = std::mem::take(&mut self.data);
        let lines = std::mem::take(&mut self.data_lines);
        let has_id = std::mem::take(&mut self.has_id);
        self.event_bytes = 0;
        if lines == 0 {
            return None;
        }
        Some(SseEvent {
            event: if event.is_empty() {
                "message".into()
            } else {
                event
            },
            data,
            id: if has_id {
                self.last_event_id.clone()
            } else {
                None
            },
        })
    }

    /// The stream's last event id (what a resumption sends as `Last-Event-ID`).
    pub fn last_event_id(&self) -> Option<&str> {
        self.last_event_id.as_deref()
    }

    /// The reconnection delay the server asked for (`retry`), in milliseconds.
    pub fn retry_ms(&self) -> Option<u64> {
        self.retry_ms
    }

    /// Starts a resumed stream: what was half read of the broken one is dropped, the last
    /// event id and the delay are kept.
    pub fn resume(&mut self) {
        let last_event_id = self.last_event_id.take();
        let retry_ms = self.retry_ms;
        *self = Self {
            last_event_id,
            retry_ms,
            ..Self::default()
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(decoder: &mut SseDecoder, chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut events = Vec::new();
        for chunk in chunks {
            events.extend(decoder.push(chunk).unwrap());
        }
        events
    }

    #[test]
    fn events_split_anywhere_are_the_same_events() {
        let stream =
            b"id: 7\nevent: message\ndata: {\"a\":1}\n\n: ping\n\ndata: x\r\ndata: y\r\n\r\n";
        let whole = all(&mut SseDecoder::default(), &[stream]);
        assert_eq!(
            whole,
            [
                SseEvent {
                    event: "message".into(),
                    data: "{\"a\":1}".into(),
                    id: Some("7".into())
                },
                SseEvent {
                    event: "message".into(),
                    data: "x\ny".into(),
                    id: None
                },
            ]
        );
        for split in 0..stream.len() {
            let mut decoder = SseDecoder::default();
            let events = all(&mut decoder, &[&stream[..split], &stream[split..]]);
            assert_eq!(events, whole, "split at {split}");
        }
        let bytewise: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(all(&mut SseDecoder::default(), &bytewise), whole);
    }

    #[test]
    fn a_lone_carriage_return_ends_a_line_and_a_bom_is_skipped() {
        let events = all(
            &mut SseDecoder::default(),
            &[b"\xEF\xBB", b"\xBFdata:a\rdata:b\r\r", b"event:e\ndata\n\n"],
        );
        assert_eq!(events[0].data, "a\nb");
        assert_eq!(events[1].event, "e");
        assert_eq!(events[1].data, "");
        assert_eq!(events.len(), 2);
    }

    #[test]
    fn ids_and_retry_are_kept_for_resumption() {
        let mut decoder = SseDecoder::default();
        let events = all(
            &mut decoder,
            &[b"id: a1\nretry: 1500\ndata\n\nid\nretry: soon\n\nid: b\0\n\n"],
        );
        // A `data` field with no value still makes an event (with empty data).
        assert_eq!(events.len(), 1);
        // `id` with no value resets it; an id holding NUL is ignored; bad retry ignored.
        assert_eq!(decoder.last_event_id(), Some(""));
        assert_eq!(decoder.retry_ms(), Some(1500));
        decoder.push(b"id: 42\ndata: x").unwrap();
        decoder.resume();
        assert_eq!(decoder.last_event_id(), Some("42"));
        // The half-read event of the broken stream is gone.
        assert!(decoder.push(b"\n\n").unwrap().is_empty());
    }

    #[test]
    fn an_event_without_data_is_not_dispatched_and_comments_are_nothing() {
        let events = all(
            &mut SseDecoder::default(),
            &[b": keep-alive\n\nevent: ping\n\n:\n\n"],
        );
        assert!(events.is_empty());
    }

    #[test]
    fn an_endless_event_is_an_error_not_unbounded_memory() {
        let mut decoder = SseDecoder::default();
        decoder.push(b"data: ").unwrap();
        let chunk = vec![b'x'; 1024 * 1024];
        let mut result = Ok(Vec::new());
        for _ in 0..9 {
            result = decoder.push(&chunk);
            if result.is_err() {
                break;
            }
        }
        assert_eq!(result, Err(SseError::EventTooLong));
        let mut decoder = SseDecoder::default();
        let line = [b"data: ".as_slice(), &vec![b'y'; 1 << 20], b"\n"].concat();
        let mut result = Ok(Vec::new());
        for _ in 0..9 {
            result = decoder.push(&line);
            if result.is_err() {
                break;
            }
        }
        assert_eq!(result, Err(SseError::EventTooLong));
    }

    #[test]
    fn an_id_or_retry_past_its_bound_refuses_the_stream_without_naming_the_value() {
        let mut decoder = SseDecoder::default();
        let long = "7".repeat(140 * 1024);
        let result = decoder.push(format!("id: {long}\ndata: x\n\n").as_bytes());
        assert_eq!(result, Err(SseError::IdTooLong(long.len())));
        // Never kept for a resumption, and the message names the limit, not the id.
        assert_eq!(decoder.last_event_id(), None);
        let message = SseError::IdTooLong(long.len()).to_string();
        assert!(message.contains("143360 bytes") && message.contains("1024-byte limit"));
        assert!(!message.contains("7777"));
        // Split across chunks, the same.
        let mut decoder = SseDecoder::default();
        decoder.push(b"id: ").unwrap();
        decoder.push(long.as_bytes()).unwrap();
        assert_eq!(decoder.push(b"\n"), Err(SseError::IdTooLong(long.len())));
        // An id at the bound is kept.
        let mut decoder = SseDecoder::default();
        let fits = "a".repeat(MAX_EVENT_ID_BYTES);
        decoder.push(format!("id: {fits}\n\n").as_bytes()).unwrap();
        assert_eq!(decoder.last_event_id(), Some(fits.as_str()));
        // A retry over a minute, or too large for a number, is refused; one at it is kept.
        for retry in ["60001", "99999999999999999999999999"] {
            assert_eq!(
                SseDecoder::default().push(format!("retry: {retry}\n").as_bytes()),
                Err(SseError::RetryTooLong),
                "{retry}"
            );
        }
        let mut decoder = SseDecoder::default();
        decoder.push(b"retry: 60000\n").unwrap();
        assert_eq!(decoder.retry_ms(), Some(MAX_RETRY_MS));
    }

    #[test]
    fn a_line_that_is_not_utf8_is_an_error() {
        assert_eq!(
            SseDecoder::default().push(b"data: \xff\n\n"),
            Err(SseError::NotUtf8)
        );
    }
}
