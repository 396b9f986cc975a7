//! A secret as the file gives it: the value itself (after `${ENV}`), or `{ "file": "path" }`, read
//! relative to the configuration's directory.
//!
//! A secret file gets the rules of a module file (`src/transform/module_file.rs`): a regular
//! file only, opened without blocking (a FIFO would otherwise hold `check`, a start or a reload
//! until something writes to it), and of bounded size. No message says anything of what the
//! file holds.
//!
//! A candidate configuration sent to the API (a dry run) reads secret files inside the
//! configuration directory only, and one it cannot read gets [`CANDIDATE_UNREADABLE`] whatever
//! the reason: its problems would otherwise tell its sender which paths exist on the server.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

pub use super::model::SecretValue;
use super::{ConfigError, confine};

/// The configuration's directory, against which its relative paths resolve, and which secret
/// files the configuration may read.
#[derive(Debug, Clone, Copy)]
pub struct ConfigFiles<'a> {
    pub dir: &'a Path,
    reach: Reach,
}

/// Which secret files a configuration may read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reach {
    /// Any the server can: the operator's own file, whose problems say why a file is refused.
    Anywhere,
    /// Those inside the configuration directory, symlinks followed, and one message for every
    /// refusal.
    ConfigDir,
}

/// Why a candidate's secret file was not read: the same words for a file that is missing,
/// outside the configuration directory, unreadable or not a bounded regular text file.
pub const CANDIDATE_UNREADABLE: &str = "cannot read the secret file: a candidate's secret files \
     must be readable regular text files of at most 65536 bytes inside the configuration \
     directory";

impl<'a> ConfigFiles<'a> {
    /// The files of the configuration in force (or checked by `hookgate check`) in `dir`.
    pub fn operator(dir: &'a Path) -> ConfigFiles<'a> {
        ConfigFiles {
            dir,
            reach: Reach::Anywhere,
        }
    }

    /// The files of a candidate configuration sent to the API, checked as if it were in `dir`.
    pub fn candidate(dir: &'a Path) -> ConfigFiles<'a> {
        ConfigFiles {
            dir,
            reach: Reach::ConfigDir,
        }
    }

    /// The text of the secret file `name` (relative to the directory), or why it is refused.
    fn read(&self, name: &str) -> Result<String, String> {
        let path = self.dir.join(name);
        match self.reach {
            Reach::Anywhere => read_secret_file(&path, 0)
                .map_err(|why| format!("cannot read secret file {}: {why}", path.display())),
            Reach::ConfigDir => {
                // Resolved first, then opened without following a symlink: what is checked is
                // what is read.
                let real = path
                    .canonicalize()
                    .ok()
                    .filter(|real| confine::is_within(real, self.dir));
                real.and_then(|real| read_secret_file(&real, libc::O_NOFOLLOW).ok())
                    .ok_or_else(|| CANDIDATE_UNREADABLE.to_string())
            }
        }
    }
}

/// The largest secret file read: a token, a signing key or a PEM-encoded key fits many times.
pub const MAX_SECRET_FILE_BYTES: u64 = 64 * 1024;

/// The secret at `key`, trimmed of a file's surrounding whitespace; `None` when absent or blank,
/// a problem when its file cannot be read.
pub(super) fn secret(
    value: Option<SecretValue>,
    key: &str,
    files: ConfigFiles<'_>,
    problems: &mut Vec<ConfigError>,
) -> Option<String> {
    let value = match value? {
        SecretValue::Inline(value) => value,
        SecretValue::File(file) => match files.read(&file.file) {
            Ok(contents) => contents.trim().to_string(),
            Err(why) => {
                problems.push(ConfigError::invalid(key, why));
                return None;
            }
        },
    };
    (!value.trim().is_empty()).then_some(value)
}

/// The text of the secret file at `path`, opened with `flags` besides, or why it is refused.
fn read_secret_file(path: &Path, flags: libc::c_int) -> Result<String, String> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | flags)
        .open(path)
        .map_err(|err| err.to_string())?;
    // The descriptor's own metadata: a file swapped in after the open is not what is read.
    let metadata = file.metadata().map_err(|err| err.to_string())?;
    if !metadata.is_file() {
        return Err("not a regular file".into());
    }
    if metadata.len() > MAX_SECRET_FILE_BYTES {
        return Err(format!(
            "over the {MAX_SECRET_FILE_BYTES}-byte limit of a secret file"
        ));
    }
    let mut bytes = Vec::new();
    // Bounded again: the file may grow between `fstat` and the read.
    file.take(MAX_SECRET_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|err| err.to_string())?;
    if bytes.len() as u64 > MAX_SECRET_FILE_BYTES {
        return Err(format!(
            "over the {MAX_SECRET_FILE_BYTES}-byte limit of a secret file"
        ));
    }
    String::from_utf8(bytes).map_err(|_| "not UTF-8 text".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_bounded_regular_text_files_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "s3cret\n").unwrap();
        assert_eq!(read_secret_file(&path, 0).unwrap(), "s3cret\n");
        assert_eq!(
            read_secret_file(dir.path(), 0).unwrap_err(),
            "not a regular file"
        );
        std::fs::write(&path, vec![b'a'; MAX_SECRET_FILE_BYTES as usize + 1]).unwrap();
        assert!(read_secret_file(&path, 0).unwrap_err().contains("limit"));
        std::fs::write(&path, [0xff, 0xfe]).unwrap();
        assert_eq!(read_secret_file(&path, 0).unwrap_err(), "not UTF-8 text");
        let missing = read_secret_file(&dir.path().join("absent"), 0).unwrap_err();
        assert!(missing.contains("No such file"), "{missing}");
    }

    #[test]
    fn a_fifo_is_refused_without_waiting_for_a_writer() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: `path` is a valid NUL-terminated string that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
        assert_eq!(
            read_secret_file(&fifo, 0).unwrap_err(),
            "not a regular file"
        );
    }

    #[test]
    fn a_candidate_reads_inside_the_config_dir_only_and_says_the_same_of_every_refusal() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("config");
        std::fs::create_dir_all(dir.join("secrets")).unwrap();
        std::fs::write(dir.join("secrets/key"), "k\n").unwrap();
        let outside = tmp.path().join("outside");
        std::fs::write(&outside, "o").unwrap();
        std::os::unix::fs::symlink(&outside, dir.join("link")).unwrap();
        let dir = dir.canonicalize().unwrap();
        let candidate = ConfigFiles::candidate(&dir);
        assert!(CANDIDATE_UNREADABLE.contains(&MAX_SECRET_FILE_BYTES.to_string()));
        assert_eq!(candidate.read("secrets/key").unwrap(), "k\n");
        let outside = outside.to_str().unwrap();
        for refused in [
            outside,
            "link",
            "../outside",
            "absent",
            "/nonexistent/x",
            "secrets",
        ] {
            assert_eq!(
                candidate.read(refused).unwrap_err(),
                CANDIDATE_UNREADABLE,
                "{refused}"
            );
        }
        // The operator's own file reads anywhere, and is told why.
        let operator = ConfigFiles::operator(&dir);
        assert_eq!(operator.read(outside).unwrap(), "o");
        assert!(
            operator
                .read("absent")
                .unwrap_err()
                .contains("No such file")
        );
    }
}
