//! Promise rejections no handler takes. At build time one fails the build: top-level work that
//! failed would otherwise leave the module loaded by half, silently. During a call each is logged
//! (the call's own answer is the adapter's, which catches what the transform throws).
//!
//! The tracker runs inside QuickJS, in the middle of whatever rejected the promise, so it runs
//! no JavaScript: it keeps the promise and its reason, and [`take`] describes them afterwards.
//! Describing runs JavaScript (a reason's `toJSON`, getters, Proxy traps) that may reject more
//! promises; the tracker then records those while no borrow of the list is held.

use std::cell::RefCell;

use rquickjs::{Ctx, Persistent, Runtime, Value};

/// The most rejections [`take`] describes at once. A reason whose description rejects another
/// promise, whose reason does the same, would otherwise keep `take` describing for ever.
const MAX_DESCRIBED: usize = 32;

/// A rejected promise and what it was rejected with, kept until handled or taken.
type Rejection = (Persistent<Value<'static>>, Persistent<Value<'static>>);

thread_local! {
    /// Rejected promises without a handler, with what they were rejected with, oldest first.
    static UNHANDLED: RefCell<Vec<Rejection>> = const { RefCell::new(Vec::new()) };
}

/// Has `runtime` report rejections here. QuickJS reports a promise rejected with no handler, and
/// the same promise again when a handler is attached later.
pub fn track(runtime: &Runtime) {
    runtime.set_host_promise_rejection_tracker(Some(Box::new(
        |ctx, promise, reason, is_handled| {
            // Neither branch runs JavaScript: comparing and saving handles cannot re-enter.
            UNHANDLED.with(|unhandled| {
                let mut unhandled = unhandled.borrow_mut();
                if is_handled {
                    unhandled.retain(|(pending, _)| {
                        pending.clone().restore(&ctx).ok().as_ref() != Some(&promise)
                    });
                } else {
                    unhandled.push((
                        Persistent::save(&ctx, promise),
                        Persistent::save(&ctx, reason),
                    ));
                }
            });
        },
    )));
}

/// What the promises still unhandled were rejected with, oldest first, at most
/// [`MAX_DESCRIBED`] of them (then a line saying more were dropped); forgets them all. Costs a
/// description of each reason, which runs the reason's own JavaScript.
pub fn take(ctx: &Ctx<'_>) -> Vec<String> {
    let mut reasons = Vec::new();
    loop {
        let pending = UNHANDLED.with(|unhandled| std::mem::take(&mut *unhandled.borrow_mut()));
        if pending.is_empty() {
            return reasons;
        }
        for (_, reason) in pending {
            if reasons.len() == MAX_DESCRIBED {
                UNHANDLED.with(|unhandled| unhandled.borrow_mut().clear());
                reasons.push("more rejections were not described".to_string());
                return reasons;
            }
            reasons.push(match reason.restore(ctx) {
                Ok(reason) => crate::describe(ctx, reason),
                Err(err) => err.to_string(),
            });
        }
    }
}
