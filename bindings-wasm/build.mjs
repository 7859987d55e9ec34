#!/usr/bin/env node
// usage: node build.mjs [--locked] [--measure] [--js-only]
//   Builds the fencepost-wasm package into dist/:
//     1. cargo build -p fencepost-wasm --target wasm32-unknown-unknown --profile release-wasm
//        (CARGO_TARGET_DIR defaults to <repo>/target/wasm, away from the other builds)
//     2. wasm-bindgen --target web    → dist/web/  (ES module: browsers, workers, Deno, bundlers)
//        wasm-bindgen --target nodejs → dist/node/ (CommonJS, loads the module synchronously)
//        The CLI must be the version of the wasm-bindgen crate in Cargo.lock (checked).
//     3. wasm-opt -Oz --converge (npm binaryen) on both modules, metadata sections stripped
//     4. the shared JavaScript API: js/ copied word for word to dist/js/ (Node)
//        and bundled as one ES module, dist/web/fencepost_api.mjs (scripts/bundle-cjs.mjs);
//        the one interface file, bindings-node/fencepost.d.ts, copied to dist/
//     5. checks: the module imports nothing from "env" (only wasm-bindgen's glue module);
//        writes dist/build.json (sizes raw and gzip, instantiate time) and prints it
//   --measure: also builds with opt-level "s", "z" and 3 and reports each size before and
//              after wasm-opt (what the release-wasm profile's choice rests on)
//   --js-only: step 4 alone (after editing js/ or fencepost.d.ts)

import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import zlib from 'node:zlib'

import { bundleCjs } from './scripts/bundle-cjs.mjs'

const HERE = path.dirname(fileURLToPath(import.meta.url))
const REPO = path.resolve(HERE, '..')
const DIST = path.join(HERE, 'dist')
const TARGET_DIR = process.env.CARGO_TARGET_DIR || path.join(REPO, 'target', 'wasm')
const PROFILE = 'release-wasm'
const args = new Set(process.argv.slice(2))
const LOCKED = args.has('--locked') ? ['--locked'] : []
// The web module's size budget, gzip level 9 (tests/wasm reads it from dist/build.json).
// 166 KiB: the module is 168,388 B (164.4 KiB) without the core's PostgreSQL backend,
// which no host of this module can reach; the budget leaves about 1.5 KiB for growth, so
// that a change which grows the module says so here. CHANGELOG.md lists each change of
// the budget and its reason.
const GZIP_BUDGET = 166 * 1024

const log = (...m) => console.error('build.mjs:', ...m)
const run = (cmd, argv, opts = {}) => execFileSync(cmd, argv, { stdio: ['ignore', 'inherit', 'inherit'], ...opts })
const capture = (cmd, argv, opts = {}) => execFileSync(cmd, argv, { encoding: 'utf8', ...opts }).trim()

function which (name, extra = []) {
  for (const dir of [...extra, ...(process.env.PATH || '').split(path.delimiter)]) {
    const candidate = path.join(dir, name)
    try {
      fs.accessSync(candidate, fs.constants.X_OK)
      return candidate
    } catch {}
  }
  return null
}

/** The wasm-bindgen crate version Cargo.lock pins. */
function lockedWasmBindgen () {
  const lock = fs.readFileSync(path.join(REPO, 'Cargo.lock'), 'utf8')
  const m = /\[\[package\]\]\nname = "wasm-bindgen"\nversion = "([^"]+)"/.exec(lock)
  if (!m) throw new Error('Cargo.lock has no wasm-bindgen package')
  return m[1]
}

function wasmBindgenCli () {
  const want = lockedWasmBindgen()
  const cli = which('wasm-bindgen', [path.join(process.env.CARGO_HOME || path.join(os.homedir(), '.cargo'), 'bin')])
  const install = `cargo install wasm-bindgen-cli --version =${want}`
  if (cli === null) throw new Error(`wasm-bindgen is not installed: ${install}`)
  const have = capture(cli, ['--version']).split(/\s+/)[1]
  if (have !== want) throw new Error(`wasm-bindgen ${have} found, Cargo.lock pins the crate at ${want}: ${install}`)
  return cli
}

function wasmOpt () {
  const bin = path.join(HERE, 'node_modules', '.bin', 'wasm-opt')
  if (!fs.existsSync(bin)) throw new Error('wasm-opt (npm binaryen) is missing: run `npm ci` in bindings-wasm/ (Debian\'s binaryen is too old)')
  return bin
}

function cargoBuild (env = {}, targetDir = TARGET_DIR) {
  run('cargo', ['build', '-p', 'fencepost-wasm', '--target', 'wasm32-unknown-unknown', '--profile', PROFILE, ...LOCKED], {
    cwd: REPO,
    env: { ...process.env, CARGO_TARGET_DIR: targetDir, ...env }
  })
  return path.join(targetDir, 'wasm32-unknown-unknown', PROFILE, 'fencepost_wasm.wasm')
}

const gzipSize = (bytes) => zlib.gzipSync(bytes, { level: 9 }).length

/** wasm-opt -Oz in place. The features wasm-bindgen's output uses are read from the module.
 * --converge repeats -Oz while it still shrinks the module; the producers and
 * target_features custom sections are metadata no engine reads. */
function optimize (file) {
  run(wasmOpt(), ['-Oz', '--converge', '--strip-producers', '--strip-target-features', '--enable-bulk-memory', '--enable-nontrapping-float-to-int', '--enable-sign-ext',
    '--enable-mutable-globals', '--enable-reference-types', '--enable-multivalue', file, '-o', file])
}

/** The modules a wasm file imports from, with the number of imports from each. */
export function importModules (bytes) {
  const module = new WebAssembly.Module(bytes)
  const counts = {}
  for (const i of WebAssembly.Module.imports(module)) counts[i.module] = (counts[i.module] || 0) + 1
  return counts
}

async function instantiateMs (dir) {
  // A fresh process: compile + instantiate of the web build's module, as a page would.
  const script = `
    const fs = require('fs'); const path = require('path')
    const bytes = fs.readFileSync(path.join(${JSON.stringify(dir)}, 'fencepost_wasm_bg.wasm'))
    import(${JSON.stringify(path.join(dir, 'fencepost_wasm.js'))}).then(async (glue) => {
      const t0 = performance.now()
      const module = await WebAssembly.compile(bytes)
      const t1 = performance.now()
      glue.initSync({ module })
      const t2 = performance.now()
      glue.coreVersion()
      console.log(JSON.stringify({ compileMs: +(t1 - t0).toFixed(2), instantiateMs: +(t2 - t1).toFixed(2) }))
    })`
  return JSON.parse(capture(process.execPath, ['-e', script]))
}

function measure () {
  const rows = []
  for (const level of ['s', 'z', '3']) {
    const dir = path.join(TARGET_DIR, `measure-${level}`)
    const wasm = cargoBuild({ CARGO_PROFILE_RELEASE_WASM_OPT_LEVEL: level }, dir)
    const out = fs.mkdtempSync(path.join(os.tmpdir(), 'fp-measure-'))
    run(wasmBindgenCli(), ['--target', 'web', '--no-typescript', '--out-dir', out, '--out-name', 'm', wasm])
    const file = path.join(out, 'm_bg.wasm')
    const before = fs.readFileSync(file)
    optimize(file)
    const after = fs.readFileSync(file)
    rows.push({ optLevel: level, bindgen: before.length, bindgenGzip: gzipSize(before), wasmOpt: after.length, wasmOptGzip: gzipSize(after) })
    fs.rmSync(out, { recursive: true, force: true })
  }
  return rows
}

/** The shared JavaScript API: word for word for Node (dist/js/), one ES module for the web
 * (dist/web/fencepost_api.mjs); the interface file beside them. */
function jsLayer () {
  const js = path.join(REPO, 'js')
  fs.rmSync(path.join(DIST, 'js'), { recursive: true, force: true })
  fs.mkdirSync(path.join(DIST, 'js'), { recursive: true })
  for (const f of fs.readdirSync(js).filter((f) => f.endsWith('.js'))) {
    fs.copyFileSync(path.join(js, f), path.join(DIST, 'js', f))
  }
  const bundle = bundleCjs(path.join(js, 'index.js'), {
    banner: '// The fencepost JavaScript API (js/, CommonJS, word for word) as one ES module.\n// Generated by bindings-wasm/build.mjs; do not edit.'
  })
  fs.mkdirSync(path.join(DIST, 'web'), { recursive: true })
  fs.writeFileSync(path.join(DIST, 'web', 'fencepost_api.mjs'), bundle.source)
  fs.copyFileSync(path.join(REPO, 'bindings-node', 'fencepost.d.ts'), path.join(DIST, 'fencepost.d.ts'))
  return { apiJs: Buffer.byteLength(bundle.source), apiJsGzip: gzipSize(Buffer.from(bundle.source)) }
}

async function main () {
  if (args.has('--js-only')) {
    console.log(JSON.stringify(jsLayer()))
    return
  }
  const started = performance.now()
  const cli = wasmBindgenCli()
  log('cargo build', PROFILE)
  const wasm = cargoBuild()
  const raw = fs.readFileSync(wasm)

  fs.rmSync(DIST, { recursive: true, force: true })
  const report = { cargoWasm: raw.length, targets: {} }
  for (const [target, dir] of [['web', 'web'], ['nodejs', 'node']]) {
    const out = path.join(DIST, dir)
    run(cli, ['--target', target, '--no-typescript', '--out-dir', out, '--out-name', 'fencepost_wasm', wasm])
    // the web glue is an ES module in .js files; the Node glue CommonJS
    fs.writeFileSync(path.join(out, 'package.json'), JSON.stringify({ type: target === 'web' ? 'module' : 'commonjs' }) + '\n')
    const file = path.join(out, 'fencepost_wasm_bg.wasm')
    const before = fs.readFileSync(file)
    optimize(file)
    const after = fs.readFileSync(file)
    const imports = importModules(after)
    if (Object.hasOwn(imports, 'env')) throw new Error(`${file} imports from "env": ${JSON.stringify(imports)}`)
    const glue = fs.readFileSync(path.join(out, 'fencepost_wasm.js'))
    report.targets[dir] = {
      wasmBindgen: before.length,
      wasmOpt: after.length,
      wasmOptGzip: gzipSize(after),
      glueJs: glue.length,
      glueJsGzip: gzipSize(glue),
      imports
    }
  }

  Object.assign(report, jsLayer())

  report.start = await instantiateMs(path.join(DIST, 'web'))
  if (args.has('--measure')) report.optLevels = measure()
  report.buildSeconds = +((performance.now() - started) / 1000).toFixed(1)
  report.budgetGzip = GZIP_BUDGET
  fs.writeFileSync(path.join(DIST, 'build.json'), JSON.stringify(report, null, 2) + '\n')
  console.log(JSON.stringify(report, null, 2))
  const gz = report.targets.web.wasmOptGzip
  if (gz > GZIP_BUDGET) throw new Error(`the web module is ${gz} bytes gzipped, over the ${GZIP_BUDGET}-byte budget`)
}

main().catch((error) => {
  console.error(`build.mjs: ${error.message}`)
  process.exit(1)
})
