//! Confinement of transform paths (docs/configuration.md): the transforms directory stays inside
//! `<config dir>/hooks/transforms`, and every `transform.module` inside the effective directory,
//! with symlinks followed, so that no configuration can point the host at an arbitrary file.

use std::path::{Component, Path, PathBuf};

use super::ConfigError;
use super::model::HooksConfig;

/// The transforms root under the configuration directory.
pub fn transforms_root(config_dir: &Path) -> PathBuf {
    config_dir.join("hooks").join("transforms")
}

/// How a relative `hooks.transformsDir` resolves, for the messages that refuse one: against the
/// root, as in the OpenClaw gateway, so `hooks/transforms` is not the root but a directory in it.
fn resolution(root: &Path) -> String {
    format!(
        "a relative path resolves against the transforms root {} (hooks/transforms is a directory \
         inside it); leave hooks.transformsDir out for the root itself",
        root.display()
    )
}

/// The effective transforms directory: `configured` resolved against the root (absolute values
/// taken as they are), refused unless it resolves inside the root.
pub fn transforms_dir(config_dir: &Path, configured: Option<&str>) -> Result<PathBuf, ConfigError> {
    let root = transforms_root(config_dir);
    let Some(configured) = configured.map(str::trim).filter(|s| !s.is_empty()) else {
        return Ok(root);
    };
    let dir = root.join(configured);
    if is_inside(&resolve(&dir), &resolve(&root)) {
        Ok(dir)
    } else {
        Err(ConfigError::invalid(
            key!(HooksConfig.transforms_dir),
            format!(
                "must stay inside the transforms root: {}",
                resolution(&root)
            ),
        ))
    }
}

/// Refuses a configured transforms directory that does not exist, when a mapping needs it: its
/// modules could not load, and the path as configured is rarely the one meant.
pub fn transforms_dir_exists(config_dir: &Path, dir: &Path) -> Result<(), ConfigError> {
    if dir.is_dir() {
        return Ok(());
    }
    Err(ConfigError::invalid(
        key!(HooksConfig.transforms_dir),
        format!(
            "is not a directory: {}",
            resolution(&transforms_root(config_dir))
        ),
    ))
}

/// Checks a `transform.module` value and resolves it inside `dir`.
pub fn module_path(dir: &Path, module: &str, key: &str) -> Result<PathBuf, ConfigError> {
    let refuse = |why: &str| Err(ConfigError::invalid(key, why.to_string()));
    let module = module.trim();
    if module.is_empty() {
        return refuse("must not be blank");
    }
    if module.starts_with('/') || module.starts_with('\\') || Path::new(module).is_absolute() {
        return refuse("must be relative to the transforms directory");
    }
    if module.starts_with('~') {
        return refuse("must not start with '~'");
    }
    if module.contains(':') {
        return refuse("must not contain ':'");
    }
    if module.split(['/', '\\']).any(|segment| segment == "..") {
        return refuse("must not contain a '..' segment");
    }
    let path = dir.join(module);
    if is_inside(&resolve(&path), &resolve(dir)) {
        Ok(path)
    } else {
        refuse("resolves outside the transforms directory")
    }
}

/// The path with symlinks followed as far as it exists, and the rest normalised lexically.
fn resolve(path: &Path) -> PathBuf {
    let mut existing = path.to_path_buf();
    let mut rest: Vec<PathBuf> = Vec::new();
    loop {
        if let Ok(real) = existing.canonicalize() {
            return rest
                .iter()
                .rev()
                .fold(real, |acc, part| lexical_join(acc, part));
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(PathBuf::from(name));
                existing = parent.to_path_buf();
            }
            _ => return lexical(path),
        }
    }
}

fn lexical_join(base: PathBuf, part: &Path) -> PathBuf {
    lexical(&base.join(part))
}

fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

fn is_inside(path: &Path, root: &Path) -> bool {
    path.starts_with(root)
}

/// Whether `path` resolves (symlinks followed) to `root` or below it.
pub fn is_within(path: &Path, root: &Path) -> bool {
    is_inside(&resolve(path), &resolve(root))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_dir_is_the_root() {
        let dir = transforms_dir(Path::new("/etc/hg"), None).unwrap();
        assert_eq!(dir, Path::new("/etc/hg/hooks/transforms"));
    }

    #[test]
    fn relative_dir_inside_root_is_accepted() {
        let dir = transforms_dir(Path::new("/etc/hg"), Some("team-a")).unwrap();
        assert_eq!(dir, Path::new("/etc/hg/hooks/transforms/team-a"));
    }

    #[test]
    fn dir_escaping_the_root_is_refused() {
        for bad in ["../elsewhere", "/tmp", "a/../../x"] {
            let err = transforms_dir(Path::new("/etc/hg"), Some(bad)).unwrap_err();
            assert!(
                err.to_string()
                    .starts_with("hooks.transformsDir: must stay inside"),
                "{bad}"
            );
        }
    }

    #[test]
    fn module_shapes_are_refused() {
        let dir = Path::new("/etc/hg/hooks/transforms");
        for (bad, why) in [
            ("", "must not be blank"),
            ("/abs.wasm", "must be relative to the transforms directory"),
            ("~/x.wasm", "must not start with '~'"),
            ("c:x.wasm", "must not contain ':'"),
            ("a/../b.wasm", "must not contain a '..' segment"),
            ("a\\..\\b.wasm", "must not contain a '..' segment"),
        ] {
            let err = module_path(dir, bad, "k").unwrap_err();
            assert_eq!(err.to_string(), format!("k: {why}"), "{bad}");
        }
        assert!(module_path(dir, "sub/github.wasm", "k").is_ok());
    }

    #[cfg(unix)]
    #[test]
    fn symlink_leading_out_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let root = transforms_root(tmp.path());
        std::fs::create_dir_all(&root).unwrap();
        let outside = tmp.path().join("secret.wasm");
        std::fs::write(&outside, b"x").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("evil.wasm")).unwrap();
        let err = module_path(&root, "evil.wasm", "k").unwrap_err();
        assert_eq!(
            err.to_string(),
            "k: resolves outside the transforms directory"
        );
    }
}
