//! Admission: what an accepted hook request becomes, and committing it. An agent action goes
//! through every policy (agent, session key, model), gets its idempotency key and claim and its
//! safety envelope, and is queued as a run; a wake becomes its main-session event. The HTTP layer
//! extracts a request's actions and key candidates, calls [`admit`] once, and answers from the
//! [`Committed`] it returns; only [`admit`] stores, through [`Runtime`].

use uuid::Uuid;

use crate::config::HookSettings;
use crate::gateway::admission::batches::{BatchItem, Joined};
use crate::gateway::admission::budget::HeldBy;
use crate::gateway::admission::lanes::LaneError;
use crate::gateway::requests::RequestOutcome;
use crate::gateway::runtime_clock::{now_ms, now_rfc3339};
use crate::gateway::store::edge_marks;
use crate::gateway::{
    BatchOpening, EventKind, EventOutcome, IdempotencyClaim, NewEvent, NewNotice, NewRun,
    RunQueued, Runtime, StoreError,
};
use crate::hook::envelope::{ContentSource, wrap_prompt};
use crate::hook::policy::KeyOrigin;
use crate::hook::{
    AdmittedRun, AgentAction, DEFAULT_NAME, LimitReached, Rejected, WakeMode, WakeRequest,
    idempotency,
};
use crate::mapping::{BatchRule, FinishedAction, Mapping, Notification};

/// Where a request came in: what its actions' idempotency and events are made of.
pub struct Intake<'a> {
    /// The idempotency key candidates in order of precedence: the headers, the body's
    /// `idempotencyKey`, a signed delivery's id. The first usable one is the request's key.
    pub keys: [Option<&'a str>; 5],
    /// The request path, part of a run's fingerprint.
    pub path: &'a str,
    /// The source of a wake's event, e.g. `hook:wake`.
    pub event_source: String,
    /// The request's id (its answer's `X-Request-Id`), which its runs' callbacks carry.
    pub request_id: Option<&'a str>,
}

/// What a request asks for: its actions, in order.
pub enum Actions<'a> {
    /// `POST {prefix}/wake`.
    Wake(WakeRequest),
    /// `POST {prefix}/agent`.
    Agent(AgentAction),
    /// A mapping's actions: one, or one per element of a `forEach` list (at least one).
    Mapped {
        mapping: &'a Mapping,
        actions: Vec<FinishedAction>,
    },
}

/// A run admission queued: its id (the earlier run's when it repeats one) and whether it did;
/// for a batch mapping's request, the batch's run and the request's position in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedRun {
    pub run_id: String,
    pub repeated: bool,
    /// The request's position in its batch, from 1; `None` when it is a run of its own.
    pub batched: Option<u32>,
    /// A budget that holds was spent: the run is stored `held`.
    pub held: bool,
}

/// What admission committed, in the order of the request's actions.
#[derive(Debug, Default)]
pub struct Committed {
    pub runs: Vec<QueuedRun>,
    /// The mode of the last wake, and `queued` when any wake's event was, else `coalesced`;
    /// `None` without wakes.
    pub wake: Option<(WakeMode, EventOutcome)>,
}

impl QueuedRun {
    /// A run stored, or found a repeat, on its own: in no batch, held by no budget.
    fn of(queued: RunQueued) -> QueuedRun {
        let (run_id, repeated) = match queued {
            RunQueued::New { run_id } => (run_id, false),
            RunQueued::Replayed { run_id } => (run_id, true),
        };
        QueuedRun {
            run_id,
            repeated,
            batched: None,
            held: false,
        }
    }
}

impl Committed {
    /// Whether the request repeated earlier work: a repeat only when all of it was (every run,
    /// and no wake), since a batch with one new run made work of its own.
    pub fn repeated(&self) -> bool {
        self.wake.is_none() && !self.runs.is_empty() && self.runs.iter().all(|run| run.repeated)
    }

    /// How the request ended when its status alone does not say: `held` when a budget held any
    /// of its runs, else `batched` when any went into a batch (the answer carries `batched`).
    pub fn outcome(&self) -> Option<RequestOutcome> {
        if self.runs.iter().any(|run| run.held) {
            Some(RequestOutcome::Held)
        } else if self.runs.iter().any(|run| run.batched.is_some()) {
            Some(RequestOutcome::Batched)
        } else {
            None
        }
    }

    fn woke(&mut self, mode: WakeMode, outcome: EventOutcome) {
        let any_queued = self.wake.is_some_and(|(_, o)| o == EventOutcome::Queued);
        let outcome = if any_queued {
            EventOutcome::Queued
        } else {
            outcome
        };
        self.wake = Some((mode, outcome));
    }
}

/// Why admission stopped: a policy refused an action (the client's 400), or the store failed.
#[derive(Debug, thiserror::Error)]
pub enum AdmitError {
    #[error(transparent)]
    Rejected(#[from] Rejected),
    #[error(transparent)]
    Limited(#[from] LimitReached),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<LaneError> for AdmitError {
    fn from(error: LaneError) -> Self {
        match error {
            LaneError::Full(full) => AdmitError::Limited(full.into()),
            LaneError::Store(store) => AdmitError::Store(store),
        }
    }
}

/// Admission stopped, with what was committed before it did (a batch commits in order).
#[derive(Debug)]
pub struct Stopped {
    pub committed: Committed,
    pub error: AdmitError,
}

/// Admits and commits a request's actions. Every agent action is admitted before anything is
/// stored, so that a refused one refuses the request and stores nothing; then each action is
/// committed in order: a wake passes its policy and is committed, a run is queued. Each element
/// of a batch after the first has a key of its own (`key#i`), so that a retried batch finds each
/// of its runs again, and two equal elements are two runs.
///
/// Costs one store commit per action (wakes and runs each wait for theirs); for a private
/// node's edge delivery, one read of its marks before them.
pub async fn admit(
    runtime: &Runtime,
    hooks: &HookSettings,
    intake: &Intake<'_>,
    actions: Actions<'_>,
) -> Result<Committed, Stopped> {
    let stopped = |error: AdmitError| Stopped {
        committed: Committed::default(),
        error,
    };
    let admitted = admit_all(hooks, intake, actions).map_err(|e| stopped(e.into()))?;
    let mut committed = Committed::default();
    // A private node's edge delivery marks each action in the action's own commit, and one
    // pulled again after a crash makes only the actions not marked (docs/edge.md).
    let (delivery, taken) = match edge_marks::current() {
        None => (None, Vec::new()),
        Some(delivery) => {
            let taken = runtime.edge_actions_taken().await;
            (Some(delivery), taken.map_err(|e| stopped(e.into()))?)
        }
    };
    let of = u32::try_from(admitted.len()).unwrap_or(u32::MAX);
    for (index, action) in (0..).zip(admitted) {
        let done = match &delivery {
            None => commit(runtime, hooks, intake, action).await,
            Some(_) if taken.contains(&index) => continue,
            Some(delivery) => {
                let commit = commit(runtime, hooks, intake, action);
                edge_marks::action_scope(delivery, index, of, commit).await
            }
        };
        match done {
            Ok(Made::Woke(mode, outcome)) => committed.woke(mode, outcome),
            Ok(Made::Run(run)) => committed.runs.push(run),
            Err(error) => return Err(Stopped { committed, error }),
        }
    }
    Ok(committed)
}

/// What one action committed.
enum Made {
    Woke(WakeMode, EventOutcome),
    Run(QueuedRun),
}

async fn commit(
    runtime: &Runtime,
    hooks: &HookSettings,
    intake: &Intake<'_>,
    action: Admitted,
) -> Result<Made, AdmitError> {
    match action {
        Admitted::Wake(wake) => commit_wake(runtime, hooks, &wake, intake)
            .await
            .map(|outcome| Made::Woke(wake.mode, outcome)),
        // Boxed: queueing a run (a batch, a lane, budgets) is a future many times the size of
        // a wake's commit, and unboxed every wake would carry and move it.
        Admitted::Agent(mut admission) => {
            // Only a callback carries it: a run without one spares the copy.
            if admission.run.admitted.callback.is_some() {
                admission.run.admitted.request_id = intake.request_id.map(str::to_string);
            }
            Box::pin(queue(runtime, hooks, *admission))
                .await
                .map(Made::Run)
        }
        Admitted::Notify(notice) => Box::pin(runtime.submit_notify(*notice))
            .await
            .map(|queued| Made::Run(QueuedRun::of(queued)))
            .map_err(AdmitError::from),
    }
}

/// What one action of a request would become, every policy applied.
pub enum Preview {
    /// A wake: its main-session event.
    Wake(NewEvent),
    /// An agent run, as admitted (boxed: it carries the whole action).
    Agent(Box<AdmittedRun>),
    /// A notification's message.
    Notify(String),
}

/// What admitting `actions` would make, in order, every policy applied (the model allowlist,
/// the agent and session-key policies, a wake's agent and key) and nothing stored: no run, no
/// event, no idempotency key claimed. Lanes and budgets, which depend on what is queued when
/// a request comes, are not applied. A session key made fresh is one [`admit`] would make
/// anew. Costs what [`admit`] costs before its first commit.
pub fn preview(
    hooks: &HookSettings,
    intake: &Intake<'_>,
    actions: Actions<'_>,
) -> Result<Vec<Preview>, Rejected> {
    admit_all(hooks, intake, actions)?
        .into_iter()
        .map(|admitted| match admitted {
            Admitted::Wake(wake) => {
                admit_wake(hooks, &wake, intake.event_source.clone()).map(Preview::Wake)
            }
            Admitted::Agent(admission) => Ok(Preview::Agent(Box::new(admission.run.admitted))),
            Admitted::Notify(notice) => Ok(Preview::Notify(notice.run.prompt)),
        })
        .collect()
}

/// An action that passed every policy but a wake's, which is checked as it is committed.
enum Admitted {
    Wake(WakeRequest),
    /// Boxed: an admission carries the whole run record.
    Agent(Box<AgentAdmission>),
    /// Boxed: as an agent run's.
    Notify(Box<NewNotice>),
}

/// Admits every agent action of `actions`, in order.
fn admit_all(
    hooks: &HookSettings,
    intake: &Intake<'_>,
    actions: Actions<'_>,
) -> Result<Vec<Admitted>, Rejected> {
    let (mapping, actions) = match actions {
        Actions::Wake(wake) => return Ok(vec![Admitted::Wake(wake)]),
        Actions::Agent(action) => {
            let admission =
                admit_agent(hooks, action, AgentOrigin::Direct, intake.keys, intake.path)?;
            return Ok(vec![Admitted::Agent(Box::new(admission))]);
        }
        Actions::Mapped { mapping, actions } => (mapping, actions),
    };
    let chosen = idempotency::choose_key(intake.keys);
    let mut admitted = Vec::with_capacity(actions.len());
    for (i, action) in actions.into_iter().enumerate() {
        let element_key = chosen.filter(|_| i > 0).map(|key| format!("{key}#{i}"));
        let keys = match &element_key {
            Some(key) => [Some(key.as_str()), None, None, None, None],
            None => intake.keys,
        };
        admitted.push(match action {
            FinishedAction::Wake(wake) => Admitted::Wake(wake),
            FinishedAction::Notify(notification) => {
                let notice = admit_notify(hooks, mapping, notification, keys, intake.path);
                Admitted::Notify(Box::new(notice))
            }
            FinishedAction::Agent {
                action,
                key_origin,
                allow_unsafe_external_content,
                callback,
            } => {
                let origin = AgentOrigin::Mapped {
                    mapping,
                    key_origin,
                    allow_unsafe: allow_unsafe_external_content,
                    callback: callback.as_deref(),
                };
                Admitted::Agent(Box::new(admit_agent(
                    hooks,
                    action,
                    origin,
                    keys,
                    intake.path,
                )?))
            }
        });
    }
    Ok(admitted)
}

async fn commit_wake(
    runtime: &Runtime,
    hooks: &HookSettings,
    wake: &WakeRequest,
    intake: &Intake<'_>,
) -> Result<EventOutcome, AdmitError> {
    let event = admit_wake(hooks, wake, intake.event_source.clone())?;
    Ok(runtime.submit_wake(event, wake.mode).await?)
}

/// Queues an admitted run. A batch mapping's request joins its open batch; a new run (a batch
/// it opens included) enters its mapping's lane and passes its budgets first.
async fn queue(
    runtime: &Runtime,
    hooks: &HookSettings,
    admission: AgentAdmission,
) -> Result<QueuedRun, AdmitError> {
    // Batches first: joining an open batch adds no run, so no lane or budget applies to it.
    let mut admission = match batch(runtime, admission, None).await? {
        Ok(joined) => return Ok(joined),
        Err(admission) => admission,
    };
    let claim = admission.claim.as_ref();
    runtime.enter_lane(hooks, &mut admission.run, claim).await?;
    // Within its budgets, or past one that holds, a request opens a batch (held when it
    // closes); past one that refuses it is refused as the run of its own it then is.
    if admission.batch.is_some() {
        let opening = runtime
            .batch_opening(&hooks.budgets, &admission.run)
            .await?;
        if let BatchOpening::Open { held_by } = opening {
            admission = match batch(runtime, admission, Some(held_by)).await? {
                Ok(opened) => return Ok(opened),
                Err(admission) => admission,
            };
        }
    }
    let queued = runtime
        .queue_within_budgets(&hooks.budgets, admission.run, admission.claim)
        .await??;
    Ok(QueuedRun {
        held: queued.held,
        ..QueuedRun::of(queued.run)
    })
}

/// A batch mapping's request added to its open batch (with `open`, to a batch it opens when
/// none is, held when it closes by the budget `open` names); the admission back when it is not
/// a batch mapping's, or it found no batch to join (`gateway::batches`).
async fn batch(
    runtime: &Runtime,
    admission: AgentAdmission,
    open: Option<Option<HeldBy>>,
) -> Result<Result<QueuedRun, AgentAdmission>, StoreError> {
    let Some(rule) = admission.batch else {
        return Ok(Err(admission));
    };
    let item = BatchItem {
        rule,
        run: admission.run,
        claim: admission.claim,
        sender_name: admission.sender_name,
        held_by: open.clone().flatten(),
    };
    Ok(match runtime.join_batch(item, open.is_some()).await? {
        Joined::Added(added) => Ok(QueuedRun {
            held: added.opened && open.is_some_and(|held_by| held_by.is_some()),
            run_id: added.run_id,
            repeated: added.repeated,
            batched: added.position,
        }),
        Joined::NoneOpen(item) => Err(AgentAdmission {
            run: item.run,
            claim: item.claim,
            batch: Some(item.rule),
            sender_name: item.sender_name,
        }),
    })
}

/// A notification admitted: the run that records it, for the default agent (whose name a
/// reply sent nowhere would be told to; a notification's is told to no one), in a session of
/// its own (`notify:<run id>`: no agent's conversation ever holds it), with the message as its
/// prompt, as written (no envelope: no model reads it); its claim as an agent run's.
fn admit_notify(
    hooks: &HookSettings,
    mapping: &Mapping,
    notification: Notification,
    keys: [Option<&str>; 5],
    path: &str,
) -> NewNotice {
    let run_id = Uuid::now_v7().to_string();
    let action = AgentAction {
        message: notification.message,
        channel: Some(notification.channel),
        to: notification.to,
        ..AgentAction::default()
    };
    let admitted = AdmittedRun {
        target_agent: hooks.policy.agents.default_id().to_string(),
        session_key: format!("notify:{run_id}"),
        session_key_chosen: false,
        source: ContentSource::Webhook,
        allow_unsafe_external_content: false,
        mapping_id: Some(mapping.id.clone()),
        action,
        // Refused on a notify mapping at load (config/notify.rs).
        callback: None,
        request_id: None,
    };
    let claim = idempotency::choose_key(keys).map(|key| IdempotencyClaim {
        fingerprint: idempotency::fingerprint(key, path, &admitted),
        now_ms: now_ms(),
        window: idempotency::WINDOW,
    });
    let prompt = admitted.action.message.clone();
    NewNotice {
        run: NewRun::admitted(run_id, admitted, prompt, now_rfc3339()),
        claim,
    }
}

/// Where an agent request came from, which decides the session-key rule, whether the envelope
/// applies and the content source.
#[derive(Clone, Copy)]
enum AgentOrigin<'a> {
    /// `POST {prefix}/agent`.
    Direct,
    /// A mapping's agent action, with where its session key came from.
    Mapped {
        mapping: &'a Mapping,
        key_origin: KeyOrigin,
        /// The mapping's `allowUnsafeExternalContent`, or its transform's override.
        allow_unsafe: bool,
        /// Its `callback.url` rendered.
        callback: Option<&'a str>,
    },
}

/// An admitted agent request, ready for [`Runtime::submit_run`].
struct AgentAdmission {
    pub run: NewRun,
    /// Recognises a repeat of the same request within the idempotency window.
    pub claim: Option<IdempotencyClaim>,
    /// Its mapping's `batch`, when the mapping gathers its requests into batches.
    pub batch: Option<BatchRule>,
    /// The name the sender chose, when it is not the operator's ([`task_line`]).
    pub sender_name: Option<String>,
}

/// Admits an agent request. `keys` are the idempotency key candidates in order of precedence
/// (headers, body, signed delivery id); `path` is the request path, part of the fingerprint.
fn admit_agent(
    hooks: &HookSettings,
    agent: AgentAction,
    origin: AgentOrigin<'_>,
    keys: [Option<&str>; 5],
    path: &str,
) -> Result<AgentAdmission, Rejected> {
    let (key_origin, allow_unsafe) = match origin {
        AgentOrigin::Direct => (KeyOrigin::Request, false),
        AgentOrigin::Mapped {
            key_origin,
            allow_unsafe,
            ..
        } => (key_origin, allow_unsafe),
    };
    let mut admitted = hooks.policy.admit(agent, key_origin, allow_unsafe, || {
        format!("hook:{}", Uuid::now_v7())
    })?;
    if let AgentOrigin::Mapped {
        mapping, callback, ..
    } = origin
    {
        if mapping.is_email {
            admitted.source = ContentSource::Email;
        }
        admitted.mapping_id = Some(mapping.id.clone());
        admitted.callback = callback.map(str::to_string);
    }
    let key = idempotency::choose_key(keys);
    let claim = key.map(|key| IdempotencyClaim {
        fingerprint: idempotency::fingerprint(key, path, &admitted),
        now_ms: now_ms(),
        window: idempotency::WINDOW,
    });
    // Time-ordered ids (UUIDv7, 74 random bits): each insert lands at the end of the runs'
    // indexes instead of on a random page, which cost a page write per run under load.
    let run_id = Uuid::now_v7().to_string();
    let received = now_rfc3339();
    let (task, sender_name) = task_line(origin, &admitted.action.name);
    let prompt = if admitted.allow_unsafe_external_content {
        admitted.action.message.clone()
    } else {
        wrap_prompt(
            task,
            &run_id,
            &received,
            admitted.source,
            sender_name,
            &admitted.action.message,
        )
    };
    let sender_name = sender_name.map(str::to_string);
    let batch = match origin {
        AgentOrigin::Mapped { mapping, .. } => mapping.batch,
        AgentOrigin::Direct => None,
    };
    Ok(AgentAdmission {
        run: NewRun::admitted(run_id, admitted, prompt, received),
        claim,
        batch,
        sender_name,
    })
}

/// What a run's prompt shows of its `name`: the task line's text, always the operator's, and
/// the name the sender chose, which goes inside the envelope, when that is not the operator's.
/// A mapping's fixed name is the operator's; a templated one, or one its transform set, is the
/// sender's, and the task line then names the mapping by its id. A name in a request to
/// `{prefix}/agent` is the sender's, and its task line reads `Hook`.
fn task_line<'a>(origin: AgentOrigin<'a>, name: &'a str) -> (&'a str, Option<&'a str>) {
    let task = match origin {
        AgentOrigin::Direct => DEFAULT_NAME,
        AgentOrigin::Mapped { mapping, .. } if mapping.fixed_name() == Some(name) => name,
        AgentOrigin::Mapped { mapping, .. } => &mapping.id,
    };
    (task, (name != task).then_some(name))
}

/// A wake admitted: its durable, untrusted system event for the main session of its agent (the
/// default one unless it named another, under the agent policy of `/agent`). A session key it
/// names passes the session-key policy of a request's key, re-scoped to that agent, but selects
/// no session of its own: hookgate keeps one main session per agent.
fn admit_wake(
    hooks: &HookSettings,
    wake: &WakeRequest,
    source: String,
) -> Result<NewEvent, Rejected> {
    let policy = &hooks.policy;
    let agent = policy
        .agents
        .resolve(wake.agent_id.as_deref())?
        .unwrap_or_else(|| policy.agents.default_id().to_string());
    if let Some(key) = wake.session_key.as_deref() {
        policy
            .sessions
            .resolve(Some(key), KeyOrigin::Request, Some(&agent), String::new)?;
    }
    Ok(NewEvent {
        agent,
        kind: EventKind::System,
        text: wake.text.clone(),
        trusted: false,
        source,
        at: now_rfc3339(),
    })
}
