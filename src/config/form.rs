//! A mapping's `form` (docs/hooks.md#website-forms) as the file states it, checked and built
//! into the [`FormRule`] the hook endpoint admits browsers' forms by.

use super::ConfigError;
use super::model::{FormConfig, MappingConfig};
use super::schema::key_of;
use crate::mapping::{FormRule, Mapping, origin};

/// Mapping `i`'s `form`: on a mapping of its own hook name, without a `signature` (one way in
/// besides the token), with at least one origin, each an origin. `None` when refused (the
/// problems said, naming keys, never a value).
pub(super) fn form_rule(
    i: usize,
    mapping: &Mapping,
    config: &MappingConfig,
    form: &FormConfig,
    problems: &mut Vec<ConfigError>,
) -> Option<FormRule> {
    let key = key_of::<MappingConfig>(Some(i), "form");
    let refused = match mapping.path() {
        None => Some("needs the mapping's match.path"),
        Some("wake" | "agent") => Some("cannot be used on the built-in wake and agent hooks"),
        Some(_) if config.signature.is_some() => {
            Some("cannot be used with signature: a mapping has one way in besides the token")
        }
        Some(_) if form.origins.is_empty() => Some("origins needs at least one origin"),
        Some(_) => None,
    };
    if let Some(message) = refused {
        problems.push(ConfigError::invalid(&key, message));
        return None;
    }
    let mut origins = Vec::with_capacity(form.origins.len());
    for (j, text) in form.origins.iter().enumerate() {
        match origin(text) {
            Some(origin) => origins.push(origin),
            None => problems.push(ConfigError::invalid(
                format!("{key}.origins[{j}]"),
                "must be an origin: http(s)://host or http(s)://host:port, with no path",
            )),
        }
    }
    (origins.len() == form.origins.len()).then_some(FormRule { origins })
}
