//! Which version of the transform contract a component was built against, and the calls that
//! differ by version. hookgate loads 0.1 and 0.2 components and refuses any other version by
//! name: a component of a contract it does not know would otherwise link whenever its function
//! types happen to match, and mean something else.

use wasmtime::Store;
use wasmtime::component::types::ComponentItem;
use wasmtime::component::{Component, ComponentExportIndex, Func, InstancePre, TypedFunc};

use super::answer::Answer;
use super::bindings::{types, v0_1, v0_2};
use super::host::HostState;
use super::request::{RequestArg, TransformInput};

/// The package every version of the contract belongs to.
const PACKAGE: &str = "hookgate:transform";

/// What this hookgate loads, for messages.
const SUPPORTED: &str = "hookgate:transform@0.1 and @0.2";

/// A version of the contract hookgate loads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Contract {
    /// `hookgate:transform@0.1.x`: a root `transform` export.
    V0_1,
    /// `hookgate:transform@0.2.x`: the `handler` interface export, partial overrides.
    V0_2,
}

impl Contract {
    /// The version a component was built against, read from its exports (0.2 on: the `handler`
    /// interface carries it) or, for a root `transform` export, from the contract interfaces it
    /// imports. An unsupported version is refused naming it and the supported ones.
    pub fn of(component: &Component, engine: &wasmtime::Engine) -> Result<Contract, String> {
        let ty = component.component_type();
        let handler = format!("{PACKAGE}/handler@");
        let mut root_transform = false;
        for (name, item) in ty.exports(engine) {
            if let Some(version) = name.strip_prefix(&handler) {
                return Self::supported(version, &[(0, 2)]);
            }
            root_transform |=
                name == "transform" && matches!(item.ty, ComponentItem::ComponentFunc(_));
        }
        if !root_transform {
            return Err(format!(
                "exports neither `{handler}0.2.0` nor (as 0.1 components do) `transform`: it is not a hookgate transform"
            ));
        }
        let imported = ty.imports(engine).find_map(|(name, _)| {
            name.strip_prefix(PACKAGE)?
                .strip_prefix('/')?
                .split_once('@')
                .map(|(_, version)| version.to_string())
        });
        match imported {
            Some(version) => Self::supported(&version, &[(0, 1)]),
            // A 0.1 component that uses none of the contract's types imports none of it.
            None => Ok(Contract::V0_1),
        }
    }

    /// The contract for `version` when its (major, minor) is one of `loads`.
    fn supported(version: &str, loads: &[(u64, u64)]) -> Result<Contract, String> {
        let mut parts = version.split(['.', '-', '+']);
        let mut number = || parts.next().and_then(|p| p.parse::<u64>().ok());
        let (major, minor) = (number(), number());
        match (major, minor) {
            (Some(0), Some(1)) if loads.contains(&(0, 1)) => Ok(Contract::V0_1),
            (Some(0), Some(2)) if loads.contains(&(0, 2)) => Ok(Contract::V0_2),
            _ => Err(format!(
                "is built against {PACKAGE}@{version}; this hookgate loads {SUPPORTED} (rebuild it against wit/transform.wit)"
            )),
        }
    }

    /// The version's name, for messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Contract::V0_1 => "0.1",
            Contract::V0_2 => "0.2",
        }
    }
}

/// A component checked against its contract and pre-instantiated.
#[derive(Clone)]
pub enum TransformPre {
    V0_1(v0_1::TransformPre<HostState>),
    V0_2(HandlerPre),
}

/// A 0.2 component pre-instantiated, with its `handler#transform` export looked up and its type
/// checked once, when the component loads: a component whose handler has another type is
/// refused then, as a 0.1 component's is by its bindings, rather than failing every call. The
/// bindings would check that type again on every instance they make; it is the component's, the
/// same in each of its instances (the contract defines no resources), so an instance's export is
/// called as the type checked here.
#[derive(Clone)]
pub struct HandlerPre {
    bindings: v0_2::TransformPre<HostState>,
    transform: ComponentExportIndex,
}

impl TransformPre {
    /// Checks that `pre`'s component implements `contract`'s world.
    pub fn new(contract: Contract, pre: InstancePre<HostState>) -> wasmtime::Result<Self> {
        Ok(match contract {
            Contract::V0_1 => TransformPre::V0_1(v0_1::TransformPre::new(pre)?),
            Contract::V0_2 => {
                let bindings = v0_2::TransformPre::new(pre)?;
                let transform = handler_transform(&bindings)?;
                TransformPre::V0_2(HandlerPre {
                    bindings,
                    transform,
                })
            }
        })
    }

    pub fn contract(&self) -> Contract {
        match self {
            TransformPre::V0_1(_) => Contract::V0_1,
            TransformPre::V0_2(_) => Contract::V0_2,
        }
    }

    pub async fn instantiate_async(
        &self,
        store: &mut Store<HostState>,
    ) -> wasmtime::Result<TransformInstance> {
        Ok(match self {
            TransformPre::V0_1(pre) => TransformInstance::V0_1(pre.instantiate_async(store).await?),
            TransformPre::V0_2(pre) => TransformInstance::V0_2(pre.instantiate_async(store).await?),
        })
    }
}

/// The 0.2 handler interface's name, as the bindings look it up (a 0.2.x export matches).
const HANDLER: &str = "hookgate:transform/handler@0.2.0";

/// The index of `pre`'s `handler#transform` export, checked to be a function of the contract's
/// type, as the bindings check it on an instance.
fn handler_transform(
    pre: &v0_2::TransformPre<HostState>,
) -> wasmtime::Result<ComponentExportIndex> {
    let instance_pre = pre.instance_pre();
    let component = instance_pre.component();
    let (item, transform) = component
        .get_export_index(None, HANDLER)
        .and_then(|handler| component.get_export(Some(&handler), "transform"))
        .ok_or_else(|| wasmtime::format_err!("no `{HANDLER}#transform` export"))?;
    let ComponentItem::ComponentFunc(func) = item else {
        wasmtime::bail!("`{HANDLER}#transform` is not a function");
    };
    func.typecheck::<(RequestArg<'_>,), (Answer,)>(&instance_pre.instance_type())
        .map_err(|err| err.context(format!("type-checking `{HANDLER}#transform`")))?;
    Ok(transform)
}

impl HandlerPre {
    async fn instantiate_async(&self, store: &mut Store<HostState>) -> wasmtime::Result<Func> {
        let instance = self
            .bindings
            .instance_pre()
            .instantiate_async(&mut *store)
            .await?;
        instance
            .get_func(&mut *store, self.transform)
            .ok_or_else(|| wasmtime::format_err!("no `{HANDLER}#transform` function"))
    }
}

/// An instance of a transform, of either version: a 0.2 instance is its `transform` function,
/// of the type its component was checked for.
pub enum TransformInstance {
    V0_1(v0_1::Transform),
    V0_2(Func),
}

impl TransformInstance {
    /// Calls the component's `transform`; a 0.1 component gets the request without what 0.2
    /// added, and its outcome is returned as the 0.2 outcome it equals. A 0.2 call reads
    /// `input` where it is; a 0.1 call moves its fields into the bindings' request, leaving
    /// `input` empty (its caller, which owns it, has no use for it after the call).
    pub async fn call_transform(
        &self,
        store: &mut Store<HostState>,
        input: &mut TransformInput,
    ) -> wasmtime::Result<Result<types::Outcome, String>> {
        match self {
            TransformInstance::V0_1(instance) => {
                let request = types::Request::from(std::mem::take(input)).into();
                let outcome = instance.call_transform(store, &request).await?;
                Ok(outcome.map(Into::into))
            }
            TransformInstance::V0_2(transform) => {
                // SAFETY: `transform` is the `handler#transform` export of an instance that a
                // `HandlerPre` returned, whose component was checked when it loaded to export
                // it with this type (`handler_transform`). Every instance of one component has
                // the same export types (the contract defines no resources), so this is the
                // call the bindings make after their check.
                let typed: TypedFunc<(RequestArg<'_>,), (Answer,)> =
                    unsafe { TypedFunc::new_unchecked(*transform) };
                let (Answer(outcome),) = typed
                    .call_async(&mut *store, (RequestArg(&*input),))
                    .await?;
                Ok(outcome)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_read_by_major_and_minor() {
        assert_eq!(Contract::supported("0.2.0", &[(0, 2)]), Ok(Contract::V0_2));
        assert_eq!(Contract::supported("0.2.7", &[(0, 2)]), Ok(Contract::V0_2));
        assert_eq!(Contract::supported("0.1.0", &[(0, 1)]), Ok(Contract::V0_1));
        let refused = Contract::supported("1.0.0", &[(0, 2)]).unwrap_err();
        assert!(
            refused.contains("hookgate:transform@1.0.0")
                && refused.contains("hookgate:transform@0.1 and @0.2"),
            "{refused}"
        );
        assert!(Contract::supported("0.3.0", &[(0, 2)]).is_err());
        // A root export is 0.1's shape: a 0.2 import beside it is no 0.2 component.
        assert!(Contract::supported("0.2.0", &[(0, 1)]).is_err());
        assert!(Contract::supported("x", &[(0, 1)]).is_err());
    }
}
