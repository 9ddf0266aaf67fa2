//! The fake model as a process: see `m3_tests::fake_model`.

fn main() -> anyhow::Result<()> {
    m3_tests::fake_model::main_with_args(std::env::args().skip(1))
}
