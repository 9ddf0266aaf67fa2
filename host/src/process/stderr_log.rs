//! A child's stderr, written by the child straight into a file of its scratch directory
//! ([`STDERR_FILE`]), so that the host holds no descriptor for it while the child runs (issue 43:
//! a parked execution costs one descriptor, its stdio socket).
//!
//! The host opens the file when it creates it (through the scratch directory's capability,
//! owner-only, append-only for the child), hands it to the child as its stderr and closes its own
//! copy. It reads the tail ([`StderrLog::tail`]) by opening the path again, and only if the path
//! still names the file it created (device and inode, never through a link).
//!
//! Bounded on disk: one trimmer thread looks at every live log every [`TRIM_PERIOD`]; a log
//! holding more than [`TRIM_ABOVE`] bytes of disk has everything but its last
//! [`STDERR_TAIL_BYTES`] deallocated (a hole punched from the start: the child's
//! appends go on at the end, its size keeps counting, the space is freed); on a file system that
//! cannot punch holes it is emptied instead. A child that writes faster than one period allows
//! holds that much disk until the next pass, as any file it writes could; the host's memory is
//! never involved.

use super::scratch::ScratchDir;
use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// The file a child's stderr goes to, in its scratch directory (the second child started in the
/// same directory gets `.m3-stderr-2`, and so on).
pub const STDERR_FILE: &str = ".m3-stderr";

/// The most children whose stderr files one scratch directory holds.
const FILES_PER_DIRECTORY: usize = 1000;

/// How often the trimmer looks at every live log (a look is one `stat` of its path: the path
/// walks of looking every 10 s showed in the idle profile of 10,000 parked executions).
pub const TRIM_PERIOD: Duration = Duration::from_secs(30);

/// A log holding more disk than this is trimmed to its tail.
pub const TRIM_ABOVE: u64 = 1024 * 1024;

/// How much of a child's stderr is kept (the tail), for diagnostics only.
pub const STDERR_TAIL_BYTES: usize = 64 * 1024;

/// The block the punched hole ends on (a hole ends on a block boundary).
const BLOCK: u64 = 4096;

/// One child's stderr file.
#[derive(Debug)]
pub(crate) struct StderrLog {
    file: LogFile,
    /// The log's entry with the trimmer.
    key: u64,
}

/// Where a log is, and which file it is (its device and inode, as created).
#[derive(Debug, Clone)]
struct LogFile {
    path: PathBuf,
    identity: (u64, u64),
}

impl StderrLog {
    /// Creates the log in `scratch`: the log, and the descriptor the child gets as its stderr
    /// (write-only, appending; the caller closes it once the child has it).
    pub(crate) fn create(scratch: &ScratchDir) -> std::io::Result<(Self, OwnedFd)> {
        use cap_std::fs::OpenOptionsExt as _;
        let mut options = cap_std::fs::OpenOptions::new();
        options.append(true).create_new(true).mode(0o600);
        let dir = scratch.dir()?;
        let mut taken = None;
        for n in 1..=FILES_PER_DIRECTORY {
            let name = match n {
                1 => STDERR_FILE.to_string(),
                n => format!("{STDERR_FILE}-{n}"),
            };
            match dir.open_with(&name, &options) {
                Ok(file) => {
                    taken = Some((name, file.into_std()));
                    break;
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        let (name, file) = taken.ok_or_else(|| {
            std::io::Error::other("the scratch directory holds too many stderr files")
        })?;
        let created = file.metadata()?;
        let file_of = LogFile {
            path: scratch.path().join(name),
            identity: (created.dev(), created.ino()),
        };
        let key = trimmer().register(file_of.clone());
        Ok((Self { file: file_of, key }, file.into()))
    }

    /// The last `bytes` the child wrote (empty if the file is gone or was replaced).
    pub(crate) fn tail(&self, bytes: usize) -> Vec<u8> {
        let Some(mut file) = self.file.open(false) else {
            return Vec::new();
        };
        let Ok(size) = file.seek(SeekFrom::End(0)) else {
            return Vec::new();
        };
        let from = size.saturating_sub(bytes as u64);
        let mut tail = Vec::with_capacity((size - from) as usize);
        if file.seek(SeekFrom::Start(from)).is_err()
            || file.take(size - from).read_to_end(&mut tail).is_err()
        {
            return Vec::new();
        }
        tail
    }
}

impl Drop for StderrLog {
    fn drop(&mut self) {
        trimmer().unregister(self.key);
    }
}

impl LogFile {
    /// The file, opened for reading (or writing) only if the path still names it.
    fn open(&self, write: bool) -> Option<std::fs::File> {
        let file = std::fs::OpenOptions::new()
            .read(!write)
            .write(write)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&self.path)
            .ok()?;
        let opened = file.metadata().ok()?;
        ((opened.dev(), opened.ino()) == self.identity && opened.is_file()).then_some(file)
    }

    /// Frees all but the tail of the log if it holds more than [`TRIM_ABOVE`] of disk.
    /// Returns whether it trimmed.
    fn trim(&self) -> bool {
        let held = match std::fs::symlink_metadata(&self.path) {
            Ok(m) if (m.dev(), m.ino()) == self.identity => m.blocks() * 512,
            _ => return false,
        };
        if held <= TRIM_ABOVE {
            return false;
        }
        let Some(file) = self.open(true) else {
            return false;
        };
        let Ok(size) = file.metadata().map(|m| m.len()) else {
            return false;
        };
        let keep = STDERR_TAIL_BYTES as u64;
        let end = size.saturating_sub(keep) / BLOCK * BLOCK;
        if end == 0 {
            return false;
        }
        let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        // SAFETY: fallocate(2) on a descriptor this function owns; it changes only that file.
        let punched = unsafe { libc::fallocate(file.as_raw_fd(), mode, 0, end as libc::off_t) };
        if punched == 0 {
            return true;
        }
        // A file system without holes: the log starts again (the child appends at the new end).
        file.set_len(0).is_ok()
    }
}

/// Every live log, and the thread that trims them.
struct Trimmer {
    logs: Mutex<HashMap<u64, LogFile>>,
    next: AtomicU64,
}

impl Trimmer {
    fn register(&self, file: LogFile) -> u64 {
        let key = self.next.fetch_add(1, Ordering::Relaxed);
        self.logs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, file);
        key
    }

    fn unregister(&self, key: u64) {
        self.logs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&key);
    }

    /// One pass over every live log (the list copied first: the pass holds no lock while it
    /// looks at files).
    fn pass(&self) -> usize {
        let logs: Vec<LogFile> = self
            .logs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
        logs.iter().filter(|log| log.trim()).count()
    }
}

fn trimmer() -> &'static Trimmer {
    static TRIMMER: OnceLock<Trimmer> = OnceLock::new();
    TRIMMER.get_or_init(|| {
        std::thread::Builder::new()
            .name("m3-stderr-trimmer".into())
            .spawn(|| {
                loop {
                    std::thread::sleep(TRIM_PERIOD);
                    trimmer().pass();
                }
            })
            .expect("starting the stderr trimmer thread");
        Trimmer {
            logs: Mutex::new(HashMap::new()),
            next: AtomicU64::new(0),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A live log over the bound is trimmed by the trimmer's pass: it keeps its tail and frees
    /// the rest of its disk, and the child's next append still lands at the end.
    #[test]
    fn a_log_over_its_bound_keeps_its_tail_and_frees_the_rest() {
        let scratch = ScratchDir::create("m3-test").unwrap();
        let (log, fd) = StderrLog::create(&scratch).unwrap();
        let mut child_end = std::fs::File::from(fd);
        let line: Vec<u8> = (0..1000u32)
            .flat_map(|i| format!("{i:07}\n").into_bytes())
            .collect();
        for _ in 0..500 {
            child_end.write_all(&line).unwrap();
        }
        let written = 500 * line.len() as u64;
        let before = log.tail(64 * 1024);
        // The trimmer's pass finds it among the live logs.
        assert!(trimmer().pass() >= 1, "a 4 MB log was not trimmed");
        let meta = std::fs::metadata(scratch.path().join(STDERR_FILE)).unwrap();
        assert_eq!(meta.len(), written, "the size keeps counting");
        assert!(
            meta.blocks() * 512 <= TRIM_ABOVE,
            "still {} bytes held",
            meta.blocks() * 512
        );
        assert_eq!(log.tail(64 * 1024), before, "the tail survives the trim");
        assert!(!log.file.trim(), "a trimmed log is trimmed again");
        child_end.write_all(b"after\n").unwrap();
        assert!(log.tail(64 * 1024).ends_with(b"0000999\nafter\n"));
    }

    /// The tail is read only from the file created: a file put in its place is not read.
    #[test]
    fn a_replaced_log_is_not_read() {
        let scratch = ScratchDir::create("m3-test").unwrap();
        let (log, fd) = StderrLog::create(&scratch).unwrap();
        std::fs::File::from(fd).write_all(b"the child's\n").unwrap();
        assert_eq!(log.tail(1024), b"the child's\n");
        let path = scratch.path().join(STDERR_FILE);
        std::fs::remove_file(&path).unwrap();
        std::fs::write(scratch.path().join("elsewhere"), b"not the log\n").unwrap();
        std::os::unix::fs::symlink(scratch.path().join("elsewhere"), &path).unwrap();
        assert!(log.tail(1024).is_empty());
        assert!(!log.file.trim());
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, b"another file\n").unwrap();
        assert!(log.tail(1024).is_empty());
    }
}
