//! A notification target: where events are posted (`--notify URL`, or a line of
//! `--notify-file`) and in which body (`json` or `slack`). Only `https`, or `http` to a
//! loopback host, unless `--notify-insecure`; no user name or password in the address (a
//! secret there would travel in clear and be logged by proxies: sign with
//! `--notify-secret-file` instead). A target is named in the ledger by a digest of its format
//! and address (a Slack webhook's path is its secret) and shown by its origin alone.

use sha2::{Digest, Sha256};
use std::net::IpAddr;

/// The body a target gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// The event's own JSON document (versioned, documented in the README).
    Json,
    /// A Slack incoming-webhook body (`text` and `blocks`, with a button to the form).
    Slack,
}

impl Format {
    fn name(self) -> &'static str {
        match self {
            Self::Json => "json",
            Self::Slack => "slack",
        }
    }
}

/// One target.
#[derive(Clone)]
pub struct Target {
    /// Whether the connection is TLS.
    pub https: bool,
    /// The host as written (a name, or an IP address without brackets).
    pub host: String,
    /// The port.
    pub port: u16,
    /// The path and query posted to.
    pub path: String,
    /// The body's format.
    pub format: Format,
    /// The ledger's name for it (a digest of format and address).
    pub id: String,
    /// What logs and `m3 doctor` show: scheme, host and port only.
    pub label: String,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The path may be a secret (a Slack webhook's is).
        f.debug_struct("Target")
            .field("label", &self.label)
            .finish()
    }
}

/// Whether `host` is a loopback host: `localhost` or a loopback IP address.
pub fn is_loopback(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

impl Target {
    /// Parses a target's address; the refusal never quotes it (it may hold a secret).
    pub fn parse(address: &str, format: Format, insecure: bool) -> Result<Self, String> {
        let (https, rest) = if let Some(rest) = address.strip_prefix("https://") {
            (true, rest)
        } else if let Some(rest) = address.strip_prefix("http://") {
            (false, rest)
        } else {
            return Err("a notification target must start with https:// or http://".into());
        };
        if address.chars().any(|c| c.is_control() || c == ' ') {
            return Err("a notification target holds a space or a control character".into());
        }
        let (authority, path) = match rest.find(['/', '?', '#']) {
            Some(at) => rest.split_at(at),
            None => (rest, "/"),
        };
        if path.contains('#') {
            return Err("a notification target has a fragment (#...)".into());
        }
        let path = if path.starts_with('?') {
            format!("/{path}")
        } else {
            path.to_string()
        };
        if authority.contains('@') {
            return Err(
                "a notification target holds a user name or password: sign with \
                 --notify-secret-file instead"
                    .into(),
            );
        }
        let (host, port) = if let Some(bracketed) = authority.strip_prefix('[') {
            let Some((host, after)) = bracketed.split_once(']') else {
                return Err("a notification target's IPv6 host has no closing ]".into());
            };
            if host.parse::<std::net::Ipv6Addr>().is_err() {
                return Err("a notification target's IPv6 host is not an IPv6 address".into());
            }
            (host.to_string(), after.strip_prefix(':'))
        } else {
            match authority.rsplit_once(':') {
                Some((host, port)) => (host.to_string(), Some(port)),
                None => (authority.to_string(), None),
            }
        };
        let valid_name = |h: &str| {
            !h.is_empty()
                && h.len() <= 253
                && h.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
        };
        if !valid_name(&host) && host.parse::<IpAddr>().is_err() {
            return Err("a notification target's host is not a host name or IP address".into());
        }
        let port = match port {
            None | Some("") => {
                if https {
                    443
                } else {
                    80
                }
            }
            Some(p) => p
                .parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or("a notification target's port is not a number from 1 to 65535")?,
        };
        if !https && !insecure && !is_loopback(&host) {
            return Err(format!(
                "a notification target on http:// must be a loopback host (localhost, \
                 127.0.0.1, [::1]); use https://, or --notify-insecure to send events to \
                 {host} in clear"
            ));
        }
        let scheme = if https { "https" } else { "http" };
        let shown_host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host.clone()
        };
        let label = format!("{scheme}://{shown_host}:{port}");
        let digest = Sha256::digest(format!("{}\n{address}", format.name()));
        Ok(Self {
            https,
            host,
            port,
            path,
            format,
            id: format!("t{}", &hex::encode(digest)[..32]),
            label,
        })
    }

    /// The `Host` header's value.
    pub fn authority(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        let default = if self.https { 443 } else { 80 };
        if self.port == default {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }
}

/// The targets of a `--notify-file`: one per line, `URL` (in `default` format) or
/// `FORMAT URL` (`json` or `slack`); blank lines and lines starting with `#` are skipped.
pub fn parse_file(text: &str, default: Format, insecure: bool) -> Result<Vec<Target>, String> {
    let mut targets = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (format, address) = match line.split_once(char::is_whitespace) {
            Some(("json", address)) => (Format::Json, address.trim()),
            Some(("slack", address)) => (Format::Slack, address.trim()),
            Some(_) => {
                return Err(format!(
                    "line {} of --notify-file: expected `URL` or `json URL` or `slack URL`",
                    n + 1
                ));
            }
            None => (default, line),
        };
        targets.push(
            Target::parse(address, format, insecure)
                .map_err(|e| format!("line {} of --notify-file: {e}", n + 1))?,
        );
    }
    Ok(targets)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_target_is_https_or_loopback_http_unless_insecure() {
        let t = Target::parse(
            "https://hooks.example.com/services/T/B/x",
            Format::Slack,
            false,
        )
        .unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.path.as_str()),
            ("hooks.example.com", 443, "/services/T/B/x")
        );
        assert_eq!(t.label, "https://hooks.example.com:443");
        assert!(!format!("{t:?}").contains("services"));
        let t = Target::parse("http://127.0.0.1:9/hook?x=1", Format::Json, false).unwrap();
        assert_eq!(
            (t.port, t.path.as_str(), t.authority().as_str()),
            (9, "/hook?x=1", "127.0.0.1:9")
        );
        let t = Target::parse("http://[::1]:8080", Format::Json, false).unwrap();
        assert_eq!(
            (t.host.as_str(), t.path.as_str(), t.authority().as_str()),
            ("::1", "/", "[::1]:8080")
        );
        assert!(Target::parse("http://localhost/x", Format::Json, false).is_ok());
        let refused = Target::parse("http://example.com/x", Format::Json, false).unwrap_err();
        assert!(refused.contains("--notify-insecure"), "{refused}");
        assert!(Target::parse("http://example.com/x", Format::Json, true).is_ok());
        for bad in [
            "ftp://example.com",
            "https://user:pw@example.com/",
            "https://example.com:0/",
            "https://example.com:99999/",
            "https://exa mple.com/",
            "https:///x",
            "https://[::1/x",
            "https://example.com/#SECRETFRAG",
        ] {
            let e = Target::parse(bad, Format::Json, true).unwrap_err();
            assert!(!e.contains("pw@") && !e.contains("SECRETFRAG"), "{e}");
        }
        // The same address in another format is another target.
        let a = Target::parse("https://h.example/x", Format::Json, false).unwrap();
        let b = Target::parse("https://h.example/x", Format::Slack, false).unwrap();
        assert_ne!(a.id, b.id);
    }

    #[test]
    fn a_notify_file_names_each_targets_format_or_takes_the_default() {
        let text = "# team\n\nhttps://a.example/1\nslack https://hooks.example/2\njson http://127.0.0.1:5/3\n";
        let targets = parse_file(text, Format::Json, false).unwrap();
        let formats: Vec<_> = targets.iter().map(|t| t.format).collect();
        assert_eq!(formats, [Format::Json, Format::Slack, Format::Json]);
        let e = parse_file("xml https://a.example/\n", Format::Json, false).unwrap_err();
        assert!(e.starts_with("line 1 of --notify-file"), "{e}");
        let e = parse_file("\nhttp://example.com/\n", Format::Json, false).unwrap_err();
        assert!(e.starts_with("line 2"), "{e}");
    }
}
