#!/usr/bin/env node
// usage: node scripts/pack.mjs OUT_DIR
//   Packs the npm tarballs in napi-rs' per-platform layout into OUT_DIR:
//   fencepost-VERSION.tgz (the JavaScript API and the loader, no addon) and one
//   fencepost-PLATFORM-VERSION.tgz for each npm/PLATFORM/ that holds its built addon
//   (npm/linux-x64-gnu/fencepost.linux-x64-gnu.node: scripts/package builds it against
//   glibc 2.17). The main package.json gets an optionalDependency on each platform
//   package packed, at its own version, as `napi pre-publish` writes it; platforms
//   built elsewhere (CI on macOS or Windows) drop their addon into their npm/ dir first.
//   Prints the tarballs' paths, one per line.
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

const PKG = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')
const out = process.argv[2]
if (!out) {
  console.error('usage: node scripts/pack.mjs OUT_DIR')
  process.exit(2)
}
const OUT = path.resolve(out)
fs.mkdirSync(OUT, { recursive: true })

const manifest = JSON.parse(fs.readFileSync(path.join(PKG, 'package.json'), 'utf8'))
// The licence texts live once, at the repository's root; npm packs no symlinks, so
// each package gets copies (ignored by git).
const LICENSES = ['LICENSE-MIT', 'LICENSE-APACHE']
const copyLicenses = (dir) => {
  for (const f of LICENSES) fs.copyFileSync(path.join(PKG, '..', f), path.join(dir, f))
}
const binaryName = manifest.napi.binaryName

/** `npm pack` in `dir` into OUT; returns the tarball's path. */
function pack (dir) {
  const json = execFileSync('npm', ['pack', '--json', '--ignore-scripts', '--pack-destination', OUT], {
    cwd: dir, encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit']
  })
  return path.join(OUT, JSON.parse(json)[0].filename)
}

const optional = {}
const tarballs = []
const npmDir = path.join(PKG, 'npm')
for (const platform of fs.readdirSync(npmDir).sort()) {
  const dir = path.join(npmDir, platform)
  const sub = JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8'))
  if (sub.version !== manifest.version) {
    throw new Error(`${sub.name} is at version ${sub.version}, fencepost at ${manifest.version}: run scripts/version check`)
  }
  if (!fs.existsSync(path.join(dir, `${binaryName}.${platform}.node`))) continue
  optional[sub.name] = sub.version
  copyLicenses(dir)
  tarballs.push(pack(dir))
}
if (tarballs.length === 0) throw new Error(`no addon in ${npmDir}/*/: build one first (scripts/package)`)

// The main package, staged: its package.json gains the optionalDependencies, and the
// checkout's own *.node (a development build, loaded first by native.js) stays out.
execFileSync('node', [path.join(PKG, 'scripts', 'copy-js.mjs')], { stdio: 'inherit' })
const stage = fs.mkdtempSync(path.join(OUT, '.stage-'))
try {
  for (const entry of [...manifest.files, 'README.md']) {
    const from = path.join(PKG, entry)
    if (fs.existsSync(from)) fs.cpSync(from, path.join(stage, entry), { recursive: true })
  }
  copyLicenses(stage)
  const staged = { ...manifest, optionalDependencies: { ...manifest.optionalDependencies, ...optional } }
  delete staged.devDependencies
  delete staged.scripts
  fs.writeFileSync(path.join(stage, 'package.json'), JSON.stringify(staged, null, 2) + '\n')
  tarballs.unshift(pack(stage))
} finally {
  fs.rmSync(stage, { recursive: true, force: true })
}
for (const t of tarballs) console.log(t)
