# Convenience recipes; the README's commands are plain cargo and need nothing else.

# Run the whole test suite (the README's test command)
test:
    cargo test --workspace --locked

# What CI runs: fmt, clippy, tests
ci:
    bash .ci/run

# Build the host and its embedded component
build:
    cargo build --workspace

# The minimal three-piece component example
example:
    cargo run -p minimal-host

# The reliability catalogue with 10x the iterations (M3_SOAK=100 for 100x); see RELIABILITY.md
soak factor="10":
    M3_SOAK={{factor}} cargo test --workspace --release -- --test-threads 2

# Benchmarks: print tables, write target/bench/{engine,executions,component-size,cli,postgres,http_rounds}.json
bench:
    cargo bench -p m3 --bench engine --features internals
    cargo bench -p m3 --bench executions
    cargo bench -p m3 --bench component_size
    cargo bench -p m3-cli --bench startup
    cargo bench -p m3-tests --bench postgres
    cargo bench -p m3-tests --bench http_rounds

# `m3 serve` under load: answers through the API by 50 clients, the event stream fanned out to
# 200 subscribers, and notifications to a local receiver; writes
# target/bench/{serve,notify}.json (a release build of the command; see BENCHMARKS.md)
bench-serve:
    cargo bench -p m3-cli --bench serve
    cargo bench -p m3-cli --bench notify

# Scale on its own: a burst of 1,000 answers from 16 processes, and a 1,000-step script; writes
# target/bench/{burst,long_script}.json (see BENCHMARKS.md)
bench-scale:
    cargo bench -p m3 --bench burst
    cargo bench -p m3 --bench long_script

# Side by side with the peers a user would pick instead (installs them first); see BENCHMARKS.md
bench-peers:
    bash host/benches/peers/install.sh
    cargo bench -p m3 --bench peers_rounds
    cargo bench -p m3 --bench peers_validation --features internals
    cargo bench -p m3 --bench peers_scale
    cargo bench -p m3-cli --bench startup

# The Python package's kit against the Rust kit and the Python SDK's in-memory client, same
# server, same run (builds the package in release into tests/.peers/ first); writes
# target/bench/python_rounds.json (see BENCHMARKS.md, section 1)
bench-python:
    cargo bench -p m3-tests --bench python_rounds

# Writes the stored-format fixture of the current format (once per format; never rewrites one).
fixture:
    cargo build -p m3-tests --bins
    ./target/debug/m3-test-write-fixture tests/fixtures "$PWD/target/debug/m3-test-shipping-server" "$PWD/target/debug/m3-test-fault-worker"
