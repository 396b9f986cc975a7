//! The two arguments of a transform's function, built natively: the input `{ payload, headers,
//! url, path }` and `ctx` `{ mappingId, config, body, log }`, each an object with the same own
//! properties, in the same order and with the same attributes, as the adapter's object literals
//! made (`transforms/js-sdk/adapter.js` before the runtime built them; docs/performance.md, "A
//! fresh JavaScript instance (issue 50)").
//!
//! Every property is defined, as a literal defines it, never set: a setter or a read-only
//! property that a transform put on `Object.prototype` of a kept instance changes nothing. The
//! names are QuickJS atoms made once, when the runtime loads (so in the snapshot).
//!
//! `url` is an accessor, enumerable and configurable, as the literal's `get url()` and `set
//! url(value)` over a variable of the call: the request target resolved against
//! `http://localhost` by the `URL` class the prelude defined (taken before the bundle ran, so a
//! module that replaces the global changes nothing), built when first read and then kept, and
//! what a set stored once set. The getter and the setter are native functions of the input
//! (`JS_NewCFunctionData2`): the state lives in the getter's own data, which no JavaScript can
//! read, so the getter answers for its own input however it is reached (through a spread copy,
//! a descriptor, `get.call(other)`), and an input a transform keeps on a kept instance keeps its
//! own URL. The setter stores through its getter with a key only the runtime holds.
//!
//! The runtime also finds the module's function ([`Made::function`]) and calls it itself, where
//! the adapter's `transform` called it from a frame of its own.

use std::marker::PhantomData;

use rquickjs::{Ctx, Value, qjs};

/// The properties of the input and of `ctx`, in the order of each object; the exports a
/// module's function is looked up by; and, last, the names of the `url` accessor's functions,
/// never read: held so that naming a function finds its atom rather than making it again.
const NAMES: [&str; 12] = [
    "payload",
    "headers",
    "url",
    "path",
    "mappingId",
    "config",
    "body",
    "log",
    "default",
    "transform",
    "get url",
    "set url",
];

/// The index of each name read in [`NAMES`].
#[derive(Clone, Copy, PartialEq)]
enum Name {
    Payload,
    Headers,
    Url,
    Path,
    MappingId,
    Config,
    Body,
    Log,
    Default,
    Transform,
}

/// The input's properties and `ctx`'s, in order.
const INPUT: [Name; 4] = [Name::Payload, Name::Headers, Name::Url, Name::Path];
const CONTEXT: [Name; 4] = [Name::MappingId, Name::Config, Name::Body, Name::Log];

/// The getter's data: the request target, the URL once built or set (`undefined` until then),
/// the `URL` class, the base, and the setter's key.
const TARGET: usize = 0;
const SLOT: usize = 1;
const CLASS: usize = 2;
const BASE: usize = 3;
const GETTER_KEY: usize = 4;

/// The setter's data: its getter and the key.
const GETTER: usize = 0;
const SETTER_KEY: usize = 1;

/// What the arguments are built from, made once when the runtime loads (so part of the snapshot
/// a fresh instance starts from); freed with it.
pub struct Made {
    runtime: *mut qjs::JSRuntime,
    names: [qjs::JSAtom; NAMES.len()],
    /// `URL` as the prelude defined it, before the bundle ran.
    url_class: qjs::JSValue,
    /// `'http://localhost'`, the base the target is resolved against.
    base: qjs::JSValue,
    /// An object that no JavaScript can reach: a setter passes it to its getter to store a value.
    key: qjs::JSValue,
    /// The adapter's `ctxLog`, every call's `ctx.log`.
    log: qjs::JSValue,
    /// The user's module as the adapter imports it: its exports.
    module: qjs::JSValue,
    /// An object with each first one, two, three and four of the input's properties, and of
    /// `ctx`'s, that no JavaScript can reach: while they live, the engine keeps the shapes of
    /// those objects, and each property a call defines moves its object to a shape found rather
    /// than made (and freed when the call's object is).
    shapes: Vec<qjs::JSValue>,
}

impl Made {
    /// `url_class` is the `URL` the prelude defined, `log` the adapter's `ctxLog`, `module` the
    /// user's module.
    pub fn new<'js>(
        ctx: &Ctx<'js>,
        url_class: Value<'js>,
        log: Value<'js>,
        module: Value<'js>,
    ) -> rquickjs::Result<Made> {
        let raw = ctx.as_raw().as_ptr();
        let base = rquickjs::String::from_str(ctx.clone(), "http://localhost")?.into_value();
        let key = object(ctx)?;
        let mut made = Made {
            // SAFETY: the context is live.
            runtime: unsafe { qjs::JS_GetRuntime(raw) },
            names: [qjs::JS_ATOM_NULL; NAMES.len()],
            url_class: dup(&url_class),
            base: dup(&base),
            key: key.dup(),
            log: dup(&log),
            module: dup(&module),
            shapes: Vec::new(),
        };
        for (slot, name) in made.names.iter_mut().zip(NAMES) {
            *slot = atom(ctx, name)?;
        }
        for names in [INPUT, CONTEXT] {
            for len in 1..=names.len() {
                let object = object(ctx)?;
                for &name in &names[..len] {
                    if name == Name::Url {
                        define_url(ctx, &made, &object, qjs::JS_UNDEFINED, qjs::JS_UNDEFINED)?;
                    } else {
                        define_owned(ctx, &object, made.name(name), qjs::JS_UNDEFINED)?;
                    }
                }
                made.shapes.push(object.dup());
            }
        }
        Ok(made)
    }

    fn name(&self, name: Name) -> qjs::JSAtom {
        self.names[name as usize]
    }

    /// The module's function that a mapping's `transform.export` names, else its default export,
    /// else its export `transform`, if it is a function, as the adapter's `userFunction` finds
    /// it (which the runtime calls for the error when it is not).
    pub fn function<'js>(
        &self,
        ctx: &Ctx<'js>,
        export_name: Option<&str>,
    ) -> rquickjs::Result<Option<Owned<'js>>> {
        let raw = ctx.as_raw().as_ptr();
        // SAFETY: the context and the module (which lives as long as `self`) are live, and the
        // value returned is owned.
        let get = |atom| Owned::new(ctx, unsafe { qjs::JS_GetProperty(raw, self.module, atom) });
        // SAFETY: the context and the value are live.
        let is_function = |value: &Owned<'js>| unsafe { qjs::JS_IsFunction(raw, value.as_raw()) };
        let found = match export_name {
            Some(name) => {
                let atom = export_atom(ctx, name)?;
                let found = get(atom);
                // SAFETY: the atom was made above, and is freed once.
                unsafe { qjs::JS_FreeAtom(raw, atom) };
                found?
            }
            None => {
                let found = get(self.name(Name::Default))?;
                if is_function(&found) {
                    found
                } else {
                    get(self.name(Name::Transform))?
                }
            }
        };
        Ok(is_function(&found).then_some(found))
    }
}

/// The atom of an export's name (`transform.export`), made from a JavaScript string: QuickJS's
/// `JS_NewAtomLen` first looks its UTF-8 bytes up among the atoms of 8-bit strings as if they
/// were Latin-1, so `"é"` (C3 A9) would find an export named `"Ã©"`. The runtime's own names
/// are ASCII, where the two agree.
fn export_atom(ctx: &Ctx<'_>, name: &str) -> rquickjs::Result<qjs::JSAtom> {
    let name = rquickjs::String::from_str(ctx.clone(), name)?;
    // SAFETY: the context is live and `name` a string of it, borrowed for the call.
    let atom = unsafe { qjs::JS_ValueToAtom(ctx.as_raw().as_ptr(), name.as_raw()) };
    if atom == qjs::JS_ATOM_NULL {
        return Err(rquickjs::Error::Exception);
    }
    Ok(atom)
}

impl Drop for Made {
    fn drop(&mut self) {
        for &atom in &self.names {
            if atom != qjs::JS_ATOM_NULL {
                // SAFETY: the atom was made by this runtime, which outlives `Made` (`Loaded`
                // drops it first), and is freed once.
                unsafe { qjs::JS_FreeAtomRT(self.runtime, atom) };
            }
        }
        let values = [self.url_class, self.base, self.key, self.log, self.module];
        for &value in values.iter().chain(&self.shapes) {
            // SAFETY: each value is owned by `Made`, of this runtime, and freed once.
            unsafe { qjs::JS_FreeValueRT(self.runtime, value) };
        }
    }
}

/// The input `{ payload, headers, url, path }`: `url` the lazily built URL of `target`, `path`
/// the hook's `name`. The values made here are handed to QuickJS as they are made, with no
/// rquickjs `Value` around them (each of those holds a reference to the context, taken and
/// dropped through QuickJS, and one to the value).
pub fn input<'js>(
    ctx: &Ctx<'js>,
    made: &Made,
    name: String,
    target: String,
    headers: Owned<'js>,
    payload: Owned<'js>,
) -> rquickjs::Result<Owned<'js>> {
    let input = object(ctx)?;
    define_owned(ctx, &input, made.name(Name::Payload), payload.into_raw())?;
    define_owned(ctx, &input, made.name(Name::Headers), headers.into_raw())?;
    let (getter, setter) = accessor(ctx, made, &target)?;
    define_url(ctx, made, &input, getter, setter)?;
    define_owned(ctx, &input, made.name(Name::Path), string(ctx, &name))?;
    Ok(input)
}

/// The `url` accessor of an input whose request target is `target`: its getter and its setter,
/// owned by the caller.
fn accessor(
    ctx: &Ctx<'_>,
    made: &Made,
    target: &str,
) -> rquickjs::Result<(qjs::JSValue, qjs::JSValue)> {
    let raw = ctx.as_raw().as_ptr();
    let target = string(ctx, target);
    // SAFETY: only the tag is read.
    if unsafe { qjs::JS_IsException(target) } {
        return Err(rquickjs::Error::Exception);
    }
    let mut getter_data = [
        target,
        qjs::JS_UNDEFINED,
        made.url_class,
        made.base,
        made.key,
    ];
    // SAFETY: the context is live, the data (which QuickJS duplicates) are live values, and
    // the function returned is owned. Its name's atom is one of `made`'s, found, not made.
    // The target, held by the getter's data now, is freed once.
    let getter = unsafe {
        let getter = qjs::JS_NewCFunctionData2(
            raw,
            Some(url_get),
            c"get url".as_ptr(),
            0,
            0,
            getter_data.len() as _,
            getter_data.as_mut_ptr(),
        );
        qjs::JS_FreeValue(raw, target);
        getter
    };
    // SAFETY: only the tag is read.
    if unsafe { qjs::JS_IsException(getter) } {
        return Err(rquickjs::Error::Exception);
    }
    let mut setter_data = [getter, made.key];
    // SAFETY: as for the getter.
    let setter = unsafe {
        qjs::JS_NewCFunctionData2(
            raw,
            Some(url_set),
            c"set url".as_ptr(),
            1,
            0,
            setter_data.len() as _,
            setter_data.as_mut_ptr(),
        )
    };
    // SAFETY: only the tag is read; the getter is owned here, and freed once.
    if unsafe { qjs::JS_IsException(setter) } {
        unsafe { qjs::JS_FreeValue(raw, getter) };
        return Err(rquickjs::Error::Exception);
    }
    Ok((getter, setter))
}

/// Defines `object.url` as the literal's `get url()` and `set url(value)` defined it: an
/// accessor, enumerable and configurable. Takes `getter` and `setter`, owned values (or
/// `undefined`).
fn define_url(
    ctx: &Ctx<'_>,
    made: &Made,
    object: &Owned<'_>,
    getter: qjs::JSValue,
    setter: qjs::JSValue,
) -> rquickjs::Result<()> {
    // SAFETY: the context and the object are live; QuickJS takes the getter and the setter,
    // freed whatever the definition's outcome.
    let status = unsafe {
        qjs::JS_DefinePropertyGetSet(
            ctx.as_raw().as_ptr(),
            object.as_raw(),
            made.name(Name::Url),
            getter,
            setter,
            (qjs::JS_PROP_ENUMERABLE | qjs::JS_PROP_CONFIGURABLE) as _,
        )
    };
    if status < 0 {
        return Err(rquickjs::Error::Exception);
    }
    Ok(())
}

/// `ctx` `{ mappingId, config, body, log }`: `config` the mapping's configuration as `JSON.parse`
/// gives it (its error thrown, as the adapter's `JSON.parse` threw it), `undefined` when the
/// mapping has none. Values handed to QuickJS as [`input`]'s are.
pub fn context<'js>(
    ctx: &Ctx<'js>,
    made: &Made,
    mapping_id: String,
    config: Option<String>,
    body: Owned<'js>,
) -> rquickjs::Result<Owned<'js>> {
    let raw = ctx.as_raw().as_ptr();
    let context = object(ctx)?;
    define_owned(
        ctx,
        &context,
        made.name(Name::MappingId),
        string(ctx, &mapping_id),
    )?;
    let config = match config {
        None => qjs::JS_UNDEFINED,
        Some(text) => {
            let mut text = text.into_bytes();
            let len = text.len();
            // QuickJS's parser needs a NUL after the text.
            text.push(0);
            // SAFETY: the context is live, and `text` holds `len` bytes followed by a NUL; the
            // value returned is owned.
            unsafe { qjs::JS_ParseJSON(raw, text.as_ptr().cast(), len as _, c"<input>".as_ptr()) }
        }
    };
    define_owned(ctx, &context, made.name(Name::Config), config)?;
    define_owned(ctx, &context, made.name(Name::Body), body.into_raw())?;
    // SAFETY: `made.log` is live for as long as `made`; the reference is the definition's.
    let log = unsafe { qjs::JS_DupValue(raw, made.log) };
    define_owned(ctx, &context, made.name(Name::Log), log)?;
    Ok(context)
}

/// The input's `get url()`: the URL built or set, else `new URL(target, 'http://localhost')`,
/// kept (`url ??= new URL(...)`). Called by its setter with the key and a value, it stores the
/// value instead; nothing else can pass the key.
unsafe extern "C" fn url_get(
    ctx: *mut qjs::JSContext,
    _this: qjs::JSValue,
    argc: std::ffi::c_int,
    argv: *mut qjs::JSValue,
    _magic: std::ffi::c_int,
    data: *mut qjs::JSValue,
) -> qjs::JSValue {
    // SAFETY: QuickJS passes the function's own data, five values that live as long as the
    // function, which the call holds; `argv` has `argc` values. The data are read and written
    // through the pointer, never borrowed: the constructor runs JavaScript, which may call this
    // getter again.
    unsafe {
        if argc == 2 && same_object(*argv, *data.add(GETTER_KEY)) {
            store(ctx, data.add(SLOT), *argv.add(1));
            return qjs::JS_UNDEFINED;
        }
        let slot = *data.add(SLOT);
        if !qjs::JS_IsUndefined(slot) && !qjs::JS_IsNull(slot) {
            return qjs::JS_DupValue(ctx, slot);
        }
        let mut args = [*data.add(TARGET), *data.add(BASE)];
        let url = qjs::JS_CallConstructor(ctx, *data.add(CLASS), 2, args.as_mut_ptr());
        if !qjs::JS_IsException(url) {
            store(ctx, data.add(SLOT), url);
        }
        url
    }
}

/// Stores a new reference to `value` at `slot`, freeing the value it held.
///
/// # Safety
/// `slot` holds a live value of the context's runtime, owned by the slot.
unsafe fn store(ctx: *mut qjs::JSContext, slot: *mut qjs::JSValue, value: qjs::JSValue) {
    // SAFETY: as the caller promises; the old value is freed after the new one is in place.
    unsafe {
        let old = std::ptr::replace(slot, qjs::JS_DupValue(ctx, value));
        qjs::JS_FreeValue(ctx, old);
    }
}

/// The input's `set url(value)`: stores `value` through its getter, with the key.
unsafe extern "C" fn url_set(
    ctx: *mut qjs::JSContext,
    _this: qjs::JSValue,
    _argc: std::ffi::c_int,
    argv: *mut qjs::JSValue,
    _magic: std::ffi::c_int,
    data: *mut qjs::JSValue,
) -> qjs::JSValue {
    // SAFETY: QuickJS passes the function's own data (its getter and the key) and at least as
    // many arguments as its length, 1 (`undefined` for those not given).
    unsafe {
        let mut args = [*data.add(SETTER_KEY), *argv];
        qjs::JS_Call(
            ctx,
            *data.add(GETTER),
            qjs::JS_UNDEFINED,
            2,
            args.as_mut_ptr(),
        )
    }
}

/// Whether `a` and `b` are the same object.
fn same_object(a: qjs::JSValue, b: qjs::JSValue) -> bool {
    // SAFETY: each only reads the value's tag or pointer.
    unsafe {
        qjs::JS_IsObject(a)
            && qjs::JS_IsObject(b)
            && qjs::JS_VALUE_GET_PTR(a) == qjs::JS_VALUE_GET_PTR(b)
    }
}

/// Defines `object[atom]` as a literal does, an own data property, writable, enumerable and
/// configurable, taking `value`: an owned value, or the exception that making it returned (then
/// the error, with nothing defined).
pub fn define_owned(
    ctx: &Ctx<'_>,
    object: &Owned<'_>,
    atom: qjs::JSAtom,
    value: qjs::JSValue,
) -> rquickjs::Result<()> {
    // SAFETY: only the tag is read.
    if unsafe { qjs::JS_IsException(value) } {
        return Err(rquickjs::Error::Exception);
    }
    // SAFETY: the context and the object are live; QuickJS takes the value, freed whatever the
    // definition's outcome.
    let status = unsafe {
        qjs::JS_DefinePropertyValue(
            ctx.as_raw().as_ptr(),
            object.as_raw(),
            atom,
            value,
            qjs::JS_PROP_C_W_E as _,
        )
    };
    if status < 0 {
        return Err(rquickjs::Error::Exception);
    }
    Ok(())
}

/// The engine's atom for `name`, owned by the caller (freed with `JS_FreeAtomRT`).
pub fn atom(ctx: &Ctx<'_>, name: &str) -> rquickjs::Result<qjs::JSAtom> {
    // SAFETY: the context is live, and the pointer and length are those of `name`.
    let atom =
        unsafe { qjs::JS_NewAtomLen(ctx.as_raw().as_ptr(), name.as_ptr().cast(), name.len() as _) };
    if atom == qjs::JS_ATOM_NULL {
        return Err(rquickjs::Error::Exception);
    }
    Ok(atom)
}

/// A new string of `text`, owned by the caller, or the exception.
pub fn string(ctx: &Ctx<'_>, text: &str) -> qjs::JSValue {
    // SAFETY: the context is live, and the pointer and length are those of `text`, UTF-8.
    unsafe { qjs::JS_NewStringLen(ctx.as_raw().as_ptr(), text.as_ptr().cast(), text.len() as _) }
}

/// A new object, as `{}` makes it.
pub fn object<'js>(ctx: &Ctx<'js>) -> rquickjs::Result<Owned<'js>> {
    // SAFETY: the context is live; the object returned is owned.
    Owned::new(ctx, unsafe { qjs::JS_NewObject(ctx.as_raw().as_ptr()) })
}

/// A new reference to `value`, which the caller owns.
fn dup(value: &Value<'_>) -> qjs::JSValue {
    // SAFETY: the value is live, and its context with it.
    unsafe { qjs::JS_DupValue(value.ctx().as_raw().as_ptr(), value.as_raw()) }
}

/// A value of the context that the runtime owns, freed when dropped: what an rquickjs `Value`
/// is without the reference to the context that each `Value` takes and drops through QuickJS
/// (`JS_DupContext`, `JS_FreeContext`). For the values a call makes and hands to QuickJS.
pub struct Owned<'js> {
    ctx: *mut qjs::JSContext,
    value: qjs::JSValue,
    context: PhantomData<Ctx<'js>>,
}

impl<'js> Owned<'js> {
    /// `value`, an owned value of `ctx` (QuickJS's result that the caller holds), or the error
    /// for the exception pending when it is one.
    pub fn new(ctx: &Ctx<'js>, value: qjs::JSValue) -> rquickjs::Result<Owned<'js>> {
        // SAFETY: only the tag is read.
        if unsafe { qjs::JS_IsException(value) } {
            return Err(rquickjs::Error::Exception);
        }
        Ok(Owned {
            ctx: ctx.as_raw().as_ptr(),
            value,
            context: PhantomData,
        })
    }

    /// A new reference to `value`.
    pub fn of(value: &Value<'js>) -> Owned<'js> {
        Owned {
            ctx: value.ctx().as_raw().as_ptr(),
            value: dup(value),
            context: PhantomData,
        }
    }

    /// The value, borrowed.
    pub fn as_raw(&self) -> qjs::JSValue {
        self.value
    }

    /// The value, its reference now the caller's.
    pub fn into_raw(self) -> qjs::JSValue {
        let value = self.value;
        std::mem::forget(self);
        value
    }

    /// A new reference to the value, which the caller owns.
    fn dup(&self) -> qjs::JSValue {
        // SAFETY: the context lives for `'js`, and the value with it.
        unsafe { qjs::JS_DupValue(self.ctx, self.value) }
    }

    /// The value as an rquickjs `Value` (which takes a reference to the context).
    pub fn into_value(self, ctx: &Ctx<'js>) -> Value<'js> {
        // SAFETY: the value is an owned value of this context, handed over.
        unsafe { Value::from_raw(ctx.clone(), self.into_raw()) }
    }
}

impl Drop for Owned<'_> {
    fn drop(&mut self) {
        // SAFETY: the context lives for `'js`; the value is owned, and freed once.
        unsafe { qjs::JS_FreeValue(self.ctx, self.value) };
    }
}

#[cfg(test)]
pub(crate) mod tests;
