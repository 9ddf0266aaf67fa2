# Convenience recipes; the README's commands are plain cargo and need nothing else.

# Engine benchmark: prints a table, writes target/bench/engine.json
bench:
    cargo bench -p m3 --bench engine
