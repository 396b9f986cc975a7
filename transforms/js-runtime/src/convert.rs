//! The WIT request as the adapter receives it (what the transform returns is read by
//! `outcome.rs`).
//!
//! It follows the shapes jco gives JavaScript, which the adapter (`transforms/js-sdk/adapter.js`)
//! is written against: strings, `option` as the value or `undefined`, `list<u8>` as a
//! `Uint8Array`. Two parts of the request arrive as the transform sees them, which Rust makes for
//! a fraction of what the adapter's JavaScript spent on them per call: `headers` as the
//! transform's object (names in lower case, a repeated header's values joined), and the body also
//! as `bodyText`, decoded as `TextDecoder` decodes it. `query` is not passed: the transform reads
//! the query from `url`.

use std::collections::BTreeMap;

use rquickjs::function::Args;
use rquickjs::object::Property;
use rquickjs::{Ctx, Object, TypedArray};

use crate::hookgate::transform::types::Request;

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
