//! What a 0.2 `transform` returns, lifted out of the guest. A merge, what a JavaScript module's
//! plain object becomes, is read field by field at offsets computed once, instead of through
//! wasmtime's generic derive, which looks up each field's type and computes its offset on every
//! call: 17 options (docs/performance.md, "The host's side of a call"). Every other outcome,
//! and every outcome of a component whose strings are not UTF-8, is lifted by the generated
//! bindings. What is read, and what is refused, is what the bindings read and refuse.
//!
//! [`Answer`] takes its type, and the check of it, from the generated `result<outcome,
//! string>`: a component's handler is checked against it when the component loads
//! (`contract::handler_transform`), and the layout read here is the one wasmtime computes for
//! that type (`tests::the_layout_is_the_canonical_abis`); `tests/it/transforms_abi.rs` (UTF-8
//! and UTF-16 components in WAT) and `tests/it/js/every_field.rs` read every field of a merge,
//! each a distinct value, through real components.
//!
//! `wasmtime::component::__internal` is exempt from semver: the wasmtime dependency is pinned to
//! one version (`=` in Cargo.toml), and an upgrade that moves a layout fails those tests.

use wasmtime::component::__internal::wasmtime_environ::component::StringEncoding;
use wasmtime::component::__internal::{CanonicalAbiInfo, InstanceType, InterfaceType, LiftContext};
use wasmtime::component::{ComponentType, Lift};

use super::bindings::types;
use super::request::{OPTION_STRING, SOME_STRING, offsets};

/// What a 0.2 `transform` returns.
pub struct Answer(pub Result<types::Outcome, String>);

type HandlerResult = Result<types::Outcome, String>;

unsafe impl ComponentType for Answer {
    type Lower = <HandlerResult as ComponentType>::Lower;
    const ABI: CanonicalAbiInfo = <HandlerResult as ComponentType>::ABI;

    fn typecheck(ty: &InterfaceType, types: &InstanceType<'_>) -> wasmtime::Result<()> {
        <HandlerResult as ComponentType>::typecheck(ty, types)
    }
}

/// Where a `result`'s and an `outcome`'s payloads are, past their discriminants.
const RESULT_PAYLOAD: usize = 4;
const OUTCOME_PAYLOAD: usize = 4;
/// The `result` case `ok`, and the `outcome` case `merge(overrides)`.
const OK: u8 = 0;
const MERGE: u8 = 4;

unsafe impl Lift for Answer {
    /// Not the contract's way (a result is returned in memory), so left to the bindings.
    fn linear_lift_from_flat(
        cx: &mut LiftContext<'_>,
        ty: InterfaceType,
        src: &Self::Lower,
    ) -> wasmtime::Result<Self> {
        HandlerResult::linear_lift_from_flat(cx, ty, src).map(Answer)
    }

    fn linear_lift_from_memory(
        cx: &mut LiftContext<'_>,
        ty: InterfaceType,
        bytes: &[u8],
    ) -> wasmtime::Result<Self> {
        let merge = bytes.first() == Some(&OK) && bytes.get(RESULT_PAYLOAD) == Some(&MERGE);
        if !merge || cx.options().string_encoding != StringEncoding::Utf8 {
            return HandlerResult::linear_lift_from_memory(cx, ty, bytes).map(Answer);
        }
        let fields = bytes
            .get(RESULT_PAYLOAD + OUTCOME_PAYLOAD..)
            .and_then(|rest| rest.get(..OVERRIDES_SIZE))
            .ok_or_else(|| wasmtime::format_err!("outcome shorter than its type"))?;
        let overrides = lift_overrides(cx, fields)?;
        Ok(Answer(Ok(types::Outcome::Merge(overrides))))
    }
}

const OPTION_ENUM: CanonicalAbiInfo = <Option<types::WakeMode> as ComponentType>::ABI;
const OPTION_BOOL: CanonicalAbiInfo = <Option<bool> as ComponentType>::ABI;
const OPTION_U32: CanonicalAbiInfo = <Option<u32> as ComponentType>::ABI;

/// `overrides`'s fields, in the contract's order.
const OVERRIDES: [usize; 17] = offsets([
    OPTION_ENUM,   // kind
    OPTION_STRING, // text
    OPTION_ENUM,   // mode
    OPTION_STRING, // message
    OPTION_ENUM,   // wake-mode
    OPTION_STRING, // name
    OPTION_STRING, // agent-id
    OPTION_STRING, // session-key
    OPTION_ENUM,   // session-key-source
    OPTION_STRING, // session-mode
    OPTION_BOOL,   // deliver
    OPTION_BOOL,   // allow-unsafe-external-content
    OPTION_STRING, // channel
    OPTION_STRING, // to
    OPTION_STRING, // model
    OPTION_STRING, // thinking
    OPTION_U32,    // timeout-seconds
]);
const OVERRIDES_SIZE: usize = <types::Overrides as ComponentType>::SIZE32;

/// Reads an `overrides` record from its bytes `f`, in the order of its fields, as the bindings
/// would.
fn lift_overrides(cx: &mut LiftContext<'_>, f: &[u8]) -> wasmtime::Result<types::Overrides> {
    let wake_mode = |at| {
        option_enum(f, at, |case| match case {
            0 => Some(types::WakeMode::Now),
            1 => Some(types::WakeMode::NextHeartbeat),
            _ => None,
        })
    };
    let flag = |at| option_payload(f, at, 1).map(|set| set.map(|b| b[0] != 0));
    Ok(types::Overrides {
        kind: option_enum(f, OVERRIDES[0], |case| match case {
            0 => Some(types::ActionKind::Wake),
            1 => Some(types::ActionKind::Agent),
            _ => None,
        })?,
        text: option_string(cx, f, OVERRIDES[1])?,
        mode: wake_mode(OVERRIDES[2])?,
        message: option_string(cx, f, OVERRIDES[3])?,
        wake_mode: wake_mode(OVERRIDES[4])?,
        name: option_string(cx, f, OVERRIDES[5])?,
        agent_id: option_string(cx, f, OVERRIDES[6])?,
        session_key: option_string(cx, f, OVERRIDES[7])?,
        session_key_source: option_enum(f, OVERRIDES[8], |case| match case {
            0 => Some(types::KeySource::Fixed),
            1 => Some(types::KeySource::External),
            _ => None,
        })?,
        session_mode: option_string(cx, f, OVERRIDES[9])?,
        deliver: flag(OVERRIDES[10])?,
        allow_unsafe_external_content: flag(OVERRIDES[11])?,
        channel: option_string(cx, f, OVERRIDES[12])?,
        to: option_string(cx, f, OVERRIDES[13])?,
        model: option_string(cx, f, OVERRIDES[14])?,
        thinking: option_string(cx, f, OVERRIDES[15])?,
        timeout_seconds: option_payload(f, OVERRIDES[16], 4)?
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
    })
}

/// The payload of the option at `at`, `offset` bytes past its discriminant, if it is set.
fn option_payload(fields: &[u8], at: usize, offset: usize) -> wasmtime::Result<Option<&[u8]>> {
    match fields[at] {
        0 => Ok(None),
        1 => Ok(Some(&fields[at + offset..])),
        _ => wasmtime::bail!("invalid option discriminant"),
    }
}

/// The option of an enum at `at`, its cases read by `case`.
fn option_enum<E>(
    fields: &[u8],
    at: usize,
    case: impl Fn(u8) -> Option<E>,
) -> wasmtime::Result<Option<E>> {
    let Some(payload) = option_payload(fields, at, 1)? else {
        return Ok(None);
    };
    match case(payload[0]) {
        Some(value) => Ok(Some(value)),
        None => wasmtime::bail!("unexpected discriminant: {}", payload[0]),
    }
}

/// The option of a string at `at`; the string itself is lifted by wasmtime, bounds and UTF-8
/// checked.
fn option_string(
    cx: &mut LiftContext<'_>,
    fields: &[u8],
    at: usize,
) -> wasmtime::Result<Option<String>> {
    let Some(pair) = option_payload(fields, at, SOME_STRING)? else {
        return Ok(None);
    };
    String::linear_lift_from_memory(cx, InterfaceType::String, &pair[..8]).map(Some)
}

#[cfg(test)]
mod tests {
    use wasmtime::component::__internal::ComponentVariant;

    use super::super::request::walk_fields;
    use super::*;

    /// The offsets written here against the ones wasmtime computes, field by field as its
    /// derive does.
    #[test]
    fn the_layout_is_the_canonical_abis() {
        let fields = [
            <Option<types::ActionKind> as ComponentType>::ABI,
            OPTION_STRING,
            OPTION_ENUM,
            OPTION_STRING,
            OPTION_ENUM,
            OPTION_STRING,
            OPTION_STRING,
            OPTION_STRING,
            <Option<types::KeySource> as ComponentType>::ABI,
            OPTION_STRING,
            OPTION_BOOL,
            OPTION_BOOL,
            OPTION_STRING,
            OPTION_STRING,
            OPTION_STRING,
            OPTION_STRING,
            OPTION_U32,
        ];
        let (walked, offset) = walk_fields(&fields);
        assert_eq!(walked, OVERRIDES);
        assert_eq!(offset.next_multiple_of(4), OVERRIDES_SIZE);
        assert_eq!(<Option<bool> as ComponentVariant>::PAYLOAD_OFFSET32, 1);
        assert_eq!(
            <Option<types::WakeMode> as ComponentVariant>::PAYLOAD_OFFSET32,
            1
        );
        assert_eq!(<Option<u32> as ComponentVariant>::PAYLOAD_OFFSET32, 4);
        assert_eq!(
            <HandlerResult as ComponentVariant>::PAYLOAD_OFFSET32,
            RESULT_PAYLOAD
        );
        assert_eq!(
            <types::Outcome as ComponentVariant>::PAYLOAD_OFFSET32,
            OUTCOME_PAYLOAD
        );
        assert_eq!(
            <types::Outcome as ComponentVariant>::CASES.len(),
            usize::from(MERGE) + 1,
            "merge is the last case"
        );
    }
}
