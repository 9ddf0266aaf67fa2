//! Private scratch directories, handed out as cap-std capabilities: the host touches a scratch
//! directory only through its [`cap_std::fs::Dir`] handle, never through ambient paths.

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

/// A directory created for one execution (mode 0700), removed when dropped.
#[derive(Debug)]
pub struct ScratchDir {
    path: PathBuf,
    dir: Dir,
}

impl ScratchDir {
    /// Creates a fresh private directory under `parent`.
    pub fn create_in(parent: &Path, name_prefix: &str) -> std::io::Result<Self> {
        let mut bytes = [0u8; 8];
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))?;
        let name = format!("{name_prefix}-{}", hex::encode(bytes));
        let path = parent.join(name);
        std::fs::DirBuilder::new().mode(0o700).create(&path)?;
        let dir = Dir::open_ambient_dir(&path, ambient_authority())?;
        Ok(Self { path, dir })
    }

    /// Creates a fresh private directory under the system's temporary directory.
    pub fn create(name_prefix: &str) -> std::io::Result<Self> {
        Self::create_in(&std::env::temp_dir(), name_prefix)
    }

    /// The capability: every file operation of the host inside the scratch directory goes
    /// through it (it cannot reach outside the directory).
    pub fn dir(&self) -> &Dir {
        &self.dir
    }

    /// The path, for a child's working directory.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// The name every execution's scratch directory starts with.
pub const EXECUTION_PREFIX: &str = "m3-execution";

/// Removes a scratch directory a dead worker left behind, only if it is plainly one: directly
/// under the temporary directory, named `m3-execution-...`, a real directory owned by this user
/// (never a link). Anything else is left alone.
pub fn remove_left_behind(path: &Path) {
    use std::os::unix::fs::MetadataExt;
    let under_temp = path.parent() == Some(std::env::temp_dir().as_path());
    let named = path
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with(&format!("{EXECUTION_PREFIX}-")));
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    let ours =
        std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_dir() && m.uid() == uid);
    if under_temp && named && ours {
        let _ = std::fs::remove_dir_all(path);
    }
}
