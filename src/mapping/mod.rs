//! Mapped hooks (docs/hooks.md): which mapping a request matches, and the action its templates, and
//! optionally its transform, make of the payload. Pure: no HTTP, no wasmtime.

mod action;
mod batch;
pub mod conditions;
mod form;
mod js_text;
mod merge;
pub mod template;

use serde_json::Value;

use crate::hook::policy::KeyOrigin;
use crate::hook::signature::SignatureRule;
use crate::hook::{AgentAction, Channel, DEFAULT_NAME, SessionMode, Thinking, WakeMode};
pub use action::{FinishedAction, MappedAction, Notification, TransformAction};
pub use batch::{BatchRule, batch_key};
pub use conditions::{Conditions, HeaderValues, Unmet};
pub use form::{FORM_SCHEME, FormRefusal, FormRule, origin};
pub use merge::{Overrides, non_blank};
pub use template::{RenderBudget, RenderLimit, TemplateContext, TooLarge};
use template::{render, render_optional};

/// Whether a mapping produces a wake, an agent run, or a notification: its message delivered
/// to a chat channel with no model call (docs/hooks.md#notify-only-hooks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActionKind {
    Wake,
    Agent,
    Notify,
}

crate::hook::wire::wire_names!(ActionKind {
    Wake => "wake",
    Agent => "agent",
    Notify => "notify",
});

/// A mapping ready to match and render.
#[derive(Debug, Clone)]
pub struct Mapping {
    pub id: String,
    pub(crate) match_path: Option<String>,
    pub(crate) match_source: Option<String>,
    /// `match.headers` and `match.payload`: all must hold for the mapping to apply.
    pub(crate) conditions: Conditions,
    pub kind: ActionKind,
    pub(crate) wake_mode: WakeMode,
    pub(crate) name: Option<String>,
    pub(crate) agent_id: Option<String>,
    pub(crate) session_key: Option<String>,
    pub(crate) message_template: Option<String>,
    pub(crate) text_template: Option<String>,
    pub(crate) deliver: Option<bool>,
    pub(crate) channel: Option<Channel>,
    pub(crate) to: Option<String>,
    pub(crate) model: Option<String>,
    pub(crate) thinking: Option<ThinkingField>,
    pub(crate) timeout_seconds: Option<u64>,
    pub allow_unsafe_external_content: bool,
    /// The transform module, relative to the transforms directory, and its config as JSON text.
    pub transform: Option<TransformSpec>,
    /// Runs from this mapping carry e-mail content (`Source: Email`).
    pub is_email: bool,
    /// When set, a valid provider signature is accepted in place of the hook token for requests
    /// whose name is this mapping's `match.path`.
    pub signature: Option<SignatureRule>,
    /// When set, a form posted from one of its origins is accepted in place of the hook token
    /// for requests whose name is this mapping's `match.path` (docs/hooks.md#website-forms).
    pub form: Option<FormRule>,
    /// `forEach`: the top-level payload key whose list elements each make one action.
    pub for_each: Option<String>,
    /// Whether the mapping's runs continue their session key's conversation.
    pub session_mode: SessionMode,
    /// `batch`: its requests gathered into one run per window (docs/hooks.md "Batches").
    pub batch: Option<BatchRule>,
    /// `callback.url`: where its runs' outcomes go, a template rendered from the payload.
    pub callback: Option<String>,
}

/// A mapping's `thinking`: a level written out, read at load, or a template whose rendering is
/// read once per request, right after rendering.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ThinkingField {
    Fixed(Thinking),
    Template(String),
}

impl ThinkingField {
    /// The level for one request; a rendering that names none is no level (the default).
    fn level(
        &self,
        ctx: &TemplateContext<'_>,
        budget: &mut RenderBudget,
    ) -> Result<Option<Thinking>, TooLarge> {
        Ok(match self {
            ThinkingField::Fixed(level) => Some(*level),
            ThinkingField::Template(template) => render_optional(Some(template), ctx, budget)?
                .and_then(|text| Thinking::parse(&text)),
        })
    }
}

/// The `transform` of a mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransformSpec {
    pub module: String,
    pub config: Option<String>,
    /// `transform.export`: the entry point to run, when the component has several.
    pub export: Option<String>,
}

/// The extensions (without the dot) of a JavaScript or TypeScript source that a mapping may name
/// and `hookgate transform build` builds, in the order the CLI lists them.
pub const JAVASCRIPT_EXTENSIONS: [&str; 5] = ["mjs", "js", "cjs", "ts", "mts"];

/// For a module name that is a JavaScript or TypeScript source (as an openclaw.json names a
/// transform; one of [`JAVASCRIPT_EXTENSIONS`]), the component built from it, which hookgate runs
/// instead: `<stem>.wasm` beside it.
pub fn javascript_component(module: &str) -> Option<String> {
    let (stem, extension) = module.rsplit_once('.')?;
    JAVASCRIPT_EXTENSIONS
        .contains(&extension)
        .then(|| format!("{stem}.wasm"))
}

impl Mapping {
    /// The name this mapping matches exactly, if it has a `match.path`.
    pub fn path(&self) -> Option<&str> {
        self.match_path.as_deref()
    }

    /// `match.path` equals the name and `match.source` equals the payload's string `source`
    /// field, each only when given; a mapping with neither matches every name. Its conditions
    /// are not looked at: [`find`] checks them of the mappings this admits.
    pub fn matches(&self, name: &str, payload: &Value) -> bool {
        let path_ok = self.match_path.as_deref().is_none_or(|p| p == name);
        let source_ok = self
            .match_source
            .as_deref()
            .is_none_or(|s| payload.get("source").and_then(Value::as_str) == Some(s));
        path_ok && source_ok
    }

    /// The name every run of this mapping has unless its transform sets another: its `name`
    /// as written, trimmed, when it holds no `{{` (`Hook` when it is absent or blank); `None`
    /// when it is a template, whose runs' names come from the request. Only a fixed name is the
    /// operator's text, which a prompt may show outside the untrusted-content envelope.
    pub fn fixed_name(&self) -> Option<&str> {
        match self.name.as_deref().map(str::trim) {
            None | Some("") => Some(DEFAULT_NAME),
            Some(name) => (!name.contains("{{")).then_some(name),
        }
    }

    /// The mapping's `sessionKey` as written, template expressions and all.
    pub fn session_key_template(&self) -> Option<&str> {
        self.session_key.as_deref()
    }

    /// Whether the mapping's `sessionKey` holds a template expression: then the payload chooses
    /// the key, which makes it external input (docs/hooks.md). `{{}}` is no expression, as in the
    /// OpenClaw gateway.
    pub fn session_key_is_templated(&self) -> bool {
        self.session_key
            .as_deref()
            .is_some_and(has_template_expression)
    }

    /// Whether this mapping can never be reached because an earlier one matches every request it
    /// would (the first match is final). An earlier mapping with conditions lets through what
    /// they do not hold for, so it shadows nothing.
    pub fn is_shadowed_by(&self, earlier: &Mapping) -> bool {
        let path = earlier.match_path.is_none() || earlier.match_path == self.match_path;
        let source = earlier.match_source.is_none() || earlier.match_source == self.match_source;
        path && source && earlier.conditions.is_empty()
    }

    /// Every field of the mapping rendered against one payload of a request, taken from
    /// `budget`, its request's (shared by every payload of a `forEach` list); refused when they
    /// would render past what is left of it, before the bytes past it are allocated.
    pub fn render(
        &self,
        ctx: &TemplateContext<'_>,
        budget: &mut RenderBudget,
    ) -> Result<MappedAction, TooLarge> {
        let key_origin = if self.session_key_is_templated() {
            KeyOrigin::MappingTemplated
        } else {
            KeyOrigin::MappingStatic
        };
        let mut rendered = |template: &Option<String>| match template.as_deref() {
            Some(template) => render(template, ctx, budget),
            None => Ok(String::new()),
        };
        let message = rendered(&self.message_template)?;
        let text = rendered(&self.text_template)?;
        let name = render_optional(self.name.as_deref(), ctx, budget)?;
        let agent = AgentAction {
            message,
            name: name.unwrap_or_else(|| DEFAULT_NAME.into()),
            agent_id: self.agent_id.clone(),
            session_key: render_optional(self.session_key.as_deref(), ctx, budget)?,
            wake_mode: self.wake_mode,
            deliver: self.deliver.unwrap_or(true),
            channel: self.channel,
            to: render_optional(self.to.as_deref(), ctx, budget)?,
            model: render_optional(self.model.as_deref(), ctx, budget)?,
            thinking: match &self.thinking {
                Some(thinking) => thinking.level(ctx, budget)?,
                None => None,
            },
            timeout_seconds: self.timeout_seconds,
            session_mode: self.session_mode,
        };
        Ok(MappedAction {
            kind: self.kind,
            key_origin,
            text,
            agent,
            allow_unsafe_external_content: self.allow_unsafe_external_content,
            channel_refused: false,
            callback: render_optional(self.callback.as_deref(), ctx, budget)?,
        })
    }
}

/// The most elements of a `forEach` list one request turns into actions; the rest are dropped
/// (and the drop logged), as the OpenClaw gateway does.
pub const MAX_FAN_OUT: usize = 200;

/// The payloads a `forEach` mapping renders, one per element of `payload[key]`: the payload with
/// that list replaced by a list of the one element, so that templates written for a single
/// element (`{{messages[0].id}}`) see each in turn. No list (or not an object) makes none.
#[derive(Debug, Clone, PartialEq)]
pub struct FanOut {
    pub payloads: Vec<Value>,
    /// Elements past [`MAX_FAN_OUT`].
    pub dropped: usize,
}

impl FanOut {
    pub fn of(payload: &Value, key: &str) -> FanOut {
        let Some(Value::Array(items)) = payload.get(key) else {
            return FanOut {
                payloads: Vec::new(),
                dropped: 0,
            };
        };
        let payloads = items
            .iter()
            .take(MAX_FAN_OUT)
            .map(|item| {
                let mut one = payload.clone();
                one[key] = Value::Array(vec![item.clone()]);
                one
            })
            .collect();
        FanOut {
            payloads,
            dropped: items.len().saturating_sub(MAX_FAN_OUT),
        }
    }
}

/// `{{ expr }}` with something in it other than `}`.
fn has_template_expression(text: &str) -> bool {
    let mut rest = text;
    while let Some(open) = rest.find("{{") {
        let after = &rest[open + 2..];
        match after.find("}}") {
            Some(close) if close > 0 && !after[..close].contains('}') => return true,
            Some(_) => rest = after,
            None => return false,
        }
    }
    false
}

/// The mappings whose templated `sessionKey` can be reached: these need
/// `hooks.allowedSessionKeyPrefixes` (checked at start).
pub fn reachable_templated_session_keys(mappings: &[Mapping]) -> impl Iterator<Item = &Mapping> {
    mappings.iter().enumerate().filter_map(|(i, mapping)| {
        let reachable = !mappings[..i]
            .iter()
            .any(|earlier| mapping.is_shadowed_by(earlier));
        (reachable && mapping.session_key_is_templated()).then_some(mapping)
    })
}

/// The signature rule for requests named `name`: that of the first mapping whose `match.path` is
/// `name` and that has one.
pub fn signature_for<'a>(
    mappings: &'a [Mapping],
    name: &str,
) -> Option<(&'a Mapping, &'a SignatureRule)> {
    mappings
        .iter()
        .filter(|m| m.path() == Some(name))
        .find_map(|m| m.signature.as_ref().map(|rule| (m, rule)))
}

/// The form rule for requests named `name`: that of the first mapping whose `match.path` is
/// `name` and that has one.
pub fn form_for<'a>(mappings: &'a [Mapping], name: &str) -> Option<(&'a Mapping, &'a FormRule)> {
    mappings
        .iter()
        .filter(|m| m.path() == Some(name))
        .find_map(|m| m.form.as_ref().map(|rule| (m, rule)))
}

/// Which mapping, if any, serves a request.
#[derive(Debug)]
pub enum Selection<'a> {
    /// The first mapping whose path and source match and whose conditions all hold.
    Matched(&'a Mapping),
    /// Mappings whose path and source match, none of whose conditions all held: each, in
    /// order, with the first condition it found unmet. The request is filtered.
    Filtered(Vec<(&'a Mapping, Unmet<'a>)>),
    /// No mapping's path and source match.
    Unmatched,
}

/// The first mapping, in order, whose path and source match the request and whose conditions
/// hold; the first match is final. Reads, per mapping, the payload's `source` when it has a
/// `match.source`, then [`Conditions::check`]s of those that match (which allocate nothing).
/// Allocates only when a mapping's conditions fail: the list of those tried, growing as a
/// `Vec` does, to name what each found unmet should none apply.
pub fn find<'a>(
    mappings: &'a [Mapping],
    name: &str,
    headers: &impl HeaderValues,
    payload: &Value,
) -> Selection<'a> {
    let mut considered = Vec::new();
    for mapping in mappings.iter().filter(|m| m.matches(name, payload)) {
        match mapping.conditions.check(headers, payload) {
            Ok(()) => return Selection::Matched(mapping),
            Err(unmet) => considered.push((mapping, unmet)),
        }
    }
    if considered.is_empty() {
        Selection::Unmatched
    } else {
        Selection::Filtered(considered)
    }
}

/// The built-in mappings of the named presets (only `gmail` exists).
pub fn preset(name: &str) -> Option<Mapping> {
    (name == "gmail").then(|| Mapping {
        id: "gmail".into(),
        match_path: Some("gmail".into()),
        match_source: None,
        conditions: Conditions::default(),
        kind: ActionKind::Agent,
        wake_mode: WakeMode::Now,
        name: Some("Gmail".into()),
        agent_id: None,
        session_key: Some("hook:gmail:{{messages[0].id}}".into()),
        for_each: Some("messages".into()),
        session_mode: SessionMode::Isolated,
        message_template: Some(
            "New email from {{messages[0].from}}\nSubject: {{messages[0].subject}}\n{{messages[0].snippet}}\n{{messages[0].body}}".into(),
        ),
        text_template: None,
        deliver: None,
        channel: None,
        to: None,
        model: None,
        thinking: None,
        timeout_seconds: None,
        allow_unsafe_external_content: false,
        transform: None,
        is_email: true,
        signature: None,
        form: None,
        batch: None,
        callback: None,
    })
}

#[cfg(test)]
mod tests {
    use super::javascript_component;

    #[test]
    fn a_javascript_source_runs_the_component_beside_it() {
        for known in ["h.mjs", "h.js", "h.cjs", "h.ts", "h.mts"] {
            assert_eq!(javascript_component(known).as_deref(), Some("h.wasm"));
        }
        assert_eq!(
            javascript_component("dir.v2/h.mjs").as_deref(),
            Some("dir.v2/h.wasm")
        );
        for other in ["h.wasm", "h.cts", "h", "dir.mjs/h", "h.MJS"] {
            assert_eq!(javascript_component(other), None, "{other}");
        }
    }
}
