//! Sandbox probes: each touches one kind of ambient authority, so a host can check that it gave
//! the component nothing but `wasi:random`, the m3 imports and (in executions) `wasi:http` to
//! its server's origin.

use crate::exports::m3::managed_input::sandbox_probe::Probe;

/// Runs one probe (see the WIT for what each must do under a conforming host).
pub fn run(which: Probe, amount: u64) -> String {
    match which {
        Probe::Environment => format!("{} environment variables", std::env::vars_os().count()),
        Probe::WallClock => format!("{:?}", std::time::SystemTime::now()),
        Probe::Stdout => {
            use std::io::Write;
            let written = std::io::stdout()
                .write_all(b"probe\n")
                .and_then(|_| std::io::stdout().flush());
            format!("stdout write: {}", written.is_ok())
        }
        Probe::Filesystem => format!("read /etc/passwd: {}", std::fs::read("/etc/passwd").is_ok()),
        Probe::Random => {
            let mut bytes = [0u8; 8];
            format!("random: {}", getrandom::fill(&mut bytes).is_ok())
        }
        Probe::Spin => {
            let mut x: u64 = amount;
            loop {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
        }
        Probe::Allocate => {
            let block = vec![1u8; amount as usize];
            format!("allocated {} bytes", std::hint::black_box(block).len())
        }
        Probe::Network => network(amount),
    }
}

/// Sends `GET http://127.0.0.1:<port>/` through `wasi:http` and says what came of it.
fn network(port: u64) -> String {
    use wasip2::http::{outgoing_handler, types};
    let request = types::OutgoingRequest::new(types::Fields::new());
    let _ = request.set_scheme(Some(&types::Scheme::Http));
    let _ = request.set_authority(Some(&format!("127.0.0.1:{port}")));
    let _ = request.set_path_with_query(Some("/"));
    match outgoing_handler::handle(request, None) {
        Ok(future) => {
            let pollable = future.subscribe();
            pollable.block();
            drop(pollable);
            match future.get() {
                Some(Ok(Ok(response))) => format!("response: HTTP {}", response.status()),
                Some(Ok(Err(code))) => format!("refused: {code:?}"),
                Some(Err(())) | None => "no response".into(),
            }
        }
        Err(code) => format!("refused: {code:?}"),
    }
}
