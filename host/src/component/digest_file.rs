//! The digest file beside a cached compiled artifact (`<artifact>.digest`, mode 0600): the
//! artifact's keyed BLAKE3 digest and, once the artifact has been read and found to match it,
//! the artifact file's identity and times at that moment, bound to the digest and the file's
//! name by a second keyed digest.
//!
//! A later load whose file has the same identity (device, inode, size, modification and change
//! times) maps the artifact without reading it again: any write to the file since the check
//! moved its change time, which no process can set back. A check made within
//! [`SETTLED_AFTER`] of the file's last change records nothing (the file could still change
//! within the same timestamp tick), so such a file is read and checked again next time.
//!
//! Format, version 1 (all integers little-endian): the 8 bytes `m3dgst01`, the 32-byte digest
//! of the artifact's bytes, then either nothing or the 56-byte identity (device, inode, size,
//! modification seconds and nanoseconds, change seconds and nanoseconds; 8 bytes each)
//! followed by the 32-byte keyed digest of everything before it and the artifact's file name.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

const MAGIC: &[u8; 8] = b"m3dgst01";
const DIGEST: usize = 32;
const IDENTITY: usize = 56;

/// How long after its last change a file's identity is recorded.
pub(crate) const SETTLED_AFTER: Duration = Duration::from_secs(2);

/// An artifact file's identity: what any write to it changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileIdentity {
    device: u64,
    inode: u64,
    size: u64,
    modified: (i64, i64),
    changed: (i64, i64),
}

impl FileIdentity {
    /// The identity of an open file.
    pub(crate) fn of(meta: &fs::Metadata) -> Self {
        Self {
            device: meta.dev(),
            inode: meta.ino(),
            size: meta.size(),
            modified: (meta.mtime(), meta.mtime_nsec()),
            changed: (meta.ctime(), meta.ctime_nsec()),
        }
    }

    /// Whether the file's last change is at least [`SETTLED_AFTER`] before `now`.
    pub(crate) fn settled(&self, now: SystemTime) -> bool {
        let Ok(seconds) = u64::try_from(self.changed.0) else {
            return false;
        };
        let nanos = u32::try_from(self.changed.1).unwrap_or(0);
        let changed = SystemTime::UNIX_EPOCH + Duration::new(seconds, nanos);
        now.duration_since(changed)
            .is_ok_and(|age| age >= SETTLED_AFTER)
    }

    fn bytes(&self) -> [u8; IDENTITY] {
        let mut out = [0u8; IDENTITY];
        let fields = [
            self.device,
            self.inode,
            self.size,
            self.modified.0 as u64,
            self.modified.1 as u64,
            self.changed.0 as u64,
            self.changed.1 as u64,
        ];
        for (chunk, field) in out.as_chunks_mut::<8>().0.iter_mut().zip(fields) {
            chunk.copy_from_slice(&field.to_le_bytes());
        }
        out
    }
}

/// What a digest file says about its artifact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DigestFile {
    /// The keyed digest of the artifact's bytes.
    pub digest: blake3::Hash,
    /// The artifact file's identity when its bytes were last found to match `digest`, if one
    /// was recorded and its own keyed digest holds.
    pub checked_identity: Option<FileIdentity>,
}

/// The digest file's path for `artifact`.
pub(crate) fn path_for(artifact: &Path) -> PathBuf {
    artifact.with_extension("digest")
}

/// Reads the digest file of `artifact` (written with `key`). `Err` says why it is unusable.
pub(crate) fn read(key: &[u8; 32], artifact: &Path) -> Result<DigestFile, String> {
    let bytes = fs::read(path_for(artifact)).map_err(|e| format!("no digest file: {e}"))?;
    let body = bytes
        .strip_prefix(MAGIC.as_slice())
        .ok_or("its digest file has another format")?;
    let (digest, rest) = body
        .split_at_checked(DIGEST)
        .ok_or("its digest file is cut short")?;
    let digest = blake3::Hash::from_bytes(digest.try_into().unwrap_or([0; DIGEST]));
    let checked_identity = match rest.len() {
        0 => None,
        n if n == IDENTITY + DIGEST => {
            let (identity, seal) = rest.split_at(IDENTITY);
            let expected = identity_digest(key, artifact, &bytes[..bytes.len() - DIGEST]);
            // `blake3::Hash` compares in constant time.
            (expected == blake3::Hash::from_bytes(seal.try_into().unwrap_or([0; DIGEST])))
                .then(|| decode_identity(identity))
        }
        _ => return Err("its digest file has a wrong length".into()),
    };
    Ok(DigestFile {
        digest,
        checked_identity,
    })
}

/// Writes the digest file of `artifact` atomically (mode 0600): its bytes' `digest`, and the
/// file's `identity` when the bytes were just found to match it.
pub(crate) fn write(
    key: &[u8; 32],
    artifact: &Path,
    digest: &blake3::Hash,
    identity: Option<&FileIdentity>,
) -> std::io::Result<()> {
    let mut bytes = Vec::with_capacity(MAGIC.len() + DIGEST + IDENTITY + DIGEST);
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(digest.as_bytes());
    if let Some(identity) = identity {
        bytes.extend_from_slice(&identity.bytes());
        let seal = identity_digest(key, artifact, &bytes);
        bytes.extend_from_slice(seal.as_bytes());
    }
    write_private(&path_for(artifact), &[&bytes])
}

/// Writes `parts` to `path` atomically: a new mode-0600 file beside it, synced, then renamed
/// over it.
pub(crate) fn write_private(path: &Path, parts: &[&[u8]]) -> std::io::Result<()> {
    let temporary = temporary_beside(path);
    let _ = fs::remove_file(&temporary);
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temporary)?;
    for part in parts {
        file.write_all(part)?;
    }
    file.sync_all()?;
    drop(file);
    fs::rename(&temporary, path)
}

/// A unique temporary name in `path`'s directory (this process, a counter).
fn temporary_beside(path: &Path) -> PathBuf {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let unique = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    path.with_file_name(format!(".{}-{unique}.tmp", std::process::id()))
}

fn identity_digest(key: &[u8; 32], artifact: &Path, covered: &[u8]) -> blake3::Hash {
    let mut hasher = blake3::Hasher::new_keyed(key);
    hasher.update(covered);
    hasher.update(
        artifact
            .file_name()
            .map_or(&[][..], |n| n.as_encoded_bytes()),
    );
    hasher.finalize()
}

fn decode_identity(bytes: &[u8]) -> FileIdentity {
    let field = |i: usize| {
        let mut chunk = [0u8; 8];
        chunk.copy_from_slice(&bytes[i * 8..i * 8 + 8]);
        u64::from_le_bytes(chunk)
    };
    FileIdentity {
        device: field(0),
        inode: field(1),
        size: field(2),
        modified: (field(3) as i64, field(4) as i64),
        changed: (field(5) as i64, field(6) as i64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity() -> FileIdentity {
        FileIdentity {
            device: 1,
            inode: 2,
            size: 3,
            modified: (4, 5),
            changed: (6, -7),
        }
    }

    #[test]
    fn a_recorded_identity_reads_back_only_under_its_key_and_name() {
        let dir = tempfile::tempdir().unwrap();
        let artifact = dir.path().join("a.cwasm");
        let key = [7u8; 32];
        let digest = blake3::keyed_hash(&key, b"artifact");
        write(&key, &artifact, &digest, Some(&identity())).unwrap();
        let read_back = read(&key, &artifact).unwrap();
        assert_eq!(read_back.digest, digest);
        assert_eq!(read_back.checked_identity, Some(identity()));

        // Another key, or the same file under another artifact's name: no identity.
        assert_eq!(read(&[8u8; 32], &artifact).unwrap().checked_identity, None);
        let renamed = dir.path().join("b.cwasm");
        fs::rename(path_for(&artifact), path_for(&renamed)).unwrap();
        assert_eq!(read(&key, &renamed).unwrap().checked_identity, None);

        // One changed byte of the identity: no identity.
        let mut bytes = fs::read(path_for(&renamed)).unwrap();
        bytes[MAGIC.len() + DIGEST] ^= 1;
        fs::write(path_for(&artifact), &bytes).unwrap();
        assert_eq!(read(&key, &artifact).unwrap().checked_identity, None);

        // Without an identity, the digest alone.
        write(&key, &artifact, &digest, None).unwrap();
        let bare = read(&key, &artifact).unwrap();
        assert_eq!((bare.digest, bare.checked_identity), (digest, None));

        // Anything else is refused with a reason.
        fs::write(path_for(&artifact), b"m3dgst01short").unwrap();
        assert!(read(&key, &artifact).unwrap_err().contains("short"));
        fs::write(path_for(&artifact), b"another format").unwrap();
        assert!(read(&key, &artifact).unwrap_err().contains("another"));
    }

    #[test]
    fn a_file_changed_within_the_settling_time_is_not_settled() {
        let mut recent = identity();
        let now = SystemTime::now();
        let since_epoch = now.duration_since(SystemTime::UNIX_EPOCH).unwrap();
        recent.changed = (since_epoch.as_secs() as i64, 0);
        assert!(!recent.settled(now));
        assert!(recent.settled(now + SETTLED_AFTER + Duration::from_secs(1)));
        recent.changed = (-1, 0);
        assert!(!recent.settled(now));
    }
}
