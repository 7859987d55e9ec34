//! [`MemoryRedis`]: an in-memory server that executes fencepost's Redis scripts with the
//! semantics of the Lua in [`crate::backends::redis`], with TTLs driven by injected time.
//! Integration tests run the same scenarios against real Redis to keep the two in step.

use std::collections::{HashMap, VecDeque};

use crate::backends::{RedisCommand, RedisScript, RedisValue, Reply, RequestBody};
use crate::Instant;

#[derive(Clone, Debug)]
struct Entry {
    value: String,
    expires_at: Option<Instant>,
}

/// An in-memory Redis-like key space: strings with optional expiry, lists and sorted
/// sets — enough for the lock, renew, release, fair hand-off and fenced-SET scripts.
#[derive(Clone, Debug, Default)]
pub struct MemoryRedis {
    keys: HashMap<String, Entry>,
    /// Lists (wake-ups) with their expiry.
    lists: HashMap<String, (VecDeque<String>, Option<Instant>)>,
    /// Sorted sets (waiter queues): (score, member), kept sorted.
    zsets: HashMap<String, Vec<(i64, String)>>,
}

impl MemoryRedis {
    /// Writes the whole key space in a canonical order (keys sorted), whatever the
    /// history that built it. Test-only (feature `model`): the model checker's state
    /// hash.
    #[cfg(feature = "model")]
    pub(crate) fn fingerprint(&self, out: &mut impl core::fmt::Write) -> core::fmt::Result {
        fn sorted<V>(map: &HashMap<String, V>) -> Vec<(&String, &V)> {
            let mut v: Vec<_> = map.iter().collect();
            v.sort_by(|a, b| a.0.cmp(b.0));
            v
        }
        let (keys, lists, zsets) = (sorted(&self.keys), sorted(&self.lists), sorted(&self.zsets));
        write!(out, "{keys:?}{lists:?}{zsets:?}")
    }

    /// An empty server.
    pub fn new() -> Self {
        Self::default()
    }

    /// Executes a request body at `now` and returns the reply a real server would give.
    pub fn execute(&mut self, now: Instant, body: &RequestBody) -> Reply {
        match body {
            // no replicas here: a WAIT after the script confirms on none
            RequestBody::Redis(cmd) if cmd.wait.is_some() => Reply::Redis(RedisValue::Array(vec![
                self.eval(now, cmd),
                RedisValue::Int(0),
            ])),
            RequestBody::Redis(cmd) => Reply::Redis(self.eval(now, cmd)),
            // one master's share of a Redlock step: the same script
            RequestBody::RedlockPart(part) => Reply::Redis(self.eval(now, &part.command)),
            // Non-blocking here: a host or simulator emulating BLPOP parks the caller
            // itself until `lpop` yields or the timeout passes.
            RequestBody::RedisBlpop(b) => Reply::Redis(match self.lpop(now, &b.key) {
                Some(v) => {
                    RedisValue::Array(vec![RedisValue::Data(b.key.clone()), RedisValue::Data(v)])
                }
                None => RedisValue::Nil,
            }),
            _ => Reply::Redis(RedisValue::Error(
                "ERR the in-memory server runs Redis scripts only".to_owned(),
            )),
        }
    }

    /// The fair hand-off of a freed lock: grants it to the first live waiter of `queue`
    /// (token `INCR`ed, `g:<token>` pushed to its wake list), or reserves it for an
    /// older waiter for `claim`, as the release script does.
    #[allow(clippy::too_many_arguments)]
    fn hand_off(
        &mut self,
        now: Instant,
        lock: &str,
        queue: &str,
        token_key: &str,
        claim: core::time::Duration,
        alive_prefix: &str,
        wake_prefix: &str,
        previous: &str,
    ) -> Result<(), RedisValue> {
        loop {
            let head = match self.zsets.get_mut(queue) {
                Some(z) if !z.is_empty() => z.remove(0).1,
                _ => return Ok(()),
            };
            let alive_key = format!("{alive_prefix}{head}");
            let alive = self.get(now, &alive_key).map(str::to_owned);
            let wake = format!("{wake_prefix}{head}");
            if let Some(ttl) = alive.as_deref().and_then(|a| a.strip_prefix("t:")) {
                // grant in the release: the waiter's BLPOP reply is its grant
                let Some(ttl) = parse_ms(ttl) else {
                    return Err(RedisValue::Error("ERR invalid expire time".to_owned()));
                };
                self.set(lock, &head, Some(now + ttl));
                let Some(token) = self.incr(now, token_key) else {
                    return Err(overflow());
                };
                self.set(&last_key(lock), &format!("{head} {token}"), None);
                self.keys.remove(&alive_key);
                let list = self.lists.entry(wake).or_default();
                list.0.push_back(format!("g:{token} {previous}"));
                list.1 = Some(now + ttl);
                return Ok(());
            }
            if alive.is_some() {
                self.set(lock, &format!("r:{head}"), Some(now + claim));
                let list = self.lists.entry(wake).or_default();
                list.0.push_back("1".to_owned());
                list.1 = Some(now + claim);
                return Ok(());
            }
        }
    }

    /// `Renew` of one lease key: `PEXPIRE` it (and its metadata) if `owner` holds it.
    fn renew(&mut self, now: Instant, key: &str, owner: &str, ttl_ms: &str) -> RedisValue {
        let Some(ttl) = parse_ms(ttl_ms) else {
            return RedisValue::Error("ERR invalid expire time".to_owned());
        };
        if self.get(now, key) == Some(owner) {
            self.set_expiry(key, now + ttl);
            self.set_expiry(&meta_key(key), now + ttl);
            RedisValue::Int(1)
        } else {
            RedisValue::Int(0)
        }
    }

    /// Runs one script call at `now`.
    pub fn eval(&mut self, now: Instant, cmd: &RedisCommand) -> RedisValue {
        let (keys, args) = (&cmd.keys, &cmd.args);
        // Hosts send commands they build: every `keys[i]` and `args[i]` below is within
        // the arity checked here.
        let arity_ok = match cmd.script {
            RedisScript::Acquire => {
                (keys.len() == 2 && (args.len() == 2 || args.len() == 3))
                    || (keys.len() == 3 && args.len() == 4)
            }
            RedisScript::FencedSet => keys.len() == 2 && (args.len() == 2 || args.len() == 3),
            RedisScript::Renew => keys.len() == 1 && args.len() == 2,
            RedisScript::Release => keys.len() == 1 && (args.len() == 1 || args.len() == 2),
            RedisScript::AcquireFair => keys.len() == 6 && (args.len() == 3 || args.len() == 4),
            RedisScript::ReleaseFair => keys.len() == 4 && (args.len() == 4 || args.len() == 5),
            RedisScript::IsLocked => keys.len() == 1 && args.is_empty(),
            RedisScript::ForceRelease => {
                (keys.len() == 1 && args.is_empty()) || (keys.len() == 3 && args.len() == 3)
            }
            RedisScript::Inspect => (keys.len() == 3 || keys.len() == 4) && args.is_empty(),
            RedisScript::List => keys.is_empty() && args.len() == 4,
            RedisScript::RenewMany => !keys.is_empty() && args.len() == 2 * keys.len(),
        };
        if !arity_ok {
            return RedisValue::Error(
                "ERR wrong number of keys or arguments for script".to_owned(),
            );
        }
        // the acquire scripts' optional last argument
        let floor = match cmd.script {
            RedisScript::Acquire => args.get(2),
            RedisScript::AcquireFair => args.get(3),
            _ => None,
        };
        // a metadata acquire without a floor sends '' in its place
        let floor = floor.filter(|f| !f.is_empty());
        let floor = match floor.map(|f| parse_floor(f)) {
            None => None,
            Some(Some(f)) => Some(f),
            Some(None) => {
                return RedisValue::Error("ERR token floor must be a positive integer".to_owned())
            }
        };
        match cmd.script {
            RedisScript::Acquire => {
                let Some(ttl) = parse_ms(&args[1]) else {
                    return RedisValue::Error("ERR invalid expire time".to_owned());
                };
                let takes = match self.get(now, &keys[0]) {
                    Some(holder) => holder == args[0],
                    None => true,
                };
                if let (true, Some(meta), Some(value)) = (takes, keys.get(2), args.get(3)) {
                    self.set(meta, value, Some(now + ttl));
                }
                match self.get(now, &keys[0]).map(str::to_owned) {
                    Some(holder) if holder == args[0] => {
                        self.set_expiry(&keys[0], now + ttl);
                        let held = self.get(now, &keys[1]).and_then(|t| t.parse().ok());
                        let Some(token) = held.or_else(|| self.next_token(now, &keys[1], floor))
                        else {
                            return overflow();
                        };
                        RedisValue::Array(vec![RedisValue::Int(1), RedisValue::Int(token)])
                    }
                    Some(holder) => self.refused(now, keys, Some(holder)),
                    None => {
                        self.set(&keys[0], &args[0], Some(now + ttl));
                        let previous = self.previous(now, &keys[1], &keys[0]);
                        let Some(token) = self.next_token(now, &keys[1], floor) else {
                            return overflow();
                        };
                        self.record_grant(&keys[0], &args[0], token);
                        granted(token, previous)
                    }
                }
            }
            RedisScript::Renew => self.renew(now, &keys[0], &args[0], &args[1]),
            RedisScript::RenewMany => {
                let mut out = Vec::with_capacity(keys.len());
                for (key, pair) in keys.iter().zip(args.chunks_exact(2)) {
                    match self.renew(now, key, &pair[0], &pair[1]) {
                        // as a Lua error would, it ends the script where it stands
                        RedisValue::Error(e) => return RedisValue::Error(e),
                        r => out.push(r),
                    }
                }
                RedisValue::Array(out)
            }
            RedisScript::Release => {
                if self.get(now, &keys[0]) == Some(args[0].as_str()) {
                    self.mark_released(now, &keys[0], &args[0], args.get(1));
                    self.keys.remove(&keys[0]);
                    self.keys.remove(&meta_key(&keys[0]));
                    RedisValue::Int(1)
                } else {
                    RedisValue::Int(0)
                }
            }
            RedisScript::AcquireFair => {
                let (Some(ttl), Some(presence)) = (parse_ms(&args[1]), parse_ms(&args[2])) else {
                    return RedisValue::Error("ERR invalid expire time".to_owned());
                };
                let holder = self.get(now, &keys[0]).map(str::to_owned);
                let owner = &args[0];
                if holder.as_deref() == Some(owner.as_str()) {
                    self.set_expiry(&keys[0], now + ttl);
                    let held = self.get(now, &keys[1]).and_then(|t| t.parse().ok());
                    let Some(token) = held.or_else(|| self.next_token(now, &keys[1], floor)) else {
                        return overflow();
                    };
                    // a hand-off grant this acquire overtook says how the holder ended
                    let overtaken = self
                        .lists
                        .get(&keys[5])
                        .filter(|(_, expires)| !expires.is_some_and(|at| now >= at))
                        .and_then(|(list, _)| list.front());
                    let fate = overtaken
                        .and_then(|g| g.strip_prefix("g:"))
                        .and_then(|g| g.split_once(' '))
                        .map(|(_, fate)| fate.to_owned());
                    if let Some(fate) = fate {
                        return granted(token, &fate);
                    }
                    return RedisValue::Array(vec![RedisValue::Int(1), RedisValue::Int(token)]);
                }
                let reserved_for_me = holder.as_deref() == Some(format!("r:{owner}").as_str());
                if holder.is_none() || reserved_for_me {
                    self.set(&keys[0], owner, Some(now + ttl));
                    self.zrem(&keys[2], owner);
                    self.keys.remove(&keys[4]);
                    self.lists.remove(&keys[5]);
                    let previous = self.previous(now, &keys[1], &keys[0]);
                    let Some(token) = self.next_token(now, &keys[1], floor) else {
                        return overflow();
                    };
                    self.record_grant(&keys[0], owner, token);
                    return granted(token, previous);
                }
                if !self
                    .zsets
                    .get(&keys[2])
                    .is_some_and(|z| z.iter().any(|(_, m)| m == owner))
                {
                    let Some(seq) = self.incr(now, &keys[3]) else {
                        return overflow();
                    };
                    let z = self.zsets.entry(keys[2].clone()).or_default();
                    // ZADD's order, by score then member.
                    let entry = (seq, owner.clone());
                    let at = z.partition_point(|e| *e < entry);
                    z.insert(at, entry);
                }
                if let Some(f) = floor {
                    // a hand-off grant's INCR then reaches the floor
                    if self.counter(now, &keys[1]) < f - 1 {
                        self.set(&keys[1], &(f - 1).to_string(), None);
                    }
                }
                self.set(
                    &keys[4],
                    &format!("t:{ttl_ms}", ttl_ms = args[1]),
                    Some(now + presence),
                );
                self.lists.remove(&keys[5]);
                self.refused(now, keys, None)
            }
            RedisScript::ReleaseFair => {
                let Some(claim) = parse_ms(&args[1]) else {
                    return RedisValue::Error("ERR invalid expire time".to_owned());
                };
                let owner = &args[0];
                self.zrem(&keys[1], owner);
                self.keys.remove(&keys[2]);
                let holder = self.get(now, &keys[0]).map(str::to_owned);
                if holder.as_deref() != Some(owner.as_str()) && holder != Some(format!("r:{owner}"))
                {
                    return RedisValue::Int(0);
                }
                let previous = if self.mark_released(now, &keys[0], owner, args.get(4)) {
                    "released"
                } else {
                    "expired"
                };
                self.keys.remove(&keys[0]);
                let (queue, token) = (&keys[1], &keys[3]);
                match self.hand_off(
                    now, &keys[0], queue, token, claim, &args[2], &args[3], previous,
                ) {
                    Ok(()) => RedisValue::Int(1),
                    Err(e) => e,
                }
            }
            RedisScript::IsLocked => RedisValue::Int(i64::from(self.get(now, &keys[0]).is_some())),
            RedisScript::ForceRelease => {
                if self.get(now, &keys[0]).is_none() {
                    return RedisValue::Int(0);
                }
                self.keys.remove(&keys[0]);
                self.keys.remove(&meta_key(&keys[0]));
                if keys.len() == 3 {
                    let Some(claim) = parse_ms(&args[0]) else {
                        return RedisValue::Error("ERR invalid expire time".to_owned());
                    };
                    let (queue, token) = (&keys[1], &keys[2]);
                    if let Err(e) = self.hand_off(
                        now, &keys[0], queue, token, claim, &args[1], &args[2], "expired",
                    ) {
                        return e;
                    }
                }
                RedisValue::Int(1)
            }
            RedisScript::Inspect => {
                let base = keys[0].strip_suffix("lock").unwrap_or(&keys[0]);
                let queue = keys.get(3).map(String::as_str);
                self.inspect_fields(now, base, queue)
                    .map_or(RedisValue::Array(vec![]), RedisValue::Array)
            }
            RedisScript::List => {
                // one step holds every match: the key space is small and has no cursor
                let mut found: Vec<&String> = self
                    .keys
                    .keys()
                    .filter(|k| glob_match(args[1].as_bytes(), k.as_bytes()))
                    .collect();
                found.sort();
                let fair = args[3] == "1";
                let found = found
                    .into_iter()
                    .filter_map(|key| {
                        let base = key.strip_suffix("lock")?;
                        let queue = fair.then(|| format!("{base}queue"));
                        let mut fields = self.inspect_fields(now, base, queue.as_deref())?;
                        fields.insert(0, RedisValue::Data(key.clone()));
                        Some(RedisValue::Array(fields))
                    })
                    .collect();
                RedisValue::Array(vec![
                    RedisValue::Data("0".to_owned()),
                    RedisValue::Array(found),
                ])
            }
            RedisScript::FencedSet => {
                let Ok(token) = args[0].parse::<i64>() else {
                    return RedisValue::Error("ERR fencing token is not an integer".to_owned());
                };
                let owner = args.get(2);
                let held = self.get(now, &keys[1]).unwrap_or("0");
                let (highest, holder) = held.split_once(':').unwrap_or((held, ""));
                let highest = highest.parse::<i64>().unwrap_or(0);
                if token < highest {
                    return RedisValue::Array(vec![RedisValue::Int(0), RedisValue::Int(highest)]);
                }
                if token > highest {
                    let record = owner.map_or(args[0].clone(), |o| format!("{}:{o}", args[0]));
                    self.set(&keys[1], &record, None);
                } else if owner.is_some_and(|o| o != holder) {
                    return RedisValue::Array(vec![RedisValue::Int(2), RedisValue::Int(highest)]);
                }
                self.set(&keys[0], &args[1], None);
                RedisValue::Array(vec![RedisValue::Int(1), RedisValue::Int(token)])
            }
        }
    }

    /// `GET key` at `now` (expired keys are gone).
    pub fn get(&self, now: Instant, key: &str) -> Option<&str> {
        self.keys
            .get(key)
            .filter(|e| e.expires_at.is_none_or(|at| now < at))
            .map(|e| e.value.as_str())
    }

    /// An acquire's refusal: `[0, PTTL lock, the token counter or ""]`, then the
    /// holder's owner id where the script returns it (the plain one).
    fn refused(&self, now: Instant, keys: &[String], holder: Option<String>) -> RedisValue {
        let pttl = self.pttl(now, &keys[0]).unwrap_or(-1);
        let counter = self.get(now, &keys[1]).unwrap_or_default().to_owned();
        let mut reply = vec![
            RedisValue::Int(0),
            RedisValue::Int(pttl),
            RedisValue::Data(counter),
        ];
        reply.extend(holder.map(RedisValue::Data));
        RedisValue::Array(reply)
    }

    /// `PTTL key` in ms: `None` when the key is missing, `-1` when it has no expiry.
    pub fn pttl(&self, now: Instant, key: &str) -> Option<i64> {
        let entry = self.keys.get(key)?;
        match entry.expires_at {
            None => Some(-1),
            Some(at) if now < at => {
                let ms = at
                    .saturating_duration_since(now)
                    .as_nanos()
                    .div_ceil(1_000_000);
                Some(i64::try_from(ms).unwrap_or(i64::MAX))
            }
            Some(_) => None,
        }
    }

    /// When `key` expires: `None` when missing (or expired at `now`), `Some(Instant::MAX)`
    /// when it has no expiry.
    pub fn expires_at(&self, now: Instant, key: &str) -> Option<Instant> {
        let entry = self.keys.get(key)?;
        match entry.expires_at {
            None => Some(Instant::MAX),
            Some(at) if now < at => Some(at),
            Some(_) => None,
        }
    }

    /// `DEL key`, as an operator (or a bug) might do behind the holder's back.
    pub fn delete(&mut self, key: &str) -> bool {
        self.keys.remove(key).is_some()
    }

    /// Forgets everything, as a restart without persistence does.
    pub fn flush(&mut self) {
        self.keys.clear();
        self.lists.clear();
        self.zsets.clear();
    }

    /// `LPOP key` at `now`: the head of a list, if it exists and has not expired.
    pub fn lpop(&mut self, now: Instant, key: &str) -> Option<String> {
        let (list, expires) = self.lists.get_mut(key)?;
        if expires.is_some_and(|at| now >= at) {
            self.lists.remove(key);
            return None;
        }
        let v = list.pop_front();
        if list.is_empty() {
            self.lists.remove(key);
        }
        v
    }

    /// Whether `LPOP key` would yield at `now`.
    pub fn has_list_item(&self, now: Instant, key: &str) -> bool {
        self.lists
            .get(key)
            .is_some_and(|(l, exp)| !l.is_empty() && exp.is_none_or(|at| now < at))
    }

    /// How the previous holder of `lock` ended, as the acquire scripts' `previous()`
    /// says, before the grant moves the counter at `token_key`.
    fn previous(&self, now: Instant, token_key: &str, lock: &str) -> &'static str {
        let Some(counter) = self.get(now, token_key) else {
            return "none";
        };
        let last = self.get(now, &last_key(lock)).unwrap_or("");
        let (token, mark) = match last.split_once(' ') {
            Some((_, rest)) => rest.split_once(' ').unwrap_or((rest, "")),
            None => return "unknown",
        };
        match (token == counter, mark) {
            (false, _) => "unknown",
            (true, "released") => "released",
            (true, _) => "expired",
        }
    }

    /// The acquire scripts' record of a grant: `<owner> <token>`.
    fn record_grant(&mut self, lock: &str, owner: &str, token: i64) {
        self.set(&last_key(lock), &format!("{owner} {token}"), None);
    }

    /// The release scripts' mark: unless the release is a cleanup, `owner`'s grant is
    /// recorded as released. Whether it was.
    fn mark_released(
        &mut self,
        now: Instant,
        lock: &str,
        owner: &str,
        cleanup: Option<&String>,
    ) -> bool {
        let last_key = last_key(lock);
        let Some(last) = self.get(now, &last_key).map(str::to_owned) else {
            return false;
        };
        let unmarked_mine = last
            .split_once(' ')
            .is_some_and(|(o, token)| o == owner && !token.contains(' '));
        if cleanup.is_some_and(|c| c == "cleanup") || !unmarked_mine {
            return false;
        }
        self.set(&last_key, &format!("{last} released"), None);
        true
    }

    fn zrem(&mut self, key: &str, member: &str) {
        if let Some(z) = self.zsets.get_mut(key) {
            z.retain(|(_, m)| m != member);
            if z.is_empty() {
                self.zsets.remove(key);
            }
        }
    }

    fn set(&mut self, key: &str, value: &str, expires_at: Option<Instant>) {
        self.keys.insert(
            key.to_owned(),
            Entry {
                value: value.to_owned(),
                expires_at,
            },
        );
    }

    /// The Inspect script's `{owner, pttl, token, metadata, waiters}` for the lock whose
    /// keys start with `base` (`…}:`), or `None` when its lease key is gone.
    fn inspect_fields(
        &self,
        now: Instant,
        base: &str,
        queue: Option<&str>,
    ) -> Option<Vec<RedisValue>> {
        let lock = format!("{base}lock");
        let owner = self.get(now, &lock)?.to_owned();
        let text = |key: String| RedisValue::Data(self.get(now, &key).unwrap_or("").to_owned());
        let waiters = queue.map_or(-1, |q| self.zsets.get(q).map_or(0, |z| z.len() as i64));
        Some(vec![
            RedisValue::Data(owner),
            RedisValue::Int(self.pttl(now, &lock).unwrap_or(-2)),
            text(format!("{base}token")),
            text(format!("{base}meta")),
            RedisValue::Int(waiters),
        ])
    }

    fn set_expiry(&mut self, key: &str, at: Instant) {
        if let Some(e) = self.keys.get_mut(key) {
            e.expires_at = Some(at);
        }
    }

    fn counter(&self, now: Instant, key: &str) -> i64 {
        self.get(now, key)
            .and_then(|v| v.parse::<i64>().ok())
            .unwrap_or(0)
    }

    /// `INCR key`: the new value, or `None` (the key unchanged) where Redis refuses an
    /// increment past `i64::MAX`.
    fn incr(&mut self, now: Instant, key: &str) -> Option<i64> {
        let next = self.counter(now, key).checked_add(1)?;
        self.set(key, &next.to_string(), None);
        Some(next)
    }

    /// A grant's token: `max(counter + 1, floor)`, as the acquire scripts count it (a
    /// `SET` of the floor when the counter is below it, else an `INCR`, which refuses
    /// to pass `i64::MAX`: `None`).
    fn next_token(&mut self, now: Instant, key: &str, floor: Option<i64>) -> Option<i64> {
        let (counter, floor) = (self.counter(now, key), floor.unwrap_or(0));
        if counter < floor {
            self.set(key, &floor.to_string(), None);
            return Some(floor);
        }
        self.incr(now, key)
    }
}

/// Redis's error for an `INCR` past `i64::MAX` (a counter at `2^63 - 1`, raised there by
/// a token floor or a write of the key). Like a Lua error, it ends the script where it
/// stands.
fn overflow() -> RedisValue {
    RedisValue::Error("ERR increment or decrement would overflow".to_owned())
}

/// The metadata key the scripts derive from a lease key (`…:lock` → `…:meta`).
fn meta_key(lock: &str) -> String {
    format!("{}meta", lock.strip_suffix("lock").unwrap_or(lock))
}

/// Redis glob matching as `SCAN … MATCH` does it, for `*`, `?` and `\` escapes (the
/// listing pattern uses no classes). A loop that backtracks to the last `*` only: a
/// host's pattern costs at most pattern × key steps and no stack, however many stars
/// it holds.
fn glob_match(pattern: &[u8], s: &[u8]) -> bool {
    let (mut p, mut i) = (0, 0);
    // after the last `*`: where its rest starts in the pattern, and the key position
    // that rest is tried from
    let mut star: Option<(usize, usize)> = None;
    loop {
        match pattern.get(p) {
            Some(b'*') => {
                p += 1;
                star = Some((p, i));
                continue;
            }
            Some(c) => {
                let (width, matches) = match c {
                    b'?' => (1, i < s.len()),
                    b'\\' if p + 1 < pattern.len() => (2, s.get(i) == pattern.get(p + 1)),
                    c => (1, s.get(i) == Some(c)),
                };
                if matches {
                    p += width;
                    i += 1;
                    continue;
                }
            }
            None if i == s.len() => return true,
            None => {}
        }
        // a mismatch: the last `*` swallows one more byte, or nothing matches
        match star {
            Some((rest, from)) if from < s.len() => {
                star = Some((rest, from + 1));
                (p, i) = (rest, from + 1);
            }
            _ => return false,
        }
    }
}

/// The `last` key beside a lock key (`p{name}:lock` → `p{name}:last`), as the scripts
/// derive it.
fn last_key(lock: &str) -> String {
    format!("{}last", lock.strip_suffix("lock").unwrap_or(lock))
}

/// A new grant's reply: `{1, token, previous}`.
fn granted(token: i64, previous: &str) -> RedisValue {
    RedisValue::Array(vec![
        RedisValue::Int(1),
        RedisValue::Int(token),
        RedisValue::Data(previous.to_owned()),
    ])
}

/// A token floor as the scripts accept it: a positive decimal integer Redis can count.
fn parse_floor(s: &str) -> Option<i64> {
    s.parse::<i64>()
        .ok()
        .filter(|&f| f > 0 && !s.starts_with('+') && !s.starts_with('0'))
}

fn parse_ms(s: &str) -> Option<core::time::Duration> {
    s.parse::<u64>()
        .ok()
        .filter(|&ms| ms > 0)
        .map(core::time::Duration::from_millis)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backends::RedisBackend;
    use crate::{FencingToken, OwnerId};

    fn token(v: &RedisValue) -> i64 {
        match v {
            RedisValue::Array(items) => match items.as_slice() {
                [RedisValue::Int(1), RedisValue::Int(t), ..] => *t,
                _ => panic!("not a grant: {v:?}"),
            },
            _ => panic!("not a grant: {v:?}"),
        }
    }

    #[test]
    fn a_token_floor_raises_the_counter_to_max_of_next_and_floor() {
        let (mut r, b, now) = (MemoryRedis::new(), RedisBackend::default(), Instant::ZERO);
        let (a, c) = (OwnerId([1; 16]), OwnerId([2; 16]));
        r.set(&b.token_key("x"), "5", None);
        // counter 5, floor 42: max(6, 42) = 42
        let grant = r.eval(now, &b.acquire("x", &a, 1_000, 500, Some(FencingToken(42))));
        assert_eq!(token(&grant), 42);
        // a retry by the same owner keeps its token
        let again = r.eval(now, &b.acquire("x", &a, 1_000, 500, Some(FencingToken(50))));
        assert_eq!(token(&again), 42);
        r.eval(now, &b.release("x", &a, 500, true));
        // counter 42, floor 10: max(43, 10) = 43
        let next = r.eval(now, &b.acquire("x", &c, 1_000, 500, Some(FencingToken(10))));
        assert_eq!(token(&next), 43);
    }

    #[test]
    fn a_queued_fair_waiter_with_a_floor_is_handed_the_floor() {
        let (mut r, now) = (MemoryRedis::new(), Instant::ZERO);
        let b = RedisBackend {
            fair: true,
            ..RedisBackend::default()
        };
        let (holder, waiter) = (OwnerId([1; 16]), OwnerId([2; 16]));
        assert_eq!(
            token(&r.eval(now, &b.acquire("x", &holder, 1_000, 500, None))),
            1
        );
        let queued = r.eval(
            now,
            &b.acquire("x", &waiter, 1_000, 500, Some(FencingToken(100))),
        );
        assert!(matches!(&queued, RedisValue::Array(v) if v[0] == RedisValue::Int(0)));
        // the waiter raised the counter to 99; the release's INCR hands it 100
        assert_eq!(r.get(now, &b.token_key("x")), Some("99"));
        assert_eq!(
            r.eval(now, &b.release("x", &holder, 500, true)),
            RedisValue::Int(1)
        );
        let wake = b.wait("x", &waiter, 500).unwrap().key;
        assert_eq!(r.lpop(now, &wake).as_deref(), Some("g:100 released"));
    }

    #[test]
    fn an_acquire_that_overtakes_its_hand_off_grant_hears_the_holders_fate() {
        let (mut r, now) = (MemoryRedis::new(), Instant::ZERO);
        let b = RedisBackend {
            fair: true,
            ..RedisBackend::default()
        };
        let (holder, waiter) = (OwnerId([1; 16]), OwnerId([2; 16]));
        r.eval(now, &b.acquire("x", &holder, 1_000, 500, None));
        r.eval(now, &b.acquire("x", &waiter, 1_000, 500, None));
        r.eval(now, &b.release("x", &holder, 500, true));
        // the waiter's next acquire runs before its BLPOP takes the grant
        let again = r.eval(now, &b.acquire("x", &waiter, 1_000, 500, None));
        assert_eq!((token(&again), previous(&again)), (2, "released"));
    }

    fn previous(v: &RedisValue) -> &str {
        match v {
            RedisValue::Array(items) => match items.as_slice() {
                [RedisValue::Int(1), _, RedisValue::Data(p)] => p,
                _ => panic!("not a new grant: {v:?}"),
            },
            _ => panic!("not a new grant: {v:?}"),
        }
    }

    #[test]
    fn a_grant_says_how_the_previous_holder_ended() {
        let (mut r, b) = (MemoryRedis::new(), RedisBackend::default());
        let (a, c) = (OwnerId([1; 16]), OwnerId([2; 16]));
        let at = |ms| Instant::ZERO + core::time::Duration::from_millis(ms);
        let first = r.eval(at(0), &b.acquire("x", &a, 1_000, 500, None));
        assert_eq!(previous(&first), "none");
        r.eval(at(10), &b.release("x", &a, 500, true));
        let after_release = r.eval(at(20), &b.acquire("x", &c, 1_000, 500, None));
        assert_eq!(previous(&after_release), "released");
        // c's lease runs out at 1020
        let after_expiry = r.eval(at(1_100), &b.acquire("x", &a, 1_000, 500, None));
        assert_eq!(previous(&after_expiry), "expired");
        // a cleanup frees the key but is no clean release
        r.eval(at(1_200), &b.release("x", &a, 500, false));
        let after_cleanup = r.eval(at(1_300), &b.acquire("x", &c, 1_000, 500, None));
        assert_eq!(previous(&after_cleanup), "expired");
        assert_eq!(r.eval(at(1_400), &b.force_release("x")), RedisValue::Int(1));
        let after_reset = r.eval(at(1_500), &b.acquire("x", &a, 1_000, 500, None));
        assert_eq!(previous(&after_reset), "expired");
        // a grant that wrote no record (an older fencepost) moved the counter past it
        r.eval(at(1_600), &b.release("x", &a, 500, true));
        r.incr(at(1_600), &b.token_key("x"));
        let after_unrecorded = r.eval(at(1_700), &b.acquire("x", &c, 1_000, 500, None));
        assert_eq!(previous(&after_unrecorded), "unknown");
    }

    #[test]
    fn a_floor_that_is_not_a_positive_integer_is_an_error_reply() {
        let (mut r, b) = (MemoryRedis::new(), RedisBackend::default());
        let mut cmd = b.acquire("x", &OwnerId([1; 16]), 1_000, 500, None);
        for bad in ["0", "-1", "007", "x"] {
            cmd.args.truncate(2);
            cmd.args.push(bad.to_owned());
            assert!(
                matches!(r.eval(Instant::ZERO, &cmd), RedisValue::Error(_)),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_counter_at_i64_max_is_an_overflow_error_reply() {
        let (mut r, b, now) = (MemoryRedis::new(), RedisBackend::default(), Instant::ZERO);
        let (a, c) = (OwnerId([1; 16]), OwnerId([2; 16]));
        // the highest floor the options accept, 2^63 - 1, puts the counter at i64::MAX
        let top = FencingToken(i64::MAX as u64);
        let grant = r.eval(now, &b.acquire("x", &a, 1_000, 500, Some(top)));
        assert_eq!(token(&grant), i64::MAX);
        r.eval(now, &b.release("x", &a, 500, true));
        // the next grant's INCR would pass i64::MAX: refused, the counter kept
        let next = r.eval(now, &b.acquire("x", &c, 1_000, 500, None));
        assert_eq!(
            next,
            RedisValue::Error("ERR increment or decrement would overflow".to_owned())
        );
        assert_eq!(r.get(now, &b.token_key("x")), Some("9223372036854775807"));
    }

    #[test]
    fn a_fair_hand_off_past_i64_max_is_an_overflow_error_reply() {
        let (mut r, now) = (MemoryRedis::new(), Instant::ZERO);
        let b = RedisBackend {
            fair: true,
            ..RedisBackend::default()
        };
        let (holder, waiter) = (OwnerId([1; 16]), OwnerId([2; 16]));
        let top = FencingToken(i64::MAX as u64);
        assert_eq!(
            token(&r.eval(now, &b.acquire("x", &holder, 1_000, 500, Some(top)))),
            i64::MAX
        );
        r.eval(now, &b.acquire("x", &waiter, 1_000, 500, None));
        // the release hands the lock to the waiter with an INCR of the counter
        assert!(matches!(
            r.eval(now, &b.release("x", &holder, 500, true)),
            RedisValue::Error(e) if e.contains("overflow")
        ));
    }

    fn list(r: &mut MemoryRedis, pattern: &str) -> RedisValue {
        let cmd = RedisCommand {
            script: RedisScript::List,
            keys: vec![],
            args: ["0", pattern, "100", "0"].map(str::to_owned).to_vec(),
            wait: None,
        };
        r.eval(Instant::ZERO, &cmd)
    }

    #[test]
    fn glob_matching_follows_scan_match() {
        let yes = [
            ("", ""),
            ("*", ""),
            ("*", "abc"),
            ("a*c", "abbbc"),
            ("a?c", "abc"),
            ("*b*", "abc"),
            ("a\\*", "a*"),
            ("a\\", "a\\"),
            ("f{x}:*", "f{x}:lock"),
        ];
        let no = [
            ("", "a"),
            ("a", ""),
            ("a?c", "ac"),
            ("a*c", "abcd"),
            ("a\\*", "ab"),
            ("*x*", "abc"),
        ];
        for (p, s) in yes {
            assert!(glob_match(p.as_bytes(), s.as_bytes()), "{p:?} {s:?}");
        }
        for (p, s) in no {
            assert!(!glob_match(p.as_bytes(), s.as_bytes()), "{p:?} {s:?}");
        }
    }

    #[test]
    fn a_listing_pattern_of_many_stars_neither_overflows_the_stack_nor_backtracks_forever() {
        let (mut r, b) = (MemoryRedis::new(), RedisBackend::default());
        let key = format!("{}{}", "a".repeat(60), "lock");
        r.set(&key, "owner", None);
        r.set(&b.token_key("x"), "1", None);
        // 30 stars that each could take any run of the a's: no match, and no 2^30 paths
        let many = format!("{}b", "a*".repeat(30));
        assert_eq!(
            list(&mut r, &many),
            RedisValue::Array(vec![
                RedisValue::Data("0".to_owned()),
                RedisValue::Array(vec![])
            ])
        );
        // a million stars, one stack frame
        let found = list(&mut r, &"*".repeat(1_000_000));
        assert!(matches!(&found, RedisValue::Array(v) if v.len() == 2));
    }

    #[test]
    fn a_host_command_with_too_few_keys_or_arguments_is_an_error_reply() {
        let mut r = MemoryRedis::new();
        let wrong =
            RedisValue::Error("ERR wrong number of keys or arguments for script".to_owned());
        let short = |script, keys: &[&str], args: &[&str]| RedisCommand {
            script,
            keys: keys.iter().map(|k| (*k).to_owned()).collect(),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            wait: None,
        };
        for script in RedisScript::ALL {
            assert_eq!(
                r.eval(Instant::ZERO, &short(script, &["k"; 7], &[])),
                wrong,
                "{script:?}"
            );
            let nothing = short(script, &[], &[]);
            if script != RedisScript::List {
                assert_eq!(r.eval(Instant::ZERO, &nothing), wrong, "{script:?}");
            }
        }
        // a batch renewal with one argument short of a pair per key
        let odd = short(RedisScript::RenewMany, &["a", "b"], &["o", "1000", "o"]);
        assert_eq!(r.eval(Instant::ZERO, &odd), wrong);
    }
}
