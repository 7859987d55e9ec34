'use strict'
// node:path for the browser: POSIX join and basename, all the runner needs.
function join (...parts) {
  const out = []
  for (const segment of parts.join('/').split('/')) {
    if (segment === '' || segment === '.') continue
    if (segment === '..') out.pop()
    else out.push(segment)
  }
  return (parts[0] && parts[0].startsWith('/') ? '/' : '') + out.join('/')
}

function basename (p, ext) {
  const base = p.split('/').filter(Boolean).pop() ?? ''
  return ext && base.endsWith(ext) ? base.slice(0, -ext.length) : base
}

module.exports = { join, basename, sep: '/' }
