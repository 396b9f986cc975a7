//! hookgate's JavaScript runtime: QuickJS behind the WIT world `transform`
//! (`wit/transform.wit`, hookgate:transform@0.2.0).
//!
//! This is a core module, not yet a component. The SDK's build (`transforms/js-sdk/build.mjs`)
//! runs it under wizer, which calls [`initialize`] with the user's bundle on stdin: the engine
//! starts, the prelude installs the web globals, and the bundle (the SDK's adapter with the user's
//! module) is evaluated. Wizer then writes the initialised memory out as the module's data, so an
//! instance starts with the module already loaded: a fresh instance costs a copy-on-write mapping
//! of about a megabyte, not an engine start (docs/transforms.md#javascript-transforms).
//!
//! Every instance starts from the state initialisation left, so what must differ between
//! instances (`Math.random`, `crypto`, `performance.now`'s origin) is drawn at call time and
//! refused or forgotten during initialisation. What QuickJS and Rust seed once while starting
//! (the atom hash seed, the keys of rquickjs's internal type map) is shared by a build's
//! instances; neither is an input a transform can observe or an attacker can exploit.

use std::cell::{Cell, RefCell};
use std::io::Read;

use rquickjs::{Context, Ctx, Function, Object, Persistent, Promise, Runtime, Value, qjs};

mod arguments;
mod convert;
mod globals;
mod outcome;
mod rejections;

wit_bindgen::generate!({ path: "../../wit", world: "transform" });

use exports::hookgate::transform::handler::{Guest, Outcome, Request};
use hookgate::transform::types::Level;

/// The engine with the bundle loaded: created once, by [`initialize`], and part of the snapshot.
/// Its fields drop in their order: what points into the engine before the engine.
struct Loaded {
    /// The adapter's `handler.userFunction`: throws the error of a module without the function
    /// a call asks for.
    user_function: Persistent<Function<'static>>,
    /// The adapter's `handler.settle`: `await` for a value that is not yet an outcome.
    settle: Persistent<Function<'static>>,
    /// `Reflect.apply` as it was before the bundle ran: `settle` calls a thenable's `then` with
    /// it, as `await` would, whatever the module's top level did to the global.
    apply: Persistent<Function<'static>>,
    /// The adapter's `handler.errorText`: the message of what a transform threw.
    error_text: Persistent<Function<'static>>,
    /// The adapter's helpers for reading an outcome.
    helpers: outcome::Helpers,
    /// The names the runtime reads from a transform's values, as the engine's atoms.
    names: outcome::Names,
    /// What the transform's arguments are built from.
    made: arguments::Made,
    context: Context,
    /// Kept alive for `context`, which needs it.
    _runtime: Runtime,
}

thread_local! {
    // A wasm32-wasip1 instance has one thread: these are the instance's globals.
    static LOADED: RefCell<Option<Loaded>> = const { RefCell::new(None) };
    /// True while wizer runs [`initialize`]: hookgate's imports cannot be called then.
    static INITIALISING: Cell<bool> = const { Cell::new(false) };
}

/// Whether the module is being initialised (by wizer), when only WASI may be called.
fn initialising() -> bool {
    INITIALISING.with(Cell::get)
}

/// Loads the bundle read from stdin. Called once, by wizer, at build time; a failure (a syntax
/// error, a top-level `throw`, a bundle without the adapter's `handler`) is printed and ends the
/// build.
// SAFETY: `export_name` is unsafe because a symbol name can clash with another definition;
// `wizer.initialize` is the one name wizer calls, and nothing else in the module defines it.
#[unsafe(export_name = "wizer.initialize")]
pub extern "C" fn initialize() {
    INITIALISING.with(|i| i.set(true));
    let mut bundle = String::new();
    let loaded = std::io::stdin()
        .read_to_string(&mut bundle)
        .map_err(|err| format!("cannot read the bundle from stdin: {err}"))
        .and_then(|_| load(bundle));
    match loaded {
        Ok(loaded) => LOADED.with(|slot| *slot.borrow_mut() = Some(loaded)),
        Err(message) => {
            eprintln!("{message}");
            std::process::exit(1);
        }
    }
    globals::forget_instance_state();
    INITIALISING.with(|i| i.set(false));
}

/// Where the SDK's WASI preview 1 functions (`PREVIEW1` in transforms/js-sdk/build.mjs) lower
/// a write's result and the wall clock's datetime: static, so that no write needs an allocation.
/// Rust's message that an allocation failed is such a write; were its buffer allocated, it
/// would fail again and recurse until the stack overflowed.
#[cfg(target_family = "wasm")]
static PREVIEW1_SCRATCH: [std::sync::atomic::AtomicU64; 2] =
    [const { std::sync::atomic::AtomicU64::new(0) }; 2];

/// The address of [`PREVIEW1_SCRATCH`]'s 16 bytes, 8-aligned, the same for the instance's life.
// SAFETY: `export_name` is unsafe because a symbol name can clash with another definition;
// nothing else in the module defines this one.
#[cfg(target_family = "wasm")]
#[unsafe(export_name = "hookgate_preview1_scratch")]
pub extern "C" fn preview1_scratch() -> *mut u8 {
    PREVIEW1_SCRATCH.as_ptr().cast_mut().cast()
}

/// Starts the engine with the prelude and evaluates `bundle`, an ES module exporting `handler`.
fn load(bundle: String) -> Result<Loaded, String> {
    let runtime = Runtime::new().map_err(|err| format!("cannot start QuickJS: {err}"))?;
    let context = Context::full(&runtime).map_err(|err| format!("cannot start QuickJS: {err}"))?;
    rejections::track(&runtime);
    let entries = context.with(|ctx| -> Result<_, String> {
        fast_paths(&ctx)?;
        globals::install(&ctx).map_err(|err| thrown(&ctx, err))?;
        ctx.eval::<(), _>(INSTANTIATE_BUILTINS)
            .map_err(|err| thrown(&ctx, err))?;
        // Taken before the bundle runs, which may replace them.
        let builtin = |object: &str, name: &str| -> Result<Function, String> {
            ctx.globals()
                .get::<_, Object>(object)
                .and_then(|object| object.get(name))
                .map_err(|err| thrown(&ctx, err))
        };
        let is_array = builtin("Array", "isArray")?;
        let url_class: Value = ctx.globals().get("URL").map_err(|err| thrown(&ctx, err))?;
        let apply = Persistent::save(&ctx, builtin("Reflect", "apply")?);
        let names = outcome::Names::new(&ctx).map_err(|err| thrown(&ctx, err))?;
        let (module, evaluated) = rquickjs::Module::declare(ctx.clone(), "transform.js", bundle)
            .and_then(|module| module.eval())
            .map_err(|err| thrown(&ctx, err))?;
        settle::<()>(&ctx, &evaluated)?;
        // What the top level queued (a `.then`, the rest of an async function it started) runs
        // now too, or every instance's first call would run it after the transform.
        while ctx.execute_pending_job() {}
        if let Some(reason) = rejections::take(&ctx).into_iter().next() {
            return Err(format!(
                "a promise the top level started was rejected and nothing handled it: {reason}"
            ));
        }
        let handler: Object = module
            .namespace()
            .and_then(|ns| ns.get("handler"))
            .map_err(|_| "the bundle exports no `handler` (build it with the SDK)".to_string())?;
        let entry = |name: &str| {
            handler
                .get::<_, Function>(name)
                .map(|function| Persistent::save(&ctx, function))
                .map_err(|_| format!("the bundle's `handler` has no `{name}` function"))
        };
        let log = entry("ctxLog")?
            .restore(&ctx)
            .map_err(|err| thrown(&ctx, err))?;
        let user_module: Object = handler
            .get("userModule")
            .map_err(|_| "the bundle's `handler` has no `userModule` (build it with the SDK)")?;
        let made =
            arguments::Made::new(&ctx, url_class, log.into_value(), user_module.into_value())
                .map_err(|err| thrown(&ctx, err))?;
        let helpers = outcome::Helpers {
            ignored: entry("ignored")?,
            reply: entry("reply")?,
            is_array: Persistent::save(&ctx, is_array),
        };
        Ok((
            entry("userFunction")?,
            entry("settle")?,
            apply,
            entry("errorText")?,
            helpers,
            names,
            made,
        ))
    })?;
    let (user_function, settle, apply, error_text, helpers, names, made) = entries;
    leave_room(&context)?;
    Ok(Loaded {
        user_function,
        settle,
        apply,
        error_text,
        helpers,
        names,
        made,
        context,
        _runtime: runtime,
    })
}

/// Reads every property of the built-ins (from `globalThis`, through their values, accessors and
/// prototypes) by its descriptor, which calls no getter. QuickJS defines most built-in functions
/// and `JSON`, `Reflect` and `Atomics` lazily, created when first read: read here, before the
/// bundle's top level runs, they are in the snapshot, and an instance's first call does not make
/// again the ones it uses (`JSON.parse`, `Object.create`, `String.prototype.trim`, ...). Only
/// QuickJS's objects and the prelude's are reachable yet, so no getter or Proxy of the bundle's
/// can run. A loop rather than a recursive closure, which would be a cycle that only the garbage
/// collector frees, left in the snapshot with the set of everything it saw.
const INSTANTIATE_BUILTINS: &str = r#"(() => {
  const seen = new Set();
  const pending = [globalThis];
  while (pending.length > 0) {
    const value = pending.pop();
    if ((typeof value !== 'object' && typeof value !== 'function') || value === null) continue;
    if (seen.has(value)) continue;
    seen.add(value);
    for (const key of Reflect.ownKeys(value)) {
      const property = Object.getOwnPropertyDescriptor(value, key);
      pending.push(property.value, property.get, property.set);
    }
    pending.push(Object.getPrototypeOf(value));
  }
})()"#;

/// Installs the engine's own fast paths (`quickjs-split.c`), before any JavaScript runs: the
/// split, and QuickJS's runtime allocating through functions that keep an emptied arena for the
/// next call (and hand kept arenas back before an allocation fails). They are compiled into the
/// WebAssembly build only (zig-cc swaps that file in); natively QuickJS runs as rquickjs-sys
/// builds it.
fn fast_paths(ctx: &Ctx<'_>) -> Result<(), String> {
    #[cfg(target_family = "wasm")]
    {
        unsafe extern "C" {
            fn hookgate_quickjs_install(ctx: *mut rquickjs::qjs::JSContext) -> std::ffi::c_int;
        }
        // SAFETY: the context is live for the call, and the function only defines a property on
        // its RegExp.prototype, takes atoms from it and replaces its runtime's malloc functions
        // with ones over the same malloc.
        if unsafe { hookgate_quickjs_install(ctx.as_raw().as_ptr()) } < 0 {
            return Err(thrown(ctx, rquickjs::Error::Exception));
        }
    }
    #[cfg(not(target_family = "wasm"))]
    let _ = ctx;
    Ok(())
}

/// Leaves the loaded heap room for a call (`hookgate_quickjs_leave_room` in `quickjs-split.c`:
/// QuickJS's atom and shape tables doubled, and an empty arena kept in every size class), so
/// that no fresh instance's first call grows them again or makes an arena. Compiled into the
/// WebAssembly build only, as [`fast_paths`] is.
fn leave_room(context: &Context) -> Result<(), String> {
    #[cfg(target_family = "wasm")]
    context.with(|ctx| {
        unsafe extern "C" {
            fn hookgate_quickjs_leave_room(rt: *mut rquickjs::qjs::JSRuntime) -> std::ffi::c_int;
        }
        // SAFETY: the runtime is live for the call, no JavaScript runs, and the function only
        // resizes two of the runtime's tables and adds empty arenas to its allocator's lists.
        let done = unsafe {
            hookgate_quickjs_leave_room(rquickjs::qjs::JS_GetRuntime(ctx.as_raw().as_ptr()))
        };
        if done < 0 {
            return Err("cannot leave QuickJS room for a call: out of memory".to_string());
        }
        Ok(())
    })?;
    #[cfg(not(target_family = "wasm"))]
    let _ = context;
    Ok(())
}

/// Runs the job queue until `promise` settles: a transform has no timers or I/O to wait for, so
/// a promise still pending with no jobs left never settles.
fn settle<'js, T: rquickjs::FromJs<'js>>(
    ctx: &Ctx<'js>,
    promise: &Promise<'js>,
) -> Result<T, String> {
    match promise.finish() {
        Err(rquickjs::Error::WouldBlock) => Err(
            "the transform's promise never settles (no timers or I/O exist to settle it)".into(),
        ),
        other => other.map_err(|err| thrown(ctx, err)),
    }
}

/// The text of an error from QuickJS: for a JavaScript exception, its message and stack.
fn thrown(ctx: &Ctx<'_>, err: rquickjs::Error) -> String {
    if !err.is_exception() {
        return err.to_string();
    }
    describe(ctx, ctx.catch())
}

/// What was thrown or a promise rejected with: an Error's message and stack, a string as is, any
/// other value as JSON (`throw { code: 7 }`), else its kind.
fn describe<'js>(ctx: &Ctx<'js>, value: Value<'js>) -> String {
    if let Some(exception) = value.as_exception() {
        let message = exception.message().unwrap_or_default();
        return match exception.stack() {
            Some(stack) if !stack.is_empty() => format!("{message}\n{stack}"),
            _ => message,
        };
    }
    value
        .as_string()
        .and_then(|s| s.to_string().ok())
        .or_else(|| match ctx.json_stringify(value.clone()) {
            Ok(json) => json.and_then(|json| json.to_string().ok()),
            Err(_) => {
                // A `toJSON`, getter or Proxy trap that threw: its exception is not this one's
                // description, and must not be left pending for whatever runs next.
                ctx.catch();
                None
            }
        })
        .unwrap_or_else(|| format!("a JavaScript {} was thrown", value.type_name()))
}

/// Sends a line to hookgate's log (the `log` import). Natively, where there is no host (the
/// runtime's tests), the line is kept for the test to read instead.
fn host_log(level: Level, message: &str) {
    #[cfg(target_family = "wasm")]
    hookgate::transform::host::log(level, message);
    #[cfg(not(target_family = "wasm"))]
    NATIVE_LOG.with(|lines| lines.borrow_mut().push((level, message.to_string())));
}

#[cfg(not(target_family = "wasm"))]
thread_local! {
    /// What [`host_log`] was given, natively.
    static NATIVE_LOG: RefCell<Vec<(Level, String)>> = const { RefCell::new(Vec::new()) };
}

struct Transform;

impl Guest for Transform {
    /// Calls the transform's function and reads its outcome; what it throws is the call's error.
    fn transform(req: Request) -> Result<Outcome, String> {
        LOADED.with(|slot| {
            let slot = slot.borrow();
            let loaded = slot
                .as_ref()
                .ok_or("the JavaScript runtime was not initialised with a bundle")?;
            call(loaded, req)
        })
    }
}

/// One call of the transform: its outcome or the error it threw, and the rejections it left
/// unhandled logged as warnings.
fn call(loaded: &Loaded, req: Request) -> Result<Outcome, String> {
    loaded.context.with(|ctx| {
        let call = convert::request(&ctx, &loaded.made, req).map_err(|err| thrown(&ctx, err))?;
        let outcome = call_function(&ctx, loaded, call)
            .and_then(|value| settled(&ctx, loaded, value))
            .and_then(|value| outcome::read(&ctx, &loaded.names, &loaded.helpers, value));
        let outcome = match outcome {
            Ok(outcome) => Ok(outcome),
            Err(err) if err.is_exception() => Err(user_error(&ctx, loaded)?),
            Err(rquickjs::Error::WouldBlock) => return Err(NEVER_SETTLES.into()),
            Err(err) => return Err(thrown(&ctx, err)),
        };
        for reason in rejections::take(&ctx) {
            host_log(
                Level::Warn,
                &format!("a promise was rejected and nothing handled it: {reason}"),
            );
        }
        outcome
    })
}

/// Calls the module's function as the adapter called it, `fn(input, ctx)`: found first (a
/// module without it fails the call with the adapter's `userFunction`'s error), then `ctx`
/// built. The runtime calls it itself: a frame of the adapter's around it cost more than the
/// look-up.
fn call_function<'js>(
    ctx: &Ctx<'js>,
    loaded: &Loaded,
    call: convert::Call<'js>,
) -> rquickjs::Result<Value<'js>> {
    let function = match loaded.made.function(ctx, call.export_name.as_deref())? {
        Some(function) => function,
        None => {
            let function: Function = loaded
                .user_function
                .clone()
                .restore(ctx)?
                .call((call.export_name,))?;
            arguments::Owned::of(function.as_value())
        }
    };
    let context = arguments::context(ctx, &loaded.made, call.mapping_id, call.config, call.body)?;
    // Called through QuickJS rather than rquickjs's `call`, which takes a reference to the context
    // for its arguments. (rquickjs's `call` also resumes the panic of a Rust function that the
    // call reached; the built runtime aborts on a panic, `panic = "abort"`.)
    let mut args = [call.input.as_raw(), context.as_raw()];
    // SAFETY: the context, the function and the arguments are live; QuickJS borrows the
    // arguments, and the value returned is owned.
    let value = unsafe {
        qjs::JS_Call(
            ctx.as_raw().as_ptr(),
            function.as_raw(),
            qjs::JS_UNDEFINED,
            args.len() as _,
            args.as_mut_ptr(),
        )
    };
    Ok(arguments::Owned::new(ctx, value)?.into_value(ctx))
}

const NEVER_SETTLES: &str =
    "the transform's promise never settles (no timers or I/O exist to settle it)";

/// `value`, what the transform's function returned, as an async function that awaited it would
/// see it: at once when awaiting changes nothing (neither a promise nor a thenable, and no job
/// queued that would run before the awaiting function went on), else through the adapter's
/// `settle`, which awaits it. A thenable's `then` is read once, as `await` reads it.
fn settled<'js>(
    ctx: &Ctx<'js>,
    loaded: &Loaded,
    value: Value<'js>,
) -> rquickjs::Result<Value<'js>> {
    let then = if value.is_promise() {
        Value::new_undefined(ctx.clone())
    } else {
        let then = match value.is_object() {
            true => Some(arguments::Owned::new(
                ctx,
                outcome::then_of(ctx, &loaded.names, &value),
            )?),
            false => None,
        };
        match then {
            // SAFETY: the context and the value are live.
            Some(then) if unsafe { qjs::JS_IsFunction(ctx.as_raw().as_ptr(), then.as_raw()) } => {
                then.into_value(ctx)
            }
            _ if !jobs_pending(ctx) => return Ok(value),
            _ => Value::new_null(ctx.clone()),
        }
    };
    let apply = loaded.apply.clone().restore(ctx)?;
    let settling: Promise = loaded
        .settle
        .clone()
        .restore(ctx)?
        .call((value, then, apply))?;
    let settled: Object = settling.finish()?;
    let value = settled.get("value")?;
    if settled.get::<_, Option<bool>>("threw")? == Some(true) {
        // What the awaited promise was rejected with, thrown as the transform's exception.
        return Err(ctx.throw(value));
    }
    Ok(value)
}

/// Whether the engine has jobs queued (promise reactions, `queueMicrotask`).
fn jobs_pending(ctx: &Ctx<'_>) -> bool {
    // SAFETY: the context, and so its runtime, is live.
    unsafe { rquickjs::qjs::JS_IsJobPending(rquickjs::qjs::JS_GetRuntime(ctx.as_raw().as_ptr())) }
}

/// The call's error for the exception pending: the message of what the transform threw, by the
/// adapter's `errorText`. An uncatchable one (the engine's interrupt) is the runtime's own.
fn user_error(ctx: &Ctx<'_>, loaded: &Loaded) -> Result<String, String> {
    let exception = ctx.catch();
    if exception.is_uncatchable_error() {
        return Err(describe(ctx, exception));
    }
    restore(ctx, &loaded.error_text)?
        .call((exception,))
        .map_err(|err| thrown(ctx, err))
}

/// One of the adapter's functions, in this context.
fn restore<'js>(
    ctx: &Ctx<'js>,
    function: &Persistent<Function<'static>>,
) -> Result<Function<'js>, String> {
    function
        .clone()
        .restore(ctx)
        .map_err(|err| thrown(ctx, err))
}

// Natively (the runtime's tests) the export's symbol names are of no use.
#[cfg(target_family = "wasm")]
export!(Transform);

#[cfg(test)]
mod fuzz;

#[cfg(test)]
mod first_call;
