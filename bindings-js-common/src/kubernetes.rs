//! Kubernetes Lease (feature `kubernetes`): the settings of a `kind: "kubernetes"` machine.
//! Requests are the core's [`KubeRequest`](fencepost_core::backends::KubeRequest) (flat
//! body 8 in [`fencepost_core::js_outputs`]); replies the response body the API server
//! sent, as text, read by the core.

use fencepost_core::backends::KubernetesBackend;
use fencepost_core::Backend;

use crate::{decode, Primitive, Result};

/// The settings object (`{ namespace }`, default `"default"`) as the core's
/// [`KubernetesBackend`]; the namespace is checked with the lock
/// ([`Backend::check_acquire`]).
pub fn backend(fields: Vec<(String, Primitive)>) -> Result<Backend> {
    decode::<KubernetesBackend>(fields).map(Backend::Kubernetes)
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
