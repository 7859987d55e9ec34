'use strict'
// The resource side of fencing: refuse writes that carry an old fencing token. Owner-bound
// rule (an owner id given): the highest token is accepted again only from the owner that
// wrote with it, so a token the lock server granted twice writes once. Token-only rule (no
// owner id; weaker): the highest token is accepted from anyone. On etcd the fence is etcd
// itself: a transaction guarded by the holder key's create revision, which is the holder's
// own key, so it is owner-bound already. Shared word for word by the napi and WASM packages.

const check = require('./check')
const { emitWarning } = require('./driver')
const { ConfigError, ProtocolError, StaleTokenError, translate } = require('./errors')

/** The StaleTokenError of a refusal `{ resource, token, highest, reason, message }`; a
 * duplicate grant is also told as a process warning (FENCEPOST_DUPLICATE_GRANT). */
function refusal (s) {
  if (s.reason === 'duplicate_grant') emitWarning(s.message, 'FENCEPOST_DUPLICATE_GRANT')
  return new StaleTokenError(s.message, s.resource, s.token, s.highest, s.reason)
}

function optionalOwner (ownerId) {
  return ownerId === undefined || ownerId === null ? null : check.string(ownerId, 'ownerId')
}

function createFence (native) {
  /** An in-memory fence: the highest token accepted per resource, with the owner id that
   * wrote with it. */
  class Fence {
    constructor () {
      this._fence = new native.Fence()
    }

    /** Accepts a write to `resource` carrying `token` (a bigint >= 1n: 0n, no lease's
     * token, is a ConfigError) and remembers the token;
     * throws StaleTokenError if a higher token was accepted before (`reason`
     * 'superseded'). With `ownerId` (`lease.ownerId`, 32 hex digits) the owner-bound
     * rule: the token is recorded with the owner and the same token from another owner is
     * refused too ('duplicate_grant', after a FENCEPOST_DUPLICATE_GRANT warning). Without
     * it the token-only rule, which is weaker: a token granted twice passes twice. */
    check (resource, token, ownerId) {
      check.string(resource, 'resource')
      check.fencingToken(token)
      const owner = optionalOwner(ownerId)
      const stale = translate(() => this._fence.check(resource, token, owner))
      if (stale !== null) throw refusal(stale)
    }

    /** The highest token accepted for `resource`, or null. */
    highest (resource) {
      return this._fence.highest(check.string(resource, 'resource'))
    }
  }

  /**
   * The SQL of a fenced conditional update. Token-only (weaker: a token granted twice
   * passes twice): `UPDATE "table" SET "c" = $3, …, "token_column" = $2 WHERE "id_column"
   * = $1 AND "token_column" <= $2`, run with [id, token, ...values]. Owner-bound
   * (`options.ownerColumn`): `UPDATE "table" SET "c" = $4, …, "token_column" = $2,
   * "owner_column" = $3 WHERE "id_column" = $1 AND ("token_column" < $2 OR
   * ("token_column" = $2 AND "owner_column" = $3))`, run with [id, token, ownerId,
   * ...values]. Zero rows updated means a refusal, or no row has that id (it never
   * inserts: select the row to tell them apart). The columns: `bigint NOT NULL DEFAULT 0`
   * and `text NOT NULL DEFAULT ''`. `style` 'dollar' (node-postgres, default) or
   * 'pyformat'.
   */
  function sqlFencedUpdate (table, idColumn, tokenColumn, columns, options) {
    check.string(table, 'table')
    check.string(idColumn, 'idColumn')
    check.string(tokenColumn, 'tokenColumn')
    if (!Array.isArray(columns)) throw new ConfigError(`columns must be an array of strings, got ${check.describe(columns)}`)
    columns.forEach((c, i) => check.string(c, `columns[${i}]`))
    const o = check.plainObject(options, 'options')
    const style = o.style === undefined ? 'dollar' : check.string(o.style, 'style')
    const ownerColumn = o.ownerColumn === undefined || o.ownerColumn === null ? null : check.string(o.ownerColumn, 'ownerColumn')
    return translate(() => native.sqlFencedUpdate(table, idColumn, tokenColumn, columns, style, ownerColumn))
  }

  /**
   * The fenced Redis SET as a script call `{ script, sha1, keys, args }` (run it with
   * EVALSHA, or `backend.fencedSet`): writes `value` to `dataKey` unless `token` is lower
   * than the highest token stored at `fenceKey` or, with `ownerId` (owner-bound rule),
   * equal to it and recorded with another owner. Put both keys in one hash slot on Redis
   * Cluster (`{tag}`).
   */
  function redisFencedSet (dataKey, fenceKey, token, value, ownerId) {
    check.string(dataKey, 'dataKey')
    check.string(fenceKey, 'fenceKey')
    check.fencingToken(token)
    check.string(value, 'value')
    const owner = optionalOwner(ownerId)
    return translate(() => native.redisFencedSet(dataKey, fenceKey, token, value, owner))
  }

  /** Reads the reply of `redisFencedSet`: returns when written; throws StaleTokenError
   * when refused (`reason` 'superseded' or 'duplicate_grant'), ProtocolError for any
   * other reply (an error reply too). */
  function readRedisFencedSet (resource, token, reply) {
    check.string(resource, 'resource')
    check.token(token)
    const result = translate(() => native.readRedisFencedSet(resource, token, reply))
    if (result.ok) return
    if (result.stale) throw refusal(result.stale)
    throw new ProtocolError(result.protocol)
  }

  /** Every Lua script fencepost runs on Redis, for `SCRIPT LOAD`:
   * `{ acquire: { sha1, source }, renew, release, fenced_set }`. */
  function redisScripts () {
    return native.redisScripts()
  }

  // ---- etcd: fenced transactions inside etcd --------------------------------------------

  function ownerId (value) {
    check.string(value, 'ownerId')
    if (!/^[0-9a-fA-F]{32}$/.test(value)) throw new ConfigError(`ownerId must be 32 hex digits (lease.ownerId), got ${check.describe(value)}`)
    return value
  }

  /** The etcd key the acquisition `ownerId` puts for lock `name` under `keyPrefix`
   * (`{keyPrefix}{name}/{lease id, 16 hex digits}`); while it holds the lock, the key's
   * create revision is its fencing token. */
  function etcdHolderKey (keyPrefix, name, owner) {
    check.string(keyPrefix, 'keyPrefix')
    check.string(name, 'lock name')
    ownerId(owner)
    return translate(() => native.etcdHolderKey(keyPrefix, name, owner))
  }

  /** The etcd lease id of the acquisition `ownerId`, a bigint (never a lossy number). */
  function etcdLeaseId (owner) {
    ownerId(owner)
    return translate(() => native.etcdLeaseId(owner))
  }

  function pairs (value) {
    if (!Array.isArray(value)) throw new ConfigError(`puts must be an array of [key, value] string pairs, got ${check.describe(value)}`, { option: 'puts' })
    value.forEach((pair, i) => {
      if (!Array.isArray(pair) || pair.length !== 2 || typeof pair[0] !== 'string' || typeof pair[1] !== 'string') {
        throw new ConfigError(`puts[${i}] must be a [key, value] pair of strings, got ${check.describe(pair)}`, { option: 'puts' })
      }
    })
    return value
  }

  function keys (value) {
    if (!Array.isArray(value)) throw new ConfigError(`deletes must be an array of keys (strings), got ${check.describe(value)}`, { option: 'deletes' })
    value.forEach((key, i) => check.string(key, `deletes[${i}]`))
    return value
  }

  /**
   * A fenced etcd transaction as a JSON gateway call `{ backend: 'etcd', call: 'txn', path,
   * body }` (POST `body` to `{endpoint}{path}`, or use `EtcdBackend.fencedTxn`): puts every
   * `[key, value]` of `puts` and deletes every key of `deletes` only while the key of
   * `ownerId` for lock `name` still has create revision `token` (etcd's `IsOwner`).
   */
  function etcdFencedTxn (keyPrefix, name, owner, token, puts, deletes) {
    check.string(keyPrefix, 'keyPrefix')
    check.string(name, 'lock name')
    ownerId(owner)
    check.fencingToken(token)
    pairs(puts)
    if (deletes !== undefined && deletes !== null) keys(deletes)
    return translate(() => native.etcdFencedTxn(keyPrefix, name, owner, token, puts, deletes ?? []))
  }

  /** Reads the gateway's reply (JSON text) to `etcdFencedTxn` for lock `name`: returns the
   * transaction's revision (bigint) when applied; throws StaleTokenError when the lease no
   * longer holds the lock (`highest` = the current holder's token, 0n when nobody holds
   * it), ProtocolError for an error document or any other reply. */
  function readEtcdFencedTxn (name, token, reply) {
    check.string(name, 'lock name')
    check.token(token)
    const result = translate(() => native.readEtcdFencedTxn(name, token, reply))
    if (result.ok) return result.revision
    if (result.stale) {
      const s = result.stale
      const now = s.highest === 0n ? 'nobody holds it now' : `it is held now with token ${s.highest}`
      throw new StaleTokenError(`fenced etcd transaction refused: the lease with token ${s.token} no longer holds lock ${JSON.stringify(s.resource)} (${now}); nothing was written`, s.resource, s.token, s.highest)
    }
    throw new ProtocolError(`fenced etcd transaction for lock ${JSON.stringify(name)}: ${result.protocol}`)
  }

  return {
    Fence,
    sqlFencedUpdate,
    redisFencedSet,
    readRedisFencedSet,
    redisScripts,
    etcdHolderKey,
    etcdLeaseId,
    etcdFencedTxn,
    readEtcdFencedTxn
  }
}

module.exports = { createFence }
