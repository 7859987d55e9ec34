'use strict'
// node:fs for the browser: the vectors the page fetched before loading the runner, as a
// read-only tree in globalThis.__fencepostFiles ({ '/repo/tests/scenarios/x.json': text }).
const files = () => globalThis.__fencepostFiles

function existsSync (p) {
  const dir = p.endsWith('/') ? p : `${p}/`
  return Object.hasOwn(files(), p) || Object.keys(files()).some((f) => f.startsWith(dir))
}

function readdirSync (p) {
  const dir = p.endsWith('/') ? p : `${p}/`
  const names = new Set()
  for (const f of Object.keys(files())) if (f.startsWith(dir)) names.add(f.slice(dir.length).split('/')[0])
  return [...names].sort()
}

function readFileSync (p) {
  if (!Object.hasOwn(files(), p)) throw new Error(`ENOENT: ${p}`)
  return files()[p]
}

module.exports = { existsSync, readdirSync, readFileSync }
