//! Promise rejections no handler takes. At build time one fails the build: top-level work that
//! failed would otherwise leave the module loaded by half, silently. During a call each is logged
//! (the call's own answer is the adapter's, which catches what the transform throws).

use std::cell::RefCell;

use rquickjs::{Persistent, Runtime, Value};

thread_local! {
    /// Rejected promises without a handler, with what they were rejected with, oldest first.
    static UNHANDLED: RefCell<Vec<(Persistent<Value<'static>>, String)>> =
        const { RefCell::new(Vec::new()) };
}

/// Has `runtime` report rejections here. QuickJS reports a promise rejected with no handler, and
/// the same promise again when a handler is attached later.
pub fn track(runtime: &Runtime) {
    runtime.set_host_promise_rejection_tracker(Some(Box::new(
        |ctx, promise, reason, is_handled| {
            UNHANDLED.with(|unhandled| {
                let mut unhandled = unhandled.borrow_mut();
                if is_handled {
                    unhandled.retain(|(pending, _)| {
                        pending.clone().restore(&ctx).ok().as_ref() != Some(&promise)
                    });
                } else {
                    let reason = crate::describe(&ctx, reason);
                    unhandled.push((Persistent::save(&ctx, promise), reason));
                }
            });
        },
    )));
}

/// What the promises still unhandled were rejected with; forgets them.
pub fn take() -> Vec<String> {
    UNHANDLED.with(|unhandled| {
        unhandled
            .borrow_mut()
            .drain(..)
            .map(|(_, reason)| reason)
            .collect()
    })
}
