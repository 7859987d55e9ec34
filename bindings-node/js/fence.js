'use strict'
// The resource side of fencing: refuse writes that carry an old fencing token. A write
// with the same token as the highest seen is accepted (one lease may write many times);
// only a lower one is stale. Shared word for word by the napi and WASM packages.

const check = require('./check')
const { ConfigError, ProtocolError, StaleTokenError, translate } = require('./errors')

function createFence (native) {
  /** An in-memory fence: the highest token accepted per resource. */
  class Fence {
    constructor () {
      this._fence = new native.Fence()
    }

    /** Accepts a write to `resource` carrying `token` (a bigint) and remembers the token;
     * throws StaleTokenError if a higher token was accepted before. */
    check (resource, token) {
      check.string(resource, 'resource')
      check.token(token)
      const stale = translate(() => this._fence.check(resource, token))
      if (stale !== null) throw new StaleTokenError(stale.message, stale.resource, stale.token, stale.highest)
    }

    /** The highest token accepted for `resource`, or null. */
    highest (resource) {
      return this._fence.highest(check.string(resource, 'resource'))
    }
  }

  /**
   * The SQL of a fenced conditional update:
   * `UPDATE "table" SET "c" = $3, …, "token_column" = $2 WHERE "id_column" = $1 AND
   * "token_column" <= $2`. Run it with [id, token, ...values]; zero rows updated means
   * the token is stale (or the row does not exist). `style` 'dollar' (node-postgres,
   * default) or 'pyformat'.
   */
  function sqlFencedUpdate (table, idColumn, tokenColumn, columns, options) {
    check.string(table, 'table')
    check.string(idColumn, 'idColumn')
    check.string(tokenColumn, 'tokenColumn')
    if (!Array.isArray(columns)) throw new ConfigError(`columns must be an array of strings, got ${check.describe(columns)}`)
    columns.forEach((c, i) => check.string(c, `columns[${i}]`))
    const o = check.plainObject(options, 'options')
    const style = o.style === undefined ? 'dollar' : check.string(o.style, 'style')
    return translate(() => native.sqlFencedUpdate(table, idColumn, tokenColumn, columns, style))
  }

  /**
   * The fenced Redis SET as a script call `{ script, sha1, keys, args }` (run it with
   * EVALSHA, or `backend.fencedSet`): writes `value` to `dataKey` unless `token` is lower
   * than the highest token stored at `fenceKey`. Put both keys in one hash slot on Redis
   * Cluster (`{tag}`).
   */
  function redisFencedSet (dataKey, fenceKey, token, value) {
    check.string(dataKey, 'dataKey')
    check.string(fenceKey, 'fenceKey')
    check.token(token)
    check.string(value, 'value')
    return translate(() => native.redisFencedSet(dataKey, fenceKey, token, value))
  }

  /** Reads the reply of `redisFencedSet`: returns when written; throws StaleTokenError
   * when refused, ProtocolError for any other reply (an error reply too). */
  function readRedisFencedSet (resource, token, reply) {
    check.string(resource, 'resource')
    check.token(token)
    const result = translate(() => native.readRedisFencedSet(resource, token, reply))
    if (result.ok) return
    if (result.stale) {
      const s = result.stale
      throw new StaleTokenError(s.message, s.resource, s.token, s.highest)
    }
    throw new ProtocolError(result.protocol)
  }

  /** Every Lua script fencepost runs on Redis, for `SCRIPT LOAD`:
   * `{ acquire: { sha1, source }, renew, release, fenced_set }`. */
  function redisScripts () {
    return native.redisScripts()
  }

  return { Fence, sqlFencedUpdate, redisFencedSet, readRedisFencedSet, redisScripts }
}

module.exports = { createFence }
