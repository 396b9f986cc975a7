//! The WIT request as the adapter receives it, and the adapter's result as a WIT outcome.
//!
//! Both sides follow the shapes jco gives JavaScript, which the adapter (`transforms/js-sdk/
//! adapter.js`) is written against: records as objects with camel-case fields, `option` as the
//! value or `undefined`, `list<u8>` as a `Uint8Array`, variants and results as `{ tag, val }`,
//! enums as their kebab-case names. Two parts of the request arrive as the transform sees them,
//! which Rust makes for a fraction of what the adapter's JavaScript spent on them per call:
//! `headers` as the transform's object (names in lower case, a repeated header's values joined),
//! and the body also as `bodyText`, decoded as `TextDecoder` decodes it. `query` is not passed:
//! the transform reads the query from `url`. The adapter builds the result with exactly the WIT
//! types, so a mismatch here is a bug of the adapter: it is reported as an error, never guessed
//! around.
//!
//! Only a result's own properties are read. A transform may pollute `Object.prototype` (a naive
//! deep merge of a payload holding `__proto__` does), and on a kept instance (`transform.reuse`)
//! that pollution outlives the call: read through the prototype, an inherited `to` or `kind`
//! would steer every later sender's action (docs/transforms.md#limits).

use std::collections::BTreeMap;

use rquickjs::function::Args;
use rquickjs::object::{Filter, Property};
use rquickjs::{Ctx, Exception, FromJs, Object, TypedArray, Value};

use crate::hookgate::transform::types::{
    Action, ActionKind, KeySource, Outcome, Overrides, Reply, Request, WakeMode,
};

/// `req` as the arguments `handler.transform` takes, in the order of its parameters (`name`,
/// `url`, `headers`, `bodyText`, `body`, `mappingId`, `config`, `exportName`): arguments rather
/// than an object, since each field of an object cost a property key made from its name and a
/// property defined, and the adapter a read of each.
pub fn request<'js>(ctx: &Ctx<'js>, req: Request) -> rquickjs::Result<Args<'js>> {
    let mut args = Args::new(ctx.clone(), 8);
    args.push_arg(req.name)?;
    args.push_arg(req.url)?;
    args.push_arg(headers(ctx, req.headers)?)?;
    args.push_arg(crate::globals::utf8_text(&req.body, false).as_ref())?;
    args.push_arg(TypedArray::<u8>::new(ctx.clone(), req.body)?)?;
    args.push_arg(req.mapping_id)?;
    args.push_arg(req.config)?;
    args.push_arg(req.export_name)?;
    Ok(args)
}

/// The transform's `headers`: names in lower case, a repeated header's values joined with `, ` in
/// their order, in the order of each name's first appearance, each an own data property (so a
/// header named `__proto__` stays a plain entry, as `Object.fromEntries` would define it).
fn headers<'js>(ctx: &Ctx<'js>, list: Vec<(String, String)>) -> rquickjs::Result<Object<'js>> {
    let mut joined: Vec<(String, String)> = Vec::with_capacity(list.len());
    // A BTreeMap rather than a HashMap: no random keys to draw, which a fresh instance would draw
    // from the host on every call.
    let mut index: BTreeMap<String, usize> = BTreeMap::new();
    for (name, value) in list {
        let name = name.to_lowercase();
        match index.get(&name) {
            Some(&at) => {
                let joined = &mut joined[at].1;
                joined.push_str(", ");
                joined.push_str(&value);
            }
            None => {
                index.insert(name.clone(), joined.len());
                joined.push((name, value));
            }
        }
    }
    let object = Object::new(ctx.clone())?;
    for (name, value) in joined {
        object.prop(
            name,
            Property::from(value).writable().enumerable().configurable(),
        )?;
    }
    Ok(object)
}

/// What `handler.transform` resolved to: `{ tag: 'ok', val: outcome }` or `{ tag: 'err', val:
/// message }`.
pub fn result(result: &Object<'_>) -> rquickjs::Result<Result<Outcome, String>> {
    let result = Own::of(result.as_value())?;
    match result.tag()?.as_str() {
        "ok" => outcome(&Own::of(&result.get("val")?)?).map(Ok),
        "err" => Ok(Err(result.get("val")?)),
        other => Err(unexpected(result.ctx(), "result", other)),
    }
}

fn outcome(value: &Own<'_>) -> rquickjs::Result<Outcome> {
    let val = || Own::of(&value.get("val")?);
    Ok(match value.tag()?.as_str() {
        "keep" => Outcome::Keep,
        "skip" => Outcome::Skip,
        "run" => Outcome::Run(action(&val()?)?),
        "respond" => Outcome::Respond(reply(&val()?)?),
        "merge" => Outcome::Merge(overrides(&val()?)?),
        other => return Err(unexpected(value.ctx(), "outcome", other)),
    })
}

fn action(value: &Own<'_>) -> rquickjs::Result<Action> {
    let fields = Own::of(&value.get("val")?)?;
    Ok(match value.tag()?.as_str() {
        "wake" => Action::Wake(crate::hookgate::transform::types::Wake {
            text: fields.get("text")?,
            mode: wake_mode(&fields, "mode")?,
        }),
        "agent" => Action::Agent(crate::hookgate::transform::types::Agent {
            message: fields.get("message")?,
            name: fields.get("name")?,
            agent_id: fields.get("agentId")?,
            session_key: fields.get("sessionKey")?,
            wake_mode: wake_mode(&fields, "wakeMode")?,
            deliver: fields.get("deliver")?,
            channel: fields.get("channel")?,
            to: fields.get("to")?,
            model: fields.get("model")?,
            thinking: fields.get("thinking")?,
            timeout_seconds: fields.get("timeoutSeconds")?,
        }),
        other => return Err(unexpected(value.ctx(), "action", other)),
    })
}

fn reply(value: &Own<'_>) -> rquickjs::Result<Reply> {
    let body: TypedArray<u8> = value.get("body")?;
    // SAFETY: `as_bytes` is unsafe because JavaScript could detach or resize the buffer while
    // the slice lives; no JavaScript runs before the copy below ends.
    let body = unsafe { body.as_bytes() }
        .ok_or_else(|| Exception::throw_type(value.ctx(), "reply body buffer is detached"))?
        .to_vec();
    Ok(Reply {
        status: value.get("status")?,
        content_type: value.get("contentType")?,
        body,
    })
}

fn overrides(value: &Own<'_>) -> rquickjs::Result<Overrides> {
    Ok(Overrides {
        kind: enum_field(value, "kind", |name| match name {
            "wake" => Some(ActionKind::Wake),
            "agent" => Some(ActionKind::Agent),
            _ => None,
        })?,
        text: value.get("text")?,
        mode: wake_mode(value, "mode")?,
        message: value.get("message")?,
        wake_mode: wake_mode(value, "wakeMode")?,
        name: value.get("name")?,
        agent_id: value.get("agentId")?,
        session_key: value.get("sessionKey")?,
        session_key_source: enum_field(value, "sessionKeySource", |name| match name {
            "fixed" => Some(KeySource::Fixed),
            "external" => Some(KeySource::External),
            _ => None,
        })?,
        session_mode: value.get("sessionMode")?,
        deliver: value.get("deliver")?,
        allow_unsafe_external_content: value.get("allowUnsafeExternalContent")?,
        channel: value.get("channel")?,
        to: value.get("to")?,
        model: value.get("model")?,
        thinking: value.get("thinking")?,
        timeout_seconds: value.get("timeoutSeconds")?,
    })
}

fn wake_mode(object: &Own<'_>, field: &str) -> rquickjs::Result<Option<WakeMode>> {
    enum_field(object, field, |name| match name {
        "now" => Some(WakeMode::Now),
        "next-heartbeat" => Some(WakeMode::NextHeartbeat),
        _ => None,
    })
}

/// An optional enum field, by its WIT case name.
fn enum_field<T>(
    object: &Own<'_>,
    field: &str,
    case: impl Fn(&str) -> Option<T>,
) -> rquickjs::Result<Option<T>> {
    let Some(name) = object.get::<Option<String>>(field)? else {
        return Ok(None);
    };
    case(&name)
        .map(Some)
        .ok_or_else(|| unexpected(object.ctx(), field, &name))
}

/// An object of the result with its own properties, listed and read once: what it inherits
/// reads as unset.
struct Own<'js> {
    ctx: Ctx<'js>,
    fields: Vec<(String, Value<'js>)>,
}

impl<'js> Own<'js> {
    /// `value`, which must be an object. Costs one list of its own property names (a Proxy's
    /// `ownKeys` trap runs here) and one read of each: the adapter's objects hold only the
    /// fields the runtime reads, so reading each as it is listed spares making its key again.
    fn of(value: &Value<'js>) -> rquickjs::Result<Self> {
        let object = Object::from_js(value.ctx(), value.clone())?;
        let fields = object
            .own_props::<String, Value>(Filter::new().string())
            .collect::<rquickjs::Result<_>>()?;
        Ok(Own {
            ctx: value.ctx().clone(),
            fields,
        })
    }

    /// The own property `name` as a `V`; an absent or inherited one is `undefined`.
    fn get<V: FromJs<'js>>(&self, name: &str) -> rquickjs::Result<V> {
        match self.fields.iter().find(|(own, _)| own == name) {
            Some((_, value)) => V::from_js(&self.ctx, value.clone()),
            None => V::from_js(&self.ctx, Value::new_undefined(self.ctx.clone())),
        }
    }

    fn ctx(&self) -> &Ctx<'js> {
        &self.ctx
    }

    fn tag(&self) -> rquickjs::Result<String> {
        self.get("tag")
    }
}

fn unexpected(ctx: &Ctx<'_>, what: &str, name: &str) -> rquickjs::Error {
    Exception::throw_type(
        ctx,
        &format!("the adapter returned an unknown {what} `{name}`"),
    )
}
