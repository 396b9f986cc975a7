//! A secret as the file gives it: the value itself (after `${ENV}`), or `{ "file": "path" }`, read
//! relative to the configuration's directory.
//!
//! A secret file gets the rules of a module file (`src/transform/module_file.rs`): a regular
//! file only, opened without blocking (a FIFO would otherwise hold `check`, a start or a reload
//! until something writes to it), and of bounded size. No message says anything of what the
//! file holds.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use serde::Deserialize;

use super::ConfigError;

/// A secret: either the value itself or `{ "file": "path" }`, whose trimmed contents are the value.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum SecretValue {
    Inline(String),
    File(SecretFile),
}

/// The `{ "file": ... }` form of a secret.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecretFile {
    pub file: String,
}

/// The largest secret file read: a token, a signing key or a PEM-encoded key fits many times.
pub const MAX_SECRET_FILE_BYTES: u64 = 64 * 1024;

/// The secret at `key`, trimmed of a file's surrounding whitespace; `None` when absent or blank,
/// a problem when its file cannot be read.
pub(super) fn secret(
    value: Option<SecretValue>,
    key: &str,
    config_dir: &Path,
    problems: &mut Vec<ConfigError>,
) -> Option<String> {
    let value = match value? {
        SecretValue::Inline(value) => value,
        SecretValue::File(file) => {
            let path = config_dir.join(&file.file);
            match read_secret_file(&path) {
                Ok(contents) => contents.trim().to_string(),
                Err(why) => {
                    problems.push(ConfigError::invalid(
                        key,
                        format!("cannot read secret file {}: {why}", path.display()),
                    ));
                    return None;
                }
            }
        }
    };
    (!value.trim().is_empty()).then_some(value)
}

/// The text of the secret file at `path`, or why it is refused.
fn read_secret_file(path: &Path) -> Result<String, String> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
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
        assert_eq!(read_secret_file(&path).unwrap(), "s3cret\n");
        assert_eq!(
            read_secret_file(dir.path()).unwrap_err(),
            "not a regular file"
        );
        std::fs::write(&path, vec![b'a'; MAX_SECRET_FILE_BYTES as usize + 1]).unwrap();
        assert!(read_secret_file(&path).unwrap_err().contains("limit"));
        std::fs::write(&path, [0xff, 0xfe]).unwrap();
        assert_eq!(read_secret_file(&path).unwrap_err(), "not UTF-8 text");
        let missing = read_secret_file(&dir.path().join("absent")).unwrap_err();
        assert!(missing.contains("No such file"), "{missing}");
    }

    #[test]
    fn a_fifo_is_refused_without_waiting_for_a_writer() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: `path` is a valid NUL-terminated string that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
        assert_eq!(read_secret_file(&fifo).unwrap_err(), "not a regular file");
    }
}
