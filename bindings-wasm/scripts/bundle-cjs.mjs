// bundleCjs(entry): a set of CommonJS modules that require each other by relative path,
// as ONE ES module, each module's source kept word for word inside a function wrapper.
//
// The shared JavaScript API (js/ at the repository root) is CommonJS, which Node loads as is; the
// web build (browsers, workers, Deno) needs an ES module with no `require`. This is the
// smallest honest conversion: no transpiling, no renaming, so the code that runs in a
// browser is the code the Node suite tests. It refuses anything but `require('./x')` /
// `require('../x')` with a literal path (a bare package, `node:` module or computed path
// would need a real bundler, and would be a bug in code meant for the web).
//
// The result's default export is the entry's module.exports: `import api from './bundle.mjs'`.
//
// `shims` maps a specifier, as written in a require call (`'node:fs'`, `'./impl'`), to the
// file that stands in for it: how tests/wasm runs tests/js/scenarios.test.js unchanged in a
// browser, with node:test, node:assert, node:fs and the implementation picker replaced.

import fs from 'node:fs'
import path from 'node:path'

const REQUIRE = /\brequire\s*\(\s*(?:'([^']*)'|"([^"]*)"|([^)]*))\s*\)/g

function resolveFile (from, spec) {
  const base = path.resolve(path.dirname(from), spec)
  for (const candidate of [base, `${base}.js`, path.join(base, 'index.js')]) {
    if (fs.existsSync(candidate) && fs.statSync(candidate).isFile()) return candidate
  }
  throw new Error(`${from}: cannot resolve require(${JSON.stringify(spec)})`)
}

/** The source without comment lines, so that `require(...)` in prose is not taken for a
 * dependency: whole-line `//` comments and block comments that start a line (JSDoc) are
 * dropped. (A require this misses fails loudly at run time: "was not bundled".) */
function code (source) {
  const out = []
  let inBlock = false
  for (const line of source.split('\n')) {
    if (inBlock) {
      if (line.includes('*/')) inBlock = false
      continue
    }
    if (/^\s*\/\//.test(line)) continue
    if (/^\s*\/\*/.test(line)) {
      inBlock = !line.includes('*/')
      continue
    }
    out.push(line)
  }
  return out.join('\n')
}

/**
 * @param {string} entry  the entry module's path
 * @param {{ banner?: string, shims?: Record<string, string> }} [options]
 * @returns {{ source: string, files: string[] }} the ES module, and the files it contains
 */
export function bundleCjs (entry, options = {}) {
  const root = path.resolve(entry)
  /** absolute path → { index, source, deps: { spec → absolute path } } */
  const modules = new Map()
  const queue = [root]
  while (queue.length > 0) {
    const file = queue.shift()
    if (modules.has(file)) continue
    const source = fs.readFileSync(file, 'utf8')
    const deps = {}
    for (const match of code(source).matchAll(REQUIRE)) {
      const spec = match[1] ?? match[2]
      if (spec === undefined) throw new Error(`${file}: require(${match[3]}) has no literal path`)
      if (options.shims && Object.hasOwn(options.shims, spec)) {
        deps[spec] = path.resolve(options.shims[spec])
        queue.push(deps[spec])
        continue
      }
      if (!spec.startsWith('./') && !spec.startsWith('../')) {
        throw new Error(`${file}: require(${JSON.stringify(spec)}) is not a relative module; the web bundle takes relative modules only`)
      }
      deps[spec] = resolveFile(file, spec)
      queue.push(deps[spec])
    }
    modules.set(file, { index: modules.size, source, deps })
  }

  const base = path.dirname(root)
  const out = []
  if (options.banner) out.push(options.banner.trimEnd())
  out.push('const __modules = [')
  for (const [file, m] of modules) {
    const deps = Object.fromEntries(Object.entries(m.deps).map(([spec, dep]) => [spec, modules.get(dep).index]))
    out.push(`// ---- ${path.relative(base, file).split(path.sep).join('/')} ----`)
    out.push(`[${JSON.stringify(deps)}, function (module, exports, require) {`)
    out.push(m.source.trimEnd())
    out.push('}],')
  }
  out.push(']')
  out.push(`const __cache = []
function __require (index) {
  if (__cache[index] !== undefined) return __cache[index].exports
  const [deps, body] = __modules[index]
  const module = { exports: {} }
  __cache[index] = module
  body.call(module.exports, module, module.exports, (spec) => {
    if (!Object.hasOwn(deps, spec)) throw new Error(\`bundle: require(\${JSON.stringify(spec)}) was not bundled\`)
    return __require(deps[spec])
  })
  return module.exports
}
export default __require(0)`)
  return { source: out.join('\n') + '\n', files: [...modules.keys()] }
}
