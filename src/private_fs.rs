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
}
