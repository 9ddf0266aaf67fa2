//! A throwaway PostgreSQL server for tests, run from the server's own command-line programs.
//!
//! - The binaries are the highest version under `/usr/lib/postgresql/*/bin`; when there are none,
//!   Debian's `postgresql` package is installed with `apt-get` first (under the same lock as the
//!   other apt installs, `tests/.peers/apt.lock`), and a failed install panics with its output:
//!   tests that need PostgreSQL fail, they never skip.
//! - `initdb` writes a cluster into a fresh directory under `/tmp` (short, so the socket path fits
//!   the kernel's limit), owned by an unprivileged user (`postgres` if it exists, else `nobody`)
//!   with mode 0700: only that user and root (the tests) can reach it. `initdb` and `postgres` run
//!   as that user, with an environment of `PATH` and `LANG=C` only. The superuser is that user's
//!   name, local connections are trusted, the server listens on a Unix socket in that directory
//!   only (`listen_addresses=''`) and `fsync` stays on.
//! - `postgres` runs under a sentinel (`sh`, as the same user, in a process group of its own) that
//!   reads commands from a pipe whose write end only this process holds (close-on-exec, so no
//!   other child inherits it). When the pipe closes, because [`PostgresServer::stop`] closed it or
//!   this process exited or was killed (even with SIGKILL), the sentinel stops the server with
//!   SIGINT (fast shutdown; SIGQUIT, then SIGKILL, if it does not stop), waits for it and removes
//!   the whole directory.
//! - [`PostgresServer::shared`] is the one server of a test process, started on first use; each
//!   test takes a database of its own from it with [`PostgresServer::fresh_database`]. A test that
//!   restarts or stops a server starts one of its own with [`PostgresServer::start`].

use std::fs::{self, File};
use std::io::{BufRead, BufReader, PipeWriter, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// How long a server may take to accept connections after it was started.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long `initdb` may take.
const INITDB_TIMEOUT: Duration = Duration::from_secs(120);
/// How long one `psql`, `createdb` or `pg_isready` may take.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(60);
/// How long each of `apt-get update` and `apt-get install` may take.
const APT_TIMEOUT: Duration = Duration::from_secs(900);
/// How long the sentinel may take to stop the server and remove its directory (its own bounds:
/// 60 s for the fast shutdown, 10 s each for SIGQUIT and SIGKILL, then the removal).
const STOP_TIMEOUT: Duration = Duration::from_secs(120);
/// The only `PATH` the server's programs and the clients get.
const PATH: &str = "/usr/bin:/bin";
/// The port, which only names the socket file (`.s.PGSQL.5432`): nothing listens on TCP.
const PORT: &str = "5432";
/// The programs a usable binary directory holds.
const PROGRAMS: [&str; 5] = ["initdb", "postgres", "pg_isready", "psql", "createdb"];

/// The sentinel, run as `sh -c SENTINEL sentinel <dir> <postgres> <port>` with the command pipe as its
/// standard input and the log as its standard error. It prints `started <pid>` after each start
/// and `stopped` after a restart's stop; a `restart` line restarts the server, and the end of its
/// input stops it and removes `<dir>`. SIGPIPE is ignored so that an acknowledgement nobody
/// reads any more cannot kill it before it cleans up.
const SENTINEL: &str = r#"
trap '' PIPE
dir=$1
postgres=$2
port=$3
start() {
  "$postgres" -D "$dir/data" -k "$dir" -p "$port" -c listen_addresses= \
    -c unix_socket_permissions=0777 -c fsync=on -c max_connections=300 </dev/null >&2 &
  pid=$!
  echo "started $pid"
}
gone() {
  state=$(cut -d' ' -f3 "/proc/$pid/stat" 2>/dev/null)
  [ -z "$state" ] || [ "$state" = Z ]
}
signal() {
  kill "-$1" "$pid" 2>/dev/null
  tenths=0
  while ! gone && [ "$tenths" -lt "$2" ]; do sleep 0.1; tenths=$((tenths + 1)); done
  gone
}
stop() {
  signal INT 600 || signal QUIT 100 || signal KILL 100
  wait "$pid"
}
start
while read -r command; do
  case $command in
    restart) stop; echo stopped; start ;;
  esac
done
stop
rm -rf "$dir" || { sleep 1; rm -rf "$dir"; }
"#;

/// A running throwaway PostgreSQL server (see the module documentation). Dropping it stops it.
pub struct PostgresServer {
    dir: PathBuf,
    user: ServerUser,
    bin: PathBuf,
    databases: AtomicU64,
    /// `None` once stopped.
    sentinel: Mutex<Option<Sentinel>>,
}

/// A database of its own on a [`PostgresServer`], for one test.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostgresDatabase {
    /// The database's name (`m3_test_<pid>_<n>`).
    pub name: String,
    /// Its connection URL: `postgres://USER@%2Fpath%2Fto%2Fsocketdir/NAME`.
    pub url: String,
}

/// The sentinel process and its two pipes.
struct Sentinel {
    child: Child,
    /// The write end of its command pipe: closing it stops the server.
    commands: PipeWriter,
    /// Its acknowledgements.
    acks: BufReader<ChildStdout>,
    /// The postmaster it started last.
    postmaster: u32,
}

/// The unprivileged user the server runs as.
#[derive(Debug, Clone)]
struct ServerUser {
    name: String,
    uid: u32,
    gid: u32,
    /// Whether commands switch to it (this process runs as root).
    switch: bool,
}

/// Starts the line on which [`serve_until_killed`] names its postmaster and directory:
/// `<pid> <dir>` follow.
pub const OWNER_LINE: &str = "M3-POSTGRES-OWNER ";

/// The owner process of `postgres_server::the_sentinel_stops_the_server_when_its_owner_is_killed`
/// (`m3-test-helper own-postgres`): starts a server, names its postmaster and directory on an
/// [`OWNER_LINE`], and waits (120 s at most) to be killed.
pub fn serve_until_killed() {
    let server = PostgresServer::start();
    println!(
        "{OWNER_LINE}{} {}",
        server.postmaster_pid(),
        server.socket_dir().display()
    );
    std::io::stdout().flush().expect("flushing stdout");
    std::thread::sleep(Duration::from_secs(120));
}

impl PostgresServer {
    /// The server of this test process, started on first use and shared by its tests; it stops
    /// when the process exits. Panics (in every caller) if it could not start.
    pub fn shared() -> &'static PostgresServer {
        static SHARED: OnceLock<Result<PostgresServer, String>> = OnceLock::new();
        let started = SHARED.get_or_init(|| {
            std::panic::catch_unwind(PostgresServer::start).map_err(|payload| {
                payload
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "a panic without a message".to_string())
            })
        });
        match started {
            Ok(server) => server,
            Err(message) => panic!("the shared PostgreSQL server did not start: {message}"),
        }
    }

    /// A new server of the caller's own, ready for connections (at most 60 s, else a panic with
    /// the server's log tail); it stops when dropped or with [`PostgresServer::stop`].
    pub fn start() -> PostgresServer {
        let bin = binaries().to_path_buf();
        let user = ServerUser::find();
        let dir = tempfile::Builder::new()
            .prefix("m3-postgres-")
            .permissions(fs::Permissions::from_mode(0o700))
            .tempdir_in("/tmp")
            .expect("a temporary directory under /tmp")
            .keep();
        std::os::unix::fs::chown(&dir, Some(user.uid), Some(user.gid))
            .unwrap_or_else(|e| panic!("chown {} to {}: {e}", dir.display(), user.name));

        let data = dir.join("data");
        let initdb = run(
            user.command(bin.join("initdb"))
                .current_dir(&dir)
                .arg("-D")
                .arg(&data)
                .args(["--auth=trust", "--username", &user.name])
                .args(["--encoding=UTF8", "--locale=C", "--no-instructions"]),
            None,
            INITDB_TIMEOUT,
        );
        if !initdb.success() {
            let _ = fs::remove_dir_all(&dir);
            panic!("initdb failed: {}", initdb.describe());
        }

        let log = File::create(dir.join("postgres.log"))
            .unwrap_or_else(|e| panic!("creating the log in {}: {e}", dir.display()));
        let (commands_read, commands) = std::io::pipe().expect("a pipe for the sentinel");
        let mut child = user
            .command("/bin/sh")
            .current_dir(&dir)
            .arg("-c")
            .arg(SENTINEL)
            .arg("m3-postgres-sentinel")
            .arg(&dir)
            .arg(bin.join("postgres"))
            .arg(PORT)
            .stdin(commands_read)
            .stdout(Stdio::piped())
            .stderr(log)
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("starting the PostgreSQL sentinel: {e}"));
        // The `Command` above is gone, and with it this process's copy of the read end.
        let acks = BufReader::new(child.stdout.take().expect("the sentinel's stdout"));
        let server = PostgresServer {
            dir,
            user,
            bin,
            databases: AtomicU64::new(0),
            sentinel: Mutex::new(Some(Sentinel {
                child,
                commands,
                acks,
                postmaster: 0,
            })),
        };
        {
            let mut guard = server.sentinel();
            let sentinel = guard.as_mut().expect("a running sentinel");
            sentinel.postmaster = server.started(sentinel);
            server.wait_ready(sentinel.postmaster);
        }
        server
    }

    /// A new, empty database on this server (made with `createdb`), named uniquely.
    pub fn fresh_database(&self) -> PostgresDatabase {
        let n = self.databases.fetch_add(1, Ordering::Relaxed);
        let name = format!("m3_test_{}_{n}", std::process::id());
        let created = run(
            self.client("createdb").arg("--").arg(&name),
            None,
            CLIENT_TIMEOUT,
        );
        if !created.success() {
            panic!("createdb {name} failed: {}", created.describe());
        }
        PostgresDatabase {
            url: self.url(&name),
            name,
        }
    }

    /// Runs `sql` (any number of statements) with `psql` as the superuser on `database` and
    /// returns its standard output: rows only, unaligned, fields separated by `|`. Panics with
    /// `psql`'s standard error if a statement fails.
    pub fn psql(&self, database: &str, sql: &str) -> String {
        let ran = run(
            self.client("psql")
                .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-f", "-"])
                .arg("-d")
                .arg(database),
            Some(sql),
            CLIENT_TIMEOUT,
        );
        if !ran.success() {
            panic!("psql on {database} failed: {}\nSQL: {sql}", ran.describe());
        }
        ran.stdout
    }

    /// Stops the postmaster with a fast shutdown (its connections are cut) and starts it again on
    /// the same data directory and socket, returning once it accepts connections. On
    /// [`PostgresServer::shared`] this interrupts every test of the process: a test that restarts
    /// a server should start one of its own.
    pub fn restart(&self) {
        let mut guard = self.sentinel();
        let sentinel = guard
            .as_mut()
            .expect("restart() of a stopped PostgreSQL server");
        writeln!(sentinel.commands, "restart")
            .and_then(|()| sentinel.commands.flush())
            .unwrap_or_else(|e| panic!("asking the sentinel to restart: {e}"));
        let ack = self.ack(sentinel);
        assert_eq!(
            ack,
            "stopped",
            "the sentinel's answer to restart; log tail:\n{}",
            self.log_tail()
        );
        sentinel.postmaster = self.started(sentinel);
        self.wait_ready(sentinel.postmaster);
    }

    /// Stops the server (fast shutdown) and waits until its directory is removed; later calls do
    /// nothing. What the sentinel does when this process dies, done now.
    pub fn stop(&self) {
        let Some(sentinel) = self.sentinel().take() else {
            return;
        };
        let Sentinel {
            mut child,
            commands,
            ..
        } = sentinel;
        drop(commands);
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            match child.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => {
                    eprintln!(
                        "the PostgreSQL sentinel in {} did not finish within {} s; killed",
                        self.dir.display(),
                        STOP_TIMEOUT.as_secs()
                    );
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
            }
        }
        if self.dir.exists() {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }

    /// The connection URL of `database` on this server (the socket directory, percent-encoded,
    /// as the host).
    pub fn url(&self, database: &str) -> String {
        format!(
            "postgres://{}@{}/{}",
            self.user.name,
            percent_encode(&self.dir.to_string_lossy()),
            percent_encode(database)
        )
    }

    /// The directory of the socket (also the host of the URLs); the cluster is in its `data/`,
    /// the server's log in its `postgres.log`. The sentinel removes it when it stops the server.
    pub fn socket_dir(&self) -> &Path {
        &self.dir
    }

    /// The superuser's name, which is the name of the user the server runs as.
    pub fn user(&self) -> &str {
        &self.user.name
    }

    /// The user id the server runs as.
    pub fn uid(&self) -> u32 {
        self.user.uid
    }

    /// The process id of the running postmaster (a new one after each restart); 0 once stopped.
    pub fn postmaster_pid(&self) -> u32 {
        self.sentinel().as_ref().map_or(0, |s| s.postmaster)
    }

    /// The last 40 lines of the server's log.
    pub fn log_tail(&self) -> String {
        let text = fs::read(self.dir.join("postgres.log"))
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
            .unwrap_or_else(|e| format!("(no log: {e})"));
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    fn sentinel(&self) -> MutexGuard<'_, Option<Sentinel>> {
        self.sentinel.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The sentinel's next line (a panic with the log tail if it ended).
    fn ack(&self, sentinel: &mut Sentinel) -> String {
        let mut line = String::new();
        match sentinel.acks.read_line(&mut line) {
            Ok(n) if n > 0 => line.trim_end().to_string(),
            outcome => panic!(
                "the PostgreSQL sentinel ended ({outcome:?}, {:?}); log tail:\n{}",
                sentinel.child.try_wait(),
                self.log_tail()
            ),
        }
    }

    /// Reads the sentinel's `started <pid>` and returns the pid.
    fn started(&self, sentinel: &mut Sentinel) -> u32 {
        let ack = self.ack(sentinel);
        ack.strip_prefix("started ")
            .and_then(|pid| pid.parse().ok())
            .unwrap_or_else(|| panic!("the sentinel said {ack:?}, not `started <pid>`"))
    }

    /// Waits until the server accepts connections (`pg_isready`), panicking with the log tail if
    /// the postmaster exits or [`READY_TIMEOUT`] passes first.
    fn wait_ready(&self, postmaster: u32) {
        let started = Instant::now();
        loop {
            if run(&mut self.client("pg_isready"), None, CLIENT_TIMEOUT).success() {
                return;
            }
            if !crate::process_is_running(postmaster) {
                panic!(
                    "postgres (pid {postmaster}) exited while starting; log tail:\n{}",
                    self.log_tail()
                );
            }
            if started.elapsed() > READY_TIMEOUT {
                panic!(
                    "postgres (pid {postmaster}) did not accept connections within {} s; log \
                     tail:\n{}",
                    READY_TIMEOUT.as_secs(),
                    self.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// One of the server's client programs, run by this process, aimed at the socket as the
    /// superuser.
    fn client(&self, program: &str) -> Command {
        let mut command = Command::new(self.bin.join(program));
        command
            .env_clear()
            .env("PATH", PATH)
            .env("LANG", "C")
            .arg("-h")
            .arg(&self.dir)
            .args(["-p", PORT, "-U", &self.user.name]);
        command
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        self.stop();
    }
}

impl ServerUser {
    /// `postgres` if it exists, else `nobody`, when this process is root; else this process's
    /// own user (the server refuses to run as root, and only root can switch).
    fn find() -> ServerUser {
        let passwd = fs::read_to_string("/etc/passwd").expect("reading /etc/passwd");
        let entries: Vec<(String, u32, u32)> = passwd
            .lines()
            .filter_map(|line| {
                let fields: Vec<&str> = line.split(':').collect();
                Some((
                    fields.first()?.to_string(),
                    fields.get(2)?.parse().ok()?,
                    fields.get(3)?.parse().ok()?,
                ))
            })
            .collect();
        let own_uid = own_uid();
        let found = if own_uid == 0 {
            ["postgres", "nobody"]
                .iter()
                .find_map(|name| entries.iter().find(|(n, ..)| n == name))
        } else {
            entries.iter().find(|(_, uid, _)| *uid == own_uid)
        };
        let (name, uid, gid) = found
            .cloned()
            .expect("a user to run PostgreSQL as in /etc/passwd");
        ServerUser {
            name,
            uid,
            gid,
            switch: own_uid == 0,
        }
    }

    /// `program` to run as this user, with an environment of `PATH` and `LANG` only.
    fn command(&self, program: impl AsRef<Path>) -> Command {
        let mut command = Command::new(program.as_ref());
        command.env_clear().env("PATH", PATH).env("LANG", "C");
        if self.switch {
            command.uid(self.uid).gid(self.gid);
        }
        command
    }
}

/// This process's real user id (from `/proc/self/status`).
fn own_uid() -> u32 {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with("Uid:"))?;
            line.split_whitespace().nth(1)?.parse().ok()
        })
        .expect("the Uid line of /proc/self/status")
}

/// The directory of the PostgreSQL programs, installed with `apt-get` on first use if missing.
fn binaries() -> &'static Path {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match BIN.get_or_init(|| match find_binaries() {
        Some(bin) => Ok(bin),
        None => install_postgresql(),
    }) {
        Ok(bin) => bin,
        Err(message) => panic!("{message}"),
    }
}

/// The highest version's `bin/` under `/usr/lib/postgresql` that holds every program needed.
fn find_binaries() -> Option<PathBuf> {
    fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let version: Vec<u32> = name
                .split('.')
                .map(|part| part.parse().ok())
                .collect::<Option<_>>()?;
            let bin = entry.path().join("bin");
            PROGRAMS
                .iter()
                .all(|program| bin.join(program).is_file())
                .then_some((version, bin))
        })
        .max()
        .map(|(_, bin)| bin)
}

/// `apt-get update` and `apt-get install -y postgresql`, under `tests/.peers/apt.lock`.
fn install_postgresql() -> Result<PathBuf, String> {
    let root = crate::peers::install_root();
    fs::create_dir_all(&root).map_err(|e| format!("creating {}: {e}", root.display()))?;
    let lock_path = root.join("apt.lock");
    let lock = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| format!("opening {}: {e}", lock_path.display()))?;
    lock.lock()
        .map_err(|e| format!("locking {}: {e}", lock_path.display()))?;
    if let Some(bin) = find_binaries() {
        return Ok(bin);
    }
    for args in [
        &["update", "-q"][..],
        &["install", "-y", "-q", "postgresql"],
    ] {
        let ran = run(
            Command::new("apt-get")
                .args(args)
                .env("DEBIAN_FRONTEND", "noninteractive"),
            None,
            APT_TIMEOUT,
        );
        if !ran.success() {
            return Err(format!(
                "the PostgreSQL tests need the server's programs under /usr/lib/postgresql/*/bin, \
                 and installing them failed (by hand: `apt-get update && apt-get install -y \
                 postgresql`): {}",
                ran.describe()
            ));
        }
    }
    find_binaries().ok_or_else(|| {
        format!(
            "apt-get installed postgresql, but no /usr/lib/postgresql/*/bin holds {}",
            PROGRAMS.join(", ")
        )
    })
}

/// What a finished (or killed) command left.
struct Ran {
    shown: String,
    /// `None` if it was killed at its timeout.
    status: Option<ExitStatus>,
    stdout: String,
    stderr: String,
}

impl Ran {
    fn success(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }

    fn describe(&self) -> String {
        let status = self
            .status
            .map_or("killed at its timeout".to_string(), |s| s.to_string());
        format!(
            "{} ({status})\nstdout:\n{}\nstderr:\n{}",
            self.shown, self.stdout, self.stderr
        )
    }
}

/// Runs `command` with `input` on its standard input (or none), killing it after `timeout`.
fn run(command: &mut Command, input: Option<&str>, timeout: Duration) -> Ran {
    let shown = format!("{:?}", command.get_program());
    command
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command
        .spawn()
        .unwrap_or_else(|e| panic!("starting {shown}: {e}"));
    let writer = input.zip(child.stdin.take()).map(|(text, mut stdin)| {
        let text = text.to_string();
        std::thread::spawn(move || {
            let _ = stdin.write_all(text.as_bytes());
        })
    });
    let read_all = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            String::from_utf8_lossy(&bytes).into_owned()
        })
    };
    let stdout = read_all(Box::new(child.stdout.take().expect("piped stdout")));
    let stderr = read_all(Box::new(child.stderr.take().expect("piped stderr")));
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    if let Some(writer) = writer {
        let _ = writer.join();
    }
    Ran {
        shown: format!("{shown} {:?}", command.get_args().collect::<Vec<_>>()),
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    }
}

/// Percent-encodes every byte of `text` but the URL's unreserved characters.
fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}
