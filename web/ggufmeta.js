// cera_web GGUF header reader: a model's metadata and tensor table from the first bytes of its URL (HTTP Range
// requests), without downloading the model, and the name people know it by.
//
// A classic script that defines one global, `CeraGGUFMeta` (load it with <script src="/web/ggufmeta.js">, or
// importScripts in a worker):
//   CeraGGUFMeta.readUrl(url, {budget}) -> header      fetches a first slice, then more only while the header needs it
//   CeraGGUFMeta.friendlyName(header, fileName) -> 'SmolLM2 135M Instruct'
//   CeraGGUFMeta.describe(url, {size}) -> {name, file} | null   readUrl + friendlyName; null when the header cannot
//                                                       be read; kept in localStorage (see describe)
//   CeraGGUFMeta.readHeader(read, {budget}) -> header   the same through read(start, end) -> {bytes, fileSize} (a File)
// header: {version, fileSize, metadata: {key: value}, complete, tensors, dataOffset, bytesRead, bytes (the bytes read:
// what the worker hands to Python for a preflight, cera_web.webapp.preflight)}. An array value with
// more than SMALL_ARRAY items is {type, length} (a vocabulary is not kept); complete: every metadata key was read;
// tensors ([{name, shape, type, offset}], offsets relative to dataOffset) and dataOffset are null unless the
// tensor table fits the budget too. Reads stop at `budget` bytes (default 8 MiB: a 262k-token vocabulary fits):
// past it the header returned has what was read (complete false). A malformed header throws a FormatError; a
// failed request (no such file, cross-origin without CORS) throws what fetch threw or an Error with the HTTP status.
// The layout is that of cera_web/gguf.py (its docstring); the checks are its checks, as far as they concern the
// header: every count and length against the bytes that can hold it, so a hostile header allocates nothing big.
'use strict';

(() => {
  const FIRST = 256 << 10;         // the first request: 256 KiB (the general.* keys come first)
  const BUDGET = 8 << 20;          // never more than this many bytes in all
  const SMALL_ARRAY = 64;          // arrays kept whole up to this many items
  const MAX_NESTING = 16;
  const MAX_STRING = 4 << 20;
  const TYPES = ['UINT8', 'INT8', 'UINT16', 'INT16', 'UINT32', 'INT32', 'FLOAT32', 'BOOL', 'STRING', 'ARRAY',
                 'UINT64', 'INT64', 'FLOAT64'];
  const SCALAR_SIZE = [1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8];
  const STRING = 8, ARRAY = 9;

  class FormatError extends Error {
    constructor(message) { super(message); this.name = 'FormatError'; }
  }
  class Need {   // thrown inside the parser: the header goes on past the bytes read so far
    constructor(end) { this.end = end; }
  }

  const utf8 = new TextDecoder('utf-8', {fatal: true});

  // Parses the header in bytes[0:length] of a file of fileSize bytes (Infinity: unknown) into `out`, as far as it
  // goes; throws Need(end) when it needs the bytes up to `end`.
  function parse(bytes, length, fileSize, out) {
    const view = new DataView(bytes.buffer, bytes.byteOffset, length);
    let pos = 0;
    const fail = (what) => { throw new FormatError(`not a readable GGUF header: ${what}`); };
    const need = (n) => {
      if (pos + n > fileSize) fail(`it ends at byte ${fileSize}, inside ${n} bytes that start at byte ${pos}`);
      if (pos + n > length) throw new Need(pos + n);
    };
    const u32 = () => { need(4); pos += 4; return view.getUint32(pos - 4, true); };
    const u64 = (what) => {
      need(8);
      pos += 8;
      const v = view.getBigUint64(pos - 8, true);
      const most = fileSize === Infinity ? Number.MAX_SAFE_INTEGER : fileSize;
      if (v > BigInt(most)) fail(`${what} is ${v}, more than the file holds`);
      return Number(v);
    };
    const string = (what, keep = true) => {
      const n = u64(`the length of ${what}`);
      if (n > MAX_STRING) fail(`${what} is ${n} bytes long`);
      need(n);
      pos += n;
      if (!keep) return null;
      try {
        return utf8.decode(bytes.subarray(pos - n, pos));
      } catch (e) {
        return fail(`${what} is not UTF-8`);
      }
    };
    const scalar = (type) => {
      need(SCALAR_SIZE[type]);
      const at = pos;
      pos += SCALAR_SIZE[type];
      switch (type) {
        case 0: return view.getUint8(at);
        case 1: return view.getInt8(at);
        case 2: return view.getUint16(at, true);
        case 3: return view.getInt16(at, true);
        case 4: return view.getUint32(at, true);
        case 5: return view.getInt32(at, true);
        case 6: return view.getFloat32(at, true);
        case 7: {
          const b = view.getUint8(at);
          if (b > 1) fail(`a bool is ${b}`);
          return b === 1;
        }
        case 10: return Number(view.getBigUint64(at, true));
        case 11: return Number(view.getBigInt64(at, true));
        default: return view.getFloat64(at, true);
      }
    };
    const value = (type, what, depth) => {
      if (type === STRING) return string(what);
      if (type !== ARRAY) return scalar(type);
      if (depth >= MAX_NESTING) fail(`${what} nests arrays more than ${MAX_NESTING} deep`);
      const itemType = u32();
      if (itemType >= TYPES.length) fail(`${what} holds items of unknown type ${itemType}`);
      const count = u64(`the item count of ${what}`);
      const least = itemType === STRING ? 8 : itemType === ARRAY ? 12 : SCALAR_SIZE[itemType];
      if (pos + count * least > fileSize) fail(`${what} claims ${count} items, more than the file holds`);
      const keep = count <= SMALL_ARRAY;
      const items = keep ? [] : null;
      if (!keep && itemType !== STRING && itemType !== ARRAY) {   // fixed-size items: skip them in one step
        need(count * least);
        pos += count * least;
      } else {
        for (let i = 0; i < count; i++) {
          const item = itemType === STRING ? string(`item ${i} of ${what}`, keep)
            : value(itemType, `item ${i} of ${what}`, depth + 1);
          if (keep) items.push(item);
        }
      }
      return keep ? items : {type: TYPES[itemType], length: count};
    };

    need(4);
    if (String.fromCharCode(...bytes.subarray(0, 4)) !== 'GGUF') fail('it does not start with "GGUF"');
    pos = 4;
    out.version = u32();
    if (out.version !== 2 && out.version !== 3) fail(`version ${out.version} (2 and 3 are read)`);
    const nTensors = u64('the tensor count');
    const nKv = u64('the metadata count');
    if (24 + nKv * 13 + nTensors * 28 > fileSize) fail(`${nKv} keys and ${nTensors} tensors do not fit the file`);
    for (let i = 0; i < nKv; i++) {
      const key = string(`metadata key ${i}`);
      const type = u32();
      if (type >= TYPES.length) fail(`metadata ${JSON.stringify(key)} has unknown type ${type}`);
      out.metadata[key] = value(type, `metadata ${JSON.stringify(key)}`, 0);
    }
    out.complete = true;
    const tensors = [];
    for (let i = 0; i < nTensors; i++) {
      const name = string(`tensor name ${i}`);
      const nDims = u32();
      if (nDims < 1 || nDims > 4) fail(`tensor ${JSON.stringify(name)} has ${nDims} dimensions`);
      const shape = [];
      for (let d = 0; d < nDims; d++) shape.push(u64(`dimension ${d} of tensor ${JSON.stringify(name)}`));
      tensors.push({name, shape, type: u32(), offset: u64(`the offset of tensor ${JSON.stringify(name)}`)});
    }
    const alignment = out.metadata['general.alignment'] ?? 32;
    if (!Number.isInteger(alignment) || alignment < 1) fail(`general.alignment is ${alignment}`);
    out.tensors = tensors;
    out.dataOffset = Math.ceil(pos / alignment) * alignment;
  }

  // Reads through `read(start, end) -> {bytes, fileSize}` (bytes start..end of the file, or fewer at its end; fileSize
  // Infinity when unknown), asking for more only while the parser needs it: the first FIRST bytes, then at least twice
  // what it has, never past the budget.
  async function readHeader(read, budget = BUDGET) {
    let bytes = new Uint8Array(0);
    let fileSize = Infinity;
    let end = Math.min(FIRST, budget);
    for (;;) {
      const got = await read(bytes.length, end);
      fileSize = got.fileSize;
      const joined = new Uint8Array(bytes.length + got.bytes.length);
      joined.set(bytes);
      joined.set(got.bytes, bytes.length);
      const atEnd = got.bytes.length < end - bytes.length;   // the file (or the response) ended early
      bytes = joined;
      if (atEnd) fileSize = Math.min(fileSize, bytes.length);   // so each round reads more or ends
      const out = {version: null, fileSize, metadata: {}, complete: false, tensors: null, dataOffset: null,
                   bytesRead: bytes.length, bytes};
      try {
        parse(bytes, bytes.length, fileSize, out);
        return out;
      } catch (e) {
        if (!(e instanceof Need)) throw e;
        if (bytes.length >= budget) return out;   // as far as the budget goes
        end = Math.min(budget, Math.max(e.end, 2 * bytes.length));
      }
    }
  }

  // What tells one version of a file from another: its ETag, else its Last-Modified (null: neither, or hidden by CORS).
  const validator = (resp) => resp.headers.get('ETag') || resp.headers.get('Last-Modified') || null;

  // Bytes start..end of a URL: a Range request; a server that ignores Range (200) is read from its first byte and the
  // response cancelled once `end` bytes have come, so no more than that is downloaded either way.
  function urlReader(url) {
    return async (start, end) => {
      const resp = await fetch(url, {headers: {Range: `bytes=${start}-${end - 1}`}, cache: 'no-store'});
      let skip = 0;
      let fileSize = Infinity;
      if (resp.status === 206) {
        const range = /^bytes (\d+)-\d+\/(\d+|\*)$/.exec(resp.headers.get('Content-Range') || '');
        if (!range || Number(range[1]) !== start) throw new Error(`unexpected Content-Range from ${url}`);
        if (range[2] !== '*') fileSize = Number(range[2]);
      } else if (resp.ok) {
        skip = start;
        const length = resp.headers.get('Content-Length');
        if (length !== null && !resp.headers.get('Content-Encoding')) fileSize = Number(length);
      } else {
        throw new Error(`HTTP ${resp.status} for ${url}`);
      }
      const want = end - start;
      const bytes = new Uint8Array(want);
      let have = 0;
      const reader = resp.body.getReader();
      while (have < want) {
        const {done, value} = await reader.read();
        if (done) break;
        const part = value.subarray(Math.min(skip, value.length));
        skip -= value.length - part.length;
        const n = Math.min(part.length, want - have);
        bytes.set(part.subarray(0, n), have);
        have += n;
      }
      reader.cancel().catch(() => {});
      return {bytes: bytes.subarray(0, have), fileSize, tag: validator(resp)};
    };
  }

  const readUrl = (url, {budget = BUDGET} = {}) => readHeader(urlReader(url), budget);

  // A parameter count as GGUF size labels write it: 135M, 0.5B, 7B.
  function sizeLabel(n) {
    const [scale, unit] = n >= 1e12 ? [1e12, 'T'] : n >= 1e9 ? [1e9, 'B'] : n >= 1e6 ? [1e6, 'M'] : [1e3, 'K'];
    const x = n / scale;
    return `${x < 10 ? Number(x.toFixed(1)) : Math.round(x)}${unit}`;
  }

  const words = (s) => String(s).split(/[\s_-]+/).filter(Boolean);
  const same = (a, b) => a.toLowerCase() === b.toLowerCase();

  // The name people know a model by: general.name (else general.basename), less its fine-tune's words (the GGUF spec's
  // general.finetune: what the base was tuned toward, often training-run labels), then the size (general.size_label,
  // else the parameters counted from the tensor shapes) and Instruct where the file has a chat template (Base where
  // it has none), unless the name says so already. A word the file name spells with inner capitals ("SmolLM2" for
  // a converter's "Smollm2") takes that spelling. null when the header names nothing.
  function friendlyName(header, fileName = '') {
    const md = header.metadata;
    const named = typeof md['general.name'] === 'string' && md['general.name'].trim() ? md['general.name']
      : typeof md['general.basename'] === 'string' ? md['general.basename'] : '';
    let out = words(named);
    if (!out.length) return null;
    const tune = typeof md['general.finetune'] === 'string' ? words(md['general.finetune']) : [];
    const tail = out.slice(out.length - tune.length);
    if (tune.length && tune.length < out.length && tail.every((w, i) => same(w, tune[i]))) {
      out = out.slice(0, -tune.length);
    }
    const fileWords = words(fileName.replace(/\.gguf$/i, '').replace(/\./g, ' '));
    out = out.map((w) => fileWords.find((f) => same(f, w) && /^.+[A-Z]/.test(f)) || w);
    let size = typeof md['general.size_label'] === 'string' ? md['general.size_label'] : null;
    if (!size && header.tensors) {
      const params = header.tensors.reduce((sum, t) => sum + t.shape.reduce((a, b) => a * b, 1), 0);
      if (params) size = sizeLabel(params);
    }
    if (size) {
      const at = out.findIndex((w) => same(w, size));
      if (at >= 0) out[at] = size;
      else out.push(size);
    }
    if (header.complete) {
      const chat = Boolean(md['tokenizer.chat_template']);
      const says = chat ? /^(instruct|chat|it)$/i : /^base$/i;
      if (!out.some((w) => says.test(w))) out.push(chat ? 'Instruct' : 'Base');
    }
    return out.join(' ');
  }

  // Names read before, so that opening the page again reads no header: localStorage[NAMES_KEY] is {absolute URL:
  // {size, tag, name}} (tag: the ETag or Last-Modified its header came with; name null: the header is not readable),
  // at most NAMES_MAX URLs, the least recently read dropped first. No localStorage (a worker, storage off): no keeping.
  const NAMES_KEY = 'cera_web.model-names';
  const NAMES_MAX = 100;
  function keptNames() {
    try {
      const kept = JSON.parse(self.localStorage.getItem(NAMES_KEY));
      return kept && typeof kept === 'object' && !Array.isArray(kept) ? kept : {};
    } catch (e) {
      return {};
    }
  }
  function keepName(url, entry) {
    try {
      const kept = keptNames();
      delete kept[url];
      kept[url] = entry;   // last: the most recent
      const urls = Object.keys(kept);
      for (const old of urls.slice(0, Math.max(0, urls.length - NAMES_MAX))) delete kept[old];
      self.localStorage.setItem(NAMES_KEY, JSON.stringify(kept));
    } catch (e) { /* storage off or full: the name is read again next time */ }
  }

  // {size, tag} of the file at url now, from a HEAD request (null when the server does not say its size).
  async function probe(url) {
    try {
      const resp = await fetch(url, {method: 'HEAD', cache: 'no-store'});
      const length = resp.headers.get('Content-Length');
      if (!resp.ok || length === null || resp.headers.get('Content-Encoding')) return null;
      return {size: Number(length), tag: validator(resp)};
    } catch (e) {
      return null;
    }
  }

  // {name, file} of the model at url, read from its header; null when it cannot be read (the page then shows the
  // file name: a header that cannot be read never stops a load). size: the file's size when known (the served
  // models' list has it). A name read before is used again without reading the header while the file is the same:
  // the same size as given (no request at all), else the same size and tag as a HEAD request says; a changed file
  // is read again.
  async function describe(url, {size = null} = {}) {
    const key = new URL(url, self.location.href).href;
    const file = new URL(key).pathname.split('/').pop();
    const kept = keptNames()[key];
    if (kept && typeof kept.size === 'number') {
      const now = size != null ? {size, tag: null} : await probe(key);
      if (now && now.size === kept.size && (!now.tag || !kept.tag || now.tag === kept.tag)) {
        return typeof kept.name === 'string' ? {name: kept.name, file} : null;
      }
    }
    let first = null;   // the first response: the file's size and tag
    const read = urlReader(key);
    const keep = (name) => {
      if (first && Number.isFinite(first.fileSize)) keepName(key, {size: first.fileSize, tag: first.tag, name});
    };
    try {
      const name = friendlyName(await readHeader(async (start, end) => {
        const got = await read(start, end);
        first = first || got;
        return got;
      }), file);
      keep(name);
      return name ? {name, file} : null;
    } catch (e) {
      if (e instanceof FormatError) keep(null);   // not a GGUF file: not read again while it stays the same
      return null;
    }
  }

  self.CeraGGUFMeta = {readUrl, readHeader: (read, {budget = BUDGET} = {}) => readHeader(read, budget), friendlyName, describe, sizeLabel, FormatError, BUDGET, FIRST, NAMES_KEY};
})();
