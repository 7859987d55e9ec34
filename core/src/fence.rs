//! The resource side of fencing: [`Fence`] keeps the highest token per resource and
//! refuses lower ones; guard builders put the same check inside a SQL `UPDATE` or a
//! Redis script, so the check and the write are one atomic step at the resource.
//!
//! Two rules, in every fence:
//! * **owner-bound** ([`Fence::check_owned`], [`sql_fenced_update_owned`],
//!   [`redis_fenced_set_owned`]): a token above the highest seen is accepted and recorded
//!   with its owner id; the highest token is accepted again only from that owner (one
//!   lease may write many times); a lower token, or the highest token from another owner,
//!   is refused. A lock server that hands one token out twice (a Redis failover or
//!   restart without persistence, a transaction pooler sharing one advisory lock) gives
//!   one of the two holders a refusal ([`StaleReason::DuplicateGrant`]) instead of a
//!   shared resource.
//! * **token-only** ([`Fence::check`], [`sql_fenced_update`], [`redis_fenced_set`]): the
//!   highest token is accepted from anyone. Weaker: two holders given the same token both
//!   write. Kept for resources that cannot store an owner id.
//!
//! Use one rule per resource: a token-only write does not record an owner, so the
//! owner-bound rule refuses the same token after it.

use std::collections::HashMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::backends::{RedisCommand, RedisScript, RedisValue};
use crate::error::ProtocolError;
use crate::text::Host;
use crate::{FencingToken, OwnerId};

/// Why a fence refused a write.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StaleReason {
    /// The token is lower than one the resource accepted: a newer holder has written.
    #[default]
    Superseded,
    /// The token equals the highest one the resource accepted, which another owner wrote
    /// with (owner-bound rule only): the lock server granted one token twice (a failover,
    /// a transaction pooler, a restart without persistence).
    DuplicateGrant,
}

/// A write was refused: its token is lower than one the resource already accepted, or
/// (owner-bound rule) equal to it but from another owner; `reason` says which.
/// `highest` is the resource's highest token: a legitimate holder refused because tokens went
/// backwards acquires again with [`crate::LockOptions::token_floor`] = `highest + 1`.
#[derive(Clone, Debug, Error, PartialEq, Eq, Serialize, Deserialize)]
pub struct StaleToken {
    /// The resource the write was for, as the caller named it ([`Fence::check`]'s
    /// `resource`, [`read_redis_fenced_set`]'s `resource`).
    pub resource: String,
    /// The token the refused write carried.
    pub token: FencingToken,
    /// The highest token the resource has accepted; 0 when it has accepted none (a
    /// write with token 0 to a fresh resource).
    pub highest: FencingToken,
    /// Why it was refused: a lower token, or the highest token from another owner.
    /// Absent in JSON: [`StaleReason::Superseded`].
    #[serde(default)]
    pub reason: StaleReason,
}

impl fmt::Display for StaleToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (token, resource, highest) = (self.token, &self.resource, self.highest);
        match self.reason {
            StaleReason::Superseded if token.0 == 0 => write!(
                f,
                "fencing token 0 for {resource:?} is no lease's token (tokens start at 1)"
            ),
            StaleReason::Superseded => write!(
                f,
                "stale fencing token {token} for {resource:?}: the resource has already accepted token {highest}"
            ),
            StaleReason::DuplicateGrant => write!(
                f,
                "fencing token {token} for {resource:?} was granted twice: the resource accepted it from another owner (the lock server handed it out again: a failover, a transaction pooler or a restart without persistence)"
            ),
        }
    }
}

/// An in-memory fence: the highest token accepted per resource, with the owner that
/// wrote with it (owner-bound writes).
#[derive(Clone, Debug, Default)]
pub struct Fence {
    highest: HashMap<String, (FencingToken, Option<OwnerId>)>,
}

impl Fence {
    /// An empty fence.
    pub fn new() -> Self {
        Self::default()
    }

    /// Token-only rule: accepts a write to `resource` carrying `token` if no higher token
    /// was accepted before, and remembers `token` as the highest (with no owner). Weaker
    /// than [`Fence::check_owned`]: the same token from two holders is accepted twice.
    ///
    /// Errors: [`StaleToken`] ([`StaleReason::Superseded`]), naming the highest token;
    /// token 0 (no lease's token: tokens start at 1) is always refused.
    pub fn check(&mut self, resource: &str, token: FencingToken) -> Result<(), StaleToken> {
        self.decide(resource, token, None)
    }

    /// Owner-bound rule: accepts a write to `resource` carrying `token` from `owner` (the
    /// lease's owner id) if `token` is above the highest token accepted, recording
    /// `owner` with it, or equal to it and recorded with `owner`.
    ///
    /// Errors: [`StaleToken`] with [`StaleReason::Superseded`] for a lower token,
    /// [`StaleReason::DuplicateGrant`] for the highest token from another owner (or one
    /// recorded by a token-only write, which has no owner); token 0 is always refused.
    pub fn check_owned(
        &mut self,
        resource: &str,
        token: FencingToken,
        owner: OwnerId,
    ) -> Result<(), StaleToken> {
        self.decide(resource, token, Some(owner))
    }

    fn decide(
        &mut self,
        resource: &str,
        token: FencingToken,
        owner: Option<OwnerId>,
    ) -> Result<(), StaleToken> {
        let refuse = |highest, reason| StaleToken {
            resource: resource.to_owned(),
            token,
            highest,
            reason,
        };
        if token.0 == 0 {
            // no lease has token 0 (tokens start at 1): it is what a fresh record holds
            return Err(refuse(
                self.highest(resource).unwrap_or(FencingToken(0)),
                StaleReason::Superseded,
            ));
        }
        match self.highest.get_mut(resource) {
            Some((highest, _)) if token < *highest => {
                Err(refuse(*highest, StaleReason::Superseded))
            }
            Some((highest, recorded)) if token == *highest => match owner {
                None => Ok(()), // token-only: anyone with the token, the record kept
                Some(o) if *recorded == Some(o) => Ok(()),
                Some(_) => Err(refuse(*highest, StaleReason::DuplicateGrant)),
            },
            _ => {
                self.highest.insert(resource.to_owned(), (token, owner));
                Ok(())
            }
        }
    }

    /// The highest token accepted for `resource`.
    pub fn highest(&self, resource: &str) -> Option<FencingToken> {
        self.highest.get(resource).map(|(t, _)| *t)
    }

    /// The owner recorded with the highest token of `resource` (`None` when nothing was
    /// accepted, or the highest token came from a token-only write).
    pub fn owner(&self, resource: &str) -> Option<OwnerId> {
        self.highest.get(resource).and_then(|(_, o)| *o)
    }
}

/// How the SQL guard writes its parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ParamStyle {
    /// `$1`, `$2`, … (PostgreSQL, asyncpg, node-postgres): `$1` = id, `$2` = token,
    /// `$3…` = the new values in the order of `columns`.
    Dollar,
    /// `%(name)s` (psycopg, DB-API `pyformat`): `id`, `token` and one parameter per
    /// column, named after the column.
    Pyformat,
}

/// A guard builder's input cannot make a correct statement.
#[derive(Clone, Debug, Error, PartialEq, Eq, Serialize, Deserialize)]
pub enum InvalidGuard {
    /// Not a plain SQL identifier.
    #[error("invalid SQL identifier {0:?}: use 1 to 63 characters of letters, digits and '_', not starting with a digit")]
    Identifier(String),
    /// A column to set is the id or token column, appears twice, or (in `pyformat`
    /// style) is named like the `id` or `token` parameter it would be confused with.
    #[error("column {column:?} cannot be set by a fenced update: {why}")]
    Column {
        /// The column, as given in `columns`.
        column: String,
        /// Which rule it breaks, as a sentence fragment ("it is listed twice").
        why: String,
    },
    /// A fenced Redis `SET` whose data key is its fence key: the write would replace the
    /// highest token with the data, and every later write would be refused.
    #[error("{}", same_key(.0, Host::Rust))]
    SameKey(String),
}

fn same_key(key: &str, host: Host) -> String {
    format!(
        "{} and {} must differ (both {key:?}): the write would overwrite the fence",
        host.option_name("data_key"),
        host.option_name("fence_key")
    )
}

impl InvalidGuard {
    /// The message as `host`'s users read it: the arguments it names in that host's
    /// spelling (`data_key`, JavaScript `dataKey`); `Display` is [`Host::Rust`]'s.
    pub fn render(&self, host: Host) -> String {
        match self {
            InvalidGuard::SameKey(key) => same_key(key, host),
            other => other.to_string(),
        }
    }
}

fn ident(name: &str) -> Result<String, InvalidGuard> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(format!("\"{name}\""))
    } else {
        Err(InvalidGuard::Identifier(name.to_owned()))
    }
}

fn check_columns(
    id_column: &str,
    token_column: &str,
    owner_column: Option<&str>,
    columns: &[&str],
    style: ParamStyle,
) -> Result<(), InvalidGuard> {
    let params: &[&str] = if owner_column.is_some() {
        &["id", "token", "owner"]
    } else {
        &["id", "token"]
    };
    for (i, c) in columns.iter().enumerate() {
        let why = if *c == id_column {
            Some("it is the id column that selects the row".to_owned())
        } else if *c == token_column {
            Some("it is the token column, which the update sets to the fencing token".to_owned())
        } else if Some(*c) == owner_column {
            Some("it is the owner column, which the update sets to the lease's owner id".to_owned())
        } else if columns[..i].contains(c) {
            Some("it is listed twice".to_owned())
        } else if style == ParamStyle::Pyformat && params.contains(c) {
            Some(format!(
                "its parameter %({c})s would be the {c} parameter of the fence; use the dollar ($n) parameter style"
            ))
        } else {
            None
        };
        if let Some(why) = why {
            return Err(InvalidGuard::Column {
                column: (*c).to_owned(),
                why,
            });
        }
    }
    Ok(())
}

/// Builds a fenced conditional update under the token-only rule:
///
/// ```text
/// UPDATE "table" SET "c1" = $3, …, "last_token" = $2
///  WHERE "id" = $1 AND "last_token" <= $2
/// ```
///
/// Run it with the row id, the lease's token and the new values. **Zero rows updated
/// means the token is stale** (or the row does not exist): report [`StaleToken`].
/// The token column must be a `bigint NOT NULL` (start it at 0). Weaker than
/// [`sql_fenced_update_owned`]: two holders given the same token both write; use it for
/// tables that cannot take an owner column.
///
/// Errors: [`InvalidGuard::Identifier`] for a table or column name that is not a plain
/// identifier (they are quoted, never interpolated from user data);
/// [`InvalidGuard::Column`] for a column that is the id or token column, is listed
/// twice, or in `pyformat` style is named `id` or `token`.
pub fn sql_fenced_update(
    table: &str,
    id_column: &str,
    token_column: &str,
    columns: &[&str],
    style: ParamStyle,
) -> Result<String, InvalidGuard> {
    guard(table, id_column, token_column, None, columns, style)
}

/// Builds a fenced conditional update under the owner-bound rule:
///
/// ```text
/// UPDATE "table" SET "c1" = $4, …, "last_token" = $2, "last_owner" = $3
///  WHERE "id" = $1 AND ("last_token" < $2 OR ("last_token" = $2 AND "last_owner" = $3))
/// ```
///
/// Run it with the row id, the lease's token, its owner id (32 hex digits, as text) and
/// the new values (`pyformat`: `%(id)s`, `%(token)s`, `%(owner)s`, one per column).
/// **Zero rows updated means a refusal** (or no such row): a higher `last_token` is
/// [`StaleReason::Superseded`], an equal one with another `last_owner` is
/// [`StaleReason::DuplicateGrant`]. The columns:
///
/// ```sql
/// ALTER TABLE jobs ADD COLUMN last_token bigint NOT NULL DEFAULT 0,
///                  ADD COLUMN last_owner text NOT NULL DEFAULT '';
/// ```
///
/// Errors: as [`sql_fenced_update`], and [`InvalidGuard::Column`] for a column that is
/// the owner column or, in `pyformat` style, is named `owner`.
pub fn sql_fenced_update_owned(
    table: &str,
    id_column: &str,
    token_column: &str,
    owner_column: &str,
    columns: &[&str],
    style: ParamStyle,
) -> Result<String, InvalidGuard> {
    guard(
        table,
        id_column,
        token_column,
        Some(owner_column),
        columns,
        style,
    )
}

fn guard(
    table: &str,
    id_column: &str,
    token_column: &str,
    owner_column: Option<&str>,
    columns: &[&str],
    style: ParamStyle,
) -> Result<String, InvalidGuard> {
    check_columns(id_column, token_column, owner_column, columns, style)?;
    let param = |n: usize, name: &str| match style {
        ParamStyle::Dollar => format!("${n}"),
        ParamStyle::Pyformat => format!("%({name})s"),
    };
    let first = if owner_column.is_some() { 4 } else { 3 };
    let mut sets = Vec::with_capacity(columns.len() + 2);
    for (i, c) in columns.iter().enumerate() {
        sets.push(format!("{} = {}", ident(c)?, param(i + first, c)));
    }
    let (token_col, token) = (ident(token_column)?, param(2, "token"));
    sets.push(format!("{token_col} = {token}"));
    let condition = match owner_column {
        None => format!("{token_col} <= {token}"),
        Some(owner_column) => {
            let (owner_col, owner) = (ident(owner_column)?, param(3, "owner"));
            sets.push(format!("{owner_col} = {owner}"));
            format!("({token_col} < {token} OR ({token_col} = {token} AND {owner_col} = {owner}))")
        }
    };
    Ok(format!(
        "UPDATE {} SET {} WHERE {} = {} AND {condition}",
        ident(table)?,
        sets.join(", "),
        ident(id_column)?,
        param(1, "id"),
    ))
}

/// Checks the keys of a fenced Redis `SET` ([`redis_fenced_set`],
/// [`redis_fenced_set_owned`]) before it is built: `data_key` and `fence_key` must be two
/// keys.
///
/// Errors: [`InvalidGuard::SameKey`] naming the key.
pub fn check_redis_fenced_set_keys(data_key: &str, fence_key: &str) -> Result<(), InvalidGuard> {
    if data_key == fence_key {
        return Err(InvalidGuard::SameKey(data_key.to_owned()));
    }
    Ok(())
}

/// Builds a fenced Redis `SET` under the token-only rule: writes `value` to `data_key`
/// unless `token` is lower than the highest token stored at `fence_key` (see
/// [`RedisScript::FencedSet`]). Weaker than [`redis_fenced_set_owned`]: two holders
/// given the same token both write. Read its reply with [`read_redis_fenced_set`]. Put
/// both keys in one hash slot (`{tag}`) on Redis Cluster; check them first with
/// [`check_redis_fenced_set_keys`].
pub fn redis_fenced_set(
    data_key: &str,
    fence_key: &str,
    token: FencingToken,
    value: &str,
) -> RedisCommand {
    RedisCommand {
        script: RedisScript::FencedSet,
        keys: vec![data_key.to_owned(), fence_key.to_owned()],
        args: vec![token.to_string(), value.to_owned()],
        wait: None,
    }
}

/// Builds a fenced Redis `SET` under the owner-bound rule: as [`redis_fenced_set`], and
/// the highest token is accepted again only from `owner` (the lease's owner id), which
/// the fence key records beside it (`<token>:<owner>`).
pub fn redis_fenced_set_owned(
    data_key: &str,
    fence_key: &str,
    token: FencingToken,
    owner: OwnerId,
    value: &str,
) -> RedisCommand {
    let mut cmd = redis_fenced_set(data_key, fence_key, token, value);
    cmd.args.push(owner.to_string());
    cmd
}

/// Reads the reply of [`redis_fenced_set`] or [`redis_fenced_set_owned`]: `Ok(Ok(()))`
/// written, `Ok(Err(StaleToken))` refused (with its [`StaleReason`]),
/// `Err(ProtocolError)` for a reply of another shape.
pub fn read_redis_fenced_set(
    resource: &str,
    token: FencingToken,
    reply: &RedisValue,
) -> Result<Result<(), StaleToken>, ProtocolError> {
    // The script returns tokens as decimal strings (exact beyond 2^53); integers are
    // accepted too.
    let int = |v: &RedisValue| match v {
        RedisValue::Int(n) => u64::try_from(*n).ok(),
        RedisValue::Data(s) | RedisValue::Status(s) => s.parse::<u64>().ok(),
        _ => None,
    };
    if let RedisValue::Array(items) = reply {
        if let [RedisValue::Int(flag), n] = items.as_slice() {
            let reason = match flag {
                0 => Some(StaleReason::Superseded),
                2 => Some(StaleReason::DuplicateGrant),
                _ => None,
            };
            match (*flag, reason, int(n)) {
                (1, _, _) => return Ok(Ok(())),
                (_, Some(reason), Some(highest)) => {
                    return Ok(Err(StaleToken {
                        resource: resource.to_owned(),
                        token,
                        highest: FencingToken(highest),
                        reason,
                    }))
                }
                _ => {}
            }
        }
    }
    Err(ProtocolError {
        backend: "redis".to_owned(),
        message: format!(
            "fenced SET: expected [1, token], [0, highest] or [2, highest], got {reply:?}"
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fenced_set_needs_two_keys() {
        assert_eq!(check_redis_fenced_set_keys("doc:data", "doc:fence"), Ok(()));
        let err = check_redis_fenced_set_keys("doc", "doc").unwrap_err();
        assert_eq!(err, InvalidGuard::SameKey("doc".to_owned()));
        let rest = " must differ (both \"doc\"): the write would overwrite the fence";
        assert_eq!(err.to_string(), format!("data_key and fence_key{rest}"));
        assert_eq!(
            err.render(Host::Python),
            format!("data_key and fence_key{rest}")
        );
        assert_eq!(err.render(Host::Js), format!("dataKey and fenceKey{rest}"));
    }

    #[test]
    fn fence_refuses_a_lower_token_once_a_higher_one_landed() {
        let mut fence = Fence::new();
        assert_eq!(fence.check("row:1", FencingToken(33)), Ok(()));
        assert_eq!(fence.check("row:1", FencingToken(34)), Ok(()));
        assert_eq!(fence.check("row:1", FencingToken(34)), Ok(())); // same lease writes again
        let err = fence.check("row:1", FencingToken(33)).unwrap_err();
        assert_eq!(err.highest, FencingToken(34));
        assert!(err.to_string().contains("stale fencing token 33"));
        assert_eq!(fence.check("row:2", FencingToken(1)), Ok(())); // per resource
        assert_eq!(fence.highest("row:1"), Some(FencingToken(34)));
        // no lease has token 0: a fresh resource refuses it too, under both rules
        for refused in [
            Fence::new().check("fresh", FencingToken(0)),
            Fence::new().check_owned("fresh", FencingToken(0), OwnerId([1; 16])),
        ] {
            let err = refused.unwrap_err();
            assert_eq!(
                (err.reason, err.highest),
                (StaleReason::Superseded, FencingToken(0))
            );
            assert!(err.to_string().contains("is no lease's token"), "{err}");
        }
        assert_eq!(fence.highest("fresh"), None);
    }

    const A: OwnerId = OwnerId([0xaa; 16]);
    const B: OwnerId = OwnerId([0xbb; 16]);

    fn refused(fence: &mut Fence, token: u64, owner: OwnerId) -> (StaleReason, FencingToken) {
        let err = fence
            .check_owned("row:1", FencingToken(token), owner)
            .unwrap_err();
        (err.reason, err.highest)
    }

    #[test]
    fn owner_bound_fence_accepts_a_higher_token_and_the_same_token_from_its_owner() {
        let mut fence = Fence::new();
        assert_eq!(fence.check_owned("row:1", FencingToken(5), A), Ok(()));
        assert_eq!(fence.check_owned("row:1", FencingToken(5), A), Ok(())); // A writes again
        assert_eq!(fence.owner("row:1"), Some(A));
        assert_eq!(fence.check_owned("row:1", FencingToken(6), B), Ok(())); // B's newer grant
        assert_eq!(fence.owner("row:1"), Some(B));
        assert_eq!(fence.highest("row:1"), Some(FencingToken(6)));
    }

    #[test]
    fn owner_bound_fence_refuses_a_lower_token_as_superseded() {
        let mut fence = Fence::new();
        fence.check_owned("row:1", FencingToken(6), B).unwrap();
        let err = fence.check_owned("row:1", FencingToken(5), A).unwrap_err();
        assert_eq!(
            (err.reason, err.highest),
            (StaleReason::Superseded, FencingToken(6))
        );
        assert!(
            err.to_string().starts_with("stale fencing token 5"),
            "{err}"
        );
        // a lower token is refused from the recorded owner too
        assert_eq!(
            refused(&mut fence, 5, B),
            (StaleReason::Superseded, FencingToken(6))
        );
    }

    #[test]
    fn owner_bound_fence_refuses_the_same_token_from_another_owner_as_a_duplicate_grant() {
        // a failover re-grants token 5 to B while A still holds it
        let mut fence = Fence::new();
        fence.check_owned("row:1", FencingToken(5), A).unwrap();
        let err = fence.check_owned("row:1", FencingToken(5), B).unwrap_err();
        assert_eq!(
            (err.reason, err.highest),
            (StaleReason::DuplicateGrant, FencingToken(5))
        );
        assert!(err.to_string().contains("was granted twice"), "{err}");
        // the refusal changes nothing: A keeps writing, B stays refused
        assert_eq!(fence.check_owned("row:1", FencingToken(5), A), Ok(()));
        assert_eq!(fence.owner("row:1"), Some(A));
        // the token-only rule takes the same write: the weaker rule
        assert_eq!(fence.check("row:1", FencingToken(5)), Ok(()));
        assert_eq!(fence.owner("row:1"), Some(A));
    }

    #[test]
    fn a_token_only_record_has_no_owner_to_match() {
        let mut fence = Fence::new();
        fence.check("row:1", FencingToken(7)).unwrap();
        assert_eq!(fence.owner("row:1"), None);
        assert_eq!(
            refused(&mut fence, 7, A),
            (StaleReason::DuplicateGrant, FencingToken(7))
        );
        assert_eq!(fence.check_owned("row:1", FencingToken(8), A), Ok(()));
    }

    #[test]
    fn stale_token_reason_defaults_to_superseded_in_serde() {
        let old: StaleToken =
            serde_json::from_str(r#"{"resource":"r","token":1,"highest":2}"#).unwrap();
        assert_eq!(old.reason, StaleReason::Superseded);
        let json = serde_json::to_value(StaleToken {
            reason: StaleReason::DuplicateGrant,
            ..old
        })
        .unwrap();
        assert_eq!(json["reason"], "duplicate_grant");
    }

    #[test]
    fn owner_bound_sql_guard_compares_the_owner_on_an_equal_token() {
        let sql = sql_fenced_update_owned(
            "accounts",
            "id",
            "last_token",
            "last_owner",
            &["balance"],
            ParamStyle::Dollar,
        )
        .unwrap();
        assert_eq!(
            sql,
            r#"UPDATE "accounts" SET "balance" = $4, "last_token" = $2, "last_owner" = $3 WHERE "id" = $1 AND ("last_token" < $2 OR ("last_token" = $2 AND "last_owner" = $3))"#
        );
        let sql = sql_fenced_update_owned(
            "accounts",
            "id",
            "last_token",
            "last_owner",
            &["balance"],
            ParamStyle::Pyformat,
        )
        .unwrap();
        assert!(
            sql.ends_with(r#"WHERE "id" = %(id)s AND ("last_token" < %(token)s OR ("last_token" = %(token)s AND "last_owner" = %(owner)s))"#),
            "{sql}"
        );
        for (cols, style) in [
            (&["last_owner"][..], ParamStyle::Dollar),
            (&["owner"][..], ParamStyle::Pyformat),
        ] {
            let err = sql_fenced_update_owned("a", "id", "last_token", "last_owner", cols, style)
                .unwrap_err();
            assert!(
                matches!(err, InvalidGuard::Column { .. }),
                "{cols:?}: {err}"
            );
        }
        assert!(sql_fenced_update_owned("a", "id", "t", "o; x", &[], ParamStyle::Dollar).is_err());
        // the token-only guard leaves a column named owner free
        assert!(sql_fenced_update("a", "id", "t", &["owner"], ParamStyle::Pyformat).is_ok());
    }

    #[test]
    fn sql_guard_is_parameterized_and_quotes_identifiers() {
        let sql = sql_fenced_update(
            "accounts",
            "id",
            "last_token",
            &["balance"],
            ParamStyle::Dollar,
        )
        .unwrap();
        assert_eq!(
            sql,
            r#"UPDATE "accounts" SET "balance" = $3, "last_token" = $2 WHERE "id" = $1 AND "last_token" <= $2"#
        );
        let sql = sql_fenced_update(
            "accounts",
            "id",
            "last_token",
            &["balance"],
            ParamStyle::Pyformat,
        )
        .unwrap();
        assert!(
            sql.ends_with(r#"WHERE "id" = %(id)s AND "last_token" <= %(token)s"#),
            "{sql}"
        );
        assert!(sql_fenced_update("a; DROP TABLE x", "id", "t", &[], ParamStyle::Dollar).is_err());
        assert!(sql_fenced_update("a", "id", "t", &["1col"], ParamStyle::Dollar).is_err());
        // parameters and columns must not be confused
        for (cols, style) in [
            (&["token", "body"][..], ParamStyle::Pyformat),
            (&["id"][..], ParamStyle::Pyformat),
            (&["t"][..], ParamStyle::Dollar),
            (&["body", "body"][..], ParamStyle::Dollar),
            (&["pk"][..], ParamStyle::Dollar),
        ] {
            let err = sql_fenced_update("inv", "pk", "t", cols, style).unwrap_err();
            assert!(
                matches!(err, InvalidGuard::Column { .. }),
                "{cols:?}: {err}"
            );
        }
        assert!(sql_fenced_update("inv", "pk", "t", &["token"], ParamStyle::Dollar).is_ok());
    }

    #[test]
    fn redis_fenced_set_reply_is_read_strictly() {
        let ok = RedisValue::Array(vec![RedisValue::Int(1), RedisValue::Int(5)]);
        assert_eq!(read_redis_fenced_set("r", FencingToken(5), &ok), Ok(Ok(())));
        let stale = RedisValue::Array(vec![RedisValue::Int(0), RedisValue::Data("9".into())]);
        let err = read_redis_fenced_set("r", FencingToken(5), &stale)
            .unwrap()
            .unwrap_err();
        assert_eq!(err.highest, FencingToken(9));
        assert_eq!(err.reason, StaleReason::Superseded);
        let twice = RedisValue::Array(vec![RedisValue::Int(2), RedisValue::Data("5".into())]);
        let err = read_redis_fenced_set("r", FencingToken(5), &twice)
            .unwrap()
            .unwrap_err();
        assert_eq!(
            (err.reason, err.highest),
            (StaleReason::DuplicateGrant, FencingToken(5))
        );
        assert!(read_redis_fenced_set("r", FencingToken(5), &RedisValue::Nil).is_err());
        let three = RedisValue::Array(vec![RedisValue::Int(3), RedisValue::Int(5)]);
        assert!(read_redis_fenced_set("r", FencingToken(5), &three).is_err());
        let cmd = redis_fenced_set_owned("d", "f", FencingToken(5), A, "v");
        assert_eq!(cmd.args, ["5", "v", &"aa".repeat(16)]);
    }
}
