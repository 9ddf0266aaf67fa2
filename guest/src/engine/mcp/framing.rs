//! Newline-delimited framing: one JSON-RPC message per line, no embedded newlines.

/// Longest line accepted from a server (bytes, without the newline).
pub const MAX_LINE_BYTES: usize = 8 * 1024 * 1024;

/// Why a stream could not be framed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FramingError {
    /// A line grew past [`MAX_LINE_BYTES`] without a newline.
    LineTooLong,
    /// A line is not UTF-8.
    NotUtf8,
}

/// Collects bytes from a child's stdout and yields complete lines.
#[derive(Debug, Default)]
pub struct LineBuffer {
    pending: Vec<u8>,
}

impl LineBuffer {
    /// Adds bytes; returns the complete lines they finish (without `\n` or a trailing `\r`,
    /// blank lines dropped).
    pub fn push(&mut self, bytes: &[u8]) -> Result<Vec<String>, FramingError> {
        let mut lines = Vec::new();
        for chunk in bytes.split_inclusive(|b| *b == b'\n') {
            self.pending.extend_from_slice(chunk);
            if self.pending.last() == Some(&b'\n') {
                let mut line = std::mem::take(&mut self.pending);
                line.pop();
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                lines.push(String::from_utf8(line).map_err(|_| FramingError::NotUtf8)?);
            } else if self.pending.len() > MAX_LINE_BYTES {
                self.pending.clear();
                return Err(FramingError::LineTooLong);
            }
        }
        Ok(lines)
    }

    /// Whether a partial line is waiting for its newline.
    pub fn has_partial_line(&self) -> bool {
        !self.pending.is_empty()
    }
}

/// One outgoing message as a line (compact JSON: `serde_json` never writes raw newlines).
pub fn encode(message: &serde_json::Value) -> String {
    let mut line = message.to_string();
    line.push('\n');
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_split_across_chunks_are_joined() {
        let mut buffer = LineBuffer::default();
        assert!(buffer.push(b"{\"a\":").unwrap().is_empty());
        assert!(buffer.has_partial_line());
        assert_eq!(
            buffer.push(b"1}\r\n\n{\"b\":2}\n{").unwrap(),
            ["{\"a\":1}", "{\"b\":2}"]
        );
        assert!(buffer.has_partial_line());
    }

    #[test]
    fn an_endless_line_is_an_error_not_unbounded_memory() {
        let mut buffer = LineBuffer::default();
        let chunk = vec![b'x'; 1024 * 1024];
        let mut result = Ok(Vec::new());
        for _ in 0..9 {
            result = buffer.push(&chunk);
            if result.is_err() {
                break;
            }
        }
        assert_eq!(result, Err(FramingError::LineTooLong));
    }

    #[test]
    fn encoded_messages_are_single_lines() {
        let line = encode(&serde_json::json!({"text": "a\nb"}));
        assert_eq!(line.matches('\n').count(), 1);
        assert!(line.ends_with('\n'));
    }
}
