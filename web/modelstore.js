// cera_web model store: downloads GGUF files with progress and keeps them in the browser's origin-private file
// system (OPFS), checked against a sidecar of SHA-256 hashes, so a reload does not download a model again.
//
// A classic script that defines one global, `CeraModelStore`. Load it with importScripts('/web/modelstore.js') in a
// classic worker (web/worker.js), or with `await import('/web/modelstore.js')` in a module worker or page (PyScript's
// workers; the import runs it for its side effect). It works on the main thread too, except that reading a cached
// file (or a server's file by Range requests) for upload then needs the whole file in memory (the engine's BlobSource
// and RangeSource read synchronously, which only workers can).
//
// Layout, in OPFS directory `cera_web-models/`:
//   <id>.gguf   the model bytes (id: the first 32 hex digits of SHA-256 of the absolute URL)
//   <id>.json   the sidecar, written after the bytes: {format: 1, url, name, size, chunk, sha256: [hex per chunk],
//               etag, lastModified, stored}. An entry without a sidecar is an interrupted download and is removed.
// Integrity: SHA-256 of every `chunk` bytes (crypto.subtle has no incremental hash; per-chunk hashes also say where a
// file is damaged). Checked on every load from the cache: a mismatch deletes the entry and downloads it again.
//
// API (all async):
//   CeraModelStore.open(url, {onProgress, onStatus, checkHeader, cache})
//        -> {blob, url, buffer, name, size, fromCache, cached, note}
//      Returns the model's bytes as a Blob (a File in OPFS: on disk, not in memory) when it is cached. When it cannot
//      be (no OPFS, storage full, or cache is false) and the server answers Range requests, it returns the absolute
//      `url` instead, to be read a part at a time (cera_web.gpu.browser.RangeSource): no whole file in memory, so
//      models past 4 GB load too. Only from a server without Range requests is a model downloaded into one
//      ArrayBuffer (`buffer`), and only up to MEMORY_MOST bytes.
//      onProgress(stage, done, total): stage 'download' or 'verify' (bytes; total 0 when unknown). Hashing streams:
//      the sidecar's SHA-256 is taken per CHUNK as the bytes arrive, and checked per CHUNK read back.
//      onStatus(text): a human-readable note (cache hit, corrupted entry, not cached because ...).
//      checkHeader(prefix: Uint8Array, total): called as the first bytes arrive; returns 0 when it has seen enough,
//      or the number of bytes it needs (it is called again once they are there); throws to refuse the model, which
//      cancels the download (so a model that cannot run is refused after a few MB, not after all of it).
//   CeraModelStore.list() -> [{url, name, size, stored}]       complete entries, newest first
//   CeraModelStore.remove(url) -> boolean                        delete an entry (false: there was none)
//   CeraModelStore.estimate() -> {usage, quota} | null            the origin's storage use and quota
// Errors are Error objects with a `kind` ('DownloadError', 'CacheError', or whatever checkHeader threw).
'use strict';

(() => {
  const DIR = 'cera_web-models';
  const CHUNK = 8 << 20;              // bytes per hash; caching, a download holds this block and one READ at once
  const PROGRESS_MS = 100;            // at most one progress call per interval (plus the first and the last)
  const HEADER_FIRST = 1 << 20;       // bytes to show checkHeader first
  const MEMORY_MOST = 2 ** 31;        // the largest download held in one ArrayBuffer (a server without Range requests)

  class StoreError extends Error {
    constructor(kind, message) { super(message); this.kind = kind; }
  }

  const hex = (buf) => Array.from(new Uint8Array(buf), (b) => b.toString(16).padStart(2, '0')).join('');
  const sha256 = async (data) => hex(await crypto.subtle.digest('SHA-256', data));
  const READ = 1 << 20;               // bytes per read of a download (one buffer, reused, where the browser allows)

  // Free an ArrayBuffer's bytes now rather than when the garbage collector comes to it (detach it): a download or a
  // check goes through gigabytes of them, and V8 let hundreds of MB wait. Nothing may use it afterwards.
  const release = (buf) => { if (buf.transfer && !buf.detached) buf.transfer(0); };
  const mb = (n) => `${(n / 1e6).toFixed(1)} MB`;

  function absolute(url) {
    return new URL(url, self.location.href).href;
  }

  function nameOf(url) {
    const path = new URL(url).pathname;
    return decodeURIComponent(path.slice(path.lastIndexOf('/') + 1)) || 'model.gguf';
  }

  async function idOf(url) {
    return (await sha256(new TextEncoder().encode(url))).slice(0, 32);
  }

  // The cache directory, or null when this browser has no OPFS (or refuses it, e.g. some private modes).
  async function directory() {
    try {
      if (!navigator.storage || !navigator.storage.getDirectory) return null;
      const root = await navigator.storage.getDirectory();
      return await root.getDirectoryHandle(DIR, {create: true});
    } catch (e) {
      return null;
    }
  }

  async function fileOrNull(dir, name) {
    try {
      return await (await dir.getFileHandle(name)).getFile();
    } catch (e) {
      return null;
    }
  }

  async function removeQuietly(dir, name) {
    try { await dir.removeEntry(name); } catch (e) { /* already gone */ }
  }

  async function readSidecar(dir, id) {
    const file = await fileOrNull(dir, `${id}.json`);
    if (!file) return null;
    try {
      const meta = JSON.parse(await file.text());
      return meta && meta.format === 1 && Array.isArray(meta.sha256) ? meta : null;
    } catch (e) {
      return null;
    }
  }

  function throttled(onProgress) {
    let last = 0;
    return (stage, done, total, force) => {
      const now = performance.now();
      if (onProgress && (force || now - last >= PROGRESS_MS)) {
        last = now;
        onProgress(stage, done, total);
      }
    };
  }

  // Check a cached file against its sidecar: '' when it is whole, else what is wrong.
  async function verify(file, meta, progress) {
    if (file.size !== meta.size) return `it holds ${file.size} bytes, not ${meta.size}`;
    const chunks = Math.ceil(meta.size / meta.chunk);
    if (meta.sha256.length !== chunks) return 'its checksum list does not match its size';
    progress('verify', 0, meta.size, true);
    for (let i = 0; i < chunks; i++) {
      const start = i * meta.chunk;
      const data = await file.slice(start, Math.min(start + meta.chunk, meta.size)).arrayBuffer();
      const n = data.byteLength;
      const sum = await sha256(data);     // digest copies its input: the chunk can go
      release(data);
      if (sum !== meta.sha256[i]) {
        return `bytes ${start}-${start + n - 1} (chunk ${i + 1} of ${chunks}) do not match their SHA-256`;
      }
      progress('verify', start + n, meta.size, i === chunks - 1);
    }
    return '';
  }

  // Where downloaded bytes go: an OPFS file (cache) or, from a server without Range requests, one ArrayBuffer.
  class MemorySink {
    constructor(total) {
      this.parts = [];
      this.buf = total ? MemorySink.allocate(total) : null;
      this.size = 0;
    }
    static allocate(n) {
      if (n > MEMORY_MOST) {
        throw new StoreError('DownloadError',
          `The model file is ${(n / 1e9).toFixed(2)} GB and could not be kept in the browser's storage, and its ` +
          `server does not answer Range requests, so it would have to be held in memory whole (at most ` +
          `${(MEMORY_MOST / 1e9).toFixed(2)} GB). Free some disk space for the cache, or serve it with Range support.`);
      }
      try {
        return new Uint8Array(n);
      } catch (e) {   // RangeError: the browser would not give this much memory to one buffer
        throw new StoreError('DownloadError',
          `The model file is ${(n / 1e9).toFixed(2)} GB, more than this browser can hold in memory (${e.message}), ` +
          'and it could not be kept in the browser\'s storage instead. Try a smaller model, free some disk space, ' +
          'or use a browser or device with more memory.');
      }
    }
    async write(bytes) {
      if (this.size + bytes.length > MEMORY_MOST) MemorySink.allocate(this.size + bytes.length);   // throws
      if (this.buf && this.size + bytes.length > this.buf.length) {   // more than announced: keep chunks instead
        this.parts.push(this.buf.subarray(0, this.size));
        this.buf = null;
      }
      if (this.buf) this.buf.set(bytes, this.size); else this.parts.push(bytes.slice());
      this.size += bytes.length;
    }
    async finish() {
      if (this.buf) return {buffer: this.size === this.buf.length ? this.buf.buffer : this.buf.slice(0, this.size).buffer};
      const joined = MemorySink.allocate(this.size);
      let at = 0;
      for (const p of this.parts) { joined.set(p, at); at += p.length; }
      return {buffer: joined.buffer};
    }
    async abort() {}
  }

  class CacheSink {
    constructor(dir, id, meta, writable) {
      Object.assign(this, {dir, id, meta, writable});
      this.block = new Uint8Array(CHUNK);   // the chunk being filled: written and hashed when full
      this.fill = 0;
      this.size = 0;
    }
    static async create(dir, id, meta) {
      const handle = await dir.getFileHandle(`${id}.gguf`, {create: true});
      // createWritable writes to a swap file that replaces the entry on close: a cut download leaves nothing behind
      return new CacheSink(dir, id, meta, await handle.createWritable({keepExistingData: false}));
    }
    async flushBlock() {
      if (!this.fill) return;
      const part = this.block.subarray(0, this.fill);
      this.meta.sha256.push(await sha256(part));
      await this.writable.write(part);
      this.fill = 0;
    }
    async write(bytes) {
      let at = 0;
      while (at < bytes.length) {
        const n = Math.min(bytes.length - at, CHUNK - this.fill);
        this.block.set(bytes.subarray(at, at + n), this.fill);
        this.fill += n;
        at += n;
        if (this.fill === CHUNK) await this.flushBlock();
      }
      this.size += bytes.length;
    }
    async finish() {
      await this.flushBlock();
      await this.writable.close();
      this.meta.size = this.size;
      this.meta.stored = new Date().toISOString();
      const side = await (await this.dir.getFileHandle(`${this.id}.json`, {create: true})).createWritable();
      await side.write(JSON.stringify(this.meta));
      await side.close();
      // ask the browser not to evict the cache under storage pressure (it decides; a refusal changes nothing)
      if (navigator.storage.persist) navigator.storage.persist().catch(() => {});
      return {blob: await (await this.dir.getFileHandle(`${this.id}.gguf`)).getFile()};
    }
    async abort() {
      try { await this.writable.abort(); } catch (e) { /* closed already */ }
      await removeQuietly(this.dir, `${this.id}.gguf`);
    }
  }

  async function fetchResponse(url) {
    let resp;
    try {
      resp = await fetch(url);
    } catch (e) {
      throw new StoreError('DownloadError', `Could not fetch the model from ${url}: ${e.message}. ` +
        'Check the address; a model on another site must allow this page to read it (CORS).');
    }
    if (!resp.ok) {
      throw new StoreError('DownloadError',
        `Could not fetch the model from ${url}: HTTP ${resp.status} ${resp.statusText}.`);
    }
    return resp;
  }

  // Is there room for `total` more bytes in the origin's storage? ('' when yes, else why not.)
  async function roomFor(total) {
    if (!total) return 'its size is unknown';
    try {
      const {usage = 0, quota = Infinity} = await navigator.storage.estimate();
      if (usage + total * 1.02 > quota) {
        return `it needs ${mb(total)} but the browser allows this site ${mb(Math.max(0, quota - usage))} more`;
      }
    } catch (e) { /* no estimate: try, and fall back if a write fails */ }
    return '';
  }

  // A reader of the response body and how to read the next chunk. Where the body is a byte stream (Chromium's is) a
  // BYOB reader fills one READ-byte buffer again and again; else the default reader, each chunk detached once the
  // sink has copied it. Either way no chunk waits for the garbage collector.
  function bodyReader(resp) {
    try {
      const reader = resp.body.getReader({mode: 'byob'});
      let buf = new ArrayBuffer(READ);
      return {reader, next: async () => {
        const got = await reader.read(new Uint8Array(buf));   // buf is detached; got.value is over its bytes
        if (got.value) buf = got.value.buffer;
        return got;
      }, done: () => {}};
    } catch (e) {     // not a byte stream
      const reader = resp.body.getReader();
      const whole = (v) => v.byteOffset === 0 && v.byteLength === v.buffer.byteLength;   // its own buffer
      return {reader, next: () => reader.read(), done: (value) => { if (whole(value)) release(value.buffer); }};
    }
  }

  // Stream the response into `sink`, reporting progress and showing checkHeader the first bytes.
  async function pump(resp, sink, total, progress, checkHeader) {
    const {reader, next, done: consumed} = bodyReader(resp);
    let head = checkHeader ? new Uint8Array(0) : null;   // the first bytes, until checkHeader is satisfied
    let need = HEADER_FIRST;
    let seen = null;      // the bytes checkHeader was satisfied with
    let done = 0;
    progress('download', 0, total, true);
    try {
      for (;;) {
        const {done: finished, value} = await next();
        if (finished) break;
        if (head) {
          const grown = new Uint8Array(head.length + value.length);
          grown.set(head);
          grown.set(value, head.length);
          head = grown;
        }
        await sink.write(value);          // the sink copies the bytes
        done += value.length;
        consumed(value);
        progress('download', done, total);
        if (head && (head.length >= need || (total && head.length >= total))) {
          need = checkHeader(head, total || 0);   // throws to refuse the model
          if (!need) [seen, head] = [head, null];
          else if (need <= head.length) throw new StoreError('CacheError', `checkHeader asked for ${need} bytes it has`);
        }
      }
      // The file was shorter than what checkHeader asked for, or its size was not announced: check it again with
      // the size it has (a file cut short is refused here, before it is kept).
      if (head) checkHeader(head, done);
      else if (seen && done !== total) checkHeader(seen, done);
    } catch (e) {
      try { await reader.cancel(); } catch (e2) { /* already closed */ }
      throw e;
    }
    progress('download', done, total || done, true);
    return done;
  }

  // Bytes start..end-1 of url by one Range request (the whole answer checked: status 206 and its length).
  async function rangeBytes(url, start, end) {
    let resp;
    try {
      resp = await fetch(url, {headers: {Range: `bytes=${start}-${end - 1}`}, cache: 'no-store'});
    } catch (e) {
      throw new StoreError('DownloadError', `Could not read ${url}: ${e.message}.`);
    }
    const bytes = resp.status === 206 ? new Uint8Array(await resp.arrayBuffer()) : null;
    if (!bytes || bytes.length !== end - start) {
      if (!bytes && resp.body) resp.body.cancel().catch(() => {});
      throw new StoreError('DownloadError', `The server did not answer a Range request for bytes ${start}-${end - 1} ` +
        `of ${url} (HTTP ${resp.status}).`);
    }
    return bytes;
  }

  // Show checkHeader the first bytes of a file read by Range requests, as many as it asks for.
  async function checkRanged(url, total, checkHeader) {
    let head = new Uint8Array(0);
    let need = Math.min(HEADER_FIRST, total);
    for (;;) {
      const more = await rangeBytes(url, head.length, need);
      const grown = new Uint8Array(need);
      grown.set(head);
      grown.set(more, head.length);
      head = grown;
      need = Math.min(checkHeader(head, total), total);   // throws to refuse the model
      if (!need) return;
      if (need <= head.length) throw new StoreError('CacheError', `checkHeader asked for ${need} bytes it has`);
    }
  }

  async function open(url, {onProgress = null, onStatus = null, checkHeader = null, cache = true} = {}) {
    url = absolute(url);
    const name = nameOf(url);
    const progress = throttled(onProgress);
    const note = (text) => { if (onStatus) onStatus(text); };
    const dir = cache ? await directory() : null;
    const id = await idOf(url);

    if (dir) {
      const meta = await readSidecar(dir, id);
      const file = meta && await fileOrNull(dir, `${id}.gguf`);
      if (meta && file) {
        note(`Checking the cached copy of ${name}…`);
        const problem = await verify(file, meta, progress);
        if (!problem) {
          return {blob: file, name, size: file.size, fromCache: true, cached: true,
                  note: `Loaded ${name} from the browser cache (no download).`};
        }
        note(`The cached copy of ${name} is damaged (${problem}); downloading it again.`);
      }
      // a damaged entry, or leftovers of an interrupted download
      await removeQuietly(dir, `${id}.json`);
      await removeQuietly(dir, `${id}.gguf`);
    }

    const resp = await fetchResponse(url);
    const total = Number(resp.headers.get('Content-Length')) || 0;
    let why = cache ? (dir ? await roomFor(total) : 'this browser offers no origin-private file system') : 'caching is off';
    let sink = null;
    if (!why) {
      const meta = {format: 1, url, name, size: total, chunk: CHUNK, sha256: [],
                    etag: resp.headers.get('ETag'), lastModified: resp.headers.get('Last-Modified')};
      try {
        sink = await CacheSink.create(dir, id, meta);
      } catch (e) {
        why = `the browser refused to store it (${e.message})`;
      }
    }
    if (!sink && total && resp.headers.get('Accept-Ranges') === 'bytes') {
      // not cached, but readable a part at a time: the engine reads it by Range requests as it uploads
      await resp.body.cancel().catch(() => {});
      if (checkHeader) await checkRanged(url, total, checkHeader);
      return {url, name, size: total, fromCache: false, cached: false,
              note: `Reading ${name} from its server a part at a time (not cached: ${why}).`};
    }
    try {
      if (!sink) sink = new MemorySink(total);
    } catch (e) {
      await resp.body.cancel().catch(() => {});
      throw e;
    }
    try {
      await pump(resp, sink, total, progress, checkHeader);
      const out = await sink.finish();
      const cached = sink instanceof CacheSink;
      return {...out, name, size: sink.size, fromCache: false, cached,
              note: cached ? `Downloaded ${name} and kept it in the browser cache.`
                           : `Downloaded ${name} (not cached: ${why}).`};
    } catch (e) {
      await sink.abort();
      if (e.kind) throw e;
      if (sink instanceof CacheSink && e.name === 'QuotaExceededError') {
        note(`The browser's storage is full; reading ${name} from its server instead, without caching it.`);
        return open(url, {onProgress, onStatus, checkHeader, cache: false});
      }
      throw new StoreError('DownloadError', `Downloading ${url} failed: ${e.message}.`);
    }
  }

  async function list() {
    const dir = await directory();
    if (!dir) return [];
    const entries = [];
    for await (const [fname] of dir.entries()) {
      if (!fname.endsWith('.json')) continue;
      const id = fname.slice(0, -5);
      const meta = await readSidecar(dir, id);
      const file = meta && await fileOrNull(dir, `${id}.gguf`);
      if (file) entries.push({url: meta.url, name: meta.name, size: file.size, stored: meta.stored});
    }
    return entries.sort((a, b) => (a.stored < b.stored ? 1 : -1));
  }

  async function remove(url) {
    const dir = await directory();
    if (!dir) return false;
    const id = await idOf(absolute(url));
    const existed = !!(await fileOrNull(dir, `${id}.json`) || await fileOrNull(dir, `${id}.gguf`));
    await removeQuietly(dir, `${id}.json`);
    await removeQuietly(dir, `${id}.gguf`);
    return existed;
  }

  async function estimate() {
    try {
      const {usage, quota} = await navigator.storage.estimate();
      return {usage, quota};
    } catch (e) {
      return null;
    }
  }

  self.CeraModelStore = {open, list, remove, estimate, StoreError, CHUNK};
})();
