//! The signature a receiver checks: `X-M3-Signature: v1=HEX`, the HMAC-SHA256 with the
//! secret of `--notify-secret-file` over `TIMESTAMP.BODY` (the `X-M3-Timestamp` header's
//! Unix seconds, a dot, the body's exact bytes), as Stripe and Slack sign theirs. Signing the
//! time too lets a receiver refuse an old request replayed (five minutes is the usual window);
//! the event id lets it drop a repeat.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The signature header's value for `body` sent at `timestamp` (Unix seconds).
pub fn sign(secret: &[u8], timestamp: i64, body: &[u8]) -> String {
    // HMAC takes a key of any length; `new_from_slice` refuses none.
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).unwrap_or_else(|_| unreachable!());
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("v1={}", hex::encode(mac.finalize().into_bytes()))
}

/// A notification secret from `--notify-secret-file`'s first line: not blank, no control
/// character, at least 16 bytes (shorter is guessable); its text never quoted.
pub fn parse_secret(text: &str) -> Result<Vec<u8>, String> {
    let line = text.lines().next().unwrap_or_default();
    if line.trim().is_empty() {
        return Err("the first line of --notify-secret-file is empty".into());
    }
    if line.chars().any(char::is_control) {
        return Err("the notification secret holds a control character".into());
    }
    if line.len() < 16 {
        return Err(format!(
            "the notification secret is {} bytes; at least 16 are needed",
            line.len()
        ));
    }
    Ok(line.as_bytes().to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value an independent HMAC-SHA256 gives (Python's `hmac.new(b"It's a secret to
    /// everybody", b"1700000000.{}", hashlib.sha256).hexdigest()`).
    #[test]
    fn the_signature_is_the_hmac_of_the_timestamp_a_dot_and_the_body() {
        let s = sign(b"It's a secret to everybody", 1_700_000_000, b"{}");
        assert_eq!(
            s,
            "v1=549f5febd124a707a7b2a3a9a45fa8b9700e0d60d34b859cd006438e55708beb"
        );
    }

    #[test]
    fn a_secret_is_one_line_of_sixteen_bytes_or_more() {
        assert_eq!(
            parse_secret("0123456789abcdef\nrest").unwrap(),
            b"0123456789abcdef"
        );
        for bad in ["", "\n", "short", "0123456789abcde\u{7}x"] {
            let e = parse_secret(bad).unwrap_err();
            assert!(!e.contains("short") && !e.contains("0123"), "{e}");
        }
    }
}
