//! Backend specs and lock options as hosts hand them over (serde): defaults for what
//! is missing, an error naming the field for what is unknown.

use fencepost_core::{Backend, LockOptions};

#[test]
fn a_backend_spec_takes_its_kind_and_settings() {
    let b: Backend = serde_json::from_str(r#"{"kind": "redis", "fair": true}"#).unwrap();
    assert!(matches!(b, Backend::Redis(r) if r.fair && r.key_prefix == "fencepost:"));
    let b: Backend = serde_json::from_str(r#"{"kind": "etcd"}"#).unwrap();
    assert_eq!(b.name(), "etcd");
}

#[test]
fn an_unknown_field_is_an_error_that_names_it() {
    let e = serde_json::from_str::<Backend>(r#"{"kind": "redis", "fiar": true}"#).unwrap_err();
    assert!(e.to_string().contains("unknown field `fiar`"), "{e}");
    let e = serde_json::from_str::<LockOptions>(r#"{"ttl": 1000000, "tll": 5}"#).unwrap_err();
    assert!(e.to_string().contains("unknown field `tll`"), "{e}");
}
