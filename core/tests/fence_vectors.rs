//! Replays the fence vectors `tests/scenarios/fence/*.json` (format in
//! `tests/scenarios/README.md`, "Fence vectors") through [`Fence`] and through the fenced
//! SET script on the in-memory Redis: each write must be accepted, or refused with the
//! stated reason and highest token. A write with an `owner` uses the owner-bound rule,
//! one without it the token-only rule.

use std::path::{Path, PathBuf};

use fencepost_core::fence::{
    read_redis_fenced_set, redis_fenced_set, redis_fenced_set_owned, StaleReason,
};
use fencepost_core::memory::MemoryRedis;
use fencepost_core::{Fence, FencingToken, Instant, OwnerId, StaleToken};
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct Vector {
    name: String,
    description: serde_json::Value,
    rules: Vec<String>,
    writes: Vec<Write>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Write {
    resource: String,
    token: u64,
    owner: Option<String>,
    expect: Expect,
}

#[derive(Deserialize, Debug, PartialEq)]
#[serde(untagged)]
enum Expect {
    Accepted(String),
    Refused { refused: StaleReason, highest: u64 },
}

fn outcome(result: Result<(), StaleToken>) -> Expect {
    match result {
        Ok(()) => Expect::Accepted("accepted".to_owned()),
        Err(e) => Expect::Refused {
            refused: e.reason,
            highest: e.highest.get(),
        },
    }
}

/// The fence vectors; fails if there are fewer than 3 (the suite must not shrink
/// silently).
pub fn fence_vectors() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/scenarios/fence");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|entry| entry.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    assert!(files.len() >= 3, "fence vectors: {files:?}");
    files
}

#[test]
fn fence_vectors_replay_through_fence_and_the_redis_script() {
    for path in fence_vectors() {
        let text = std::fs::read_to_string(&path).unwrap();
        let vector: Vector = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{}: not a fence vector: {e}", path.display()));
        assert_eq!(
            Some(vector.name.as_str()),
            path.file_stem().and_then(|s| s.to_str())
        );
        let mut fence = Fence::new();
        let mut redis = MemoryRedis::new();
        let now = Instant::from_nanos(0);
        for (i, w) in vector.writes.iter().enumerate() {
            let token = FencingToken(w.token);
            let owner = w.owner.as_deref().map(|o| {
                OwnerId::from_hex(o).unwrap_or_else(|| panic!("{}: owner {o:?}", vector.name))
            });
            let in_memory = outcome(match owner {
                Some(o) => fence.check_owned(&w.resource, token, o),
                None => fence.check(&w.resource, token),
            });
            let fence_key = format!("fence:{}", w.resource);
            let cmd = match owner {
                Some(o) => redis_fenced_set_owned(&w.resource, &fence_key, token, o, "v"),
                None => redis_fenced_set(&w.resource, &fence_key, token, "v"),
            };
            let reply = redis.eval(now, &cmd);
            let scripted = outcome(read_redis_fenced_set(&w.resource, token, &reply).unwrap());
            assert_eq!(in_memory, w.expect, "{} write {i}: Fence", vector.name);
            assert_eq!(scripted, w.expect, "{} write {i}: MemoryRedis", vector.name);
        }
    }
}
