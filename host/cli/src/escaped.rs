//! Text that m3 did not write (a server's messages, field titles, stderr and error texts, a
//! harness's events, request keys), made safe to print on a terminal. A terminal obeys what it
//! is sent: an escape sequence from a server could set the window title, clear the screen, paint
//! text, write the clipboard (OSC 52) or, with a carriage return or a bidirectional override,
//! show a question the server made up where the operator expects m3's own words. Every control
//! character (C0, DEL, C1) and every invisible reordering or line-breaking mark is written as a
//! visible escape instead (`\x1b`, `\r`, `\u{202e}`), so the operator sees what was sent and the
//! terminal obeys nothing. JSON text ([`json`]) keeps its value: what JSON itself leaves raw
//! (DEL, C1 controls, the reordering marks) is written as a `\uXXXX` escape of the same string.

use std::borrow::Cow;

/// `text` for one line: every control character made visible, newlines and tabs included.
pub fn line(text: &str) -> Cow<'_, str> {
    escape(text, false)
}

/// `text` for several lines: as [`line`], but newlines and tabs are kept as they are.
pub fn lines(text: &str) -> Cow<'_, str> {
    escape(text, true)
}

/// JSON text as serde_json writes it (C0 controls already escaped), with every other hidden
/// character written as a JSON `\u` escape: the same JSON value, nothing a terminal obeys. Such
/// characters can only be inside strings, where `\uXXXX` means the same character.
pub fn json(text: &str) -> Cow<'_, str> {
    if !text.chars().any(|c| hidden(c, true)) {
        return Cow::Borrowed(text);
    }
    let mut shown = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if hidden(c, true) {
            // Every hidden character is in the Basic Multilingual Plane: one `\u` escape.
            shown.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            shown.push(c);
        }
    }
    Cow::Owned(shown)
}

/// Whether `c` is shown as an escape (`keep_layout`: newline and tab are not).
fn hidden(c: char, keep_layout: bool) -> bool {
    match c {
        '\n' | '\t' => !keep_layout,
        // C0 controls, DEL and C1 controls: ESC, CSI (U+009B), OSC (U+009D), BEL, CR, BS ...
        c if c.is_control() => true,
        // Bidirectional embeddings, overrides and isolates, and the marks that steer them:
        // they reorder what is shown, so text can read as something else.
        '\u{061c}'
        | '\u{200e}'
        | '\u{200f}'
        | '\u{202a}'..='\u{202e}'
        | '\u{2066}'..='\u{2069}' => true,
        // Line and paragraph separators: some terminals break the line there.
        '\u{2028}' | '\u{2029}' => true,
        _ => false,
    }
}

fn escape(text: &str, keep_layout: bool) -> Cow<'_, str> {
    if !text.chars().any(|c| hidden(c, keep_layout)) {
        return Cow::Borrowed(text);
    }
    let mut shown = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if !hidden(c, keep_layout) {
            shown.push(c);
            continue;
        }
        match c {
            '\n' => shown.push_str("\\n"),
            '\r' => shown.push_str("\\r"),
            '\t' => shown.push_str("\\t"),
            c if (c as u32) < 0x100 => shown.push_str(&format!("\\x{:02x}", c as u32)),
            c => shown.push_str(&format!("\\u{{{:x}}}", c as u32)),
        }
    }
    Cow::Owned(shown)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a hostile server sends: a window title, a cleared screen, colour, a clipboard
    /// write, a carriage return that overwrites the line with a made-up question, a C1 CSI,
    /// and a right-to-left override.
    const HOSTILE: &str = "\u{1b}]0;owned\u{7}\u{1b}[2J\u{1b}[31mred\u{1b}]52;c;aGk=\u{7}\rProceed? [y/N]\u{9b}2J\u{202e}fdp.exe";

    #[test]
    fn every_control_is_shown_and_none_is_sent() {
        let shown = line(HOSTILE);
        assert!(
            !shown.chars().any(|c| hidden(c, false)),
            "{shown:?} still holds a control"
        );
        assert_eq!(
            shown,
            "\\x1b]0;owned\\x07\\x1b[2J\\x1b[31mred\\x1b]52;c;aGk=\\x07\\rProceed? [y/N]\\x9b2J\\u{202e}fdp.exe"
        );
    }

    #[test]
    fn lines_keep_newlines_and_tabs_and_nothing_else() {
        assert_eq!(lines("a\tb\nc\r\u{1b}[K"), "a\tb\nc\\r\\x1b[K");
        assert_eq!(line("a\tb\nc"), "a\\tb\\nc");
        assert_eq!(line("a\u{0}b\u{7f}c\u{2028}"), "a\\x00b\\x7fc\\u{2028}");
    }

    #[test]
    fn json_text_keeps_its_value_and_hides_nothing() {
        let value = serde_json::json!({"message": HOSTILE, "del": "a\u{7f}b"});
        for text in [
            value.to_string(),
            serde_json::to_string_pretty(&value).unwrap(),
        ] {
            let shown = json(&text);
            assert!(!shown.chars().any(|c| hidden(c, true)), "{shown:?}");
            let back: serde_json::Value = serde_json::from_str(&shown).unwrap();
            assert_eq!(back, value);
        }
    }

    #[test]
    fn plain_text_is_borrowed_as_it_is() {
        for text in [
            "",
            "Where should the shipment be delivered?",
            "Zürich — 東京 ✓ 🚚",
        ] {
            assert!(matches!(line(text), Cow::Borrowed(t) if t == text));
            assert!(matches!(lines(text), Cow::Borrowed(t) if t == text));
        }
    }
}
