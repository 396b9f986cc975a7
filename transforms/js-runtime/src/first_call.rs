//! A fresh instance's first call against a later one (docs/performance.md, "A fresh JavaScript
//! instance (issue 50)"). Every instance starts from the state [`crate::load`] leaves, so what
//! the engine makes the first time it is used (QuickJS creates most built-in functions, and
//! `JSON`, when they are first read) would be made again in every fresh instance. Run natively,
//! as `fuzz` runs the glue.

use crate::exports::hookgate::transform::handler::Request;

/// The benchmarks' transform (`TITLE_MJS` in benches/support/mod.rs) behind the SDK's adapter.
fn bundle() -> String {
    const TRANSFORM: &str = "const userModule = { default({ payload, headers, path }) {
        const title = typeof payload.title === 'string' ? payload.title.trim() : '';
        if (!title) return null;
        const from = headers['user-agent'] ?? 'someone';
        const words = title.split(/\\s+/).length;
        return { kind: 'wake', text: `${path}: ${title} (${words} words, from ${from})`,
                 mode: 'next-heartbeat' };
    } };";
    crate::arguments::tests::bundle(TRANSFORM)
}

fn request() -> Request {
    Request {
        name: "title".into(),
        url: "/hooks/title".into(),
        headers: vec![("content-type".into(), "application/json".into())],
        query: Vec::new(),
        body: br#"{"title":"deploy finished on production cluster 7"}"#.to_vec(),
        mapping_id: "title".into(),
        config: None,
        export_name: None,
    }
}

/// What the engine holds that a call could leave made: objects, C functions (the built-ins),
/// properties, shapes, atoms and allocations.
fn census(loaded: &crate::Loaded) -> [i64; 6] {
    let usage = loaded._runtime.memory_usage();
    [
        usage.obj_count,
        usage.c_func_count,
        usage.prop_count,
        usage.shape_count,
        usage.atom_count,
        usage.memory_used_count,
    ]
}

fn change(from: [i64; 6], to: [i64; 6]) -> [i64; 6] {
    std::array::from_fn(|i| to[i] - from[i])
}

#[test]
fn a_first_call_makes_nothing_that_a_later_call_does_not() {
    let loaded = crate::load(bundle()).unwrap();
    let loaded_state = census(&loaded);
    crate::call(&loaded, request()).unwrap();
    let after_first = census(&loaded);
    crate::call(&loaded, request()).unwrap();
    let after_second = census(&loaded);
    drop(loaded);
    assert_eq!(
        change(loaded_state, after_first),
        change(after_first, after_second),
        "objects, C functions, properties, shapes, atoms and allocations the first call left \
         against the second's: the first made what every fresh instance makes again"
    );
}
