//! A finished turn's tokens in the metrics: `hookgate_model_tokens_total{agent, mapping, model,
//! direction}`, counted once per turn a model answered, by the node that ran it (a run started
//! again after a crash used its tokens again, and is counted again).

use super::provider::Usage;
use crate::config::Settings;
use crate::gateway::store::records::{NewRun, RunOutcome};
use crate::metrics::{Metrics, TokenLabels};

/// The `model` label of a model id the configuration does not name.
const OTHER_MODEL: &str = "other";

/// Adds the tokens of `run`'s turn, as `outcome` reports them, to `metrics`; nothing when no
/// model answered or its provider reported no usage.
pub fn count_tokens(metrics: &Metrics, settings: &Settings, run: &NewRun, outcome: &RunOutcome) {
    let (Some(usage), Some(model)) = (outcome.usage, outcome.model.as_deref()) else {
        return;
    };
    let Usage {
        input_tokens,
        output_tokens,
    } = usage;
    let mut labels = TokenLabels {
        agent: run.admitted.target_agent.clone(),
        mapping: run.admitted.mapping_id.clone().unwrap_or_default(),
        model: model_label(settings, run, model).to_string(),
        direction: "input",
    };
    metrics
        .model_tokens
        .get_or_create(&labels)
        .inc_by(input_tokens);
    labels.direction = "output";
    metrics
        .model_tokens
        .get_or_create(&labels)
        .inc_by(output_tokens);
}

/// `model` when the configuration names it (in the run's agent's model chain, or in
/// `agents.defaults.models`), else [`OTHER_MODEL`]: a request may name any model when no
/// allowlist is set, and a label must not take whatever a client sends.
fn model_label<'a>(settings: &Settings, run: &NewRun, model: &'a str) -> &'a str {
    let agent = settings.runtime.agent(&run.admitted.target_agent);
    let in_chain = agent
        .model
        .iter()
        .any(|chain| chain.primary == model || chain.fallbacks.iter().any(|m| m == model));
    let listed = settings
        .hooks
        .as_ref()
        .is_some_and(|hooks| hooks.policy.models.lists(model));
    if in_chain || listed {
        model
    } else {
        OTHER_MODEL
    }
}
