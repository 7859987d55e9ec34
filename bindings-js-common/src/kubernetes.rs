//! Kubernetes Lease (feature `kubernetes`): the settings of a `kind: "kubernetes"` machine.
//! Requests are the core's [`KubeRequest`](fencepost_core::backends::KubeRequest) (flat
//! body 8 in [`fencepost_core::js_outputs`]); replies the response body the API server
//! sent, as text, read by the core.

use std::borrow::Cow;

use fencepost_core::backends::{read_kube_inspect, read_kube_list, KubernetesBackend};
use fencepost_core::Backend;

use crate::{decode, holder, protocol, JsOut, Primitive, Result};

/// The settings object (`{ namespace }`, default `"default"`) as the core's
/// [`KubernetesBackend`]; the namespace is checked with the lock
/// ([`Backend::check_acquire`]).
pub fn backend(fields: Vec<(String, Primitive)>) -> Result<Backend> {
    decode::<KubernetesBackend>(fields).map(Backend::Kubernetes)
}

/// `kubernetesListPage`: the path of one page of the Lease listing of `namespace`
/// (`…/leases?limit={limit}` and the previous page's `continue` token).
pub fn list_page(namespace: String, limit: u32, continue_token: Option<&str>) -> String {
    KubernetesBackend { namespace }
        .list_page(limit, continue_token)
        .path
}

/// `readKubernetesInspect`: `{ ok: true, holder }` for a Lease GET's response body
/// (`holder` null: no Lease, or no holder) or `{ ok: false, protocol }`.
pub fn read_inspect(name: &str, reply: &str) -> JsOut<'static> {
    match read_kube_inspect(name, reply) {
        Ok(found) => JsOut::Object(vec![
            ("ok", JsOut::Bool(true)),
            ("holder", found.map_or(JsOut::Null, holder)),
        ]),
        Err(e) => protocol(e.to_string()),
    }
}

/// `readKubernetesList`: `{ ok: true, continue, holders }` for one page (`continue`
/// null on the last page; the held Leases whose names start with `prefix`) or
/// `{ ok: false, protocol }`.
pub fn read_list(prefix: &str, reply: &str) -> JsOut<'static> {
    match read_kube_list(prefix, reply) {
        Ok((next, holders)) => JsOut::Object(vec![
            ("ok", JsOut::Bool(true)),
            (
                "continue",
                next.map_or(JsOut::Null, |c| JsOut::Text(Cow::Owned(c))),
            ),
            (
                "holders",
                JsOut::Array(holders.into_iter().map(holder).collect()),
            ),
        ]),
        Err(e) => protocol(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_in_the_javascript_spelling() {
        let b = backend(vec![("namespace".into(), Primitive::Text("jobs".into()))]).unwrap();
        assert_eq!(
            b,
            Backend::Kubernetes(KubernetesBackend {
                namespace: "jobs".into()
            })
        );
        let e = backend(vec![("server".into(), Primitive::Text("x".into()))]).unwrap_err();
        assert_eq!(e.message, "unknown option \"server\"");
    }
}
