#!/usr/bin/env node
// usage: node scripts/copy-js.mjs
//   Copies the shared JavaScript API (../js/*.js, the layer both npm packages build from)
//   word for word into dist/js/, which index.js loads and `npm pack` ships. Run by
//   `npm run build` and `prepack`; tests/js refuses a stale copy.
import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

const HERE = path.dirname(fileURLToPath(import.meta.url))
const SHARED = path.resolve(HERE, '..', '..', 'js')
const OUT = path.resolve(HERE, '..', 'dist', 'js')

fs.rmSync(OUT, { recursive: true, force: true })
fs.mkdirSync(OUT, { recursive: true })
for (const f of fs.readdirSync(SHARED).filter((f) => f.endsWith('.js'))) {
  fs.copyFileSync(path.join(SHARED, f), path.join(OUT, f))
}
