//! Seeds of the randomised tests and the commands that replay them.
//!
//! Every test that draws from a seed is a [`RandomTest`]: the registry knows its test binary, its
//! module, its name and whether `on_both_backends!` made it a test per backend, and it is the only
//! way to get a seed ([`RandomTest::seed`], [`RandomTest::seed_on`]). The seed is fresh each run,
//! or `M3_SEED` (hex) to replay one, and is printed with a command whose filter names exactly the
//! test that printed it (`--exact`, with its backend's module where it has one).
//! `replay::every_printed_replay_command_names_exactly_the_test_that_printed_it` lists each
//! filter with the test binary itself, and checks that the registry has every random test.

use crate::backends::Db;

/// The environment variable that replays a seed (hexadecimal, `0x` optional).
pub const SEED_VARIABLE: &str = "M3_SEED";

/// A storage backend, as `on_both_backends!` names the module of its tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// `<module>::sqlite::<name>`.
    Sqlite,
    /// `<module>::postgres::<name>`.
    Postgres,
}

impl Backend {
    /// Both backends, in the order `on_both_backends!` declares their modules.
    pub const ALL: [Backend; 2] = [Backend::Sqlite, Backend::Postgres];

    /// The name of the module `on_both_backends!` puts this backend's tests in.
    pub fn module(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }

    /// The backend of `db`.
    pub fn of(db: &Db) -> Self {
        if db.is_postgres() {
            Backend::Postgres
        } else {
            Backend::Sqlite
        }
    }
}

/// Every randomised test of the workspace: the only holders of a seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RandomTest {
    /// `lifecycle_model::{sqlite,postgres}::the_store_follows_the_reference_lifecycle_model`.
    LifecycleModel,
    /// `random_kills::{sqlite,postgres}::random_kills_under_load`.
    RandomKills,
    /// `lease_fencing::eight_workers_contend_for_rounds_and_paused_workers_are_fenced_off`.
    LeaseFencing,
    /// `redaction::secrets_never_appear_in_errors_debug_output_or_streams`.
    Redaction,
    /// `malformed_input::malformed_submissions_are_refused_and_leave_every_round_pending`.
    MalformedSubmissions,
    /// `malformed_input::a_prepared_round_decides_every_case_as_the_one_off_call_does`.
    PreparedRound,
    /// `malformed_input::generated_hostile_schemas_are_refused_at_create_round_in_bounded_time`.
    HostileSchemas,
    /// `hostile_arguments_never_panic_and_every_error_is_typed` of the `m3` command's `hostile`
    /// test binary.
    HostileArguments,
}

/// Where a random test is: its test binary, its module (`None` at the binary's root), its
/// function's name, and whether it runs on both backends.
struct Place {
    binary: &'static str,
    module: Option<&'static str>,
    name: &'static str,
    on_both_backends: bool,
}

impl RandomTest {
    /// Every random test (`replay::every_random_test_is_registered` checks that none is missing).
    pub const ALL: [RandomTest; 8] = [
        RandomTest::LifecycleModel,
        RandomTest::RandomKills,
        RandomTest::LeaseFencing,
        RandomTest::Redaction,
        RandomTest::MalformedSubmissions,
        RandomTest::PreparedRound,
        RandomTest::HostileSchemas,
        RandomTest::HostileArguments,
    ];

    fn place(self) -> Place {
        let (binary, module, name, on_both_backends) = match self {
            RandomTest::LifecycleModel => (
                "all",
                Some("lifecycle_model"),
                "the_store_follows_the_reference_lifecycle_model",
                true,
            ),
            RandomTest::RandomKills => {
                ("all", Some("random_kills"), "random_kills_under_load", true)
            }
            RandomTest::LeaseFencing => (
                "all",
                Some("lease_fencing"),
                "eight_workers_contend_for_rounds_and_paused_workers_are_fenced_off",
                false,
            ),
            RandomTest::Redaction => (
                "all",
                Some("redaction"),
                "secrets_never_appear_in_errors_debug_output_or_streams",
                false,
            ),
            RandomTest::MalformedSubmissions => (
                "all",
                Some("malformed_input"),
                "malformed_submissions_are_refused_and_leave_every_round_pending",
                false,
            ),
            RandomTest::PreparedRound => (
                "all",
                Some("malformed_input"),
                "a_prepared_round_decides_every_case_as_the_one_off_call_does",
                false,
            ),
            RandomTest::HostileSchemas => (
                "all",
                Some("malformed_input"),
                "generated_hostile_schemas_are_refused_at_create_round_in_bounded_time",
                false,
            ),
            RandomTest::HostileArguments => (
                "hostile",
                None,
                "hostile_arguments_never_panic_and_every_error_is_typed",
                false,
            ),
        };
        Place {
            binary,
            module,
            name,
            on_both_backends,
        }
    }

    /// The test binary (`cargo test --test <binary>`) that holds the test.
    pub fn binary(self) -> &'static str {
        self.place().binary
    }

    /// The test's module in its binary (`None`: the binary's root).
    pub fn module(self) -> Option<&'static str> {
        self.place().module
    }

    /// The name of the test's function.
    pub fn name(self) -> &'static str {
        self.place().name
    }

    /// The backends the test runs on as tests of their own: `[None]` for a test that is one
    /// test, `[Some(sqlite), Some(postgres)]` for one `on_both_backends!` made.
    pub fn backends(self) -> Vec<Option<Backend>> {
        if self.place().on_both_backends {
            Backend::ALL.into_iter().map(Some).collect()
        } else {
            vec![None]
        }
    }

    /// The full name of the test on `backend` (`<module>::<backend>::<name>`), which libtest
    /// matches with `--exact`. Panics if `backend` is given for a test that runs on one store
    /// only, or missing for a test that runs on both.
    pub fn filter(self, backend: Option<Backend>) -> String {
        let place = self.place();
        assert_eq!(
            place.on_both_backends,
            backend.is_some(),
            "{self:?}: a backend is given exactly when the test runs on both backends"
        );
        place
            .module
            .into_iter()
            .chain(backend.map(Backend::module))
            .chain([place.name])
            .collect::<Vec<_>>()
            .join("::")
    }

    /// The command that runs the test on `backend` alone with `seed`.
    pub fn replay_command(self, backend: Option<Backend>, seed: u64) -> String {
        format!(
            "{SEED_VARIABLE}={seed:x} cargo test --workspace --test {} -- --exact {}",
            self.binary(),
            self.filter(backend)
        )
    }

    /// The seed of this test (one that runs on one store only), printed with its replay command.
    pub fn seed(self) -> u64 {
        self.seed_for(None)
    }

    /// The seed of this test on `db`'s backend, printed with its replay command.
    pub fn seed_on(self, db: &Db) -> u64 {
        self.seed_for(Some(Backend::of(db)))
    }

    /// The seed of a run: `M3_SEED` (hex) if set, else fresh from the operating system; printed
    /// with the command that replays it (libtest shows it when the test fails). Panics when
    /// called from a test thread of another name than the filter's: the printed command would
    /// replay another test.
    fn seed_for(self, backend: Option<Backend>) -> u64 {
        let filter = self.filter(backend);
        if let Some(thread) = std::thread::current().name()
            && thread != "main"
        {
            assert_eq!(
                thread, filter,
                "{self:?} drew its seed in test {thread}: the replay command would name another test"
            );
        }
        let seed = match std::env::var(SEED_VARIABLE) {
            Ok(text) => u64::from_str_radix(text.trim().trim_start_matches("0x"), 16)
                .unwrap_or_else(|_| panic!("{SEED_VARIABLE}={text} is not a hexadecimal seed")),
            Err(_) => {
                let mut bytes = [0u8; 8];
                getrandom::fill(&mut bytes).expect("the operating system's random source");
                u64::from_le_bytes(bytes)
            }
        };
        println!(
            "{filter}: seed {seed:x} (replay: {})",
            self.replay_command(backend, seed)
        );
        seed
    }
}
