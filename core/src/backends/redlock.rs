//! Redlock: one lock over N independent Redis masters (N odd, at least 3), after
//! Redis' "Distributed locks with Redis" page. Every step fans out one request per
//! master, the same scripts as the single-server backend ([`super::redis`]) with the
//! same keys; the recipe tallies the replies and decides once a majority has.
//!
//! * **Acquire**: the acquire script on every master at once, one owner id for all.
//!   Granted once a majority granted; the lock measures validity from the step's send
//!   (DESIGN.md rule 1) less drift and margin, so a majority that answers only after
//!   the validity has passed is a grant too late to use, released like any other.
//!   When a majority can no longer be reached the attempt failed
//!   (`Read::NoQuorum`): the lock releases the owner id on *every* master (the
//!   ones that did not answer may have granted) and retries under a fresh owner id,
//!   after a jittered backoff.
//! * **Renew**: the renew script on every master; kept once a majority confirmed,
//!   lost at once when a majority can no longer confirm (the confirming minority is
//!   released). Transport failures without a decision are retried until the validity
//!   deadline, as on one server.
//! * **Release**: the release script on every master; a majority that no longer held
//!   the lease is a loss (`NotHeldAtRelease`), as on one server.
//!
//! **The token** is the highest of the granting majority's counters (each master
//! counts its own grants with `INCR`). It is a number the granting majority handed
//! out, not a fencing token in the strict sense: counters of different masters drift
//! apart (a failed attempt's minority grants count on those masters only), so a later
//! grant by another majority can carry a lower token, and a master restarted without
//! persistence counts from 1 again. A Redlock lease is therefore an efficiency lock:
//! `correctness` is refused, with no opt-in ([`Backend::check_acquire`]).
//!
//! [`Backend::check_acquire`]: super::Backend::check_acquire

use core::time::Duration;

use serde::{Deserialize, Serialize};

use super::redis::{holder_owner, read_acquire, read_owner_check, RedisBackend, RedisCommand};
use super::{Phrased, Progress, Read, ReadError, Recipe, Reply, RequestBody, Step, StepCx};
use crate::error::UsageError;
use crate::{FencingToken, Instant, OwnerId};

/// Settings of the Redlock backend: the masters and the key prefix.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RedlockBackend {
    /// Prefix of every key fencepost writes on each master; default `fencepost:`.
    pub key_prefix: String,
    /// One entry per master, naming the server (e.g. `"127.0.0.1:6379/0"`), in the
    /// order the host's clients are given: request part `i` goes to master `i`. Only
    /// compared for duplicates; an odd count, at least 3 ([`RedlockBackend::check`]).
    pub masters: Vec<String>,
}

impl Default for RedlockBackend {
    fn default() -> Self {
        RedlockBackend {
            key_prefix: RedisBackend::default().key_prefix,
            masters: Vec::new(),
        }
    }
}

/// One master's share of a Redlock step: run `command` on master `master` (an index
/// into [`RedlockBackend::masters`]) exactly as a [`RequestBody::Redis`] call, and
/// answer with that master's reply (or a transport error) under the request's id.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RedlockPart {
    /// Which master, from 0.
    pub master: u16,
    /// The script call, the same as on a single Redis server.
    pub command: RedisCommand,
}

/// The most masters a Redlock may name (request parts are numbered in 16 bits).
const MAX_MASTERS: usize = 255;

impl RedlockBackend {
    /// How many masters must agree: a strict majority.
    pub fn quorum(&self) -> usize {
        self.masters.len() / 2 + 1
    }

    /// Checks the masters: an odd count from 3 to 255, no server twice.
    ///
    /// Errors: [`UsageError::InvalidOption`] for option `masters`, naming the problem.
    pub fn check(&self) -> Result<(), UsageError> {
        let n = self.masters.len();
        let bad = |message: String| Err(UsageError::option("masters", message));
        if n == 0 {
            return bad(
                "a Redlock needs an odd number of independent Redis masters, at least 3; got none"
                    .to_owned(),
            );
        }
        if n < 3 {
            return bad(format!(
                "a Redlock needs an odd number of independent Redis masters, at least 3; got {n} \
                 (for one server use the Redis backend)"
            ));
        }
        if n % 2 == 0 {
            return bad(format!(
                "a Redlock needs an odd number of masters, got {n}: a majority of {n} survives \
                 no more failures than a majority of {}, so use {} or {}",
                n - 1,
                n - 1,
                n + 1
            ));
        }
        if n > MAX_MASTERS {
            return bad(format!("at most {MAX_MASTERS} masters, got {n}"));
        }
        for (j, b) in self.masters.iter().enumerate() {
            if let Some(i) = self.masters[..j].iter().position(|a| a == b) {
                return bad(format!(
                    "masters {i} and {j} are the same server ({b}): one server counted twice \
                     gives one failure two votes"
                ));
            }
        }
        Ok(())
    }

    /// The single-server settings whose scripts and keys every master runs.
    fn redis(&self) -> RedisBackend {
        RedisBackend {
            key_prefix: self.key_prefix.clone(),
            fair: false,
            cluster: false,
        }
    }

    /// The lease key of `name` on every master.
    pub fn lock_key(&self, name: &str) -> String {
        self.redis().lock_key(name)
    }

    /// The token-counter key of `name` on every master.
    pub fn token_key(&self, name: &str) -> String {
        self.redis().token_key(name)
    }
}

/// What one master answered to one step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Part {
    Waiting,
    /// Granted with this master's counter; or, for renew and release, confirmed.
    Yes(FencingToken),
    /// Held by another (with its `PTTL` when known, and a mark of its owner id when
    /// the refusal names it), or not held for this owner.
    No(Option<Duration>, Option<u64>),
    /// A transport failure or an error reply: unknown outcome.
    Failed,
}

/// The replies to one fanned-out step so far.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Tally {
    cleanup: bool,
    owner: OwnerId,
    sent_at: Instant,
    parts: Vec<Part>,
    /// The first error a part reported, for the lock's `last_error`.
    error: Option<String>,
}

impl Tally {
    fn count(&self, f: impl Fn(&Part) -> bool) -> usize {
        self.parts.iter().filter(|p| f(p)).count()
    }
}

/// A Redlock lock's open tallies: the lock's own step, and cleanups in flight.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct RedlockProgress {
    tallies: Vec<Tally>,
}

fn tallies(progress: &mut Progress) -> &mut Vec<Tally> {
    &mut progress
        .redlock
        .get_or_insert_with(Default::default)
        .tallies
}

/// Every step fans out to all masters; a contender polls (no server wakes it).
impl Recipe for RedlockBackend {
    fn phrase(
        &self,
        step: Step,
        cx: &StepCx<'_>,
        progress: &mut Progress,
        _shared: &mut super::Shared,
    ) -> Phrased {
        let redis = self.redis();
        let (name, owner) = (cx.name, cx.owner);
        let command = match step {
            Step::Acquire => redis.acquire(name, owner, cx.ttl_ms, cx.retry_max_ms, None),
            Step::Renew => redis.renew(name, owner, cx.ttl_ms),
            Step::Release(_) => redis.release(name, owner, cx.retry_max_ms, true),
            Step::Cleanup => redis.release(name, owner, cx.retry_max_ms, false),
            Step::Wait { .. } => return Phrased::Nothing,
        };
        let cleanup = step == Step::Cleanup;
        let open = tallies(progress);
        if !cleanup {
            // one step of the lock's own at a time: an earlier one was abandoned. A
            // cleanup runs beside the lock's step (a late grant answered while it
            // releases) and must not drop that step's tally.
            open.retain(|t| t.cleanup);
        }
        open.push(Tally {
            cleanup,
            owner: *owner,
            sent_at: cx.sent_at,
            parts: vec![Part::Waiting; self.masters.len()],
            error: None,
        });
        Phrased::FanOut(
            (0..self.masters.len())
                .map(|i| {
                    RequestBody::RedlockPart(RedlockPart {
                        master: u16::try_from(i).unwrap_or(u16::MAX),
                        command: command.clone(),
                    })
                })
                .collect(),
        )
    }

    fn read(
        &self,
        step: Step,
        cx: &StepCx<'_>,
        progress: &mut Progress,
        _shared: &mut super::Shared,
        reply: Result<&Reply, &str>,
    ) -> Result<Read, ReadError> {
        let part = read_part(step, reply);
        let cleanup = step == Step::Cleanup;
        let open = tallies(progress);
        let Some(i) = open
            .iter()
            .position(|t| t.cleanup == cleanup && t.owner == *cx.owner && t.sent_at == cx.sent_at)
        else {
            // never for a step this recipe phrased; read alone, unknown at worst
            return Err(ReadError::Ambiguous(
                "redlock: a reply for a step without a tally".to_owned(),
            ));
        };
        let tally = &mut open[i];
        let (part, error) = part;
        match tally.parts.get_mut(usize::from(cx.part)) {
            Some(slot @ Part::Waiting) => *slot = part,
            _ => return Ok(Read::Pending), // a duplicate, or no such master
        }
        if tally.error.is_none() {
            tally.error = error.map(|e| format!("master {}: {e}", cx.part));
        }
        let decided = decide(step, tally, self.quorum());
        if decided != Ok(Read::Pending) {
            open.swap_remove(i);
        }
        decided
    }

    /// Each late reply is one master's and reads alone: a grant or a renewal it
    /// confirmed, or any failure, may mean that master holds the key for its owner id.
    fn late_may_hold(&self, step: Step, reply: Result<&Reply, &str>) -> bool {
        match step {
            Step::Acquire | Step::Renew => {
                matches!(read_part(step, reply).0, Part::Yes(_) | Part::Failed)
            }
            Step::Release(_) | Step::Cleanup | Step::Wait { .. } => false,
        }
    }
}

/// One master's reply as a part, with the error it reported.
fn read_part(step: Step, reply: Result<&Reply, &str>) -> (Part, Option<String>) {
    let v = match reply {
        Ok(Reply::Redis(v)) => v,
        Ok(other) => {
            return (
                Part::Failed,
                Some(format!("got a reply for another backend: {other:?}")),
            )
        }
        Err(message) => return (Part::Failed, Some(message.to_owned())),
    };
    let read = match step {
        Step::Acquire => read_acquire(v),
        _ => read_owner_check(v),
    };
    match read {
        Ok(Read::Granted { token, .. }) => (Part::Yes(token), None),
        Ok(Read::Done) => (Part::Yes(FencingToken(1)), None),
        Ok(Read::Contended { remaining, .. }) => (Part::No(remaining, holder_mark(v)), None),
        Ok(Read::NotHeld) => (Part::No(None, None), None),
        Ok(other) => (Part::Failed, Some(format!("unexpected outcome {other:?}"))),
        Err(ReadError::Ambiguous(e)) => (Part::Failed, Some(e)),
        Err(ReadError::Protocol(e)) => (Part::Failed, Some(e.to_string())),
    }
}

/// The step's outcome once its tally decides it, else [`Read::Pending`].
fn decide(step: Step, tally: &Tally, quorum: usize) -> Result<Read, ReadError> {
    let n = tally.parts.len();
    let yes = tally.count(|p| matches!(p, Part::Yes(_)));
    let no = tally.count(|p| matches!(p, Part::No(..)));
    let failed = tally.count(|p| *p == Part::Failed);
    // the parts are one per master (so `n` is at least 1 once a reply is counted, and
    // `quorum` at most `n`), each in one of the four states
    let waiting = n - yes - no - failed;
    let unreachable = yes + waiting < quorum;
    let why = || {
        let mut s = format!("redlock: {yes} of {n} masters {}", agreed(step));
        if let Some(e) = &tally.error {
            s.push_str(&format!(" ({failed} failed; {e})"));
        }
        s
    };
    match step {
        Step::Acquire if yes >= quorum => {
            // the highest of the granting majority's counters (module docs)
            let token = tally
                .parts
                .iter()
                .filter_map(|p| match p {
                    Part::Yes(t) => Some(*t),
                    _ => None,
                })
                .max()
                .unwrap_or(FencingToken(1));
            Ok(Read::Granted {
                token,
                base: Some(tally.sent_at),
                // the masters' views may differ, and no majority view is kept
                previous: crate::Previous::Unknown,
            })
        }
        Step::Acquire if unreachable => Ok(Read::NoQuorum {
            // the earliest a refusing master frees the lock
            remaining: tally
                .parts
                .iter()
                .filter_map(|p| match p {
                    Part::No(r, _) => *r,
                    _ => None,
                })
                .min(),
            error: (failed > 0).then(why),
            refused: no > 0,
            holder: one_holder(tally),
        }),
        Step::Renew if yes >= quorum => Ok(Read::Done),
        // a majority refused: lost at once, and the confirming minority released
        Step::Renew if no > n - quorum => Ok(Read::NoQuorum {
            remaining: None,
            error: Some(why()),
            refused: true,
            holder: None,
        }),
        Step::Release(_) if yes >= quorum => Ok(Read::Done),
        Step::Release(_) if no >= quorum => Ok(Read::NotHeld),
        Step::Cleanup if waiting == 0 && failed > 0 => Err(ReadError::Ambiguous(why())),
        Step::Cleanup if waiting == 0 => Ok(Read::Done),
        _ if waiting == 0 => Err(ReadError::Ambiguous(why())),
        _ => Ok(Read::Pending),
    }
}

/// A mark of the owner id that refused an acquire on this master (the same on every
/// master one holder holds, where the masters' counters differ): the first 8 of its 16
/// random bytes; none for a holder that is not a fencepost owner id.
fn holder_mark(v: &super::redis::RedisValue) -> Option<u64> {
    let OwnerId([a, b, c, d, e, f, g, h, ..]) = OwnerId::from_hex(holder_owner(v)?)?;
    Some(u64::from_le_bytes([a, b, c, d, e, f, g, h]))
}

/// The holder the refusing masters agree on: a mark when every refusal named the same
/// one, else none (no refusal, or holders that differ from master to master). The
/// attempt is decided once a majority can no longer grant, so this is what the refusals
/// so far say: stale keys of an old holder on a minority can name it while a new one
/// holds the rest, which only undercounts a rare hand-off.
fn one_holder(tally: &Tally) -> Option<u64> {
    let mut marks = tally.parts.iter().filter_map(|p| match p {
        Part::No(_, mark) => Some(*mark),
        _ => None,
    });
    let first = marks.next()??;
    marks.all(|m| m == Some(first)).then_some(first)
}

fn agreed(step: Step) -> &'static str {
    match step {
        Step::Acquire => "granted",
        Step::Renew => "renewed",
        _ => "released",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Redis value a master answers to a granting acquire script.
    fn granted(token: i64) -> Reply {
        use crate::backends::redis::RedisValue::{Array, Int};
        Reply::Redis(Array(vec![Int(1), Int(token)]))
    }
    use crate::backends::{Backend, Shared};
    use crate::{LockOptions, Purpose};

    fn five() -> RedlockBackend {
        RedlockBackend {
            masters: (0..5)
                .map(|i| format!("127.0.0.1:{}/0", 7000 + i))
                .collect(),
            ..RedlockBackend::default()
        }
    }

    #[test]
    fn the_refusing_masters_name_a_holder_only_when_they_agree() {
        let tally = |parts: Vec<Part>| Tally {
            cleanup: false,
            owner: OwnerId([0; 16]),
            sent_at: Instant::ZERO,
            parts,
            error: None,
        };
        let no = |mark: Option<u64>| Part::No(None, mark);
        let agree = tally(vec![no(Some(7)), Part::Failed, no(Some(7)), Part::Waiting]);
        assert_eq!(one_holder(&agree), Some(7));
        assert_eq!(one_holder(&tally(vec![no(Some(7)), no(Some(8))])), None);
        assert_eq!(one_holder(&tally(vec![no(Some(7)), no(None)])), None);
        assert_eq!(one_holder(&tally(vec![Part::Failed, Part::Failed])), None);
        // the mark: the first 8 bytes of a fencepost owner id; none for another holder
        use crate::backends::redis::RedisValue::{Array, Data, Int};
        let refusal = |holder: &str| {
            Array(vec![
                Int(0),
                Int(900),
                Data("3".into()),
                Data(holder.into()),
            ])
        };
        let owner = format!("{:016x}{:016x}", 0x0102_0304_0506_0708_u64, 9);
        assert_eq!(
            holder_mark(&refusal(&owner)),
            Some(u64::from_le_bytes([1, 2, 3, 4, 5, 6, 7, 8]))
        );
        assert_eq!(holder_mark(&refusal("someone")), None);
        assert_eq!(
            holder_mark(&Array(vec![Int(0), Int(900), Data("3".into())])),
            None
        );
    }

    fn message(r: Result<(), UsageError>) -> String {
        r.unwrap_err().to_string()
    }

    #[test]
    fn bad_master_lists_are_refused_naming_the_problem() {
        let with = |masters: &[&str]| RedlockBackend {
            masters: masters.iter().map(|s| (*s).to_owned()).collect(),
            ..RedlockBackend::default()
        };
        assert!(message(with(&[]).check()).contains("got none"));
        assert!(message(with(&["a"]).check()).contains("at least 3; got 1"));
        assert!(
            message(with(&["a", "b", "c", "d"]).check()).contains("odd number of masters, got 4")
        );
        let dup = message(with(&["a", "b", "a"]).check());
        assert!(
            dup.contains("masters 0 and 2 are the same server (a)"),
            "{dup}"
        );
        assert_eq!(five().check(), Ok(()));
        // the machine refuses them too, before any request
        let backend = Backend::Redlock(with(&["a", "b"]));
        assert!(matches!(
            backend.check_acquire("x", &LockOptions::default()),
            Err(UsageError::InvalidOption { option, .. }) if option == "masters"
        ));
    }

    #[test]
    fn correctness_is_refused_even_with_the_opt_in_naming_the_alternatives() {
        let backend = Backend::Redlock(five());
        let options = LockOptions {
            purpose: Purpose::Correctness,
            accept_failover_risk: true,
            ..LockOptions::default()
        };
        let err = backend.check_acquire("x", &options).unwrap_err();
        let text = err.to_string();
        for name in ["etcd", "ZooKeeper", "PostgreSQL lease rows", "efficiency"] {
            assert!(text.contains(name), "{text}");
        }
        assert!(backend.tokens_may_regress());
    }

    #[test]
    fn the_token_is_the_highest_of_the_majoritys_counters() {
        let b = five();
        let mut progress = Progress::default();
        let owner = OwnerId([1; 16]);
        let cx = |part| StepCx {
            part,
            owner: &owner,
            ..super::super::LATE_CX
        };
        let Phrased::FanOut(bodies) =
            b.phrase(Step::Acquire, &cx(0), &mut progress, &mut Shared::default())
        else {
            panic!("a fan-out")
        };
        assert_eq!(bodies.len(), 5);
        let read = |progress: &mut Progress, part, reply: Result<&Reply, &str>| {
            b.read(
                Step::Acquire,
                &cx(part),
                progress,
                &mut Shared::default(),
                reply,
            )
        };
        assert_eq!(read(&mut progress, 0, Ok(&granted(7))), Ok(Read::Pending));
        assert_eq!(read(&mut progress, 3, Err("refused")), Ok(Read::Pending));
        assert_eq!(read(&mut progress, 1, Ok(&granted(12))), Ok(Read::Pending));
        assert_eq!(
            read(&mut progress, 4, Ok(&granted(9))),
            Ok(Read::Granted {
                token: FencingToken(12),
                base: Some(Instant::ZERO),
                previous: crate::Previous::Unknown
            })
        );
        assert_eq!(progress.redlock.as_ref().unwrap().tallies.len(), 0);
    }
}
