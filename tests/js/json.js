'use strict'
// A lossless JSON reader for the scenario vectors: integers beyond 2^53 − 1 (fencing tokens
// go up to 2^63 − 1) become `bigint`, every other number a `number`. JSON.parse would round
// them. Strict JSON only (RFC 8259); errors name the offset.

function parseJson (text) {
  let i = 0
  const fail = (what) => { throw new SyntaxError(`JSON: ${what} at offset ${i}`) }
  const ws = () => { while (i < text.length && ' \t\n\r'.includes(text[i])) i++ }
  const expect = (word) => {
    if (text.startsWith(word, i)) i += word.length
    else fail(`expected ${word}`)
  }
  function value () {
    ws()
    const c = text[i]
    if (c === '{') {
      i++
      const out = {}
      ws()
      if (text[i] === '}') { i++; return out }
      for (;;) {
        ws()
        if (text[i] !== '"') fail('expected a key')
        const key = string()
        ws()
        expect(':')
        out[key] = value()
        ws()
        if (text[i] === ',') { i++; continue }
        if (text[i] === '}') { i++; return out }
        fail('expected , or }')
      }
    }
    if (c === '[') {
      i++
      const out = []
      ws()
      if (text[i] === ']') { i++; return out }
      for (;;) {
        out.push(value())
        ws()
        if (text[i] === ',') { i++; continue }
        if (text[i] === ']') { i++; return out }
        fail('expected , or ]')
      }
    }
    if (c === '"') return string()
    if (c === 't') { expect('true'); return true }
    if (c === 'f') { expect('false'); return false }
    if (c === 'n') { expect('null'); return null }
    return number()
  }
  function string () {
    i++ // opening quote
    let out = ''
    for (;;) {
      if (i >= text.length) fail('unterminated string')
      const c = text[i++]
      if (c === '"') return out
      if (c === '\\') {
        const e = text[i++]
        const simple = { '"': '"', '\\': '\\', '/': '/', b: '\b', f: '\f', n: '\n', r: '\r', t: '\t' }
        if (e in simple) out += simple[e]
        else if (e === 'u' && /^[0-9a-fA-F]{4}$/.test(text.slice(i, i + 4))) {
          out += String.fromCharCode(parseInt(text.slice(i, i + 4), 16))
          i += 4
        } else fail('bad escape')
      } else if (c < ' ') {
        fail('control character in string')
      } else {
        out += c
      }
    }
  }
  function number () {
    const m = /^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/.exec(text.slice(i))
    if (m === null) fail('unexpected character')
    i += m[0].length
    if (m[2] === undefined && m[3] === undefined) {
      const n = Number(m[0])
      return Number.isSafeInteger(n) ? n : BigInt(m[0])
    }
    return Number(m[0])
  }
  const out = value()
  ws()
  if (i !== text.length) fail('trailing characters')
  return out
}

module.exports = { parseJson }
