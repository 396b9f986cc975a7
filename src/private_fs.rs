//! Files only hookgate's own user may read: the state directory holds every accepted payload and
//! the compile cache, whose native code hookgate executes without re-validation, so neither may
//! be readable (payloads) or writable (code) by other users of the machine.

use std::fs::DirBuilder;
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Creates `dir` and any missing parents with mode 0700 (before the umask). A directory that
/// already exists keeps its mode: the operator chose it, and a warning says when others can
/// write into it.
pub fn create_private_dir(dir: &Path) -> io::Result<()> {
    DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    let mode = std::fs::metadata(dir)?.permissions().mode();
    if mode & 0o022 != 0 {
        tracing::warn!(
            path = %dir.display(),
            mode = format!("{:o}", mode & 0o777),
            "other users can write into hookgate's state directory"
        );
    }
    Ok(())
}

/// Creates `file` when missing and restricts it to its owner (mode 0600), before anything is
/// written into it. For a SQLite database this covers its `-wal` and `-shm` files too, which
/// SQLite creates with the mode of the database; any left by an older, laxer version are
/// restricted here as well.
pub fn create_private_file(file: &Path) -> io::Result<()> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(file)?;
    let owner_only = || std::fs::Permissions::from_mode(0o600);
    std::fs::set_permissions(file, owner_only())?;
    for suffix in ["-wal", "-shm"] {
        let mut companion = file.as_os_str().to_owned();
        companion.push(suffix);
        match std::fs::set_permissions(Path::new(&companion), owner_only()) {
            Err(err) if err.kind() != io::ErrorKind::NotFound => return Err(err),
            _ => {}
        }
    }
    Ok(())
}

/// Writes `bytes` to a new file `file` that only its owner may read (mode 0600). Whatever was
/// at `file` (a left-over file with another mode, a symlink) is removed first, so the file
/// written is always a new one of ours.
pub fn write_private(file: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write;
    match std::fs::remove_file(file) {
        Err(err) if err.kind() != io::ErrorKind::NotFound => return Err(err),
        _ => {}
    }
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(file)?;
    out.write_all(bytes)
}

/// Whether `path` (not followed if it is a symlink) belongs to this process's user and nobody
/// else may write to it: what a file, and the directory holding it, must be before hookgate
/// runs native code from it.
pub fn only_we_can_write(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let we = unsafe { libc::geteuid() };
    std::fs::symlink_metadata(path).is_ok_and(|meta| {
        !meta.file_type().is_symlink() && meta.uid() == we && meta.mode() & 0o022 == 0
    })
}

/// Why hookgate's user cannot be the only one to control what is under `dir`, or `None` when it
/// is: `dir` and every directory above it must belong to this user or root, and no other user
/// may write to them (group and others have no write permission), except that a directory above
/// may be sticky and writable by all (`/tmp`), since others cannot rename what they do not own
/// there. A `dir` that does not exist yet is judged by the directories above it. Symlinks on the
/// way are resolved first: what counts is where the files really are.
pub fn untrusted_ancestry(dir: &Path) -> Option<&'static str> {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let we = unsafe { libc::geteuid() };
    let mut existing = std::path::absolute(dir).ok()?;
    let exists = existing.exists();
    while !existing.exists() {
        existing = existing.parent()?.to_path_buf();
    }
    let real = existing.canonicalize().ok()?;
    for (depth, path) in real.ancestors().enumerate() {
        let is_dir_itself = exists && depth == 0;
        let Ok(meta) = std::fs::metadata(path) else {
            return Some("a directory on its path cannot be examined");
        };
        if meta.uid() != we && meta.uid() != 0 {
            return Some(if is_dir_itself {
                "it belongs to another user"
            } else {
                "a directory above it belongs to another user"
            });
        }
        let sticky = meta.mode() & 0o1000 != 0;
        if meta.mode() & 0o022 != 0 && (is_dir_itself || !sticky) {
            return Some(if is_dir_itself {
                "other users may write to it"
            } else {
                "other users may write to a directory above it"
            });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_directories_and_files_are_owner_only() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("a/b");
        create_private_dir(&dir).unwrap();
        for path in [root.path().join("a"), dir.clone()] {
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o077, 0, "{} is {mode:o}", path.display());
        }
        let file = dir.join("db");
        std::fs::write(dir.join("db-wal"), b"left by an older version").unwrap();
        create_private_file(&file).unwrap();
        for path in [file.clone(), dir.join("db-wal")] {
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "{}", path.display());
        }
    }

    #[test]
    fn code_is_trusted_only_from_files_no_one_else_can_write() {
        let root = tempfile::tempdir().unwrap();
        let file = root.path().join("entry");
        write_private(&file, b"code").unwrap();
        assert!(only_we_can_write(&file));
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(!only_we_can_write(&file));
        let link = root.path().join("link");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert!(!only_we_can_write(&link));
        assert!(!only_we_can_write(&root.path().join("missing")));
    }

    #[test]
    fn a_directory_others_may_write_to_is_not_trusted_nor_what_is_under_it() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("state");
        assert_eq!(
            untrusted_ancestry(&dir),
            None,
            "not yet created, under a private root"
        );
        create_private_dir(&dir).unwrap();
        assert_eq!(untrusted_ancestry(&dir), None);
        std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        assert_eq!(
            untrusted_ancestry(&dir),
            Some("other users may write to a directory above it")
        );
        std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert_eq!(untrusted_ancestry(&dir), None, "a sticky parent like /tmp");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o770)).unwrap();
        assert_eq!(
            untrusted_ancestry(&dir),
            Some("other users may write to it")
        );
    }
}
