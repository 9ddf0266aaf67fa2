//! Sandbox probes: each touches one kind of ambient authority, so a host can check that it gave
//! the component nothing but `wasi:random` and the m3 imports.

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
    }
}
