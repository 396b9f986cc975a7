//! The request as a transform sees it, and how a 0.2 call lowers it into the guest: straight
//! from that input, written for the contract's `request` instead of through wasmtime's generic
//! derive, which looks up the guest's memory two or three times per string, and computes each
//! field's offset, on every call (docs/performance.md, "The host's side of a call"). What the
//! guest sees is what the canonical ABI gives it: the same `realloc` calls in the same order,
//! the same values in every field (padding, and the payload of an unset option, are zeros where
//! wasmtime leaves what `realloc` gave). A component that asks for strings in another encoding
//! than UTF-8 gets each field lowered, still borrowed, by wasmtime's own `Lower` of its type,
//! which encodes it.
//!
//! `wasmtime::component::__internal` is exempt from semver: the wasmtime dependency is pinned to
//! one version (`=` in Cargo.toml), and an upgrade that moves a layout fails the layout tests
//! here and in `answer.rs`, and the merge and request that `tests/it/transforms_abi.rs` and
//! `tests/it/js/every_field.rs` pass through real components, every field a distinct value.
//!
//! [`RequestArg`] takes its type, and the check of it, from the generated `request`: a
//! component's handler is checked against it when the component loads
//! (`contract::handler_transform`), and the layout written here is the one wasmtime computes for
//! that type (`tests::the_layouts_are_the_canonical_abis`).

use std::mem::MaybeUninit;

use wasmtime::component::__internal::wasmtime_environ::component::StringEncoding;
use wasmtime::component::__internal::{
    CanonicalAbiInfo, InstanceType, InterfaceType, LowerContext,
};
use wasmtime::component::{ComponentType, Lower};

use super::bindings::types;

/// The request as a transform sees it.
#[derive(Debug, Clone, Default)]
pub struct TransformInput {
    pub name: String,
    /// The request target as received, path and query.
    pub url: String,
    /// Lower-cased names, credentials removed.
    pub headers: Vec<(String, String)>,
    pub query: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub mapping_id: String,
    pub config: Option<String>,
    /// The mapping's `transform.export`.
    pub export_name: Option<String>,
}

impl From<TransformInput> for types::Request {
    fn from(input: TransformInput) -> Self {
        types::Request {
            name: input.name,
            url: input.url,
            headers: input.headers,
            query: input.query,
            body: input.body,
            mapping_id: input.mapping_id,
            config: input.config,
            export_name: input.export_name,
        }
    }
}

/// A call's input, lowered as `hookgate:transform/types.request` without that record being
/// built first.
pub struct RequestArg<'a>(pub &'a TransformInput);

/// Offsets of the fields of a record of `fields`, as the canonical ABI lays them out.
pub(super) const fn offsets<const N: usize>(fields: [CanonicalAbiInfo; N]) -> [usize; N] {
    let mut at = [0; N];
    let mut offset: u32 = 0;
    let mut i = 0;
    while i < N {
        let align = fields[i].align32;
        offset = offset.div_ceil(align) * align;
        at[i] = offset as usize;
        offset += fields[i].size32;
        i += 1;
    }
    at
}

pub(super) const STRING: CanonicalAbiInfo = <String as ComponentType>::ABI;
pub(super) const OPTION_STRING: CanonicalAbiInfo = <Option<String> as ComponentType>::ABI;
/// Where an `option<string>`'s string is, past its discriminant.
pub(super) const SOME_STRING: usize = 4;

/// `request`'s fields: name, url, headers, query, body, mapping-id, config, export-name (a list
/// is a pointer pair, as a string is).
const REQUEST: [usize; 8] = offsets([
    STRING,
    STRING,
    STRING,
    STRING,
    STRING,
    STRING,
    OPTION_STRING,
    OPTION_STRING,
]);
const REQUEST_SIZE: usize = <types::Request as ComponentType>::SIZE32;
/// A `tuple<string, string>`: two pointer pairs.
const PAIR_SIZE: usize = 16;
/// wasmtime's bound on a string it copies into a guest.
const MAX_STRING_BYTES: usize = (1 << 31) - 1;

unsafe impl ComponentType for RequestArg<'_> {
    type Lower = <types::Request as ComponentType>::Lower;
    const ABI: CanonicalAbiInfo = <types::Request as ComponentType>::ABI;

    fn typecheck(ty: &InterfaceType, types: &InstanceType<'_>) -> wasmtime::Result<()> {
        <types::Request as ComponentType>::typecheck(ty, types)
    }
}

unsafe impl Lower for RequestArg<'_> {
    /// Not the contract's way (a request, of more than 16 flat values, is passed in memory), so
    /// left to the bindings.
    fn linear_lower_to_flat<T>(
        &self,
        cx: &mut LowerContext<'_, T>,
        ty: InterfaceType,
        dst: &mut MaybeUninit<Self::Lower>,
    ) -> wasmtime::Result<()> {
        types::Request::from(self.0.clone()).linear_lower_to_flat(cx, ty, dst)
    }

    /// Writes the record at `offset`, as the contract passes it.
    fn linear_lower_to_memory<T>(
        &self,
        cx: &mut LowerContext<'_, T>,
        ty: InterfaceType,
        offset: usize,
    ) -> wasmtime::Result<()> {
        if cx.options().string_encoding != StringEncoding::Utf8 {
            return lower_encoded(self.0, cx, ty, offset);
        }
        lower_utf8(self.0, cx, offset)
    }
}

/// Lowers `input` for a component whose strings are UTF-8: each string and list in the order of
/// the fields, as the canonical ABI copies them; the record itself written once, at the end.
fn lower_utf8<T>(
    input: &TransformInput,
    cx: &mut LowerContext<'_, T>,
    offset: usize,
) -> wasmtime::Result<()> {
    let mut record = [0u8; REQUEST_SIZE];
    put_pair(&mut record, REQUEST[0], lower_string(cx, &input.name)?);
    put_pair(&mut record, REQUEST[1], lower_string(cx, &input.url)?);
    put_pair(&mut record, REQUEST[2], lower_pairs(cx, &input.headers)?);
    put_pair(&mut record, REQUEST[3], lower_pairs(cx, &input.query)?);
    put_pair(&mut record, REQUEST[4], lower_bytes(cx, &input.body)?);
    put_pair(
        &mut record,
        REQUEST[5],
        lower_string(cx, &input.mapping_id)?,
    );
    for (at, text) in [
        (REQUEST[6], &input.config),
        (REQUEST[7], &input.export_name),
    ] {
        if let Some(text) = text {
            record[at] = 1;
            put_pair(&mut record, at + SOME_STRING, lower_string(cx, text)?);
        }
    }
    guest_bytes(cx, offset, REQUEST_SIZE)?.copy_from_slice(&record);
    Ok(())
}

/// Lowers `input` for a component whose strings are UTF-16 or Latin-1+UTF-16: each field, in
/// order, by wasmtime's `Lower` of its type, which encodes strings as the component asked.
fn lower_encoded<T>(
    input: &TransformInput,
    cx: &mut LowerContext<'_, T>,
    ty: InterfaceType,
    offset: usize,
) -> wasmtime::Result<()> {
    let InterfaceType::Record(record) = ty else {
        wasmtime::bail!("a request is lowered as a record");
    };
    let fields = &cx.types[record].fields;
    if fields.len() != REQUEST.len() {
        wasmtime::bail!("a request has {} fields", REQUEST.len());
    }
    let ty: [InterfaceType; 8] = std::array::from_fn(|i| fields[i].ty);
    let at = |i: usize| offset + REQUEST[i];
    input.name.linear_lower_to_memory(cx, ty[0], at(0))?;
    input.url.linear_lower_to_memory(cx, ty[1], at(1))?;
    (input.headers[..]).linear_lower_to_memory(cx, ty[2], at(2))?;
    (input.query[..]).linear_lower_to_memory(cx, ty[3], at(3))?;
    (input.body[..]).linear_lower_to_memory(cx, ty[4], at(4))?;
    input.mapping_id.linear_lower_to_memory(cx, ty[5], at(5))?;
    input.config.linear_lower_to_memory(cx, ty[6], at(6))?;
    input.export_name.linear_lower_to_memory(cx, ty[7], at(7))
}

fn lower_string<T>(cx: &mut LowerContext<'_, T>, text: &str) -> wasmtime::Result<(u32, u32)> {
    if text.len() > MAX_STRING_BYTES {
        wasmtime::bail!(
            "string length of {} too large to copy into wasm",
            text.len()
        );
    }
    lower_bytes(cx, text.as_bytes())
}

/// Copies `bytes` (a UTF-8 string or a `list<u8>`) into memory the guest's `realloc` gives.
fn lower_bytes<T>(cx: &mut LowerContext<'_, T>, bytes: &[u8]) -> wasmtime::Result<(u32, u32)> {
    let ptr = cx.realloc(0, 0, 1, bytes.len())?;
    guest_bytes(cx, ptr, bytes.len())?.copy_from_slice(bytes);
    Ok((u32::try_from(ptr)?, u32::try_from(bytes.len())?))
}

/// Lowers a `list<tuple<string, string>>`: the list's memory, then each pair's two strings.
fn lower_pairs<T>(
    cx: &mut LowerContext<'_, T>,
    pairs: &[(String, String)],
) -> wasmtime::Result<(u32, u32)> {
    let size = pairs
        .len()
        .checked_mul(PAIR_SIZE)
        .ok_or_else(|| wasmtime::format_err!("size overflow copying a list"))?;
    let list = cx.realloc(0, 0, 4, size)?;
    for (i, (name, value)) in pairs.iter().enumerate() {
        let mut pair = [0u8; PAIR_SIZE];
        put_pair(&mut pair, 0, lower_string(cx, name)?);
        put_pair(&mut pair, 8, lower_string(cx, value)?);
        guest_bytes(cx, list + i * PAIR_SIZE, PAIR_SIZE)?.copy_from_slice(&pair);
    }
    Ok((u32::try_from(list)?, u32::try_from(pairs.len())?))
}

/// `len` bytes of the guest's memory at `at`, which its `realloc` gave (and wasmtime checked
/// to be in bounds): an error, not a panic, were they not.
fn guest_bytes<'a, T>(
    cx: &'a mut LowerContext<'_, T>,
    at: usize,
    len: usize,
) -> wasmtime::Result<&'a mut [u8]> {
    cx.as_slice_mut()
        .get_mut(at..)
        .and_then(|memory| memory.get_mut(..len))
        .ok_or_else(|| wasmtime::format_err!("lowering past the end of memory"))
}

/// Writes a pointer pair (of a string or a list) at `at`.
#[inline]
fn put_pair(record: &mut [u8], at: usize, (ptr, len): (u32, u32)) {
    record[at..at + 4].copy_from_slice(&ptr.to_le_bytes());
    record[at + 4..at + 8].copy_from_slice(&len.to_le_bytes());
}

/// The offset of each of `fields` laid one after another as the canonical ABI lays out a
/// record's fields (as wasmtime's derive walks them), and where the last one ends: what the
/// tests check this module's and `answer`'s offsets against.
#[cfg(test)]
pub(super) fn walk_fields(fields: &[CanonicalAbiInfo]) -> (Vec<usize>, usize) {
    let mut offset = 0;
    let walked = fields
        .iter()
        .map(|field| field.next_field32_size(&mut offset))
        .collect();
    (walked, offset)
}

#[cfg(test)]
mod tests {
    use wasmtime::component::__internal::ComponentVariant;

    use super::*;

    /// The offsets written here against the ones wasmtime computes, field by field as its derive
    /// does.
    #[test]
    fn the_layouts_are_the_canonical_abis() {
        const LIST: CanonicalAbiInfo = <Vec<(String, String)> as ComponentType>::ABI;
        let fields = [
            STRING,
            STRING,
            LIST,
            LIST,
            <Vec<u8> as ComponentType>::ABI,
            STRING,
            OPTION_STRING,
            OPTION_STRING,
        ];
        let (walked, offset) = walk_fields(&fields);
        assert_eq!(walked, REQUEST);
        assert_eq!(offset, REQUEST_SIZE);
        assert_eq!(<(String, String) as ComponentType>::SIZE32, PAIR_SIZE);
        assert_eq!(
            <Option<String> as ComponentVariant>::PAYLOAD_OFFSET32,
            SOME_STRING
        );
    }
}
