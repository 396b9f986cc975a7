//! The globals a transform finds beyond what QuickJS-ng itself defines (`atob`, `btoa`,
//! `queueMicrotask`, `performance`, ...): `console`, `TextEncoder`, `TextDecoder`, `URL`,
//! `URLSearchParams`, `crypto.getRandomValues`, `crypto.randomUUID`, a `fetch` that says there is
//! no network, and a `Math.random` drawn per instance. `prelude.js` defines them over the native
//! functions here, which do what JavaScript would do slowly or wrongly (WHATWG URL parsing with
//! the `url` crate, UTF-8, randomness from WASI).

use std::borrow::Cow;
use std::cell::Cell;
use std::time::Instant;

use rquickjs::context::EvalOptions;
use rquickjs::{Array, Ctx, Exception, Function, Object, TypedArray, Value};
use url::Url;

use crate::hookgate::transform::types::Level;

/// Evaluates the prelude with the native functions it wraps.
pub fn install(ctx: &Ctx<'_>) -> rquickjs::Result<()> {
    let native = Object::new(ctx.clone())?;
    native.set("log", Function::new(ctx.clone(), log)?)?;
    native.set("utf8Decode", Function::new(ctx.clone(), utf8_decode)?)?;
    native.set("utf8Encode", Function::new(ctx.clone(), utf8_encode)?)?;
    native.set("urlParse", Function::new(ctx.clone(), url_parse)?)?;
    native.set("urlSet", Function::new(ctx.clone(), url_set)?)?;
    native.set("formParse", Function::new(ctx.clone(), form_parse)?)?;
    native.set("formSerialize", Function::new(ctx.clone(), form_serialize)?)?;
    native.set("randomBytes", Function::new(ctx.clone(), random_bytes)?)?;
    native.set("random", Function::new(ctx.clone(), random)?)?;
    native.set("now", Function::new(ctx.clone(), now)?)?;
    let mut options = EvalOptions::default();
    options.filename = Some("hookgate:prelude.js".into());
    let prelude: Function = ctx.eval_with_options(include_str!("prelude.js"), options)?;
    prelude.call((native,))
}

/// `level` is one of the adapter's four; anything else is an error, so a typo is not silent.
fn log(ctx: Ctx<'_>, level: String, message: String) -> rquickjs::Result<()> {
    let level = match level.as_str() {
        "debug" => Level::Debug,
        "info" => Level::Info,
        "warn" => Level::Warn,
        "error" => Level::Error,
        _ => return Err(Exception::throw_range(&ctx, "log level")),
    };
    if crate::initialising() {
        // hookgate's `log` import cannot be called while wizer runs the module's top level: the
        // build shows what the top level logs instead.
        eprintln!("{message}");
    } else {
        crate::host_log(level, &message);
    }
    Ok(())
}

/// UTF-8 to a string: `fatal` throws on invalid bytes (else U+FFFD), and a leading byte-order
/// mark is dropped unless `ignore_bom`, as `TextDecoder` does.
fn utf8_decode(
    ctx: Ctx<'_>,
    bytes: TypedArray<'_, u8>,
    fatal: bool,
    ignore_bom: bool,
) -> rquickjs::Result<String> {
    // SAFETY: `as_bytes` is unsafe because JavaScript could detach or resize the buffer while
    // the slice lives; no JavaScript runs before the slice is copied into the string below.
    let bytes = unsafe { bytes.as_bytes() }
        .ok_or_else(|| Exception::throw_type(&ctx, "TextDecoder.decode: the buffer is detached"))?;
    if fatal {
        std::str::from_utf8(without_bom(bytes, ignore_bom))
            .map(str::to_owned)
            .map_err(|_| Exception::throw_type(&ctx, "The encoded data was not valid utf-8"))
    } else {
        Ok(utf8_text(bytes, ignore_bom).into_owned())
    }
}

/// UTF-8 to text as a non-fatal `TextDecoder` decodes it: invalid bytes as U+FFFD, and a leading
/// byte-order mark dropped unless `ignore_bom`.
pub fn utf8_text(bytes: &[u8], ignore_bom: bool) -> Cow<'_, str> {
    String::from_utf8_lossy(without_bom(bytes, ignore_bom))
}

fn without_bom(bytes: &[u8], ignore_bom: bool) -> &[u8] {
    match bytes {
        [0xEF, 0xBB, 0xBF, rest @ ..] if !ignore_bom => rest,
        _ => bytes,
    }
}

fn utf8_encode<'js>(ctx: Ctx<'js>, text: String) -> rquickjs::Result<TypedArray<'js, u8>> {
    TypedArray::new(ctx, text.into_bytes())
}

/// The WHATWG components of `input` against `base`, in the order `prelude.js` reads them, or
/// `undefined` when either does not parse.
fn url_parse<'js>(
    ctx: Ctx<'js>,
    input: String,
    base: Option<String>,
) -> rquickjs::Result<Value<'js>> {
    let parsed = match base {
        Some(base) => Url::parse(&base).and_then(|base| base.join(&input)),
        None => Url::parse(&input),
    };
    match parsed {
        Ok(url) => components(&ctx, &url).map(Array::into_value),
        Err(_) => Ok(Value::new_undefined(ctx)),
    }
}

/// `href` with one component set as the URL setters set it, as components again.
fn url_set<'js>(
    ctx: Ctx<'js>,
    href: String,
    field: String,
    value: String,
) -> rquickjs::Result<Array<'js>> {
    use url::quirks;
    let mut url = Url::parse(&href).map_err(|_| Exception::throw_type(&ctx, "Invalid URL"))?;
    // The setters ignore a value they cannot use, as the standard's do (except `href`, which
    // `prelude.js` parses itself).
    let _ = match field.as_str() {
        "protocol" => quirks::set_protocol(&mut url, &value),
        "username" => quirks::set_username(&mut url, &value),
        "password" => quirks::set_password(&mut url, &value),
        "host" => quirks::set_host(&mut url, &value),
        "hostname" => quirks::set_hostname(&mut url, &value),
        "port" => quirks::set_port(&mut url, &value),
        "pathname" => {
            quirks::set_pathname(&mut url, &value);
            Ok(())
        }
        "search" => {
            quirks::set_search(&mut url, &value);
            Ok(())
        }
        "hash" => {
            quirks::set_hash(&mut url, &value);
            Ok(())
        }
        _ => return Err(Exception::throw_type(&ctx, "unknown URL component")),
    };
    components(&ctx, &url)
}

fn components<'js>(ctx: &Ctx<'js>, url: &Url) -> rquickjs::Result<Array<'js>> {
    use url::quirks;
    let array = Array::new(ctx.clone())?;
    let fields = [
        quirks::href(url),
        quirks::protocol(url),
        quirks::username(url),
        quirks::password(url),
        quirks::host(url),
        quirks::hostname(url),
        quirks::port(url),
        quirks::pathname(url),
        quirks::search(url),
        quirks::hash(url),
    ];
    for (i, field) in fields.into_iter().enumerate() {
        array.set(i, field)?;
    }
    array.set(fields.len(), quirks::origin(url))?;
    Ok(array)
}

/// `application/x-www-form-urlencoded` text as name/value pairs.
fn form_parse(ctx: Ctx<'_>, text: String) -> rquickjs::Result<Array<'_>> {
    let array = Array::new(ctx.clone())?;
    for (i, (name, value)) in url::form_urlencoded::parse(text.as_bytes()).enumerate() {
        let pair = Array::new(ctx.clone())?;
        pair.set(0, name.as_ref())?;
        pair.set(1, value.as_ref())?;
        array.set(i, pair)?;
    }
    Ok(array)
}

/// Name/value pairs (arrays of two strings, as `URLSearchParams` keeps them) as
/// `application/x-www-form-urlencoded` text.
fn form_serialize(pairs: Array<'_>) -> rquickjs::Result<String> {
    let mut serializer = url::form_urlencoded::Serializer::new(String::new());
    for pair in pairs.iter::<Array>() {
        let pair = pair?;
        serializer.append_pair(&pair.get::<String>(0)?, &pair.get::<String>(1)?);
    }
    Ok(serializer.finish())
}

/// `len` bytes from the host's random source.
fn random_bytes(ctx: Ctx<'_>, len: usize) -> rquickjs::Result<TypedArray<'_, u8>> {
    let mut bytes = vec![0; len];
    fill(&ctx, &mut bytes)?;
    TypedArray::new(ctx, bytes)
}

fn fill(ctx: &Ctx<'_>, bytes: &mut [u8]) -> rquickjs::Result<()> {
    if crate::initialising() {
        // Whatever the top level drew would be the same in every instance.
        return Err(Exception::throw_message(
            ctx,
            "random numbers are not available at the top level (it runs once, at build time); \
             draw them inside the transform",
        ));
    }
    getrandom::fill(bytes).map_err(|_| Exception::throw_message(ctx, "no random source"))
}

thread_local! {
    /// `Math.random`'s xoroshiro128+ state, seeded from WASI at the first call of an instance.
    static RANDOM: Cell<Option<(u64, u64)>> = const { Cell::new(None) };
    /// `performance.now`'s origin: the instance's first reading.
    static ORIGIN: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// Forgets what initialisation drew, so that every instance starts from nothing.
pub fn forget_instance_state() {
    RANDOM.with(|state| state.set(None));
    ORIGIN.with(|origin| origin.set(None));
}

/// `performance.now`: milliseconds since the instance's first reading, from the host's monotonic
/// clock (which hookgate gives in whole milliseconds).
fn now() -> f64 {
    let reading = Instant::now();
    let origin = ORIGIN.with(|origin| *origin.get().get_or_insert(reading));
    ORIGIN.with(|cell| cell.set(Some(origin)));
    reading.duration_since(origin).as_secs_f64() * 1000.0
}

/// `Math.random`: QuickJS seeds its own from the clock when the engine starts, which is at build
/// time here, so every instance would repeat one sequence.
fn random(ctx: Ctx<'_>) -> rquickjs::Result<f64> {
    let (mut s0, mut s1) = match RANDOM.with(Cell::get) {
        Some(state) => state,
        None => {
            let mut seed = [0u8; 16];
            fill(&ctx, &mut seed)?;
            let (a, b) = seed.split_at(8);
            let a = u64::from_le_bytes(a.try_into().unwrap_or_default());
            let b = u64::from_le_bytes(b.try_into().unwrap_or_default());
            // xoroshiro128+ must not start from all zeroes.
            (a | 1, b)
        }
    };
    let result = s0.wrapping_add(s1);
    s1 ^= s0;
    s0 = s0.rotate_left(55) ^ s1 ^ (s1 << 14);
    s1 = s1.rotate_left(36);
    RANDOM.with(|state| state.set(Some((s0, s1))));
    // The top 53 bits as a fraction in [0, 1).
    Ok((result >> 11) as f64 / (1u64 << 53) as f64)
}
