//! One call of a transform: a fresh store, the limits set, instantiate, call, drop (or, for a
//! mapping with `transform.reuse` above 1, which JavaScript modules have by default, a call on
//! an instance kept from its earlier calls); and what the answer means for the request.

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use wasmtime::{Store, Trap, UpdateDeadline};

use super::bindings::types;
use super::call_slots::SlotShare;
use super::contract::Contract;
use super::engine::TransformEngine;
use super::guest_clock::{Budgeted, GuestClock};
use super::guest_text::{MAX_ERROR_BYTES, guest_text};
use super::host::{CallOutput, HostState};
use super::limits::TransformLimits;
use super::pipe::PipeOverflow;
use super::registry::LoadedTransform;
use super::request::TransformInput;
use super::warm::{IdleCount, IdleInstance, WarmInstance, WarmLimits};
use crate::hook::{Channel, Named, SessionMode, Thinking, WakeMode};
use crate::mapping::{ActionKind, Overrides, TransformAction, non_blank};

/// What a transform decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallOutcome {
    Run(TransformAction),
    /// Fields to change in the mapping's action (contract 0.2).
    Merge(Box<Overrides>),
    Keep,
    Skip,
    Respond(Reply),
}

/// A transform's own response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub status: u16,
    pub content_type: String,
    pub body: Vec<u8>,
}

/// A call's future, of either kind.
type CallFuture<'a> = Pin<Box<dyn Future<Output = Result<Returned, TransformFailure>> + Send + 'a>>;

/// Why a call failed. Each is the transform's failure alone: the request gets a 500.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransformFailure {
    /// The call ran past its limit: its own running time, its waits for a call slot and for a
    /// turn on a worker thread not counted (`guest_clock`).
    #[error("running-time limit of {0:?} exceeded")]
    Timeout(Duration),
    #[error("no call slot free within {0:?}")]
    Busy(Duration),
    #[error("memory limit of {0} bytes exceeded")]
    Memory(usize),
    #[error("output limit exceeded: {0}")]
    Output(String),
    #[error("trap: {0}")]
    Trap(String),
    #[error("transform returned an error: {0}")]
    Error(String),
    #[error("invalid outcome: {0}")]
    Invalid(String),
}

impl TransformFailure {
    /// Every label [`Self::cause`] gives: `hookgate_transform_failures_total` shows each at 0
    /// from the start for every mapping with a transform.
    pub const CAUSES: [&str; 7] = [
        "timeout", "busy", "memory", "output", "trap", "error", "invalid",
    ];

    /// A short label for logs and metrics.
    pub fn cause(&self) -> &'static str {
        match self {
            TransformFailure::Timeout(_) => "timeout",
            TransformFailure::Busy(_) => "busy",
            TransformFailure::Memory(_) => "memory",
            TransformFailure::Output(_) => "output",
            TransformFailure::Trap(_) => "trap",
            TransformFailure::Error(_) => "error",
            TransformFailure::Invalid(_) => "invalid",
        }
    }

    /// What went wrong, for the request log: the guest's own words when it returned an error
    /// (escaped and bounded already), else this failure described, bounded and escaped alike.
    pub fn text(&self) -> String {
        match self {
            TransformFailure::Error(message) => message.clone(),
            other => guest_text(&other.to_string(), MAX_ERROR_BYTES),
        }
    }
}

impl TransformEngine {
    /// Calls `transform` on `input` within `limits`, after waiting for a slot of the fair share
    /// `share` names (`call_slots`: its mapping's, or the dry runs') for at most [`slot_wait`]. The call is charged for its time
    /// less its waits for a turn (`guest_clock`); the guest yields to other tasks every epoch
    /// tick and is interrupted at the first tick past `limits.timeout`. A call past its limit
    /// while blocked in a host call is stopped too: its future, and with it the store, the
    /// instance and the host call, is dropped, so nothing of a stopped call lives on but what
    /// it wrote to stdout and stderr, which goes to the log as its store is dropped.
    pub async fn call(
        &self,
        transform: &LoadedTransform,
        input: TransformInput,
        limits: &TransformLimits,
        share: SlotShare,
    ) -> Result<CallOutcome, TransformFailure> {
        self.call_as_returned(transform, input, limits, share)
            .await
            .map(Returned::into_outcome)
    }

    /// [`call`](Self::call), with the outcome as the transform returned it (checked, not yet
    /// read into the action model), for `hookgate transform run` to print.
    pub async fn call_as_returned(
        &self,
        transform: &LoadedTransform,
        mut input: TransformInput,
        limits: &TransformLimits,
        share: SlotShare,
    ) -> Result<Returned, TransformFailure> {
        if input.export_name.is_some() && transform.pre.contract() == Contract::V0_1 {
            // A 0.1 component has one entry point and would silently run it.
            return Err(TransformFailure::Invalid(
                "transform.export needs a component built against hookgate:transform@0.2; this one is 0.1".into(),
            ));
        }
        // Only a call that finds no free slot sets a timer for its wait.
        let _slot = match self.slots.claim(share, &input.mapping_id) {
            Ok(slot) => slot,
            Err(queued) => {
                let wait = slot_wait(limits.timeout);
                // Boxed: a timer is large, and the future of a call that finds a slot free
                // need not carry room for one.
                let Ok(slot) = Box::pin(tokio::time::timeout(wait, queued.wait())).await else {
                    return Err(TransformFailure::Busy(wait));
                };
                slot
            }
        };
        let clock = GuestClock::new();
        // The call's future is boxed where it is made, and only its box moves: the outer future
        // stays small for whatever awaits it, and a kept instance's call, which makes no
        // instance, does not carry room for making one.
        let call: CallFuture<'_> = if limits.reuse > 1 && !transform.builder.is_outdated() {
            Box::pin(self.call_reused(transform, &mut input, limits, &clock))
        } else {
            // An older SDK's adapter may leave something of one call for the next (it read
            // fields a result inherits, from a prototype an earlier call polluted): no reuse.
            Box::pin(self.call_in_fresh_store(transform, &mut input, limits, &clock))
        };
        let call = Budgeted::new(Arc::clone(&clock), limits.timeout, call);
        let result = match call.await {
            Err(_) => Err(TransformFailure::Timeout(limits.timeout)),
            Ok(result) => result,
        };
        transform.stats.record(&result);
        result
    }

    async fn call_in_fresh_store(
        &self,
        transform: &LoadedTransform,
        input: &mut TransformInput,
        limits: &TransformLimits,
        clock: &Arc<GuestClock>,
    ) -> Result<Returned, TransformFailure> {
        let memory_cap = limits.memory_bytes.min(self.memory_bytes);
        let charge = (Arc::clone(clock), limits.timeout);
        let state = HostState::new(&input.mapping_id, memory_cap, limits.log_bytes, charge);
        let mut store = self.store(state);
        let result = match transform.pre.instantiate_async(&mut store).await {
            Ok(instance) => instance.call_transform(&mut store, input).await,
            Err(err) => Err(err),
        };
        let output = store.data_mut().flush_output();
        answer(&store, result, &output, limits, memory_cap)
    }

    /// A call on an idle instance of this mapping, or on a new one that is kept afterwards.
    /// Only an instance whose call succeeded goes back (docs/transforms.md#limits): one whose
    /// call failed in any way (an error of its own, such as a JavaScript throw the adapter
    /// caught, an invalid outcome, a trap, a breached limit, a timeout that dropped its future
    /// mid-call) is gone with whatever that call left in it, and so is one that served
    /// `limits.reuse` calls or whose output pipes are nearly full.
    async fn call_reused(
        &self,
        transform: &LoadedTransform,
        input: &mut TransformInput,
        limits: &TransformLimits,
        clock: &Arc<GuestClock>,
    ) -> Result<Returned, TransformFailure> {
        let memory_cap = limits.memory_bytes.min(self.memory_bytes);
        // A call never gets an instance made for other limits.
        let made_for = WarmLimits {
            memory_cap,
            log_bytes: limits.log_bytes,
        };
        let mut warm = match self.take_warm(transform, &input.mapping_id, made_for) {
            Some(warm) => warm,
            None => {
                let charge = (Arc::clone(clock), limits.timeout);
                let state =
                    HostState::for_reuse(&input.mapping_id, memory_cap, limits.log_bytes, charge);
                let mut store = self.store(state);
                // Boxed: the future that makes an instance is twice the size of the one that
                // calls it, and only the first of an instance's calls needs it.
                let instance = match Box::pin(transform.pre.instantiate_async(&mut store)).await {
                    Ok(instance) => instance,
                    Err(err) => {
                        // What a start function wrote before it failed explains the failure.
                        let output = store.data_mut().flush_output();
                        return Err(classify(&store, &err, &output, limits, memory_cap));
                    }
                };
                WarmInstance {
                    store,
                    instance,
                    calls: 0,
                    made_for,
                }
            }
        };
        warm.store.data_mut().begin_call(limits.log_bytes);
        warm.store
            .data_mut()
            .charge_to(Arc::clone(clock), limits.timeout);
        warm.store.set_epoch_deadline(1);
        let result = warm.instance.call_transform(&mut warm.store, input).await;
        let output = warm.store.data_mut().flush_output();
        warm.calls += 1;
        // A reused store's pipes hold several calls' output, so a call that wrote more than its
        // own budget was not stopped by a full pipe: it fails here instead.
        let answer = if result.is_ok() && output.reached(limits.log_bytes) {
            Err(TransformFailure::Output(format!(
                "stdout/stderr over {} bytes",
                limits.log_bytes
            )))
        } else {
            answer(&warm.store, result, &output, limits, memory_cap)
        };
        let state = warm.store.data();
        // A failed call may have left its state half-changed (a JavaScript global set before a
        // throw), which its instance would hand to the next sender. A guest may also survive a
        // refused memory growth (a caught out-of-memory error) and succeed: its instance is not
        // reused all the same.
        let reusable = answer.is_ok()
            && !state.memory.exceeded
            && warm.calls < limits.reuse
            && output.room_for_another_call(limits.log_bytes);
        if reusable {
            warm.store.data_mut().end_call(&output);
            self.put_warm(transform, warm);
        }
        answer
    }

    /// A store for `state` with the memory limiter set and, at every epoch tick, either an
    /// interrupt (the call has run for its time limit) or a yield to the executor, so a
    /// spinning guest shares its thread.
    fn store(&self, state: HostState) -> Store<HostState> {
        let mut store = Store::new(&self.engine, state);
        store.limiter(|state| &mut state.memory);
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(|store| {
            let state = store.data();
            Ok(if state.out_of_time() {
                UpdateDeadline::Interrupt
            } else {
                state.clock.yielding();
                UpdateDeadline::Yield(1)
            })
        });
        store
    }

    /// An idle instance of `mapping` made for `made_for`, the one that went idle last.
    fn take_warm(
        &self,
        transform: &LoadedTransform,
        mapping: &str,
        made_for: WarmLimits,
    ) -> Option<WarmInstance> {
        let mut warm = lock(&transform.warm);
        let idle = warm.get_mut(mapping)?;
        let at = idle
            .iter()
            .rposition(|idle| idle.instance.made_for == made_for)?;
        // `remove`, not `swap_remove`: the others keep the order they went idle in.
        Some(idle.remove(at).instance)
    }

    /// Keeps `warm` for the mapping's next call, unless idle instances already hold their share
    /// of the pool (then it is dropped, and the next call instantiates).
    fn put_warm(&self, transform: &LoadedTransform, warm: WarmInstance) {
        let Some(count) = IdleCount::claim(&self.idle, self.max_idle) else {
            return;
        };
        let idle = IdleInstance {
            instance: warm,
            _count: count,
        };
        let mut warm = lock(&transform.warm);
        // The mapping's name is copied once, for its first idle instance.
        if let Some(same_mapping) = warm.get_mut(idle.instance.store.data().mapping_id()) {
            same_mapping.push(idle);
        } else {
            let mapping = idle.instance.store.data().mapping_id().to_owned();
            warm.insert(mapping, vec![idle]);
        }
    }
}

/// How long a call may wait for a call slot: ten times its time limit, and at least a second.
/// Past that the transforms are overloaded, and the client is told to retry (503).
pub(super) fn slot_wait(limit: Duration) -> Duration {
    limit.saturating_mul(10).max(Duration::from_secs(1))
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// What a finished call means: its outcome, or why it failed.
fn answer(
    store: &Store<HostState>,
    result: wasmtime::Result<Result<types::Outcome, String>>,
    output: &CallOutput,
    limits: &TransformLimits,
    memory_cap: usize,
) -> Result<Returned, TransformFailure> {
    match result {
        Err(err) => Err(classify(store, &err, output, limits, memory_cap)),
        // A guest refused memory at the cap may say so in its own words (QuickJS's allocator
        // failing becomes an "out of memory" error): the cap is still why the call failed.
        Ok(Err(_)) if store.data().memory.exceeded => Err(TransformFailure::Memory(memory_cap)),
        // The guest's own words: escaped and bounded before they reach a log line.
        Ok(Err(message)) => Err(TransformFailure::Error(guest_text(
            &message,
            MAX_ERROR_BYTES,
        ))),
        Ok(Ok(outcome)) => check(outcome, limits.output_bytes),
    }
}

/// Why a call failed; `output` is what [`HostState::flush_output`] read of its pipes, which are
/// not read again.
fn classify(
    store: &Store<HostState>,
    err: &wasmtime::Error,
    output: &CallOutput,
    limits: &TransformLimits,
    memory_cap: usize,
) -> TransformFailure {
    if store.data().memory.exceeded {
        return TransformFailure::Memory(memory_cap);
    }
    // A full pipe closes the stream (the guest then usually panics); one oversized write is refused
    // with a `PipeOverflow` trap.
    let oversized_write = err.downcast_ref::<PipeOverflow>().is_some();
    if oversized_write || output.reached(limits.log_bytes) {
        return TransformFailure::Output(format!("stdout/stderr over {} bytes", limits.log_bytes));
    }
    if let Some(trap) = err.downcast_ref::<Trap>() {
        return match trap {
            // The epoch callback interrupts a call that has run for its time limit.
            Trap::Interrupt => TransformFailure::Timeout(limits.timeout),
            Trap::StackOverflow => TransformFailure::Trap("stack overflow".into()),
            other => TransformFailure::Trap(other.to_string()),
        };
    }
    TransformFailure::Trap(format!("{err:#}"))
}

/// A transform's outcome as it returned it, checked against what a call allows (its size, a
/// reply's status) but not yet read into the action model.
#[derive(Debug)]
pub struct Returned(pub(super) types::Outcome);

/// `outcome`, if within `output_bytes` and, for a reply, with a status of 200-599.
fn check(outcome: types::Outcome, output_bytes: usize) -> Result<Returned, TransformFailure> {
    let size = outcome_size(&outcome);
    if size > output_bytes {
        return Err(TransformFailure::Output(format!(
            "outcome of {size} bytes over the {output_bytes}-byte limit"
        )));
    }
    if let types::Outcome::Respond(reply) = &outcome
        && !(200..=599).contains(&reply.status)
    {
        return Err(TransformFailure::Invalid(format!(
            "reply status {} is outside 200-599",
            reply.status
        )));
    }
    Ok(Returned(outcome))
}

impl Returned {
    /// The outcome read into the action model: names parsed, optional texts trimmed and blank
    /// ones unset.
    pub fn into_outcome(self) -> CallOutcome {
        match self.0 {
            types::Outcome::Keep => CallOutcome::Keep,
            types::Outcome::Skip => CallOutcome::Skip,
            types::Outcome::Respond(reply) => CallOutcome::Respond(Reply {
                status: reply.status,
                content_type: content_type_of(&reply).into_owned(),
                body: reply.body,
            }),
            types::Outcome::Run(action) => CallOutcome::Run(action_of(action)),
            types::Outcome::Merge(o) => CallOutcome::Merge(Box::new(overrides_of(o))),
        }
    }
}

fn action_of(action: types::Action) -> TransformAction {
    match action {
        types::Action::Wake(wake) => TransformAction::Wake {
            text: wake.text,
            mode: wake.mode.map(wake_mode),
        },
        types::Action::Agent(agent) => TransformAction::Agent(Box::new(Overrides {
            kind: Some(ActionKind::Agent),
            message: Some(agent.message),
            name: non_blank(agent.name),
            agent_id: non_blank(agent.agent_id),
            session_key: non_blank(agent.session_key),
            wake_mode: agent.wake_mode.map(wake_mode),
            deliver: agent.deliver,
            channel: non_blank(agent.channel).map(|c| Named::read(c, Channel::parse)),
            to: non_blank(agent.to),
            model: non_blank(agent.model),
            thinking: non_blank(agent.thinking).map(|t| Named::read(t, Thinking::parse)),
            timeout_seconds: agent.timeout_seconds.map(u64::from),
            ..Overrides::default()
        })),
    }
}

fn overrides_of(o: types::Overrides) -> Overrides {
    Overrides {
        kind: o.kind.map(|kind| match kind {
            types::ActionKind::Wake => ActionKind::Wake,
            types::ActionKind::Agent => ActionKind::Agent,
        }),
        text: o.text,
        mode: o.mode.map(wake_mode),
        message: o.message,
        wake_mode: o.wake_mode.map(wake_mode),
        name: o.name,
        agent_id: o.agent_id,
        session_key: o.session_key,
        session_key_fixed: o.session_key_source == Some(types::KeySource::Fixed),
        session_mode: o.session_mode.map(|m| Named::read(m, SessionMode::parse)),
        deliver: o.deliver,
        allow_unsafe_external_content: o.allow_unsafe_external_content,
        channel: o.channel.map(|c| Named::read(c, Channel::parse)),
        to: o.to,
        model: o.model,
        thinking: o.thinking.map(|t| Named::read(t, Thinking::parse)),
        timeout_seconds: o.timeout_seconds.map(u64::from),
    }
}

pub(super) fn wake_mode(mode: types::WakeMode) -> WakeMode {
    match mode {
        types::WakeMode::Now => WakeMode::Now,
        types::WakeMode::NextHeartbeat => WakeMode::NextHeartbeat,
    }
}

/// The reply's content type, or by its body: JSON if it parses as JSON, else plain text.
pub(super) fn content_type_of(reply: &types::Reply) -> Cow<'_, str> {
    match &reply.content_type {
        Some(given) => Cow::Borrowed(given),
        None if serde_json::from_slice::<serde::de::IgnoredAny>(&reply.body).is_ok() => {
            Cow::Borrowed("application/json")
        }
        None => Cow::Borrowed("text/plain; charset=utf-8"),
    }
}

/// The bytes an outcome carries; strings and bodies, summed.
fn outcome_size(outcome: &types::Outcome) -> usize {
    let opt = |s: &Option<String>| s.as_ref().map_or(0, String::len);
    match outcome {
        types::Outcome::Keep | types::Outcome::Skip => 0,
        types::Outcome::Respond(reply) => reply.body.len() + opt(&reply.content_type),
        types::Outcome::Run(types::Action::Wake(wake)) => wake.text.len(),
        types::Outcome::Run(types::Action::Agent(a)) => {
            a.message.len()
                + [
                    &a.name,
                    &a.agent_id,
                    &a.session_key,
                    &a.channel,
                    &a.to,
                    &a.model,
                    &a.thinking,
                ]
                .into_iter()
                .map(opt)
                .sum::<usize>()
        }
        types::Outcome::Merge(o) => [
            &o.text,
            &o.message,
            &o.name,
            &o.agent_id,
            &o.session_key,
            &o.session_mode,
            &o.channel,
            &o.to,
            &o.model,
            &o.thinking,
        ]
        .into_iter()
        .map(opt)
        .sum::<usize>(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reply_status_outside_range_is_refused() {
        let reply = |status| {
            types::Outcome::Respond(types::Reply {
                status,
                content_type: None,
                body: vec![],
            })
        };
        assert!(check(reply(199), 10).is_err());
        assert!(check(reply(600), 10).is_err());
        assert!(check(reply(200), 10).is_ok());
    }

    #[test]
    fn reply_content_type_defaults_by_body() {
        let reply = |body: &[u8]| types::Reply {
            status: 200,
            content_type: None,
            body: body.to_vec(),
        };
        assert_eq!(content_type_of(&reply(b"{\"a\":1}")), "application/json");
        assert_eq!(content_type_of(&reply(b"ok")), "text/plain; charset=utf-8");
    }

    #[test]
    fn oversized_outcome_is_an_output_failure() {
        let outcome = types::Outcome::Run(types::Action::Wake(types::Wake {
            text: "x".repeat(11),
            mode: None,
        }));
        assert_eq!(check(outcome, 10).unwrap_err().cause(), "output");
    }
}
