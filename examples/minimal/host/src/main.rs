//! The minimal m3 host: runs the `minimal` component and prints its description of a round.
//!
//! Usage: `minimal-host [ROUND_ID [REQUEST_KEY]]` (defaults: `r1`, `shipping_address`).

use bindings::{Minimal, MinimalImports};
use chrono::{SecondsFormat, Utc};
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::error::Context;
use wasmtime::{Engine, Store, bail};
use wasmtime_wasi::p2::bindings::random;
use wasmtime_wasi::random::{WasiRandom, WasiRandomCtx};

/// `Minimal` (instantiate, `call_describe_round`) and `MinimalImports` (`now_utc`), generated
/// from `../wit/minimal.wit`.
mod bindings {
    wasmtime::component::bindgen!({
        world: "minimal",
        path: "../wit",
    });
}

/// The component, built from `examples/minimal/guest` by `build.rs`.
static GUEST_WASM: &[u8] = include_bytes!(env!("MINIMAL_GUEST_WASM_PATH"));

/// What the host keeps for one instance.
struct HostState {
    /// `wasi:random`, the only WASI the component may use.
    random: WasiRandomCtx,
}

impl MinimalImports for HostState {
    fn now_utc(&mut self) -> String {
        Utc::now().to_rfc3339_opts(SecondsFormat::Secs, true)
    }
}

/// Defines the component's imports: `now-utc`, `wasi:random`, and a trap for everything else
/// (environment, stdio, clocks, filesystem, sockets), as the m3 host's sandbox does.
fn link(linker: &mut Linker<HostState>, component: &Component) -> wasmtime::Result<()> {
    Minimal::add_to_linker::<HostState, HasSelf<HostState>>(linker, |s| s)?;
    random::random::add_to_linker::<HostState, WasiRandom>(linker, |s| &mut s.random)?;
    random::insecure::add_to_linker::<HostState, WasiRandom>(linker, |s| &mut s.random)?;
    random::insecure_seed::add_to_linker::<HostState, WasiRandom>(linker, |s| &mut s.random)?;
    linker.define_unknown_imports_as_traps(component)?;
    Ok(())
}

fn main() -> wasmtime::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (round_id, request_key) = match args.as_slice() {
        [] => ("r1", "shipping_address"),
        [round] => (round.as_str(), "shipping_address"),
        [round, key] => (round.as_str(), key.as_str()),
        _ => bail!("usage: minimal-host [ROUND_ID [REQUEST_KEY]]"),
    };

    let engine = Engine::default();
    let component = Component::new(&engine, GUEST_WASM).context("compiling the component")?;
    let mut linker = Linker::new(&engine);
    link(&mut linker, &component).context("linking the component's imports")?;

    let state = HostState {
        random: WasiRandomCtx::default(),
    };
    let mut store = Store::new(&engine, state);
    let minimal = Minimal::instantiate(&mut store, &component, &linker)
        .context("instantiating the component")?;
    let line = minimal
        .call_describe_round(&mut store, round_id, request_key)
        .context("calling describe-round")?;
    println!("{line}");
    Ok(())
}
