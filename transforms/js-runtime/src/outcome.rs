//! What a transform's function returned, read straight into the WIT outcome, as the OpenClaw
//! gateway merges a hook transform's result into the mapping's action:
//!
//! - `null` skips the request; `undefined`, or any other value that is not an object, keeps the
//!   mapping's action (any but `false`, `0` and `''` logged as ignored);
//! - an object with `kind: 'respond'` is the response (`status`, `contentType`, `body`; the
//!   adapter's `reply` checks and encodes them);
//! - any other object is merged over the mapping's action: `kind` "wake" is a wake, any other kind
//!   an agent run (a kind other than "agent" logged); `mode` and `wakeMode` change only to
//!   'next-heartbeat'; `text`, `message`, `name`, `agentId`, `sessionKey`, `sessionMode`,
//!   `channel`, `to`, `model` and `thinking` must be strings (each lone surrogate read as U+FFFD,
//!   as `toWellFormed` gives it), `deliver` and `allowUnsafeExternalContent` true or false,
//!   `timeoutSeconds` a whole number from 0 to 2³²−1; a value of another type is ignored, as
//!   OpenClaw ignores it, and logged (by the adapter's `ignored`), in that order;
//!   `sessionKeySource` is `fixed` for 'static' and `external` otherwise, and only with a
//!   `sessionKey`.
//!
//! Only a result's own properties are read, enumerable or not, each once, in the order of one
//! listing of its own names (a Proxy's `ownKeys` and `get` traps run then; for an array or a typed
//! array, whose own names may be millions of indices, the twenty names are tested one by one
//! instead). A transform may pollute `Object.prototype` (a naive deep merge of a payload holding
//! `__proto__` does), and on a kept instance (`transform.reuse`) that pollution outlives the call:
//! read through the prototype, an inherited `to` or `kind` would steer every later sender's action
//! (docs/transforms.md#limits). The names are matched as QuickJS atoms made once, when the
//! runtime loads, so a call makes no key from a string. No JavaScript object is built on the way
//! but for the rare paths the adapter keeps: a warning, a response, an error's message.

use std::ptr;

use rquickjs::{Array, Ctx, Function, Persistent, TypedArray, Value, qjs};

use crate::arguments::{Owned, atom};
use crate::hookgate::transform::types::{
    ActionKind, KeySource, Outcome, Overrides, Reply, WakeMode,
};

/// The fields of a result the runtime reads, in this order when it tests them by name.
const FIELDS: [&str; 20] = [
    "kind",
    "text",
    "message",
    "mode",
    "wakeMode",
    "name",
    "agentId",
    "sessionKey",
    "sessionMode",
    "channel",
    "to",
    "model",
    "thinking",
    "deliver",
    "allowUnsafeExternalContent",
    "sessionKeySource",
    "timeoutSeconds",
    "status",
    "contentType",
    "body",
];

/// The index of each field in [`FIELDS`].
#[derive(Clone, Copy)]
enum Field {
    Kind,
    Text,
    Message,
    Mode,
    WakeMode,
    Name,
    AgentId,
    SessionKey,
    SessionMode,
    Channel,
    To,
    Model,
    Thinking,
    Deliver,
    AllowUnsafeExternalContent,
    SessionKeySource,
    TimeoutSeconds,
    Status,
    ContentType,
    Body,
}

/// The names the runtime reads from a transform's values, as atoms of the engine, made once
/// when it loads (and so part of the snapshot a fresh instance starts from); freed with it.
pub struct Names {
    runtime: *mut qjs::JSRuntime,
    fields: [qjs::JSAtom; FIELDS.len()],
    then: qjs::JSAtom,
}

impl Names {
    pub fn new(ctx: &Ctx<'_>) -> rquickjs::Result<Names> {
        let mut names = Names {
            // SAFETY: the context is live.
            runtime: unsafe { qjs::JS_GetRuntime(ctx.as_raw().as_ptr()) },
            fields: [qjs::JS_ATOM_NULL; FIELDS.len()],
            then: atom(ctx, "then")?,
        };
        for (slot, name) in names.fields.iter_mut().zip(FIELDS) {
            *slot = atom(ctx, name)?;
        }
        Ok(names)
    }

    /// The field `atom` names, if it is one the runtime reads.
    fn field(&self, atom: qjs::JSAtom) -> Option<usize> {
        self.fields.iter().position(|&field| field == atom)
    }
}

impl Drop for Names {
    fn drop(&mut self) {
        for &atom in self.fields.iter().chain([&self.then]) {
            if atom != qjs::JS_ATOM_NULL {
                // SAFETY: the atom was made by this runtime, which outlives `Names` (`Loaded`
                // drops it first), and is freed once.
                unsafe { qjs::JS_FreeAtomRT(self.runtime, atom) };
            }
        }
    }
}

/// The adapter's helpers for the outcome's rare paths (transforms/js-sdk/adapter.js), and
/// `Array.isArray` as the runtime found it, taken when it loads.
pub struct Helpers {
    pub ignored: Persistent<Function<'static>>,
    pub reply: Persistent<Function<'static>>,
    pub is_array: Persistent<Function<'static>>,
}

/// The value of `object[atom]`, as `object.name` reads it (through a getter or a Proxy's trap).
fn get<'js>(
    ctx: &Ctx<'js>,
    object: &Value<'js>,
    atom: qjs::JSAtom,
) -> rquickjs::Result<Owned<'js>> {
    // SAFETY: the context and the object are live, and the returned value is owned.
    let value = unsafe { qjs::JS_GetProperty(ctx.as_raw().as_ptr(), object.as_raw(), atom) };
    Owned::new(ctx, value)
}

/// The `then` of `value`, an object, read once as `await` reads it: owned by the caller, or the
/// exception.
pub fn then_of(ctx: &Ctx<'_>, names: &Names, value: &Value<'_>) -> qjs::JSValue {
    // SAFETY: the context and the object are live, and the returned value is owned.
    unsafe { qjs::JS_GetProperty(ctx.as_raw().as_ptr(), value.as_raw(), names.then) }
}

/// The outcome `result` means (see the top of the file); an exception is one the transform's
/// own JavaScript threw while its result was read (a getter, a Proxy's trap), or the adapter's
/// `reply` refusing the response.
pub fn read<'js>(
    ctx: &Ctx<'js>,
    names: &Names,
    helpers: &Helpers,
    result: Value<'js>,
) -> rquickjs::Result<Outcome> {
    if result.is_null() {
        return Ok(Outcome::Skip);
    }
    if result.is_undefined() {
        return Ok(Outcome::Keep);
    }
    if !result.is_object() || result.is_function() {
        let silent = result.as_bool() == Some(false)
            || result.as_number() == Some(0.0)
            || (result.is_string() && text_is(ctx, result.as_raw(), "")?);
        if !silent {
            ignored(
                ctx,
                helpers,
                "the result",
                &result,
                "an object, null or undefined",
            )?;
        }
        return Ok(Outcome::Keep);
    }
    let fields = fields(ctx, names, helpers, &result)?;
    let kind = &fields[Field::Kind as usize];
    if let Some(kind) = kind
        && is_string(kind.as_raw())
        && text_is(ctx, kind.as_raw(), "respond")?
    {
        return reply(ctx, helpers, &fields).map(Outcome::Respond);
    }
    overrides(ctx, helpers, &fields).map(Outcome::Merge)
}

/// A result's fields: each present one's value, read in the order of its own names. QuickJS's
/// values rather than rquickjs's (each of which takes a reference to the context): most are
/// only tested.
type Fields<'js> = [Option<Owned<'js>>; FIELDS.len()];

fn fields<'js>(
    ctx: &Ctx<'js>,
    names: &Names,
    helpers: &Helpers,
    result: &Value<'js>,
) -> rquickjs::Result<Fields<'js>> {
    let mut fields: Fields<'js> = std::array::from_fn(|_| None);
    let raw = ctx.as_raw().as_ptr();
    if indexed(ctx, helpers, result)? {
        let mut own = [false; FIELDS.len()];
        for (own, &atom) in own.iter_mut().zip(&names.fields) {
            // SAFETY: the context and the object are live; no descriptor is asked for.
            let has =
                unsafe { qjs::JS_GetOwnProperty(raw, ptr::null_mut(), result.as_raw(), atom) };
            if has < 0 {
                return Err(rquickjs::Error::Exception);
            }
            *own = has > 0;
        }
        for (at, &atom) in names.fields.iter().enumerate() {
            if own[at] {
                fields[at] = Some(get(ctx, result, atom)?);
            }
        }
        return Ok(fields);
    }
    let listed = OwnNames::of(ctx, result)?;
    for property in listed.names() {
        if let Some(at) = names.field(property.atom) {
            fields[at] = Some(get(ctx, result, property.atom)?);
        }
    }
    Ok(fields)
}

/// Whether `value` is an array or a view of a buffer (`Array.isArray(value) ||
/// ArrayBuffer.isView(value)`), whose fields are tested by name rather than listed.
fn indexed<'js>(ctx: &Ctx<'js>, helpers: &Helpers, value: &Value<'js>) -> rquickjs::Result<bool> {
    if value.is_proxy() {
        // `Array.isArray` looks through a Proxy to its target, and throws for a revoked one.
        let is_array = helpers.is_array.clone().restore(ctx)?;
        return is_array.call((value.clone(),));
    }
    let raw = value.as_raw();
    // SAFETY: each only reads the value's class.
    Ok(value.is_array()
        || unsafe { qjs::JS_GetTypedArrayType(raw) } >= 0
        || unsafe { qjs::JS_IsDataView(raw) })
}

/// One listing of an object's own string-keyed property names (`Object.getOwnPropertyNames`),
/// as atoms; freed when dropped.
struct OwnNames<'a, 'js> {
    ctx: &'a Ctx<'js>,
    table: *mut qjs::JSPropertyEnum,
    len: u32,
}

impl<'a, 'js> OwnNames<'a, 'js> {
    fn of(ctx: &'a Ctx<'js>, object: &Value<'js>) -> rquickjs::Result<Self> {
        let mut listed = OwnNames {
            ctx,
            table: ptr::null_mut(),
            len: 0,
        };
        // SAFETY: the context and the object are live; on failure the table is left empty.
        let status = unsafe {
            qjs::JS_GetOwnPropertyNames(
                ctx.as_raw().as_ptr(),
                &mut listed.table,
                &mut listed.len,
                object.as_raw(),
                qjs::JS_GPN_STRING_MASK as _,
            )
        };
        if status < 0 {
            return Err(rquickjs::Error::Exception);
        }
        Ok(listed)
    }

    fn names(&self) -> &[qjs::JSPropertyEnum] {
        if self.table.is_null() {
            return &[];
        }
        // SAFETY: QuickJS filled `len` entries at `table`, which live until `drop`.
        unsafe { std::slice::from_raw_parts(self.table, self.len as usize) }
    }
}

impl Drop for OwnNames<'_, '_> {
    fn drop(&mut self) {
        if !self.table.is_null() {
            // SAFETY: the table and its atoms are this listing's, freed once.
            unsafe { qjs::JS_FreePropertyEnum(self.ctx.as_raw().as_ptr(), self.table, self.len) };
        }
    }
}

/// The fields given (not null or undefined) as the WIT overrides, each checked in this order
/// (the order of the warnings).
fn overrides<'js>(
    ctx: &Ctx<'js>,
    helpers: &Helpers,
    fields: &Fields<'js>,
) -> rquickjs::Result<Overrides> {
    let given = Given {
        ctx,
        helpers,
        fields,
    };
    let kind = given.kind()?;
    let text = given.string(Field::Text)?;
    let message = given.string(Field::Message)?;
    let mode = given.next_heartbeat(Field::Mode)?;
    let wake_mode = given.next_heartbeat(Field::WakeMode)?;
    let name = given.string(Field::Name)?;
    let agent_id = given.string(Field::AgentId)?;
    let session_key = given.string(Field::SessionKey)?;
    let session_mode = given.string(Field::SessionMode)?;
    let channel = given.string(Field::Channel)?;
    let to = given.string(Field::To)?;
    let model = given.string(Field::Model)?;
    let thinking = given.string(Field::Thinking)?;
    let deliver = given.boolean(Field::Deliver)?;
    let allow_unsafe_external_content = given.boolean(Field::AllowUnsafeExternalContent)?;
    let session_key_source = match session_key {
        None => None,
        Some(_) if given.is(Field::SessionKeySource, "static")? => Some(KeySource::Fixed),
        Some(_) => Some(KeySource::External),
    };
    Ok(Overrides {
        kind,
        text,
        mode,
        message,
        wake_mode,
        name,
        agent_id,
        session_key,
        session_key_source,
        session_mode,
        deliver,
        allow_unsafe_external_content,
        channel,
        to,
        model,
        thinking,
        timeout_seconds: given.seconds(Field::TimeoutSeconds)?,
    })
}

/// A result's fields, checked one by one; one of the wrong type is ignored and logged.
struct Given<'a, 'js> {
    ctx: &'a Ctx<'js>,
    helpers: &'a Helpers,
    fields: &'a Fields<'js>,
}

impl<'js> Given<'_, 'js> {
    /// The field's value, if the result gives it (not null or undefined).
    fn get(&self, field: Field) -> Option<qjs::JSValue> {
        self.fields[field as usize]
            .as_ref()
            .map(Owned::as_raw)
            // SAFETY: each only reads the value's tag.
            .filter(|&v| unsafe { !qjs::JS_IsNull(v) && !qjs::JS_IsUndefined(v) })
    }

    /// Logs that `field`'s `value` was ignored, not being `expected`.
    fn ignored(&self, field: Field, value: qjs::JSValue, expected: &str) -> rquickjs::Result<()> {
        ignored(
            self.ctx,
            self.helpers,
            FIELDS[field as usize],
            &borrowed(self.ctx, value),
            expected,
        )
    }

    /// Whether the field is the string `name`.
    fn is(&self, field: Field, name: &str) -> rquickjs::Result<bool> {
        match self.get(field) {
            Some(v) if is_string(v) => text_is(self.ctx, v, name),
            _ => Ok(false),
        }
    }

    /// `kind`: "wake" is a wake, any other kind an agent run (one other than "agent" logged).
    fn kind(&self) -> rquickjs::Result<Option<ActionKind>> {
        let Some(kind) = self.get(Field::Kind) else {
            return Ok(None);
        };
        if self.is(Field::Kind, "wake")? {
            return Ok(Some(ActionKind::Wake));
        }
        if !self.is(Field::Kind, "agent")? {
            self.ignored(Field::Kind, kind, "\"wake\" or \"agent\"; it runs an agent")?;
        }
        Ok(Some(ActionKind::Agent))
    }

    fn string(&self, field: Field) -> rquickjs::Result<Option<String>> {
        match self.get(field) {
            Some(v) if is_string(v) => well_formed(self.ctx, v).map(Some),
            Some(v) => self.ignored(field, v, "a string").map(|()| None),
            None => Ok(None),
        }
    }

    fn boolean(&self, field: Field) -> rquickjs::Result<Option<bool>> {
        match self.get(field) {
            Some(v) => match borrowed(self.ctx, v).as_bool() {
                Some(b) => Ok(Some(b)),
                None => self.ignored(field, v, "true or false").map(|()| None),
            },
            None => Ok(None),
        }
    }

    /// Only "next-heartbeat" changes a mode; anything else keeps the mapping's, silently.
    fn next_heartbeat(&self, field: Field) -> rquickjs::Result<Option<WakeMode>> {
        Ok(self
            .is(field, "next-heartbeat")?
            .then_some(WakeMode::NextHeartbeat))
    }

    fn seconds(&self, field: Field) -> rquickjs::Result<Option<u32>> {
        match self.get(field) {
            Some(v) => match seconds(&borrowed(self.ctx, v)) {
                Some(seconds) => Ok(Some(seconds)),
                None => self
                    .ignored(field, v, "a whole number of seconds")
                    .map(|()| None),
            },
            None => Ok(None),
        }
    }
}

/// `v` as whole seconds, if it is a number that is a whole one from 0 to 2³²−1
/// (`Number.isInteger(v) && v >= 0 && v <= 0xffffffff`).
fn seconds(v: &Value<'_>) -> Option<u32> {
    if let Some(int) = v.as_int() {
        return u32::try_from(int).ok();
    }
    let float = v.as_float()?;
    // `-0` is a whole number too: 0 seconds.
    (float.fract() == 0.0 && (0.0..=f64::from(u32::MAX)).contains(&float)).then_some(float as u32)
}

/// The response of a `{ kind: 'respond' }` result, from the adapter's `reply`.
fn reply<'js>(ctx: &Ctx<'js>, helpers: &Helpers, fields: &Fields<'js>) -> rquickjs::Result<Reply> {
    let field = |field: Field| match &fields[field as usize] {
        Some(value) => borrowed(ctx, value.as_raw()),
        None => Value::new_undefined(ctx.clone()),
    };
    let reply = helpers.reply.clone().restore(ctx)?;
    let parts: Array = reply.call((
        field(Field::Status),
        field(Field::ContentType),
        field(Field::Body),
    ))?;
    let body: TypedArray<u8> = parts.get(2)?;
    // SAFETY: `as_bytes` is unsafe because JavaScript could detach or resize the buffer while
    // the slice lives; no JavaScript runs before the copy below ends.
    let body = unsafe { body.as_bytes() }
        .ok_or_else(|| rquickjs::Exception::throw_type(ctx, "reply body buffer is detached"))?
        .to_vec();
    Ok(Reply {
        status: parts.get(0)?,
        content_type: parts.get(1)?,
        body,
    })
}

/// Logs that `field` was ignored (the adapter's `ignored`, which says what was expected and
/// describes the value).
fn ignored<'js>(
    ctx: &Ctx<'js>,
    helpers: &Helpers,
    field: &str,
    value: &Value<'js>,
    expected: &str,
) -> rquickjs::Result<()> {
    let ignored = helpers.ignored.clone().restore(ctx)?;
    ignored.call((field, value.clone(), expected))
}

/// `value` as an rquickjs `Value`, with a reference of its own: for the rare paths, where
/// rquickjs's conversions serve.
fn borrowed<'js>(ctx: &Ctx<'js>, value: qjs::JSValue) -> Value<'js> {
    // SAFETY: the context and the value are live; the new reference is the `Value`'s.
    unsafe { Value::from_raw(ctx.clone(), qjs::JS_DupValue(ctx.as_raw().as_ptr(), value)) }
}

/// Whether `value` is a string.
fn is_string(value: qjs::JSValue) -> bool {
    // SAFETY: only the tag is read.
    unsafe { qjs::JS_IsString(value) }
}

/// Whether the string `value` is `text`.
fn text_is(ctx: &Ctx<'_>, value: qjs::JSValue, text: &str) -> rquickjs::Result<bool> {
    with_utf8(ctx, value, |bytes| bytes == text.as_bytes())
}

/// The string `value` as Rust text, each lone surrogate (half an emoji cut by `slice`) as
/// U+FFFD, as `toWellFormed` and the web give it.
fn well_formed(ctx: &Ctx<'_>, value: qjs::JSValue) -> rquickjs::Result<String> {
    with_utf8(ctx, value, |bytes| {
        let mut text = String::with_capacity(bytes.len());
        let mut rest = bytes;
        loop {
            match std::str::from_utf8(rest) {
                Ok(valid) => {
                    text.push_str(valid);
                    return text;
                }
                Err(err) => {
                    let (valid, invalid) = rest.split_at(err.valid_up_to());
                    // SAFETY: `from_utf8` checked the bytes up to `valid_up_to`.
                    text.push_str(unsafe { std::str::from_utf8_unchecked(valid) });
                    text.push('\u{fffd}');
                    // QuickJS writes a lone surrogate as its three bytes of WTF-8 (0xED, then
                    // 0xA0..=0xBF, then a continuation byte): one U+FFFD for all three.
                    let skip = match invalid {
                        [0xed, 0xa0..=0xbf, 0x80..=0xbf, ..] => 3,
                        _ => err.error_len().unwrap_or(invalid.len()),
                    };
                    rest = &invalid[skip..];
                }
            }
        }
    })
}

/// `f` of the UTF-8 of the string `value` (QuickJS's, lone surrogates as WTF-8): borrowed from
/// the string itself when it is ASCII.
fn with_utf8<R>(
    ctx: &Ctx<'_>,
    value: qjs::JSValue,
    f: impl FnOnce(&[u8]) -> R,
) -> rquickjs::Result<R> {
    let raw = ctx.as_raw().as_ptr();
    let mut len = 0;
    // SAFETY: the context and the string are live; the bytes are freed below, after their use.
    let bytes = unsafe { qjs::JS_ToCStringLen2(raw, &mut len, value, false) };
    if bytes.is_null() {
        return Err(rquickjs::Error::Exception);
    }
    // SAFETY: QuickJS wrote `len` bytes at `bytes`, valid until `JS_FreeCString`.
    let result = f(unsafe { std::slice::from_raw_parts(bytes.cast::<u8>(), len as usize) });
    // SAFETY: `bytes` came from `JS_ToCStringLen2` on this context, freed once.
    unsafe { qjs::JS_FreeCString(raw, bytes) };
    Ok(result)
}
