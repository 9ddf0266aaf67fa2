//! Private scratch directories, handed out as cap-std capabilities: the host touches a scratch
//! directory only through a [`cap_std::fs::Dir`] handle, never through ambient paths.
//!
//! The handle is opened when the host writes, not held: a parked execution's scratch directory
//! costs no descriptor (issue 43). Each opening checks that the path still names the directory
//! created (its device and inode), so a child that moved its scratch directory away and put
//! something else (a link elsewhere) in its place gets no write of the host redirected.

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

/// A directory created for one execution (mode 0700), removed when dropped.
#[derive(Debug)]
pub struct ScratchDir {
    path: PathBuf,
    /// The directory's device and inode, as created.
    identity: (u64, u64),
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
        let created = std::fs::symlink_metadata(&path)?;
        Ok(Self {
            path,
            identity: (created.dev(), created.ino()),
        })
    }

    /// Creates a fresh private directory under the system's temporary directory.
    pub fn create(name_prefix: &str) -> std::io::Result<Self> {
        Self::create_in(&std::env::temp_dir(), name_prefix)
    }

    /// The capability, opened now: every file operation of the host inside the scratch
    /// directory goes through it (it cannot reach outside the directory). An error if the path
    /// no longer names the directory created.
    pub fn dir(&self) -> std::io::Result<Dir> {
        let dir = Dir::open_ambient_dir(&self.path, ambient_authority())?;
        let opened = dir.dir_metadata()?;
        use cap_std::fs::MetadataExt as _;
        if (opened.dev(), opened.ino()) != self.identity {
            return Err(std::io::Error::other(
                "the scratch directory was replaced after it was created",
            ));
        }
        Ok(dir)
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

/// Removes a scratch directory a dead worker left behind, only if it is plainly one of ours: an
/// absolute path (under whatever temporary directory that worker had) whose last component is
/// `m3-execution-` and 16 hex digits as [`ScratchDir::create`] names them, a real directory
/// (never a link) owned by this user with mode 0700. Anything else is left alone: the path
/// comes from the database, which a hostile neighbour may have written.
pub fn remove_left_behind(path: &Path) {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let named = path
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix(&format!("{EXECUTION_PREFIX}-")))
        .is_some_and(|random| {
            random.len() == 16
                && random
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        });
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    let ours = std::fs::symlink_metadata(path).is_ok_and(|m| {
        m.file_type().is_dir() && m.uid() == uid && m.permissions().mode() & 0o777 == 0o700
    });
    if path.is_absolute() && path.parent().is_some() && named && ours {
        let _ = std::fs::remove_dir_all(path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// The capability is opened only on the directory created: one moved away and replaced by
    /// a link to another directory (or by another directory) is refused.
    #[test]
    fn a_replaced_scratch_directory_is_refused() {
        let parent = tempfile::tempdir().unwrap();
        let scratch = ScratchDir::create_in(parent.path(), EXECUTION_PREFIX).unwrap();
        scratch.dir().unwrap().write("mine", b"x").unwrap();
        let moved = parent.path().join("moved");
        std::fs::rename(scratch.path(), &moved).unwrap();
        let elsewhere = parent.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, scratch.path()).unwrap();
        assert!(scratch.dir().is_err(), "a link in its place was opened");
        std::fs::remove_file(scratch.path()).unwrap();
        std::fs::create_dir(scratch.path()).unwrap();
        assert!(
            scratch.dir().is_err(),
            "another directory in its place was opened"
        );
        std::fs::remove_dir(scratch.path()).unwrap();
        std::fs::rename(&moved, scratch.path()).unwrap();
        assert_eq!(scratch.dir().unwrap().read("mine").unwrap(), b"x");
    }

    #[test]
    fn only_plain_scratch_directories_are_removed_wherever_they_are() {
        let parent = tempfile::tempdir().unwrap();
        let scratch = ScratchDir::create_in(parent.path(), EXECUTION_PREFIX).unwrap();
        let path = scratch.path().to_path_buf();
        std::mem::forget(scratch); // left behind, as by a dead worker
        let lookalikes = [
            parent.path().join("m3-execution-0123"),
            parent.path().join("m3-execution-0123456789abcdeg"),
            parent.path().join("other-0123456789abcdef"),
        ];
        for dir in &lookalikes {
            std::fs::DirBuilder::new().mode(0o700).create(dir).unwrap();
        }
        let loose = parent.path().join("m3-execution-0123456789abcdef");
        std::fs::create_dir(&loose).unwrap();
        std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o755)).unwrap();
        let link = parent.path().join("m3-execution-fedcba9876543210");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        for dir in lookalikes.iter().chain([&loose, &link]) {
            remove_left_behind(dir);
            assert!(dir.exists(), "{dir:?} was removed");
        }
        assert!(path.exists());
        remove_left_behind(&path);
        assert!(!path.exists(), "the scratch directory was left");
    }
}
