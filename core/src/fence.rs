//! The resource side of fencing: [`Fence`] keeps the highest token per resource and
//! refuses lower ones; guard builders put the same check inside a SQL `UPDATE` or a
//! Redis script, so the check and the write are one atomic step at the resource.
//!
//! A write carrying the *same* token as the highest seen is accepted: one lease may
//! write many times. Only a token lower than one already accepted is stale.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::backends::{RedisCommand, RedisScript, RedisValue};
use crate::error::ProtocolError;
use crate::FencingToken;

/// A write was refused: its token is lower than one the resource already accepted,
/// so a newer holder has written since this lease was granted.
#[derive(Clone, Debug, Error, PartialEq, Eq, Serialize, Deserialize)]
#[error("stale fencing token {token} for {resource:?}: the resource has already accepted token {highest}")]
pub struct StaleToken {
    pub resource: String,
    pub token: FencingToken,
    pub highest: FencingToken,
}

/// An in-memory fence: the highest token accepted per resource.
#[derive(Clone, Debug, Default)]
pub struct Fence {
    highest: HashMap<String, FencingToken>,
}

impl Fence {
    /// An empty fence.
    pub fn new() -> Self {
        Self::default()
    }

    /// Accepts a write to `resource` carrying `token` if no higher token was accepted
    /// before, and remembers `token` as the highest.
    ///
    /// Errors: [`StaleToken`], naming the highest token accepted.
    pub fn check(&mut self, resource: &str, token: FencingToken) -> Result<(), StaleToken> {
        match self.highest.get_mut(resource) {
            Some(highest) if token < *highest => Err(StaleToken {
                resource: resource.to_owned(),
                token,
                highest: *highest,
            }),
            Some(highest) => {
                *highest = token;
                Ok(())
            }
            None => {
                self.highest.insert(resource.to_owned(), token);
                Ok(())
            }
        }
    }

    /// The highest token accepted for `resource`.
    pub fn highest(&self, resource: &str) -> Option<FencingToken> {
        self.highest.get(resource).copied()
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
    Column { column: String, why: String },
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
    columns: &[&str],
    style: ParamStyle,
) -> Result<(), InvalidGuard> {
    for (i, c) in columns.iter().enumerate() {
        let why = if *c == id_column {
            Some("it is the id column that selects the row".to_owned())
        } else if *c == token_column {
            Some("it is the token column, which the update sets to the fencing token".to_owned())
        } else if columns[..i].contains(c) {
            Some("it is listed twice".to_owned())
        } else if style == ParamStyle::Pyformat && (*c == "id" || *c == "token") {
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

/// Builds a fenced conditional update:
///
/// ```text
/// UPDATE "table" SET "c1" = $3, …, "last_token" = $2
///  WHERE "id" = $1 AND "last_token" <= $2
/// ```
///
/// Run it with the row id, the lease's token and the new values. **Zero rows updated
/// means the token is stale** (or the row does not exist): report [`StaleToken`].
/// The token column must be a `bigint NOT NULL` (start it at 0).
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
    check_columns(id_column, token_column, columns, style)?;
    let param = |n: usize, name: &str| match style {
        ParamStyle::Dollar => format!("${n}"),
        ParamStyle::Pyformat => format!("%({name})s"),
    };
    let mut sets = Vec::with_capacity(columns.len() + 1);
    for (i, c) in columns.iter().enumerate() {
        sets.push(format!("{} = {}", ident(c)?, param(i + 3, c)));
    }
    let token_col = ident(token_column)?;
    sets.push(format!("{token_col} = {}", param(2, "token")));
    Ok(format!(
        "UPDATE {} SET {} WHERE {} = {} AND {token_col} <= {}",
        ident(table)?,
        sets.join(", "),
        ident(id_column)?,
        param(1, "id"),
        param(2, "token"),
    ))
}

/// Builds a fenced Redis `SET`: writes `value` to `data_key` unless `token` is lower
/// than the highest token stored at `fence_key` (see [`RedisScript::FencedSet`]).
/// Read its reply with [`read_redis_fenced_set`]. Put both keys in one hash slot
/// (`{tag}`) on Redis Cluster.
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
    }
}

/// Reads the reply of [`redis_fenced_set`]: `Ok(Ok(()))` written, `Ok(Err(StaleToken))`
/// refused, `Err(ProtocolError)` for a reply of another shape.
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
            match (*flag, int(n)) {
                (1, _) => return Ok(Ok(())),
                (0, Some(highest)) => {
                    return Ok(Err(StaleToken {
                        resource: resource.to_owned(),
                        token,
                        highest: FencingToken(highest),
                    }))
                }
                _ => {}
            }
        }
    }
    Err(ProtocolError {
        backend: "redis".to_owned(),
        message: format!("fenced SET: expected [1, token] or [0, highest], got {reply:?}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(read_redis_fenced_set("r", FencingToken(5), &RedisValue::Nil).is_err());
    }
}
