//! A child's private home (e.g. Codex's `CODEX_HOME`) inside its scratch directory: the files the
//! component asks to be copied there (the user's sign-in) and the server binding's environment
//! for a harness that starts the MCP server itself. Everything is written through the home's
//! capability, readable by the owner only, and removed with the scratch directory.

use crate::component::bindings::m3::managed_input::process::{HomeFile, McpConfig};
use cap_std::fs::OpenOptionsExt;
use cap_std::fs::{Dir, OpenOptions};
use std::collections::BTreeMap;
use std::io::Write;

/// Largest file copied into a home (a sign-in is a few KiB).
const MAX_HOME_FILE_BYTES: u64 = 1024 * 1024;

/// Reads a file that a home is given (or that is looked at for one, such as the user's Codex
/// sign-in): at most [`MAX_HOME_FILE_BYTES`]. A larger one, or an endless one such as
/// `/dev/zero` (also reached through a link, or swapped in after a size check), is an error
/// once one byte past the limit was read; it is never read whole.
pub(crate) fn read_source(path: &std::path::Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(path)?
        .take(MAX_HOME_FILE_BYTES + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_HOME_FILE_BYTES {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("the source is larger than {MAX_HOME_FILE_BYTES} bytes"),
        ));
    }
    Ok(bytes)
}

/// Copies each file (a missing source is skipped) into `home` as its `name`, mode 0600.
/// Errors name the file's name in the home, never its contents.
pub fn copy_files(home: &Dir, files: &[HomeFile]) -> Result<(), String> {
    for file in files {
        if file.name.is_empty()
            || file.name.contains('/')
            || file.name == "."
            || file.name == ".."
            || file.name.contains('\0')
        {
            return Err(format!(
                "a home file's name must be one path component, not `{}`",
                file.name.escape_debug()
            ));
        }
        let source = std::path::Path::new(&file.source);
        if !source.is_absolute() {
            return Err(format!(
                "the source of home file `{}` is not absolute",
                file.name
            ));
        }
        let bytes = match std::fs::metadata(source) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(format!("home file `{}`: {e}", file.name)),
            Ok(m) if !m.is_file() => {
                return Err(format!(
                    "home file `{}`: the source is not a file",
                    file.name
                ));
            }
            Ok(m) if m.len() > MAX_HOME_FILE_BYTES => {
                return Err(format!(
                    "home file `{}`: the source is larger than {MAX_HOME_FILE_BYTES} bytes",
                    file.name
                ));
            }
            Ok(_) => read_source(source).map_err(|e| format!("home file `{}`: {e}", file.name))?,
        };
        write_private(home, &file.name, &bytes)?;
    }
    Ok(())
}

/// Writes `env` as the TOML table `[mcp_servers.<server>.env]` to `home/config.toml` (mode 0600).
/// JSON strings are TOML basic strings (every escape JSON writes is one TOML reads).
pub fn write_server_env(
    home: &Dir,
    server: &str,
    env: &BTreeMap<String, String>,
) -> Result<(), String> {
    let quote = |s: &str| serde_json::Value::String(s.to_string()).to_string();
    let mut text = format!("[mcp_servers.{}.env]\n", quote(server));
    for (name, value) in env {
        text.push_str(&format!("{} = {}\n", quote(name), quote(value)));
    }
    write_private(home, "config.toml", text.as_bytes())
}

/// Writes `config`'s document as `home/mcp.json` (mode 0600) with `env` as its server's `env`
/// (Claude Code's `{"mcpServers": {name: {.., "env": {..}}}}`). Errors never hold a value.
pub fn write_mcp_config(
    home: &Dir,
    config: &McpConfig,
    env: &BTreeMap<String, String>,
) -> Result<(), String> {
    let mut document: serde_json::Value = serde_json::from_str(&config.document)
        .map_err(|e| format!("the MCP configuration is not JSON: {e}"))?;
    let server = document
        .get_mut("mcpServers")
        .and_then(|servers| servers.get_mut(&config.server))
        .and_then(serde_json::Value::as_object_mut)
        .ok_or_else(|| {
            format!(
                "the MCP configuration has no server `{}`",
                config.server.escape_debug()
            )
        })?;
    server.insert("env".into(), serde_json::json!(env));
    write_private(home, "mcp.json", document.to_string().as_bytes())
}

fn write_private(home: &Dir, name: &str, bytes: &[u8]) -> Result<(), String> {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true).mode(0o600);
    let mut file = home
        .open_with(name, &options)
        .map_err(|e| format!("writing `{name}` in the private home: {e}"))?;
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(|e| format!("writing `{name}` in the private home: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn home() -> (tempfile::TempDir, Dir) {
        let dir = tempfile::tempdir().unwrap();
        let cap = Dir::open_ambient_dir(dir.path(), cap_std::ambient_authority()).unwrap();
        (dir, cap)
    }

    #[test]
    fn files_are_copied_owner_only_and_missing_ones_skipped() {
        let (dir, cap) = home();
        let source = dir.path().join("source.json");
        std::fs::write(&source, b"{\"OPENAI_API_KEY\":\"k\"}").unwrap();
        let files = [
            HomeFile {
                name: "auth.json".into(),
                source: source.display().to_string(),
            },
            HomeFile {
                name: "missing.json".into(),
                source: dir.path().join("nope").display().to_string(),
            },
        ];
        copy_files(&cap, &files).unwrap();
        let copied = dir.path().join("auth.json");
        assert_eq!(
            std::fs::read(&copied).unwrap(),
            std::fs::read(&source).unwrap()
        );
        let mode = std::fs::metadata(&copied).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert!(!dir.path().join("missing.json").exists());
    }

    #[test]
    fn a_source_past_the_limit_is_refused_after_one_byte_too_many() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("big");
        std::fs::write(&source, vec![b'x'; MAX_HOME_FILE_BYTES as usize]).unwrap();
        assert_eq!(
            read_source(&source).unwrap().len() as u64,
            MAX_HOME_FILE_BYTES
        );
        std::fs::write(&source, vec![b'x'; MAX_HOME_FILE_BYTES as usize + 1]).unwrap();
        let e = read_source(&source).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData, "{e}");
        let e = read_source(std::path::Path::new("/dev/zero")).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData, "{e}");
    }

    #[test]
    fn names_that_leave_the_home_are_refused() {
        let (dir, cap) = home();
        for name in ["../x", "a/b", "..", ""] {
            let files = [HomeFile {
                name: name.into(),
                source: dir.path().display().to_string(),
            }];
            assert!(copy_files(&cap, &files).is_err(), "{name}");
        }
    }

    #[test]
    fn the_server_env_table_quotes_every_name_and_value() {
        let (dir, cap) = home();
        let env = BTreeMap::from([
            (
                "SHIP_PASSWORD".to_string(),
                "a \"quoted\"\nline\\".to_string(),
            ),
            ("PLAIN".to_string(), "v".to_string()),
        ]);
        write_server_env(&cap, "ship ping", &env).unwrap();
        let text = std::fs::read_to_string(dir.path().join("config.toml")).unwrap();
        assert_eq!(
            text,
            "[mcp_servers.\"ship ping\".env]\n\"PLAIN\" = \"v\"\n\
             \"SHIP_PASSWORD\" = \"a \\\"quoted\\\"\\nline\\\\\"\n"
        );
        let mode = std::fs::metadata(dir.path().join("config.toml"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600);
    }

    #[test]
    fn the_mcp_config_gets_the_server_s_environment_owner_only() {
        let (dir, cap) = home();
        let config = McpConfig {
            server: "ship".into(),
            document: r#"{"mcpServers":{"ship":{"command":"/bin/s","args":[]}}}"#.into(),
            withheld: vec!["ANTHROPIC_API_KEY".into()],
        };
        let env = BTreeMap::from([("SHIP_PASSWORD".to_string(), "p\"w".to_string())]);
        write_mcp_config(&cap, &config, &env).unwrap();
        let path = dir.path().join("mcp.json");
        let written: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(written["mcpServers"]["ship"]["command"], "/bin/s");
        assert_eq!(
            written["mcpServers"]["ship"]["env"]["SHIP_PASSWORD"],
            "p\"w"
        );
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let other = McpConfig {
            server: "nope".into(),
            ..config
        };
        let (_dir, cap) = home();
        let e = write_mcp_config(&cap, &other, &env).unwrap_err();
        assert!(e.contains("no server") && !e.contains("p\"w"), "{e}");
    }
}
