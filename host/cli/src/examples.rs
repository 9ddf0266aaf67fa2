//! The examples each subcommand's `--help` ends with. Every line that starts with `  m3 ` is a
//! command line the tests parse, so an example cannot drift from the flags it shows.

/// `m3 --help`.
pub const M3: &str = "\
Examples:
  m3 demo
  m3 run --human-input managed --server-name shipping --server-command m3 --server-arg example-server --tool shipping:book_shipment 'Book one book'
  m3 pending
  m3 respond 3f2a
  m3 status 9c1e --watch

Ids may be shortened to any unique prefix. `--db` (or M3_DB) names the database; `--json` makes every
output, errors included, JSON.";

/// `m3 demo --help`.
pub const DEMO: &str = "\
Examples:
  m3 demo
  m3 demo --era modern --answer '{\"street\":\"1 Main Street\",\"city\":\"Pune\"}'
  m3 demo --db demo.sqlite";

/// `m3 run --help`.
pub const RUN: &str = "\
Examples:
  m3 run --human-input managed --server-name shipping --server-command m3 --server-arg example-server --tool shipping:book_shipment 'Book one book'
  m3 run --no-prompt --json --human-input managed --server-name shipping --server-command ./server --tool shipping:book_shipment 'Book one book'
  m3 run --harness codex --model gpt-5 --human-input managed --server-name shipping --server-command m3 --server-arg example-server --tool shipping:book_shipment 'Book one book'

Ctrl-C cancels the execution (its open round fails `cancelled`); a second Ctrl-C exits at once.";

/// `m3 pending --help`.
pub const PENDING: &str = "\
Examples:
  m3 pending
  m3 pending --wait 60 --json
  m3 pending --watch";

/// `m3 respond --help`.
pub const RESPOND: &str = "\
Examples:
  m3 respond 3f2a
  m3 respond 3f2a --accept shipping_address={\"street\":\"1\",\"city\":\"Pune\"} --idempotency-key k1
  m3 respond 3f2a --decline shipping_address --idempotency-key k2 --wait 60
  m3 respond 3f2a --responses answers.json --idempotency-key k3

Without an answer option, on a terminal, it asks with a form and makes the idempotency key itself.";

/// `m3 rounds --help`.
pub const ROUNDS: &str = "\
Examples:
  m3 rounds
  m3 rounds --status failed --wide
  m3 rounds --execution 9c1e --json";

/// `m3 show --help`.
pub const SHOW: &str = "\
Examples:
  m3 show 3f2a
  m3 show 3f2a --redacted";

/// `m3 executions --help`.
pub const EXECUTIONS: &str = "\
Examples:
  m3 executions
  m3 executions --json";

/// `m3 status --help`.
pub const STATUS: &str = "\
Examples:
  m3 status 9c1e
  m3 status 9c1e --watch
  m3 status 9c1e --json";

/// `m3 events --help`.
pub const EVENTS: &str = "\
Examples:
  m3 events 9c1e
  m3 events 9c1e --json";

/// `m3 cancel --help`.
pub const CANCEL: &str = "\
Examples:
  m3 cancel 9c1e";

/// `m3 serve --help`.
pub const SERVE: &str = "\
Examples:
  m3 serve
  m3 serve --listen 127.0.0.1:0
  m3 serve --listen 0.0.0.0:8383 --token-file token.txt
  m3 serve --notify-file targets --notify-secret-file notify-secret --public-url https://inbox.example.com
  curl -H 'Authorization: Bearer TOKEN' http://127.0.0.1:8383/api/rounds/pending";

/// `m3 validate --help`.
pub const VALIDATE: &str = "\
Examples:
  m3 pending --json > round.json
  m3 validate --round round.json --responses answers.json";

/// `m3 check-schema --help`.
pub const CHECK_SCHEMA: &str = "\
Examples:
  m3 check-schema schema.json
  m3 check-schema -";

/// `m3 component --help`.
pub const COMPONENT: &str = "\
Examples:
  m3 component policy.wasm
  m3 component --world policy-only policy.wasm";

/// `m3 doctor --help`.
pub const DOCTOR: &str = "\
Examples:
  m3 doctor
  m3 doctor --json

Exits non-zero when the database or the component is not healthy.";

/// `m3 recover --help`.
pub const RECOVER: &str = "\
Examples:
  m3 recover";

/// `m3 migrate --help`.
pub const MIGRATE: &str = "\
Examples:
  m3 migrate --from sqlite:executions.sqlite --to postgres://m3@db.example/m3
  m3 migrate --from executions.sqlite --to postgres://m3@db.example/m3 --json

Stop the workers first: a live lease in the source refuses the copy, as does a target that holds rows.";

/// `m3 example-server --help`.
pub const EXAMPLE_SERVER: &str = "\
Examples:
  m3 run --human-input managed --server-name shipping --server-command m3 --server-arg example-server --tool shipping:book_shipment 'Book one book'
  m3 example-server --era legacy";

/// `m3 completions --help`.
pub const COMPLETIONS: &str = "\
Examples:
  m3 completions bash
  m3 completions zsh
  m3 completions fish

For bash: `m3 completions bash > ~/.local/share/bash-completion/completions/m3`.";
