//! Redis: Lua scripts with `KEYS`/`ARGV` (never string-interpolated), run by the host
//! with `EVALSHA`, falling back to `EVAL` on `NOSCRIPT`.
//!
//! Keys for lock `name` with prefix `p` (default `fencepost:`):
//! * `p{name}:lock` — the lease: value = owner id (32 hex chars), `PX` = TTL;
//! * `p{name}:token` — the fencing-token counter; never expires.
//!
//! With fair hand-off ([`RedisBackend::fair`]) also:
//! * `p{name}:queue` — waiters in FIFO order (a sorted set scored by `p{name}:seq`);
//! * `p{name}:alive:<owner>` — a waiter's presence, expiring unless it keeps asking;
//! * `p{name}:wake:<owner>` — the list a parked waiter blocks on (`BLPOP`).
//!
//! A fair release does not free the lock: it grants it to the first live waiter (lock
//! key = that waiter's owner id with the waiter's TTL, token `INCR`ed) and pushes
//! `g:<token>` to that waiter's wake list, so the waiter's `BLPOP` reply *is* its grant
//! (one round trip per hand-off), the releasing process cannot take the lock straight
//! back, and waiters are served in order. A waiter that misses its wake-up falls back on
//! its jittered backoff, and its next acquire finds the lock already its own.
//!
//! All keys share the hash tag `{name…}`, so the scripts also work on Redis Cluster.
//! Tokens come from `INCR` on the counter and travel as decimal strings (Lua numbers
//! are doubles, exact only below 2^53); the fenced SET compares them as strings of
//! digits, length first. A failover to a replica that had not seen
//! the last `INCR`, or a restart without persistence, can hand out a token again:
//! Redis locks are for efficiency unless the user opts in (DESIGN.md rule 8).

use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use super::{
    payload, BatchKey, Holder, Phrased, Progress, Read, ReadError, Recipe, Reply, RequestBody,
    Step, StepCx, Waiting,
};
use crate::error::ProtocolError;
use crate::{FencingToken, OwnerId, Previous};

/// Settings of the Redis backend.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RedisBackend {
    /// Prefix of every key fencepost writes; default `fencepost:`.
    pub key_prefix: String,
    /// Fair, instant hand-off: contended acquirers queue up and park on a blocking
    /// `BLPOP`; a release grants the lock to the first live waiter and wakes it.
    /// Default off (polling with jittered backoff). Locks of both kinds may share a
    /// name safely; only fairness is lost.
    pub fair: bool,
    /// The client is a Redis Cluster client: a batched renewal ([`RedisScript::RenewMany`])
    /// carries only keys of one hash slot, since a script's keys must share a slot there
    /// (`CROSSSLOT` otherwise). Hosts set it from the client they are given; default off.
    #[serde(skip_serializing_if = "core::ops::Not::not")]
    pub cluster: bool,
}

impl Default for RedisBackend {
    fn default() -> Self {
        RedisBackend {
            key_prefix: "fencepost:".to_owned(),
            fair: false,
            cluster: false,
        }
    }
}

/// The scripts fencepost runs on Redis.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RedisScript {
    /// `KEYS = [lock, token]`, `ARGV = [owner, ttl_ms]` or `[owner, ttl_ms, floor]`.
    /// Free: `SET lock owner NX PX ttl_ms`, then the token counter becomes
    /// `max(counter + 1, floor)` (plain `INCR` without a floor), return `{1, token}`.
    /// Already ours: `PEXPIRE`, return `{1, token}` (idempotent retry). Held by
    /// another: `{0, pttl, counter, holder}`, the counter's string (`""` before any
    /// grant) marking the holder's grant (`Read::Contended::holder`), and the holder's
    /// owner id, which marks it on every Redlock master alike (the counters differ
    /// from master to master). A floor that is not a positive decimal integer is an
    /// error reply. A new grant's reply has a third item saying how the previous
    /// holder ended (`released`, `expired`, `none`, `unknown`), from the `last` key
    /// beside the lock's (`p{name}:last`: the latest grant's `<owner> <token>`, with
    /// ` released` appended by its holder's own release; a record of another token than
    /// the counter's is `unknown`), which the grant rewrites.
    Acquire,
    /// `KEYS = [lock]`, `ARGV = [owner, ttl_ms]`: `PEXPIRE` if the owner matches; `1` or `0`.
    /// Never re-creates a missing key (DESIGN.md rule 3).
    Renew,
    /// `KEYS = [lock]`, `ARGV = [owner]` or `[owner, "cleanup"]`: `DEL` if the owner
    /// matches; `1` or `0`. Without `cleanup` (the holder's own release) it marks the
    /// `last` key released; a cleanup (the machine freeing a lease it no longer
    /// believes in) does not, so the next holder hears `expired`.
    Release,
    /// `KEYS = [data, fence]`, `ARGV = [token, value]` (token-only rule) or
    /// `[token, value, owner]` (owner-bound rule): writes `value` to `data` unless
    /// `token` is lower than the highest token the `fence` key has seen or, with an
    /// owner, equal to it but recorded with another owner. The fence key holds
    /// `<token>` or `<token>:<owner>`. Returns `{1, token}` when written, `{0, highest}`
    /// when the token is lower, `{2, highest}` when the token was granted twice.
    FencedSet,
    /// Fair acquire. `KEYS = [lock, token, queue, seq, alive, wake]`,
    /// `ARGV = [owner, ttl_ms, presence_ms]` or `[owner, ttl_ms, presence_ms, floor]`.
    /// Ours already: as `Acquire`. Free, or reserved for this owner: take it, leave
    /// the queue, token `max(counter + 1, floor)`, `{1, token}`. Held by another: raise
    /// the counter to at least `floor - 1` (so a hand-off's `INCR` reaches the floor),
    /// join the queue (once, FIFO), refresh presence (`alive` = `t:<ttl_ms>`,
    /// the TTL a release grants this waiter), clear the wake list (anything in it
    /// predates this moment: a grant it carried has expired), `{0, pttl, counter}`.
    AcquireFair,
    /// Fair release. `KEYS = [lock, queue, alive, token]`, `ARGV = [owner, claim_ms,
    /// alive_prefix, wake_prefix]`, with `"cleanup"` added for a cleanup (as
    /// `Release`). Leaves the queue; if the owner holds the lock (or
    /// its reservation), **grants** it to the first waiter whose presence key lives:
    /// `SET lock waiter PX <its ttl>`, `INCR token`, and pushes `g:<token> <previous>`
    /// (`released`, or `expired` after a cleanup) to that
    /// waiter's wake list, so the waiter's `BLPOP` reply is its grant (one round trip
    /// per hand-off). A waiter whose presence is the older `1` (an earlier fencepost) is
    /// only woken, with the lock reserved (`r:<waiter>`) for `claim_ms`. `1`; else `0`.
    ReleaseFair,
    /// Operator query. `KEYS = [lock]`: `1` if the lease key lives (a holder's lease,
    /// or a fair reservation for a woken waiter), else `0`.
    IsLocked,
    /// Operator reset. `KEYS = [lock]`, `ARGV = []` (plain), or `KEYS = [lock, queue,
    /// token]`, `ARGV = [claim_ms, alive_prefix, wake_prefix]` (fair): deletes the lease
    /// key whoever holds it, never the token counter; fair, it then grants the lock to
    /// the first live waiter exactly as `ReleaseFair` does. `1` if a lease was
    /// deleted, else `0` (nothing else changes).
    ForceRelease,
    /// Operator query. `KEYS = [lock, token, meta]` (plain) or `[lock, token, meta,
    /// queue]` (fair): `{}` when the lease key is gone, else `{owner, pttl, token,
    /// metadata, waiters}` (`''` for a missing token or metadata, waiters `-1` without a
    /// queue). Reads only.
    Inspect,
    /// Operator listing, one bounded step. `KEYS = []`, `ARGV = [cursor, pattern,
    /// count, fair]`: `SCAN cursor MATCH pattern COUNT count`, then for each lease key
    /// found that still lives `{key, owner, pttl, token, metadata, waiters}` as
    /// `Inspect` reads them; returns `{next cursor, found}`. Never `KEYS`. The other
    /// keys of a lock are derived from its lease key, so on Redis Cluster a step sees
    /// one node only.
    List,
    /// Batched renewal. `KEYS = [lock₁, …, lockₙ]`, `ARGV = [owner₁, ttl_ms₁, …, ownerₙ,
    /// ttl_msₙ]`: for each lease key, exactly what `Renew` does to it (`PEXPIRE` if the
    /// owner matches, never re-creating a missing key); returns `{r₁, …, rₙ}`, each `1` or
    /// `0`. The machine sends it when several of its leases renew at once, at most
    /// [`RENEW_BATCH_LIMIT`] keys per call, and on Cluster only keys of one hash slot.
    RenewMany,
}

/// The most lease keys one [`RedisScript::RenewMany`] call renews. The script blocks the
/// server while it runs (three commands per key), so a call stays short: 500 keys take
/// about as long as one slow command.
pub const RENEW_BATCH_LIMIT: usize = 500;

// The free case first (the uncontended path: `SET NX`, the token's `INCR`). Tokens
// are always returned as the counter's string (`GET`), never through a Lua number: Lua
// numbers are doubles, which round above 2^53 and print as `1e+14` from 10^14 on (a
// counter seeded from a clock gets there). For the same reason a token floor (the last
// ARGV, optional) is compared with the counter as a string of digits, length first, and
// the counter is raised with `SET`, never through a Lua number. A queued fair waiter
// raises the counter to `floor - 1` at once, so the `INCR` of a hand-off grant reaches
// the floor; raising a counter is always safe (tokens only move up).
//
// `previous(counter)` tells how the previous holder ended, before this grant moves the
// counter (`counter`: its string, read once per grant; nil: no counter yet, the first
// grant): `p{name}:last` holds the latest grant's `<owner> <token>`, with " released"
// once its holder's own release ran (never a cleanup's); a record of another token (a
// grant that wrote none, or a floor) gives "unknown". The Lua carries no comments: it is
// compiled into every binary and sent whole on every `EVAL` fallback.
const ACQUIRE_LUA: &str = r#"local floor = ARGV[3]
if floor == '' then floor = nil end
if floor and not string.match(floor, '^[1-9][0-9]*$') then
  return redis.error_reply('ERR token floor must be a positive integer')
end
local function next_token(counter)
  counter = counter or '0'
  if floor and (#counter < #floor or (#counter == #floor and counter < floor)) then
    redis.call('SET', KEYS[2], floor)
    return floor
  end
  redis.call('INCR', KEYS[2])
  return redis.call('GET', KEYS[2])
end
local function previous(counter)
  if not counter then return 'none' end
  local last = redis.call('GET', string.sub(KEYS[1], 1, -5) .. 'last')
  local token, mark = string.match(last or '', '^%S+ (%d+)(.*)$')
  if token ~= counter then return 'unknown' end
  if mark == ' released' then return 'released' end
  return 'expired'
end
local function granted()
  local counter = redis.call('GET', KEYS[2])
  local before = previous(counter)
  local token = next_token(counter)
  redis.call('SET', string.sub(KEYS[1], 1, -5) .. 'last', ARGV[1] .. ' ' .. token)
  return {1, token, before}
end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if KEYS[3] then redis.call('SET', KEYS[3], ARGV[4], 'PX', ARGV[2]) end
  return granted()
end
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if KEYS[3] then redis.call('SET', KEYS[3], ARGV[4], 'PX', ARGV[2]) end
  return {1, redis.call('GET', KEYS[2]) or next_token(nil)}
end
return {0, redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2]) or '', holder}
"#;

// The metadata key (`…:meta`, see `RedisBackend::meta_key`) is reached from the lease
// key, undeclared, so renewals and releases send the same keys with or without
// metadata; it shares the lease key's hash tag, hence its Cluster slot.
const RENEW_LUA: &str = r#"if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', string.sub(KEYS[1], 1, -5) .. 'meta', ARGV[2])
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"#;

// `Renew` for each key in turn; ARGV holds each key's owner and TTL in pairs.
const RENEW_MANY_LUA: &str = r#"local out = {}
for i, key in ipairs(KEYS) do
  local ttl = ARGV[2 * i]
  if redis.call('GET', key) == ARGV[2 * i - 1] then
    redis.call('PEXPIRE', string.sub(key, 1, -5) .. 'meta', ttl)
    out[i] = redis.call('PEXPIRE', key, ttl)
  else
    out[i] = 0
  end
end
return out
"#;

const RELEASE_LUA: &str = r#"if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', string.sub(KEYS[1], 1, -5) .. 'meta')
  local last_key = string.sub(KEYS[1], 1, -5) .. 'last'
  local last = redis.call('GET', last_key)
  if ARGV[2] ~= 'cleanup' and last and string.match(last, '^(%S+) %d+$') == ARGV[1] then
    redis.call('SET', last_key, last .. ' released')
  end
  return redis.call('DEL', KEYS[1])
end
return 0
"#;

// As `ACQUIRE_LUA`, with the queue. The holder's own re-acquire answers with the fate
// in a hand-off grant it overtook (the head of its wake-up list), which says how the
// releasing holder ended.
const ACQUIRE_FAIR_LUA: &str = r#"local floor = ARGV[4]
if floor and not string.match(floor, '^[1-9][0-9]*$') then
  return redis.error_reply('ERR token floor must be a positive integer')
end
local function below_floor(counter)
  counter = counter or '0'
  return floor and (#counter < #floor or (#counter == #floor and counter < floor))
end
local function next_token(counter)
  if below_floor(counter) then
    redis.call('SET', KEYS[2], floor)
    return floor
  end
  redis.call('INCR', KEYS[2])
  return redis.call('GET', KEYS[2])
end
local function previous(counter)
  if not counter then return 'none' end
  local last = redis.call('GET', string.sub(KEYS[1], 1, -5) .. 'last')
  local token, mark = string.match(last or '', '^%S+ (%d+)(.*)$')
  if token ~= counter then return 'unknown' end
  if mark == ' released' then return 'released' end
  return 'expired'
end
local function granted()
  local counter = redis.call('GET', KEYS[2])
  local before = previous(counter)
  local token = next_token(counter)
  redis.call('SET', string.sub(KEYS[1], 1, -5) .. 'last', ARGV[1] .. ' ' .. token)
  return {1, token, before}
end
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  local grant = redis.call('LINDEX', KEYS[6], 0)
  local fate = grant and string.match(grant, '^g:%d+ (%a+)$')
  if fate then return {1, redis.call('GET', KEYS[2]) or next_token(nil), fate} end
  return {1, redis.call('GET', KEYS[2]) or next_token(nil)}
end
if (not holder) or holder == 'r:' .. ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  redis.call('ZREM', KEYS[3], ARGV[1])
  redis.call('DEL', KEYS[5], KEYS[6])
  return granted()
end
if not redis.call('ZSCORE', KEYS[3], ARGV[1]) then
  redis.call('ZADD', KEYS[3], redis.call('INCR', KEYS[4]), ARGV[1])
end
if floor and below_floor(redis.call('GET', KEYS[2])) then
  redis.call('SET', KEYS[2], floor)
  redis.call('DECR', KEYS[2])
end
redis.call('SET', KEYS[5], 't:' .. ARGV[2], 'PX', ARGV[3])
redis.call('DEL', KEYS[6])
return {0, redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2]) or ''}
"#;

// The release, then the hand-off to the first live waiter. The release's own
// " released" mark on `…:last` is written last, and only when no grant wrote that
// waiter's record over it.
const RELEASE_FAIR_LUA: &str = r#"redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('DEL', KEYS[3])
local holder = redis.call('GET', KEYS[1])
if holder ~= ARGV[1] and holder ~= 'r:' .. ARGV[1] then
  return 0
end
local last_key = string.sub(KEYS[1], 1, -5) .. 'last'
local last = redis.call('GET', last_key)
local fate = 'expired'
if ARGV[5] ~= 'cleanup' and last and string.match(last, '^(%S+) %d+$') == ARGV[1] then
  fate = 'released'
end
redis.call('DEL', KEYS[1])
local recorded = false
while true do
  local head = redis.call('ZPOPMIN', KEYS[2])
  if #head == 0 then break end
  local waiter = head[1]
  local alive = redis.call('GET', ARGV[3] .. waiter)
  if alive and string.sub(alive, 1, 2) == 't:' then
    local ttl = string.sub(alive, 3)
    redis.call('SET', KEYS[1], waiter, 'PX', ttl)
    redis.call('INCR', KEYS[4])
    local token = redis.call('GET', KEYS[4])
    redis.call('SET', last_key, waiter .. ' ' .. token)
    recorded = true
    redis.call('DEL', ARGV[3] .. waiter)
    redis.call('RPUSH', ARGV[4] .. waiter, 'g:' .. token .. ' ' .. fate)
    redis.call('PEXPIRE', ARGV[4] .. waiter, ttl)
    break
  elseif alive then
    redis.call('SET', KEYS[1], 'r:' .. waiter, 'PX', ARGV[2])
    redis.call('RPUSH', ARGV[4] .. waiter, '1')
    redis.call('PEXPIRE', ARGV[4] .. waiter, ARGV[2])
    break
  end
end
if fate == 'released' and not recorded then
  redis.call('SET', last_key, last .. ' released')
end
return 1
"#;

const IS_LOCKED_LUA: &str = "return redis.call('EXISTS', KEYS[1])\n";

// The hand-off loop is RELEASE_FAIR_LUA's, with the token key at KEYS[3] and the
// arguments shifted by one (no owner); a change to one belongs in both (scripts cannot
// share code; MemoryRedis runs both through one `hand_off`).
const FORCE_RELEASE_LUA: &str = r#"if redis.call('DEL', KEYS[1]) == 0 then return 0 end
redis.call('DEL', string.sub(KEYS[1], 1, -5) .. 'meta')
if #KEYS == 1 then return 1 end
while true do
  local head = redis.call('ZPOPMIN', KEYS[2])
  if #head == 0 then break end
  local waiter = head[1]
  local alive = redis.call('GET', ARGV[2] .. waiter)
  if alive and string.sub(alive, 1, 2) == 't:' then
    local ttl = string.sub(alive, 3)
    redis.call('SET', KEYS[1], waiter, 'PX', ttl)
    redis.call('INCR', KEYS[3])
    local token = redis.call('GET', KEYS[3])
    redis.call('SET', string.sub(KEYS[1], 1, -5) .. 'last', waiter .. ' ' .. token)
    redis.call('DEL', ARGV[2] .. waiter)
    redis.call('RPUSH', ARGV[3] .. waiter, 'g:' .. token .. ' expired')
    redis.call('PEXPIRE', ARGV[3] .. waiter, ttl)
    break
  elseif alive then
    redis.call('SET', KEYS[1], 'r:' .. waiter, 'PX', ARGV[1])
    redis.call('RPUSH', ARGV[3] .. waiter, '1')
    redis.call('PEXPIRE', ARGV[3] .. waiter, ARGV[1])
    break
  end
end
return 1
"#;

// Missing values read as '' (a nil would end the Lua array early); -1 waiters: no queue.
const INSPECT_LUA: &str = r#"local owner = redis.call('GET', KEYS[1])
if not owner then return {} end
local waiters = -1
if KEYS[4] then waiters = redis.call('ZCARD', KEYS[4]) end
return {owner, redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2]) or '', redis.call('GET', KEYS[3]) or '', waiters}
"#;

// One bounded SCAN step and each found lease's fields, as INSPECT_LUA reads them; the
// other keys of a lock are derived from its lease key (`…:lock`).
const LIST_LUA: &str = r#"local scan = redis.call('SCAN', ARGV[1], 'MATCH', ARGV[2], 'COUNT', ARGV[3])
local found = {}
for _, key in ipairs(scan[2]) do
  local owner = redis.call('GET', key)
  if owner then
    local base = string.sub(key, 1, -5)
    local waiters = -1
    if ARGV[4] == '1' then waiters = redis.call('ZCARD', base .. 'queue') end
    found[#found + 1] = {key, owner, redis.call('PTTL', key), redis.call('GET', base .. 'token') or '', redis.call('GET', base .. 'meta') or '', waiters}
  end
end
return {scan[1], found}
"#;

// The fence key holds `<token>` (token-only write) or `<token>:<owner>` (owner-bound
// write, ARGV[3] = the owner id).
const FENCED_SET_LUA: &str = r#"local function lower(a, b)
  if #a ~= #b then return #a < #b end
  return a < b
end
local token, owner = ARGV[1], ARGV[3]
if not string.match(token, '^[1-9][0-9]*$') then
  return redis.error_reply('ERR fencing token must be a positive integer')
end
if owner == '' then return redis.error_reply('ERR owner id must not be empty') end
local highest, holder = string.match(redis.call('GET', KEYS[2]) or '0', '^([0-9]+):?(.*)$')
if not highest then return redis.error_reply('ERR the fence key holds no fencing token') end
if lower(token, highest) then return {0, highest} end
if token ~= highest then
  redis.call('SET', KEYS[2], owner and (token .. ':' .. owner) or token)
elseif owner and holder ~= owner then
  return {2, highest}
end
redis.call('SET', KEYS[1], ARGV[2])
return {1, token}
"#;

impl RedisScript {
    /// Every script, for hosts that preload them with `SCRIPT LOAD`.
    pub const ALL: [RedisScript; 11] = [
        RedisScript::Acquire,
        RedisScript::Renew,
        RedisScript::Release,
        RedisScript::FencedSet,
        RedisScript::AcquireFair,
        RedisScript::ReleaseFair,
        RedisScript::IsLocked,
        RedisScript::ForceRelease,
        RedisScript::Inspect,
        RedisScript::List,
        RedisScript::RenewMany,
    ];

    /// The Lua source, for `EVAL` and `SCRIPT LOAD`.
    pub fn source(self) -> &'static str {
        match self {
            RedisScript::Acquire => ACQUIRE_LUA,
            RedisScript::Renew => RENEW_LUA,
            RedisScript::Release => RELEASE_LUA,
            RedisScript::FencedSet => FENCED_SET_LUA,
            RedisScript::AcquireFair => ACQUIRE_FAIR_LUA,
            RedisScript::ReleaseFair => RELEASE_FAIR_LUA,
            RedisScript::IsLocked => IS_LOCKED_LUA,
            RedisScript::ForceRelease => FORCE_RELEASE_LUA,
            RedisScript::Inspect => INSPECT_LUA,
            RedisScript::List => LIST_LUA,
            RedisScript::RenewMany => RENEW_MANY_LUA,
        }
    }

    /// The SHA-1 of the source as 40 lowercase hex digits, for `EVALSHA`.
    pub fn sha1(self) -> &'static str {
        // one slot per variant, indexed by its declaration order (`ALL` lists the 11)
        static SHAS: [OnceLock<String>; 11] = [const { OnceLock::new() }; 11];
        SHAS[self as usize]
            .get_or_init(|| sha1_smol::Sha1::from(self.source()).digest().to_string())
    }
}

/// One script call: `EVALSHA sha1 len(keys) keys… args…`, and with `wait` a `WAIT`
/// right after it on the same connection.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RedisCommand {
    /// Which script.
    pub script: RedisScript,
    /// `KEYS`.
    pub keys: Vec<String>,
    /// `ARGV`.
    pub args: Vec<String>,
    /// Replica confirmation ([`crate::LockOptions::min_replicas`]): send `WAIT replicas
    /// timeout_ms` on the same connection right after the script (a pipeline; never
    /// inside `MULTI`, where `WAIT` does not block) and reply `[script reply, WAIT
    /// reply]`. `WAIT` counts the replicas that acknowledged every earlier write *of
    /// its connection*, so on another connection it would confirm nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<RedisWait>,
}

/// `WAIT numreplicas timeout` after a script ([`RedisCommand::wait`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RedisWait {
    /// How many replicas must acknowledge.
    pub replicas: u32,
    /// How long `WAIT` may block, ms; at least 1 (0 would block forever).
    pub timeout_ms: u64,
}

/// A blocking pop a parked waiter waits on: `BLPOP key timeout` with the timeout in
/// seconds (`timeout_ms / 1000`, fractional; Redis ≥ 6). Run it on a connection of
/// its own (it blocks that connection). Any reply — the wake-up, or nil at the
/// timeout — is answered by the next acquire attempt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RedisBlpop {
    /// The waiter's own wake-up list, `{prefix}{{name}}:wake:{owner id}`: a releasing
    /// holder that hands the lock to this waiter pushes to it.
    pub key: String,
    /// At least 1 ms (0 would block forever).
    pub timeout_ms: u64,
}

/// A Redis reply as plain data. Adapters convert their client's values: integers to
/// `Int`, bulk strings to `Data` (UTF-8, lossy), simple strings to `Status`, nil to
/// `Nil`, arrays to `Array`, error replies to `Error` with the full message
/// (e.g. `"LOADING Redis is loading the dataset in memory"`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", content = "value", rename_all = "snake_case")]
pub enum RedisValue {
    /// A nil reply (a missing key, `BLPOP` at its timeout).
    Nil,
    /// An integer reply.
    Int(i64),
    /// A bulk string, as UTF-8 (invalid bytes replaced).
    Data(String),
    /// A simple string (`OK`).
    Status(String),
    /// An array, each element converted the same way.
    Array(Vec<RedisValue>),
    /// An error reply: the full message, its code first (`NOSCRIPT …`, `LOADING …`).
    Error(String),
}

impl RedisBackend {
    /// The lease key of `name`: `{prefix}{{name}}:lock`.
    pub fn lock_key(&self, name: &str) -> String {
        self.tagged(name, "lock")
    }

    /// The fencing-token counter key of `name`: `{prefix}{{name}}:token`.
    pub fn token_key(&self, name: &str) -> String {
        self.tagged(name, "token")
    }

    /// The lock name whose lease key is `key` (the inverse of [`RedisBackend::lock_key`]),
    /// or `None` for a key that is not a lease key under this prefix. For operator
    /// listings that scan the keyspace.
    pub fn lock_name(&self, key: &str) -> Option<String> {
        let tagged = key
            .strip_prefix(self.key_prefix.as_str())?
            .strip_prefix('{')?
            .strip_suffix("}:lock")?;
        // the NUL pad of a name that starts with '}' (see `tagged`)
        let name = match tagged.strip_prefix('\0') {
            Some(rest) if rest.starts_with('}') => rest,
            _ => tagged,
        };
        Some(name.to_owned())
    }

    /// `{prefix}{{name}}:{suffix}`: every key of one lock shares the hash tag, so they
    /// live in one Redis Cluster slot. The tag ends at the first `}` after the `{`
    /// (Redis Cluster specification, "Hash tags"), so a name that starts with `}`
    /// would give an empty tag, and Cluster would hash each whole key to its own slot.
    /// Such a name gets a NUL byte before it inside the braces: the tag is then that
    /// byte, and the key stays distinct from every other name's (lock names never
    /// contain NUL, see `check_lock_name`).
    fn tagged(&self, name: &str, suffix: &str) -> String {
        let pad = if name.starts_with('}') { "\0" } else { "" };
        // pushed piece by piece: a few keys per acquire and release, and `format!`
        // costs several times as much here
        let mut key = String::with_capacity(
            self.key_prefix.len() + pad.len() + name.len() + suffix.len() + 3,
        );
        key.push_str(&self.key_prefix);
        key.push('{');
        key.push_str(pad);
        key.push_str(name);
        key.push_str("}:");
        key.push_str(suffix);
        key
    }

    /// The operator query "is `name` locked?" ([`RedisScript::IsLocked`]); read its
    /// reply with [`read_redis_flag`]: `true` while a lease (or a fair reservation)
    /// lives.
    pub fn is_locked(&self, name: &str) -> RedisCommand {
        RedisCommand {
            script: RedisScript::IsLocked,
            keys: vec![self.lock_key(name)],
            args: vec![],
            wait: None,
        }
    }

    /// The operator reset of `name` ([`RedisScript::ForceRelease`]): frees the lock
    /// whoever holds it, keeps the token counter (the next grant's token is above every
    /// earlier one) and, fair, grants the lock to the first live waiter as a release
    /// does. Read its reply with [`read_redis_flag`]: `true` if a lease was freed. The
    /// freed holder learns it at its next renewal (`Lost { RenewRejected }`).
    pub fn force_release(&self, name: &str) -> RedisCommand {
        if !self.fair {
            return RedisCommand {
                script: RedisScript::ForceRelease,
                keys: vec![self.lock_key(name)],
                args: vec![],
                wait: None,
            };
        }
        // the claim window of an older waiter: the default park, as a release's
        let claim_ms = crate::LockOptions::default().retry_max.as_millis();
        RedisCommand {
            script: RedisScript::ForceRelease,
            keys: vec![
                self.lock_key(name),
                self.tagged(name, "queue"),
                self.token_key(name),
            ],
            args: vec![
                claim_ms.to_string(),
                self.tagged(name, "alive:"),
                self.tagged(name, "wake:"),
            ],
            wait: None,
        }
    }

    /// The holder metadata key of `name`: `{prefix}{{name}}:meta`, written by an
    /// acquisition with [`crate::LockOptions::metadata`] with the lease's `PX`, extended
    /// and deleted with the lease key.
    pub fn meta_key(&self, name: &str) -> String {
        self.tagged(name, "meta")
    }

    /// The operator query "who holds `name`?" ([`RedisScript::Inspect`]): owner, time
    /// left (`PTTL`), token and metadata in one atomic read, plus the queue length when
    /// fair. Read its reply with [`read_redis_inspect`].
    pub fn inspect(&self, name: &str) -> RedisCommand {
        let mut keys = vec![
            self.lock_key(name),
            self.token_key(name),
            self.meta_key(name),
        ];
        if self.fair {
            keys.push(self.tagged(name, "queue"));
        }
        RedisCommand {
            script: RedisScript::Inspect,
            keys,
            args: vec![],
            wait: None,
        }
    }

    /// One step of the operator listing of the locks whose names start with `prefix`
    /// ([`RedisScript::List`]), from `cursor` (`"0"` for the first step). Read its reply
    /// with [`read_redis_list`]; send the next step with the cursor it returns, at most
    /// [`REDIS_LIST_STEPS`] steps per listing.
    pub fn list_step(&self, prefix: &str, cursor: &str) -> RedisCommand {
        RedisCommand {
            script: RedisScript::List,
            keys: vec![],
            args: vec![
                cursor.to_owned(),
                self.list_pattern(prefix),
                REDIS_SCAN_COUNT.to_string(),
                if self.fair { "1" } else { "0" }.to_owned(),
            ],
            wait: None,
        }
    }

    /// The `SCAN … MATCH` pattern of the lease keys of names starting with `prefix`.
    pub fn list_pattern(&self, prefix: &str) -> String {
        let escape = |s: &str| {
            s.chars().fold(String::new(), |mut out, c| {
                if matches!(c, '*' | '?' | '[' | ']' | '\\') {
                    out.push('\\');
                }
                out.push(c);
                out
            })
        };
        // a name that starts with '}' has a NUL before it inside the braces (`tagged`)
        let pad = if prefix.starts_with('}') { "\0" } else { "" };
        format!(
            "{}{{{pad}{}*}}:lock",
            escape(&self.key_prefix),
            escape(prefix)
        )
    }

    /// How long a queued waiter stays in line without asking again: its longest park
    /// (`retry_max`) plus a claim window plus slack.
    fn presence_ms(retry_max_ms: u64) -> u64 {
        retry_max_ms.saturating_mul(2).saturating_add(1_000)
    }

    pub(crate) fn acquire(
        &self,
        name: &str,
        owner: &OwnerId,
        ttl_ms: u64,
        retry_max_ms: u64,
        floor: Option<FencingToken>,
    ) -> RedisCommand {
        let mut cmd = self.acquire_without_floor(name, owner, ttl_ms, retry_max_ms);
        // the optional last ARGV: scripts called without it ask for no floor
        cmd.args.extend(floor.map(|f| f.to_string()));
        cmd
    }

    /// The plain acquire with metadata: `KEYS = [lock, token, meta]`, `ARGV = [owner,
    /// ttl_ms, floor or '', metadata]`.
    fn acquire_with_metadata(&self, cx: &StepCx<'_>, metadata: &str) -> RedisCommand {
        let mut cmd = self.acquire(cx.name, cx.owner, cx.ttl_ms, cx.retry_max_ms, None);
        cmd.keys.push(self.meta_key(cx.name));
        cmd.args
            .push(cx.token_floor.map(|f| f.to_string()).unwrap_or_default());
        // canonical text (keys in order, compact), whatever JSON the host encoded
        let canonical = crate::decode_metadata(metadata).map(|m| crate::encode_metadata(&m));
        cmd.args
            .push(canonical.unwrap_or_else(|| metadata.to_owned()));
        cmd
    }

    fn acquire_without_floor(
        &self,
        name: &str,
        owner: &OwnerId,
        ttl_ms: u64,
        retry_max_ms: u64,
    ) -> RedisCommand {
        if self.fair {
            let o = owner.to_string();
            return RedisCommand {
                script: RedisScript::AcquireFair,
                keys: vec![
                    self.lock_key(name),
                    self.token_key(name),
                    self.tagged(name, "queue"),
                    self.tagged(name, "seq"),
                    self.tagged(name, &format!("alive:{o}")),
                    self.tagged(name, &format!("wake:{o}")),
                ],
                args: vec![
                    o,
                    ttl_ms.to_string(),
                    Self::presence_ms(retry_max_ms).to_string(),
                ],
                wait: None,
            };
        }
        RedisCommand {
            script: RedisScript::Acquire,
            keys: vec![self.lock_key(name), self.token_key(name)],
            args: vec![owner.to_string(), ttl_ms.to_string()],
            wait: None,
        }
    }

    /// The blocking wait of a parked fair waiter, or `None` when not fair.
    pub(crate) fn wait(&self, name: &str, owner: &OwnerId, timeout_ms: u64) -> Option<RedisBlpop> {
        self.fair.then(|| RedisBlpop {
            key: self.tagged(name, &format!("wake:{owner}")),
            timeout_ms: timeout_ms.max(1),
        })
    }

    pub(crate) fn renew(&self, name: &str, owner: &OwnerId, ttl_ms: u64) -> RedisCommand {
        RedisCommand {
            script: RedisScript::Renew,
            keys: vec![self.lock_key(name)],
            args: vec![owner.to_string(), ttl_ms.to_string()],
            wait: None,
        }
    }

    /// The release of `owner`'s lease; `clean`: its holder's own release (the next
    /// grant hears `released`), else a cleanup (it hears `expired`).
    pub(crate) fn release(
        &self,
        name: &str,
        owner: &OwnerId,
        claim_ms: u64,
        clean: bool,
    ) -> RedisCommand {
        let mut cmd = self.release_command(name, owner, claim_ms);
        if !clean {
            cmd.args.push("cleanup".to_owned());
        }
        cmd
    }

    fn release_command(&self, name: &str, owner: &OwnerId, claim_ms: u64) -> RedisCommand {
        if self.fair {
            let o = owner.to_string();
            return RedisCommand {
                script: RedisScript::ReleaseFair,
                keys: vec![
                    self.lock_key(name),
                    self.tagged(name, "queue"),
                    self.tagged(name, &format!("alive:{o}")),
                    self.token_key(name),
                ],
                args: vec![
                    o,
                    claim_ms.max(1).to_string(),
                    self.tagged(name, "alive:"),
                    self.tagged(name, "wake:"),
                ],
                wait: None,
            };
        }
        RedisCommand {
            script: RedisScript::Release,
            keys: vec![self.lock_key(name)],
            args: vec![owner.to_string()],
            wait: None,
        }
    }
}

/// Every step is one script call; a fair contender is queued by its acquire and parks
/// on its own wake list, which the releasing holder's script pushes its grant to.
impl Recipe for RedisBackend {
    fn waiting(&self) -> Waiting {
        if self.fair {
            Waiting::Handoff
        } else {
            Waiting::Poll
        }
    }

    fn phrase(
        &self,
        step: Step,
        cx: &StepCx<'_>,
        _progress: &mut Progress,
        _shared: &mut super::Shared,
    ) -> Phrased {
        let (name, owner) = (cx.name, cx.owner);
        let mut cmd = match step {
            Step::Acquire => match cx.metadata {
                // check_acquire keeps metadata off fair locks
                Some(metadata) if !self.fair => self.acquire_with_metadata(cx, metadata),
                _ => self.acquire(name, owner, cx.ttl_ms, cx.retry_max_ms, cx.token_floor),
            },
            Step::Renew => self.renew(name, owner, cx.ttl_ms),
            // a fair release hands the lock to the first live waiter for one park
            Step::Release(_) => self.release(name, owner, cx.retry_max_ms, true),
            Step::Cleanup => self.release(name, owner, cx.retry_max_ms, false),
            Step::Wait { timeout_ms } => match self.wait(name, owner, timeout_ms) {
                Some(blpop) => return Phrased::One(RequestBody::RedisBlpop(blpop)),
                None => return Phrased::Nothing,
            },
        };
        // grants and renewals count once replicas confirm them; a release needs none (a
        // replica promoted without it frees the lock at the TTL)
        if cx.min_replicas > 0 && matches!(step, Step::Acquire | Step::Renew) {
            cmd.wait = Some(RedisWait {
                replicas: cx.min_replicas,
                timeout_ms: cx.replica_timeout_ms.max(1),
            });
        }
        Phrased::One(RequestBody::Redis(cmd))
    }

    fn read(
        &self,
        step: Step,
        cx: &StepCx<'_>,
        _progress: &mut Progress,
        _shared: &mut super::Shared,
        reply: Result<&Reply, &str>,
    ) -> Result<Read, ReadError> {
        let v = payload(reply, "redis", |r| match r {
            Reply::Redis(v) => Some(v),
            _ => None,
        })?;
        let confirmed = matches!(step, Step::Acquire | Step::Renew) && cx.min_replicas > 0;
        let (v, acks) = if confirmed {
            read_confirmed(v)?
        } else {
            (v, None)
        };
        let read = match step {
            Step::Acquire => read_acquire(v).map(|read| match read {
                Read::Contended {
                    remaining, holder, ..
                } => Read::Contended {
                    remaining,
                    queued: self.fair,
                    holder,
                },
                other => other,
            }),
            // a hand-off grant was never confirmed: the next acquire (already ours) is
            Step::Wait { .. } if cx.min_replicas > 0 => read_wait(v).map(|_| Read::Done),
            Step::Wait { .. } => read_wait(v),
            Step::Renew | Step::Release(_) | Step::Cleanup => read_owner_check(v),
        }?;
        match (read, acks) {
            (Read::Granted { .. } | Read::Done, Some(n)) if n < i64::from(cx.min_replicas) => {
                Err(ReadError::Ambiguous(format!(
                    "redis: WAIT confirmed the {} on {n} of {} replicas within {} ms",
                    if step == Step::Acquire {
                        "grant"
                    } else {
                        "renewal"
                    },
                    cx.min_replicas,
                    cx.replica_timeout_ms
                )))
            }
            (read, _) => Ok(read),
        }
    }

    fn renew_batch_limit(&self) -> usize {
        RENEW_BATCH_LIMIT
    }

    fn renew_batch_key(&self, body: &RequestBody) -> Option<BatchKey> {
        let RequestBody::Redis(cmd) = body else {
            return None;
        };
        if cmd.script != RedisScript::Renew || cmd.keys.len() != 1 || cmd.args.len() != 2 {
            return None;
        }
        let slot = if self.cluster {
            redis_cluster_slot(&cmd.keys[0])
        } else {
            0
        };
        let (replicas, timeout_ms) = cmd.wait.map_or((0, 0), |w| (w.replicas, w.timeout_ms));
        Some(BatchKey(
            u64::from(slot) << 32 | u64::from(replicas),
            timeout_ms,
        ))
    }

    fn phrase_renew_batch(&self, bodies: &[&RequestBody]) -> Option<RequestBody> {
        let mut many = RedisCommand {
            script: RedisScript::RenewMany,
            keys: Vec::with_capacity(bodies.len()),
            args: Vec::with_capacity(2 * bodies.len()),
            wait: None,
        };
        for body in bodies {
            let RequestBody::Redis(cmd) = *body else {
                return None;
            };
            many.keys.extend_from_slice(&cmd.keys);
            many.args.extend_from_slice(&cmd.args);
            many.wait = cmd.wait;
        }
        Some(RequestBody::Redis(many))
    }

    fn split_renew_batch(&self, reply: &Reply, n: usize) -> Option<Vec<Reply>> {
        let Reply::Redis(RedisValue::Array(items)) = reply else {
            return None;
        };
        let one = |v: &RedisValue| Reply::Redis(v.clone());
        match items.as_slice() {
            // with replica confirmation: `[script reply, WAIT reply]`, each renewal's
            // own reply `[its result, WAIT reply]`
            [RedisValue::Array(results), acks] if results.len() == n => Some(
                (results.iter())
                    .map(|r| one(&RedisValue::Array(vec![r.clone(), acks.clone()])))
                    .collect(),
            ),
            results if results.len() == n && results.iter().all(|r| as_int(r).is_some()) => {
                Some(results.iter().map(one).collect())
            }
            _ => None,
        }
    }
}

/// The Redis Cluster hash slot of `key` (0 ..= 16383): CRC16 (XMODEM) of its hash tag —
/// what lies between the first `{` and the first `}` after it, when that is not empty —
/// or of the whole key, modulo 16384 (Redis Cluster specification, "Keys distribution
/// model").
pub fn redis_cluster_slot(key: &str) -> u16 {
    const CRC16: crc::Crc<u16> = crc::Crc::<u16>::new(&crc::CRC_16_XMODEM);
    let bytes = key.as_bytes();
    let tag = bytes
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            // `open` is a byte's index, so `open + 1` is at most the length
            let rest = &bytes[open + 1..];
            rest.iter()
                .position(|&b| b == b'}')
                .filter(|&close| close > 0)
                .map(|close| &rest[..close])
        })
        .unwrap_or(bytes);
    CRC16.checksum(tag) % 16384
}

/// A script's reply followed by its `WAIT`'s: `[script reply, replicas]`. An error reply
/// in either place is the server's (a `WAIT` refused on a replica, `NOSCRIPT`, …).
fn read_confirmed(v: &RedisValue) -> Result<(&RedisValue, Option<i64>), ReadError> {
    match v {
        RedisValue::Error(e) => Err(server_error(e)),
        RedisValue::Array(items) => match items.as_slice() {
            [_, RedisValue::Error(e)] => Err(server_error(e)),
            [script, acks] => match as_int(acks) {
                Some(n) => Ok((script, Some(n))),
                None => Err(protocol(format!(
                    "WAIT after a script: expected a count of replicas, got {acks:?}"
                ))),
            },
            _ => Err(protocol(format!(
                "a script followed by WAIT: expected [script reply, replicas], got {v:?}"
            ))),
        },
        _ => Err(protocol(format!(
            "a script followed by WAIT: expected [script reply, replicas], got {v:?}"
        ))),
    }
}

/// Error replies that a retry may fix: the server is loading, busy, read-only during a
/// failover, or redirecting in a cluster.
const TRANSIENT_PREFIXES: [&str; 11] = [
    "LOADING",
    "BUSY",
    "READONLY",
    "MASTERDOWN",
    "CLUSTERDOWN",
    "TRYAGAIN",
    "NOREPLICAS",
    "MOVED",
    "ASK",
    "OOM",
    "NOSCRIPT",
];

fn protocol(message: String) -> ReadError {
    ReadError::Protocol(ProtocolError {
        backend: "redis".to_owned(),
        message,
    })
}

fn server_error(message: &str) -> ReadError {
    let word = message.split_whitespace().next().unwrap_or("");
    if TRANSIENT_PREFIXES.contains(&word) {
        ReadError::Ambiguous(format!("redis: {message}"))
    } else {
        protocol(format!("server error reply: {message}"))
    }
}

fn as_int(v: &RedisValue) -> Option<i64> {
    match v {
        RedisValue::Int(n) => Some(*n),
        RedisValue::Data(s) | RedisValue::Status(s) => s.trim().parse().ok(),
        _ => None,
    }
}

pub(crate) fn read_acquire(v: &RedisValue) -> Result<Read, ReadError> {
    if let RedisValue::Error(e) = v {
        return Err(server_error(e));
    }
    // a grant's third item: how the previous holder ended (a text; a name this
    // reader does not know, from a newer script, reads as unknown); a refusal's: the
    // token counter, which marks the holder's grant ("" before any grant), and after it
    // the plain script's holder owner id (`holder_owner`)
    let (pair, previous, holder) = match v {
        RedisValue::Array(items) => match items.as_slice() {
            [a, b] => ((as_int(a), as_int(b)), Previous::Unknown, None),
            [a, b, RedisValue::Data(p) | RedisValue::Status(p)] if as_int(a) == Some(1) => (
                (as_int(a), as_int(b)),
                p.parse().unwrap_or(Previous::Unknown),
                None,
            ),
            [a, b, RedisValue::Data(c) | RedisValue::Status(c)]
            | [a, b, RedisValue::Data(c) | RedisValue::Status(c), RedisValue::Data(_) | RedisValue::Status(_)]
                if as_int(a) == Some(0) =>
            {
                let counter = if c.is_empty() {
                    Some(0)
                } else {
                    c.parse().ok()
                };
                // a counter not of digits fails the reply as a whole, below
                (
                    (as_int(a), as_int(b).filter(|_| counter.is_some())),
                    Previous::Unknown,
                    counter,
                )
            }
            _ => ((None, None), Previous::Unknown, None),
        },
        _ => ((None, None), Previous::Unknown, None),
    };
    match pair {
        (Some(1), Some(token)) if token > 0 => Ok(Read::Granted {
            token: FencingToken(token as u64),
            base: None,
            previous,
        }),
        (Some(0), Some(pttl)) => Ok(Read::Contended {
            queued: false,
            remaining: u64::try_from(pttl)
                .ok()
                .filter(|&ms| ms > 0)
                .map(core::time::Duration::from_millis),
            holder,
        }),
        _ => Err(protocol(format!(
            "acquire script: expected [1, token > 0] or [0, pttl] (a counter third, the holder fourth), got {v:?}"
        ))),
    }
}

/// The holder's owner id in an acquire's refusal (`{0, pttl, counter, holder}`, the
/// plain script's), if the reply is one.
pub(crate) fn holder_owner(v: &RedisValue) -> Option<&str> {
    match v {
        RedisValue::Array(items) => match items.as_slice() {
            [a, _, _, RedisValue::Data(h) | RedisValue::Status(h)] if as_int(a) == Some(0) => {
                Some(h)
            }
            _ => None,
        },
        _ => None,
    }
}

/// Any reply to a blocking wait ends the park; only an error reply is worth reporting.
/// A `BLPOP` reply: `[key, "g:<token>"]` is a grant made by the releasing holder's
/// script; anything else (`nil` at the timeout, an older `1`) just means "try now".
pub(crate) fn read_wait(v: &RedisValue) -> Result<Read, ReadError> {
    read_wake_up(v).map(|grant| match grant {
        Some((token, previous)) => Read::Granted {
            token,
            base: None,
            previous,
        },
        None => Read::Done,
    })
}

fn read_wake_up(v: &RedisValue) -> Result<Option<(FencingToken, Previous)>, ReadError> {
    let s = match v {
        RedisValue::Error(e) => return Err(server_error(e)),
        RedisValue::Array(items) => match items.as_slice() {
            [_, RedisValue::Data(s) | RedisValue::Status(s)] => s,
            _ => return Ok(None),
        },
        _ => return Ok(None),
    };
    let Some(grant) = s.strip_prefix("g:") else {
        return Ok(None);
    };
    // `g:<token>`, then how the releasing holder ended when the script says
    let (token, previous) = grant.split_once(' ').unwrap_or((grant, "unknown"));
    match token.parse::<u64>() {
        Ok(t) if t > 0 => Ok(Some((
            FencingToken(t),
            previous.parse().unwrap_or(Previous::Unknown),
        ))),
        _ => Err(protocol(format!(
            "fair wake-up: a grant that is not a token: {s:?}"
        ))),
    }
}

/// Reads the reply of [`RedisBackend::is_locked`] or [`RedisBackend::force_release`]:
/// `1` is `true`, `0` is `false`.
///
/// Errors: [`ProtocolError`] for an error reply or any other reply.
pub fn read_redis_flag(v: &RedisValue) -> Result<bool, ProtocolError> {
    match as_int(v) {
        Some(1) => Ok(true),
        Some(0) => Ok(false),
        _ => Err(ProtocolError {
            backend: "redis".to_owned(),
            message: format!("operator script: expected 1 or 0, got {v:?}"),
        }),
    }
}

/// How many keys one listing step asks `SCAN` for.
pub const REDIS_SCAN_COUNT: usize = 500;
/// At most this many steps per listing, so a huge keyspace costs a bounded time.
pub const REDIS_LIST_STEPS: usize = 1_000;

fn text(v: &RedisValue) -> Option<String> {
    match v {
        RedisValue::Data(s) | RedisValue::Status(s) => Some(s.clone()),
        RedisValue::Int(n) => Some(n.to_string()),
        _ => None,
    }
}

fn operator_error(message: String) -> ProtocolError {
    ProtocolError {
        backend: "redis".to_owned(),
        message,
    }
}

/// `{owner, pttl, token, metadata, waiters}` as a holder of `name`. A fair reservation
/// (`r:<owner>`) is shown as its owner.
fn read_holder(name: String, fields: &[RedisValue]) -> Result<Holder, ProtocolError> {
    let [owner, pttl, token, metadata, waiters] = fields else {
        return Err(operator_error(format!(
            "inspect: expected [owner, pttl, token, metadata, waiters], got {fields:?}"
        )));
    };
    let owner = text(owner).ok_or_else(|| {
        operator_error(format!("inspect: the lease key holds no string: {owner:?}"))
    })?;
    let metadata = text(metadata).filter(|m| !m.is_empty());
    Ok(Holder {
        name,
        owner: Some(owner.trim_start_matches("r:").to_owned()),
        token: text(token)
            .and_then(|t| t.parse::<u64>().ok())
            .map(FencingToken),
        ttl_left: as_int(pttl)
            .and_then(|ms| u64::try_from(ms).ok())
            .map(core::time::Duration::from_millis),
        waiters: as_int(waiters).and_then(|n| u64::try_from(n).ok()),
        // display only: text another writer left that is no JSON object of strings reads
        // as none
        metadata: metadata.as_deref().and_then(crate::decode_metadata),
    })
}

/// Reads the reply of [`RedisBackend::inspect`]: the holder of `name`, or `None` when
/// nobody holds it.
///
/// Errors: [`ProtocolError`] for an error reply or any other shape.
pub fn read_redis_inspect(name: &str, v: &RedisValue) -> Result<Option<Holder>, ProtocolError> {
    match v {
        RedisValue::Array(items) if items.is_empty() => Ok(None),
        RedisValue::Array(items) => read_holder(name.to_owned(), items).map(Some),
        RedisValue::Nil => Ok(None),
        RedisValue::Error(e) => Err(operator_error(format!("inspect: server error reply: {e}"))),
        _ => Err(operator_error(format!(
            "inspect: expected an array, got {v:?}"
        ))),
    }
}

/// Reads the reply of one [`RedisBackend::list_step`]: the next cursor (`None`: the scan
/// is complete) and the holders found in this step, in the server's order.
///
/// Errors: [`ProtocolError`] for an error reply or any other shape.
pub fn read_redis_list(
    backend: &RedisBackend,
    v: &RedisValue,
) -> Result<(Option<String>, Vec<Holder>), ProtocolError> {
    let shape = || operator_error(format!("list: expected [cursor, [holders]], got {v:?}"));
    if let RedisValue::Error(e) = v {
        return Err(operator_error(format!("list: server error reply: {e}")));
    }
    let RedisValue::Array(parts) = v else {
        return Err(shape());
    };
    let [cursor, RedisValue::Array(found)] = parts.as_slice() else {
        return Err(shape());
    };
    let cursor = text(cursor).ok_or_else(shape)?;
    let mut holders = Vec::with_capacity(found.len());
    for entry in found {
        let RedisValue::Array(fields) = entry else {
            return Err(shape());
        };
        let Some((key, fields)) = fields.split_first() else {
            return Err(shape());
        };
        // a key under the pattern that is no lease key of this prefix is not a lock
        if let Some(name) = text(key).and_then(|k| backend.lock_name(&k)) {
            holders.push(read_holder(name, fields)?);
        }
    }
    Ok(((cursor != "0").then_some(cursor), holders))
}

pub(crate) fn read_owner_check(v: &RedisValue) -> Result<Read, ReadError> {
    match v {
        RedisValue::Error(e) => Err(server_error(e)),
        _ => match as_int(v) {
            Some(1) => Ok(Read::Done),
            Some(0) => Ok(Read::NotHeld),
            _ => Err(protocol(format!(
                "owner-checked script: expected 1 or 0, got {v:?}"
            ))),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_share_one_cluster_hash_tag_whatever_the_name() {
        let b = RedisBackend::default();
        assert_eq!(b.lock_key("report"), "fencepost:{report}:lock");
        assert_eq!(b.token_key("report"), "fencepost:{report}:token");
        // a '}' inside the name ends the tag early, at the same place in both keys
        let tag = |k: &str| {
            k[k.find('{').unwrap() + 1..]
                .split('}')
                .next()
                .unwrap()
                .to_owned()
        };
        assert_eq!(tag(&b.lock_key("a}b")), tag(&b.token_key("a}b")));
        // a name that starts with '}' still has a non-empty tag, the same in every key,
        // and its keys are not another name's
        assert_eq!(b.lock_key("}x"), "fencepost:{\0}x}:lock");
        assert_eq!(tag(&b.lock_key("}x")), "\0");
        assert_eq!(tag(&b.tagged("}x", "queue")), tag(&b.token_key("}x")));
        assert_ne!(b.lock_key("}x"), b.lock_key("x"));
        assert_ne!(b.lock_key("}"), b.lock_key(""));
        for name in ["report", "a}b", "}x", "}", "{", "\0y"] {
            assert_eq!(b.lock_name(&b.lock_key(name)).as_deref(), Some(name));
        }
        assert_eq!(b.lock_name(&b.token_key("report")), None);
        assert_eq!(b.lock_name("other:{report}:lock"), None);
    }

    #[test]
    fn names_travel_as_keys_never_inside_the_script() {
        let b = RedisBackend::default();
        let evil = "x') redis.call('FLUSHALL') --";
        let cmd = b.acquire(evil, &OwnerId([7; 16]), 1_000, 500, None);
        assert_eq!(cmd.script.source(), ACQUIRE_LUA);
        assert!(cmd.keys[0].contains(evil));
        assert_eq!(cmd.args, vec!["07".repeat(16), "1000".to_owned()]);
    }

    #[test]
    fn sha1_matches_the_source() {
        // sha1 of RENEW_LUA computed independently would be brittle; check shape and stability
        let sha = RedisScript::Renew.sha1();
        assert_eq!(sha.len(), 40);
        assert_eq!(sha, sha1_smol::Sha1::from(RENEW_LUA).digest().to_string());
        assert_ne!(RedisScript::Renew.sha1(), RedisScript::Release.sha1());
    }

    #[test]
    fn acquire_replies_are_read_strictly() {
        use RedisValue::*;
        assert_eq!(
            read_acquire(&Array(vec![Int(1), Int(42)])),
            Ok(Read::Granted {
                token: FencingToken(42),
                base: None,
                previous: crate::Previous::Unknown
            })
        );
        // a refusal names the holder's grant by the token counter ("" before any grant);
        // an older script's, without it, names none
        let refused = |holder| {
            Ok(Read::Contended {
                queued: false,
                remaining: Some(core::time::Duration::from_millis(250)),
                holder,
            })
        };
        let counter = |c: &str| Array(vec![Int(0), Int(250), Data(c.into())]);
        assert_eq!(read_acquire(&counter("17")), refused(Some(17)));
        assert_eq!(read_acquire(&counter("")), refused(Some(0)));
        assert_eq!(read_acquire(&Array(vec![Int(0), Int(250)])), refused(None));
        // the plain script's fourth item, the holder's owner id
        let with_holder = |h: RedisValue| Array(vec![Int(0), Int(250), Data("17".into()), h]);
        assert_eq!(
            read_acquire(&with_holder(Data("ab".repeat(16)))),
            refused(Some(17))
        );
        assert!(matches!(
            read_acquire(&with_holder(Int(3))),
            Err(ReadError::Protocol(_))
        ));
        assert!(matches!(
            read_acquire(&counter("x")),
            Err(ReadError::Protocol(_))
        ));
        assert!(matches!(
            read_acquire(&Array(vec![Int(1), Int(0)])),
            Err(ReadError::Protocol(_))
        ));
        assert!(matches!(read_acquire(&Int(1)), Err(ReadError::Protocol(_))));
        assert!(matches!(read_acquire(&Nil), Err(ReadError::Protocol(_))));
        assert!(matches!(
            read_acquire(&Error("LOADING Redis is loading".into())),
            Err(ReadError::Ambiguous(_))
        ));
        assert!(matches!(
            read_acquire(&Error("WRONGTYPE Operation against a key".into())),
            Err(ReadError::Protocol(_))
        ));
    }

    #[test]
    fn a_script_and_its_wait_reply_as_a_pair() {
        use RedisValue::*;
        let script = Array(vec![Int(1), Data("7".into())]);
        let pair = Array(vec![script.clone(), Int(2)]);
        assert_eq!(read_confirmed(&pair).unwrap(), (&script, Some(2)));
        let refused = Array(vec![
            script.clone(),
            Error("ERR WAIT cannot be used with replica instances".into()),
        ]);
        assert!(matches!(
            read_confirmed(&refused),
            Err(ReadError::Protocol(_))
        ));
        assert!(matches!(
            read_confirmed(&Error("LOADING x".into())),
            Err(ReadError::Ambiguous(_))
        ));
        // a bare script reply (the host sent no WAIT) is refused, not read as a count
        for garbage in [Array(vec![Int(1)]), Int(1), Array(vec![script, Nil])] {
            assert!(
                matches!(read_confirmed(&garbage), Err(ReadError::Protocol(_))),
                "{garbage:?}"
            );
        }
    }

    #[test]
    fn non_redis_backends_refuse_replica_confirmation_and_etcd_a_floor() {
        let mut o = crate::LockOptions::ttl(core::time::Duration::from_secs(10));
        o.min_replicas = 1;
        let pg = crate::Backend::Postgres(Default::default());
        let err = pg.check_acquire("r", &o).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("min_replicas: applies to Redis only"),
            "{err}"
        );
        assert_eq!(crate::Backend::default().check_acquire("r", &o), Ok(()));
        o.min_replicas = 0;
        o.token_floor = Some(FencingToken(5));
        let etcd = crate::Backend::Etcd(Default::default());
        let err = etcd.check_acquire("r", &o).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("token_floor: not supported on etcd"),
            "{err}"
        );
        assert_eq!(pg.check_acquire("r", &o), Ok(()));
    }

    #[test]
    fn metadata_is_refused_on_fair_redis_and_other_backends() {
        let mut o = crate::LockOptions::ttl(core::time::Duration::from_secs(10));
        o.metadata = Some(r#"{"host":"a"}"#.to_owned());
        assert_eq!(crate::Backend::default().check_acquire("r", &o), Ok(()));
        let fair = crate::Backend::Redis(RedisBackend {
            fair: true,
            ..RedisBackend::default()
        });
        let pg = crate::Backend::Postgres(Default::default());
        assert_eq!(pg.check_acquire("r", &o), Ok(()), "lease rows store it");
        let etcd = crate::Backend::Etcd(Default::default());
        assert_eq!(etcd.check_acquire("r", &o), Ok(()), "as the key's value");
        let session = crate::Backend::Postgres(crate::PostgresBackend {
            mode: crate::PgMode::Session,
            ..Default::default()
        });
        for b in [fair, session] {
            let err = b.check_acquire("r", &o).unwrap_err();
            assert!(
                err.to_string().starts_with("metadata: not supported"),
                "{err}"
            );
        }
        o.metadata = Some(r#"{"pid":7}"#.to_owned());
        let err = crate::Backend::default()
            .check_acquire("r", &o)
            .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("metadata: must be a JSON object"),
            "{err}"
        );
    }

    #[test]
    fn inspect_and_list_replies_are_read_into_holders() {
        use RedisValue::*;
        let b = RedisBackend::default();
        assert_eq!(read_redis_inspect("r", &Array(vec![])), Ok(None));
        let fields = |owner: &str| {
            vec![
                Data(owner.into()),
                Int(1500),
                Data("7".into()),
                Data(r#"{"host":"a"}"#.into()),
                Int(-1),
            ]
        };
        let h = read_redis_inspect("r", &Array(fields(&"ab".repeat(16))))
            .unwrap()
            .unwrap();
        assert_eq!(h.token, Some(FencingToken(7)));
        assert_eq!(h.ttl_left, Some(core::time::Duration::from_millis(1500)));
        assert_eq!(h.waiters, None);
        assert_eq!(h.metadata.unwrap()["host"], "a");
        assert!(read_redis_inspect("r", &Int(1)).is_err());
        let mut entry = vec![Data(b.lock_key("job"))];
        entry.extend(fields("r:owner"));
        let reply = Array(vec![Data("17".into()), Array(vec![Array(entry)])]);
        let (next, found) = read_redis_list(&b, &reply).unwrap();
        assert_eq!(next.as_deref(), Some("17"));
        assert_eq!(found[0].name, "job");
        assert_eq!(found[0].owner.as_deref(), Some("owner"));
        let done = Array(vec![Data("0".into()), Array(vec![])]);
        assert_eq!(read_redis_list(&b, &done), Ok((None, vec![])));
        assert_eq!(b.list_pattern("a*"), "fencepost:{a\\**}:lock");
    }

    #[test]
    fn owner_checks_accept_only_one_or_zero() {
        assert_eq!(read_owner_check(&RedisValue::Int(1)), Ok(Read::Done));
        assert_eq!(read_owner_check(&RedisValue::Int(0)), Ok(Read::NotHeld));
        assert!(read_owner_check(&RedisValue::Int(2)).is_err());
        assert!(read_owner_check(&RedisValue::Array(vec![])).is_err());
    }
}
