//! The transforms a configuration names, loaded with it: a configuration is admitted only when
//! every one of them loads, each failure named by the key of the mapping that names the module.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{ConfigError, HookSettings, Settings};
use crate::transform::{Contract, LoadError, TransformRegistry, TransformSet};

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
                    .map_or("hooks.mappings", |(_, key)| key.as_str());
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
                    format!("hooks.mappings[{i}].transform.export"),
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
