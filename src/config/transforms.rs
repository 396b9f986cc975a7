//! The transforms a configuration names, loaded with it: a configuration is admitted only when
//! every one of them loads, each failure named by the key of the mapping that names the module.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::model::{HooksConfig, TransformConfig};
use super::{ConfigError, ConfigNotice, HookSettings, Settings};
use crate::mapping::{JAVASCRIPT_EXTENSIONS, javascript_component};
use crate::transform::{
    Builder, Contract, JS_ADAPTER_REVISION, LoadError, TransformRegistry, TransformSet,
};

/// Loads the transforms of a candidate configuration, which is never put in force, into its
/// hooks, apart from the set in force (see [`TransformRegistry::load_candidate`]); refuses it,
/// as `hookgate check` would, naming the key of each module that fails to load.
pub fn candidate_transforms(
    registry: &TransformRegistry,
    settings: &Settings,
) -> Result<(), Vec<ConfigError>> {
    load_transforms(settings, |dir, names| registry.load_candidate(dir, names))
}

/// Loads, with `load`, every transform `settings` names and gives the set to its hooks.
pub fn load_transforms(
    settings: &Settings,
    load: impl FnOnce(&Path, &[String]) -> Result<Arc<TransformSet>, Vec<LoadError>>,
) -> Result<(), Vec<ConfigError>> {
    let (dir, modules) = match &settings.hooks {
        Some(hooks) => (hooks.transforms_dir.clone(), hooks.transform_modules()),
        None => (PathBuf::new(), Vec::new()),
    };
    let names: Vec<String> = modules.iter().map(|(module, _)| module.clone()).collect();
    let set = load(&dir, &names).map_err(|errors| {
        errors
            .into_iter()
            .map(|err| {
                let key = modules
                    .iter()
                    .find(|(module, _)| *module == err.module)
                    .map_or(key!(HooksConfig.mappings), |(_, key)| key.clone());
                ConfigError::invalid(key, err.to_string())
            })
            .collect::<Vec<_>>()
    })?;
    if let Some(hooks) = &settings.hooks {
        entry_points_exist(hooks, &set)?;
        let _ = hooks.transforms.set(set);
    }
    Ok(())
}

/// Refuses a `transform.export` on a 0.1 component, which has one entry point and would run it
/// whatever the mapping asked for.
fn entry_points_exist(hooks: &HookSettings, set: &TransformSet) -> Result<(), Vec<ConfigError>> {
    let refused: Vec<ConfigError> = hooks
        .mappings
        .iter()
        .enumerate()
        .filter_map(|(i, mapping)| {
            let spec = mapping.transform.as_ref().filter(|s| s.export.is_some())?;
            let loaded = set.get(&spec.module)?;
            (loaded.contract() == Contract::V0_1).then(|| {
                ConfigError::invalid(
                    key!(TransformConfig[i].export),
                    format!(
                        "needs a component built against hookgate:transform@0.2, and {} is built against 0.1",
                        spec.module
                    ),
                )
            })
        })
        .collect();
    if refused.is_empty() {
        Ok(())
    } else {
        Err(refused)
    }
}

/// A notice for each JavaScript component of `hooks` built by an older SDK
/// ([`Builder::is_outdated`]), under the key of the first mapping naming it:
/// the file, the revision it records, and the command that rebuilds it from its source (the
/// module the mapping names, else one beside the component, else a placeholder for it).
pub fn outdated_javascript(hooks: &HookSettings) -> Vec<ConfigNotice> {
    let Some(set) = hooks.transforms.get() else {
        return Vec::new();
    };
    hooks
        .transform_modules()
        .into_iter()
        .filter_map(|(module, key)| {
            let builder = set.get(&module)?.builder;
            if !builder.is_outdated() {
                return None;
            }
            let recorded = match builder {
                Builder::JavaScript {
                    adapter: Some(revision),
                } => format!("adapter revision {revision}"),
                _ => "no adapter revision".to_string(),
            };
            let component = hooks
                .transforms_dir
                .join(javascript_component(&module).unwrap_or_else(|| module.clone()));
            // `transform build x.mjs` writes x.wasm beside it: in place, for a source found here.
            let rebuild = match javascript_source(&hooks.transforms_dir, &module) {
                Some(source) => format!("hookgate transform build {}", source.display()),
                None => "hookgate transform build <its .mjs or .ts source>, and put the .wasm it writes in its place".into(),
            };
            Some(ConfigNotice {
                key,
                message: format!(
                    "{} was built by an older hookgate JavaScript SDK ({recorded}; this hookgate's is {JS_ADAPTER_REVISION}) and keeps that SDK's adapter, without the fixes since; until it is rebuilt, each of its calls gets a fresh instance. Rebuild it: {rebuild}",
                    component.display(),
                ),
            })
        })
        .collect()
}

/// The JavaScript or TypeScript source of `module` in `dir`: the module itself when it is one,
/// else the first `<stem>.<extension>` beside the component that is a file.
fn javascript_source(dir: &Path, module: &str) -> Option<PathBuf> {
    if javascript_component(module).is_some() {
        return Some(dir.join(module));
    }
    let stem = module.strip_suffix(".wasm")?;
    JAVASCRIPT_EXTENSIONS
        .iter()
        .map(|extension| dir.join(format!("{stem}.{extension}")))
        .find(|source| source.is_file())
}
