//! `m3 component FILE`: writes a component this build embeds, for embedding in another host
//! (jco, wasmtime-py, any component runtime). See EMBEDDING.md.

use crate::{Cli, print_json};
use anyhow::Result;
use clap::ValueEnum;
use std::path::Path;
use std::process::ExitCode;

/// Which component to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum World {
    /// `policy`, `round-protocol` and `execution-rules`, importing nothing but `wasi:random` (for
    /// other hosts).
    PolicyOnly,
    /// The whole engine; its host must provide the m3 imports (`clock`, `store`, `process`,
    /// `events`).
    Engine,
}

/// `m3 component [--world W] FILE`.
pub fn write(cli: &Cli, world: World, file: &Path) -> Result<ExitCode> {
    let (name, bytes) = match world {
        World::PolicyOnly => ("policy-only", m3::POLICY_COMPONENT),
        World::Engine => ("engine", m3::health::engine_component()),
    };
    std::fs::write(file, bytes)
        .map_err(|e| anyhow::anyhow!("StorageError: {} cannot be written: {e}", file.display()))?;
    if cli.json {
        print_json(
            &serde_json::json!({"world": name, "bytes": bytes.len(), "path": file}),
            false,
        );
    } else {
        println!(
            "wrote the {name} component ({} bytes) to {}",
            bytes.len(),
            file.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}
