//! ZooKeeper for the Node addon only (feature `zookeeper`): WebAssembly hosts cannot
//! reach ZooKeeper (its protocol runs over TCP; workers have no sockets), so the module
//! carries none of this.
//!
//! Conventions, in addition to the crate's:
//! * Settings are an object in the JavaScript spelling: `root` (an absolute path,
//!   default `/fencepost`), `naming` (`"kazoo"` or `"curator"`), `sessionTimeoutMs` (the
//!   session timeout the server negotiated, whole milliseconds), as the core's
//!   [`ZooKeeperBackend`].
//! * Requests are the core's [`ZkRequest`] as JSON; replies the JSON document the adapter
//!   wrote (see [`ZkRequest`]), read by the core.

use std::borrow::Cow;

use fencepost_core::backends::zookeeper::{read_zk_fenced, ZkFenced};
use fencepost_core::backends::{
    read_zk_contenders, read_zk_holder, read_zk_list, ZkHolderNode, ZkNaming, ZkRequest,
    ZooKeeperBackend,
};
use fencepost_core::text::number;
use fencepost_core::Backend;

use crate::{holder, owner_id, protocol, JsError, JsOut, Primitive, Result};

fn naming(given: &str) -> Result<ZkNaming> {
    match given {
        "kazoo" => Ok(ZkNaming::Kazoo),
        "curator" => Ok(ZkNaming::Curator),
        other => Err(JsError {
            option: Some("naming".to_owned()),
            ..JsError::config(format!(
                "naming must be 'kazoo' or 'curator', got {other:?}"
            ))
        }),
    }
}

/// The settings object as the core's [`ZooKeeperBackend`].
// Read by hand: the core spells the timeout `session_timeout_ms` (whole milliseconds),
// which the crate's decoder would turn into nanoseconds.
pub fn settings(fields: Vec<(String, Primitive)>) -> Result<ZooKeeperBackend> {
    let mut s = ZooKeeperBackend::default();
    for (key, value) in fields {
        let wrong = |want: &str| JsError {
            option: Some(key.clone()),
            ..JsError::config(format!("{key} must be {want}"))
        };
        match (key.as_str(), value) {
            ("root", Primitive::Text(root)) if root.starts_with('/') => s.root = root,
            ("root", Primitive::Text(root)) => {
                return Err(JsError {
                    option: Some(key.clone()),
                    ..JsError::config(format!(
                        "root must be an absolute ZooKeeper path, got {root:?}"
                    ))
                })
            }
            ("root", _) => return Err(wrong("a string")),
            ("naming", Primitive::Text(n)) => s.naming = naming(&n)?,
            ("naming", _) => return Err(wrong("'kazoo' or 'curator'")),
            ("sessionTimeoutMs", Primitive::Number(ms))
                if ms.fract() == 0.0 && (1.0..=2_147_483_647.0).contains(&ms) =>
            {
                s.session_timeout_ms = Some(ms as u64)
            }
            ("sessionTimeoutMs", Primitive::Number(ms)) => {
                return Err(JsError {
                    option: Some(key.clone()),
                    ..JsError::config(format!(
                        "sessionTimeoutMs must be whole milliseconds in 1 ..= 2^31 − 1, got {}",
                        number(ms)
                    ))
                })
            }
            ("sessionTimeoutMs", _) => return Err(wrong("a number of milliseconds")),
            _ => {
                return Err(JsError {
                    option: Some(key.clone()),
                    ..JsError::config(format!("unknown option {key:?}"))
                })
            }
        }
    }
    Ok(s)
}

/// The machine's backend for `kind: "zookeeper"`.
pub fn backend(fields: Vec<(String, Primitive)>) -> Result<Backend> {
    settings(fields).map(Backend::ZooKeeper)
}

/// `zookeeperNodePrefix`: `[lock path, node prefix]` of `name` for `owner` (32 hex
/// digits): `{root}/{name}` and the name the owner's node starts with before the
/// server's sequence.
pub fn node_prefix(
    fields: Vec<(String, Primitive)>,
    name: &str,
    owner: &str,
) -> Result<JsOut<'static>> {
    let s = settings(fields)?;
    let owner = owner_id(owner)?;
    Ok(JsOut::Array(vec![
        JsOut::Text(Cow::Owned(s.lock_path(name))),
        JsOut::Text(Cow::Owned(s.node_prefix(&owner))),
    ]))
}

/// `readZookeeperFenced`: `{ ok: true, applied }` or `{ ok: false, protocol }` for the
/// JSON `{"results": [...]}` of a fenced multi (the check's result first).
pub fn read_fenced(reply: &str) -> JsOut<'static> {
    match read_zk_fenced(reply) {
        Ok(outcome) => JsOut::Object(vec![
            ("ok", JsOut::Bool(true)),
            ("applied", JsOut::Bool(outcome == ZkFenced::Applied)),
        ]),
        Err(e) => protocol(e.to_string()),
    }
}

/// A ZooKeeper call as the Node adapter's `execute` takes it: `{ backend: "zookeeper",
/// spec }`, `spec` the call as JSON.
fn call(req: &ZkRequest) -> JsOut<'static> {
    JsOut::Object(vec![
        ("backend", JsOut::Text(Cow::Borrowed("zookeeper"))),
        ("spec", JsOut::Text(Cow::Owned(req.to_json()))),
    ])
}

/// `zookeeperInspect`: the first call of "who holds lock `name`?" (the lock path's
/// children), read with [`read_contenders`].
pub fn inspect(fields: Vec<(String, Primitive)>, name: &str) -> Result<JsOut<'static>> {
    Ok(call(&settings(fields)?.inspect(name)))
}

/// `readZookeeperContenders`: `{ ok: true, node }` (`node` null when nobody holds the
/// lock, else `{ get, path, waiters }`: the holder node's `getData` call, its path and
/// the contenders behind it) or `{ ok: false, protocol }`.
pub fn read_contenders(
    fields: Vec<(String, Primitive)>,
    name: &str,
    reply: &str,
) -> Result<JsOut<'static>> {
    let s = settings(fields)?;
    Ok(match read_zk_contenders(&s, name, reply) {
        Ok(found) => JsOut::Object(vec![
            ("ok", JsOut::Bool(true)),
            (
                "node",
                found.map_or(JsOut::Null, |n| {
                    JsOut::Object(vec![
                        ("get", call(&n.get())),
                        ("path", JsOut::Text(Cow::Owned(n.path))),
                        ("waiters", JsOut::Number(n.waiters as f64)),
                    ])
                }),
            ),
        ]),
        Err(e) => protocol(e.to_string()),
    })
}

/// `readZookeeperHolder`: `{ ok: true, holder }` for the reply of the holder node's
/// `getData` (`holder` null: the node is gone, list again) or `{ ok: false, protocol }`.
pub fn read_holder(
    fields: Vec<(String, Primitive)>,
    name: &str,
    path: String,
    waiters: u64,
    reply: &str,
) -> Result<JsOut<'static>> {
    let s = settings(fields)?;
    let node = ZkHolderNode { path, waiters };
    Ok(match read_zk_holder(&s, name, &node, reply) {
        Ok(found) => JsOut::Object(vec![
            ("ok", JsOut::Bool(true)),
            ("holder", found.map_or(JsOut::Null, holder)),
        ]),
        Err(e) => protocol(e.to_string()),
    })
}

/// `zookeeperListNames`: the root's children call, read with [`read_list`].
pub fn list_names(fields: Vec<(String, Primitive)>) -> Result<JsOut<'static>> {
    Ok(call(&settings(fields)?.list_names()))
}

/// `readZookeeperList`: `{ ok: true, names }` (the root's names starting with
/// `prefix`, sorted) or `{ ok: false, protocol }`.
pub fn read_list(prefix: &str, reply: &str) -> JsOut<'static> {
    match read_zk_list(prefix, reply) {
        Ok(names) => JsOut::Object(vec![
            ("ok", JsOut::Bool(true)),
            (
                "names",
                JsOut::Array(
                    names
                        .into_iter()
                        .map(|n| JsOut::Text(Cow::Owned(n)))
                        .collect(),
                ),
            ),
        ]),
        Err(e) => protocol(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(k: &str, v: &str) -> (String, Primitive) {
        (k.to_owned(), Primitive::Text(v.to_owned()))
    }

    #[test]
    fn settings_in_the_javascript_spelling() {
        let s = settings(vec![
            text("root", "/locks"),
            text("naming", "curator"),
            ("sessionTimeoutMs".to_owned(), Primitive::Number(4000.0)),
        ])
        .unwrap();
        assert_eq!(s.root, "/locks");
        assert_eq!(s.naming, ZkNaming::Curator);
        assert_eq!(s.session_timeout_ms, Some(4000));
        let e = settings(vec![text("root", "locks")]).unwrap_err();
        assert_eq!(e.option.as_deref(), Some("root"));
        let e = settings(vec![text("naming", "zk")]).unwrap_err();
        assert_eq!(e.message, "naming must be 'kazoo' or 'curator', got \"zk\"");
        let e = settings(vec![("sessionTimeoutMs".into(), Primitive::Number(0.5))]).unwrap_err();
        assert!(e.message.contains("got 0.5"), "{}", e.message);
        let e = settings(vec![text("hosts", "x")]).unwrap_err();
        assert_eq!(e.message, "unknown option \"hosts\"");
    }

    #[test]
    fn fenced_replies() {
        assert_eq!(
            read_fenced(r#"{"results":[true,true]}"#),
            JsOut::Object(vec![
                ("ok", JsOut::Bool(true)),
                ("applied", JsOut::Bool(true))
            ])
        );
        let refused = read_fenced(r#"{"results":["no_node","rolled_back"]}"#);
        assert!(matches!(&refused, JsOut::Object(o) if o[1] == ("applied", JsOut::Bool(false))));
        assert!(
            matches!(read_fenced("{}"), JsOut::Object(o) if o[0] == ("ok", JsOut::Bool(false)))
        );
    }
}
