// cera_web page worker: runs Pyodide and the cera_web engine off the main thread, so the page never freezes.
//
// A classic (non-module) dedicated worker: `new Worker('/web/worker.js')`. It pulls Pyodide and the model store in
// with importScripts, which works in every browser that has WebGPU in workers, with no bundler or module-worker
// support needed.
//
// Assets it fetches (from the site that serves this file, laid out as serve.py serves them):
//   /pyodide/                    Pyodide core (indexURL); numpy comes from its lock file via loadPackage
//   /pyodide/wheels/index.json   {"wheels": [names]}: the wheels to unpack into site-packages, from the same folder:
//                                cera_web's own (its shaders inside; the same wheel `pip wheel .` gives, which the
//                                notebooks install with micropip) and the pure-Python jinja2 and markupsafe
//   /web/modelstore.js           downloads with progress, and the browser cache of models (OPFS + SHA-256 sidecar)
//   the model URL                any GGUF URL the page asks for (same origin, or a site that allows it by CORS)
//
// Where model bytes go: a download is streamed into the browser's origin-private file system (the cache), checked
// as its first bytes arrive (header, architecture, the device's buffer limits: a model that cannot run is refused
// before most of it is downloaded), and then uploaded to GPU buffers a slice at a time straight from that file
// (cera_web.gpu.browser.BlobSource): neither the wasm heap nor the JS heap ever holds the whole model, so models past
// 4 GB load too. A picked or dropped file is uploaded the same way from the File. When the cache is unavailable (no
// OPFS, storage full) the model is read from its server by Range requests a slice at a time (RangeSource); only
// from a server without Range requests is a download held in one ArrayBuffer (up to 2 GiB; modelstore.js).
//
// Protocol: the message kinds and their fields are declared once, in cera_web/protocol.py (REQUESTS: page → worker,
// EVENTS: worker → page, STOP_REASONS); tests/test_protocol.py checks this file, app.js and cera.js against it. The
// worker handles 'load', 'cache-list', 'cache-delete', 'cancel' and the conversations' kept state ('snapshot-save',
// 'snapshot-restore', 'snapshot-delete': see "the conversations' state" below) itself (WORKER_KINDS); every other
// request goes to Python as it is (webapp.handle), which checks it against the table and answers it. Requests run one
// at a time, in order (one GPU), except those handled at once ('cancel', 'cache-list').
'use strict';

// Relative to this file (web/worker.js), so a site may serve the whole tree under a folder of its own. Started from a
// page of another origin, cera.js runs this file through a same-origin blob worker that sets CERA_WORKER_URL to this
// file's real address first (a blob's own address is no base for these).
const WORKER_URL = self.CERA_WORKER_URL || self.location.href;
const PYODIDE_URL = new URL('../pyodide/', WORKER_URL).href;
const WHEELS_URL = PYODIDE_URL + 'wheels/';

importScripts(PYODIDE_URL + 'pyodide.js');   // defines self.loadPyodide
importScripts(new URL('modelstore.js', WORKER_URL).href);   // defines self.CeraModelStore
importScripts(new URL('ggufmeta.js', WORKER_URL).href);     // defines self.CeraGGUFMeta (a preflight's header)

const post = (msg) => self.postMessage(msg);
const status = (text) => post({type: 'status', text});

// An error raised on the JS side, with a kind the page shows like a Python error class name.
class WorkerError extends Error {
  constructor(kind, message) { super(message); this.kind = kind; }
}

let webapp = null;     // the cera_web.webapp module (a PyProxy) once Python is up
let booting = null;    // the boot promise, shared by every message until it settles

// WebGPU must be there before anything heavy is fetched. The page shows the message (one sentence for a person, next
// to the offer to run on the CPU); the details a developer needs go to the console.
async function checkWebGPU() {
  if (!('gpu' in navigator) || !navigator.gpu) {
    console.warn('cera_web: navigator.gpu is missing in the worker (headless Chromium needs --enable-unsafe-webgpu)');
    throw new WorkerError('GPUUnavailableError', 'This browser does not offer WebGPU, so the model cannot use the GPU.');
  }
  let adapter = null;
  try {
    adapter = await navigator.gpu.requestAdapter();
  } catch (e) {
    adapter = null;
  }
  if (!adapter) {
    console.warn('cera_web: navigator.gpu.requestAdapter() returned null (chrome://gpu says why)');
    throw new WorkerError('GPUUnavailableError',
      'This browser has WebGPU but offers no GPU to it (hardware acceleration may be switched off).');
  }
  const info = adapter.info || {};
  return [info.vendor, info.architecture, info.description].filter(Boolean).join(' ') || 'unknown adapter';
}

async function fetchOk(url, what) {
  let resp;
  try {
    resp = await fetch(url);
  } catch (e) {
    throw new WorkerError('DownloadError', `Could not fetch ${what} from ${url}: ${e.message}.`);
  }
  if (!resp.ok) {
    throw new WorkerError('DownloadError', `Could not fetch ${what} from ${url}: HTTP ${resp.status} ${resp.statusText}.`);
  }
  return resp;
}

// cpu: boot without WebGPU (the engine then runs on the CPU); else stop at once, saying what is missing.
async function boot(cpu) {
  if (cpu) {
    status('Loading Pyodide (the model will run on the CPU)…');
  } else {
    status('Checking WebGPU…');
    const adapter = await checkWebGPU();
    status(`WebGPU adapter: ${adapter}. Loading Pyodide…`);
  }
  const pyodide = await loadPyodide({
    indexURL: PYODIDE_URL,
    stdout: (s) => console.log(s),
    stderr: (s) => console.warn(s),
  });
  status('Loading numpy…');
  await pyodide.loadPackage('numpy', {messageCallback: () => {}});
  status('Installing Python packages…');
  const sitePackages = pyodide.runPython("import sysconfig; sysconfig.get_paths()['purelib']");
  const {wheels} = await (await fetchOk(WHEELS_URL + 'index.json', 'the list of Python wheels')).json();
  for (const wheel of wheels) {   // cera_web's wheel among them
    const resp = await fetchOk(WHEELS_URL + wheel, 'a Python wheel');
    pyodide.unpackArchive(await resp.arrayBuffer(), 'wheel', {extractDir: sitePackages});
  }
  const module = pyodide.pyimport('cera_web.webapp');
  module.init((json) => {
    const msg = JSON.parse(json);
    // the wasm heap (it only grows): with the GPU memory in 'done', the page shows that generations leak nothing
    if ((msg.type === 'done' || msg.type === 'ready') && msg.memory) {
      msg.memory.wasm_heap = pyodide._module.HEAPU8.byteLength;
    }
    post(msg);
  });
  post({type: 'settings', ...JSON.parse(module.settings_form())});
  webapp = module;
}

function ensureBooted(cpu) {
  if (!booting) {
    booting = boot(!!cpu).catch((e) => { booting = null; throw e; });   // a failed boot may be retried by the next load
  }
  return booting;
}

async function postCache() {
  const [entries, estimate, kept] = await Promise.all([CeraModelStore.list(), CeraModelStore.estimate(),
                                                       snapshotFiles()]);
  post({type: 'cache', entries, usage: estimate ? estimate.usage : null, quota: estimate ? estimate.quota : null,
        snapshots: {count: kept.length, bytes: kept.reduce((n, f) => n + f.size, 0)}});
}

// The model at msg.url (cache or download) or msg.file, loaded into the engine. webapp posts 'progress' and then
// 'ready' or 'error'; it returns whether the load succeeded.
async function load(msg) {
  const backend = msg.backend || 'auto';
  await ensureBooted(backend === 'cpu');
  if (!await webapp.prepare(msg.limits ? JSON.stringify(msg.limits) : '', backend)) return;   // it posted the error
  if (msg.file) {
    status(`Reading ${msg.file.name}…`);
    post({type: 'notice', text: `Loading ${msg.file.name} from this computer (${(msg.file.size / 1e6).toFixed(1)} MB; not cached).`});
    await webapp.load_blob(msg.file, msg.file.name, 'file');
    return;
  }
  const name = new URL(msg.url, self.location.href).pathname.split('/').pop() || msg.url;
  status(`Getting ${name}…`);
  const checkHeader = (prefix, total) => {
    const reply = JSON.parse(webapp.check_header(prefix, total, name));
    if (reply.error) throw new WorkerError(reply.error.kind, reply.error.message);
    return reply.need || 0;
  };
  const got = await CeraModelStore.open(msg.url, {
    onProgress: (stage, done, total) => post({type: 'progress', stage, done, total}),
    onStatus: (text) => post({type: 'notice', text}),
    checkHeader,
    cache: msg.cache !== false,
  });
  post({type: 'notice', text: got.note});
  status('Loading the model…');
  const origin = got.fromCache ? 'cache' : 'download';
  const ok = got.blob ? await webapp.load_blob(got.blob, got.name, origin)
    : got.url ? await webapp.load_url(got.url, got.size, got.name, 'server')
      : await webapp.load(got.buffer, got.name, origin);
  if (got.cached) await postCache();   // a new entry (or a checked one) to list
  return ok;
}

// Will the model at msg.url (or msg.file) run here? Its header only (HTTP Range requests, or the File's first bytes:
// ggufmeta.js), the storage quota (navigator.storage.estimate), then Python's preflight (cera_web/preflight.py:
// memory, the fit with a probe allocation released at once, the context a load would take, the speed estimated
// from micro-benchmarks measured once a worker). Answered with one 'preflight' message, never an 'error'.
// Bytes start..end of url by one Range request; a server that answers with the whole file is not read on.
async function rangeBytes(url, start, end) {
  const resp = await fetch(url, {headers: {Range: `bytes=${start}-${end - 1}`}, cache: 'no-store'});
  if (resp.status !== 206) {
    if (resp.body) resp.body.cancel().catch(() => {});
    throw new WorkerError('DownloadError', `the server did not answer a Range request for ${url}`);
  }
  return new Uint8Array(await resp.arrayBuffer());
}

async function preflight(msg) {
  const url = msg.url ?? null;
  const file = msg.file ? msg.file.name : null;
  try {
    await ensureBooted(msg.backend === 'cpu');
    const header = msg.file
      ? await CeraGGUFMeta.readHeader(async (start, end) => ({
        bytes: new Uint8Array(await msg.file.slice(start, end).arrayBuffer()), fileSize: msg.file.size}))
      : await CeraGGUFMeta.readUrl(msg.url);
    if (!header.complete || header.tensors === null) {
      throw new WorkerError('GGUFFormatError', `its header is longer than the ${CeraGGUFMeta.BUDGET >> 20} MiB read`);
    }
    const estimate = await CeraModelStore.estimate();
    const name = file || new URL(msg.url, self.location.href).pathname.split('/').pop();
    let bytes = header.bytes;
    let reply;
    for (let round = 0; round < 4; round++) {   // Python's parser may want a few bytes more (the data's alignment)
      reply = JSON.parse(await webapp.preflight(bytes, Number.isFinite(header.fileSize) ? header.fileSize : 0,
        name, msg.limits ? JSON.stringify(msg.limits) : '', msg.backend || 'auto', msg.context ?? null,
        estimate ? JSON.stringify({usage: estimate.usage, quota: estimate.quota}) : ''));
      if (!reply.need) break;
      if (reply.need > CeraGGUFMeta.BUDGET) throw new WorkerError('GGUFFormatError', 'its header is too long to read');
      const more = msg.file ? new Uint8Array(await msg.file.slice(bytes.length, reply.need).arrayBuffer())
        : await rangeBytes(msg.url, bytes.length, reply.need);
      const joined = new Uint8Array(bytes.length + more.length);
      joined.set(bytes);
      joined.set(more, bytes.length);
      bytes = joined;
    }
    if (reply.error) throw new WorkerError(reply.error.kind, reply.error.message);
    if (!reply.report) throw new WorkerError('GGUFFormatError', 'its header could not be read whole');
    post({type: 'preflight', url, file, report: reply.report, summary: reply.summary, lines: reply.lines});
  } catch (e) {
    post({type: 'preflight', url, file, error: {kind: e.kind || e.name || 'Error', message: e.message || String(e)}});
  }
}

// -- the conversations' state, kept across reloads (the prompt cache that survives) -----------------------------------
//
// OPFS folder `cera_web-kv/`: one file per (conversation, model), `<conversation id>.<model key>.snap`, holding what
// ChatSession.save() gives (cera_web/snapshot.py: the messages, the token ids and their KV / conv state, the model's
// identity, cache type and context size, a CRC-32 of the state); the model key is webapp.snapshot_model(). `uses.json`
// {file name: last use} orders them for eviction: a save or a restore is a use. The page asks for each: snapshot-save
// after every chat turn (after its 'done', so the reply never waits for it), snapshot-restore when it shows a
// conversation (a reload, a conversation switch, a model switch), snapshot-delete with the conversation. The bytes
// cross from Python as a buffer (no JSON, no base64). Saving never fails a reply: storage errors end in a 'notice'.
const KV_DIR = 'cera_web-kv';
const KV_USES = 'uses.json';
const KV_NAME = /^[\w-]{1,64}$/;   // a conversation id the page made (it names files)
const kvUses = {map: null, last: 0};   // uses.json as read (null: not yet), and the last use stamp given

// The folder (create: made when missing), or null: none yet, or no OPFS here (or refused: then nothing is kept).
async function kvDir(create = true) {
  try {
    return await (await navigator.storage.getDirectory()).getDirectoryHandle(KV_DIR, {create});
  } catch (e) {
    return null;
  }
}

// [{name, size, used}] of the kept snapshots, oldest use first.
async function snapshotFiles(dir) {
  dir = dir || await kvDir(false);
  if (!dir) return [];
  const uses = await readUses(dir);
  const files = [];
  for await (const [name, handle] of dir.entries()) {
    if (!name.endsWith('.snap') || handle.kind !== 'file') continue;
    try {
      const file = await handle.getFile();
      files.push({name, size: file.size, used: Math.max(uses[name] || 0, file.lastModified)});
    } catch (e) { /* removed meanwhile */ }
  }
  return files.sort((a, b) => a.used - b.used);
}

async function readUses(dir) {
  if (!kvUses.map) {
    try {
      const kept = JSON.parse(await (await (await dir.getFileHandle(KV_USES)).getFile()).text());
      kvUses.map = kept && typeof kept === 'object' ? kept : {};
    } catch (e) {
      kvUses.map = {};   // none yet, or damaged: the files' times order them
    }
  }
  return kvUses.map;
}

// Mark file `name` used now (forget: drop it from the list), and write uses.json (best effort: the files' times are
// the fallback).
async function markUse(dir, name, forget = false) {
  const uses = await readUses(dir);
  if (forget) delete uses[name];
  else uses[name] = kvUses.last = Math.max(Date.now(), kvUses.last + 1);
  try {
    const w = await (await dir.getFileHandle(KV_USES, {create: true})).createWritable();
    await w.write(JSON.stringify(uses));
    await w.close();
  } catch (e) { /* storage full: the order falls back to the files' times */ }
}

async function removeSnapshot(dir, name) {
  try { await dir.removeEntry(name); } catch (e) { /* already gone */ }
  await markUse(dir, name, true);
}

// The loaded model's key in the names of conversation's files ('' when nothing can be kept: no model, a bad id).
const kvKey = (conversation) => (webapp && KV_NAME.test(conversation || '') ? webapp.snapshot_model() : '');
const sizeText = (n) => (n >= 1e6 ? `${(n / 1e6).toFixed(1)} MB` : `${(n / 1e3).toFixed(1)} kB`);

// Keep `data` as snapshot file `name`, first removing the least recently used others until everything fits in `cap`
// bytes. Returns '' when kept, else why not (one line); a write that fails leaves no file of that name.
async function keepSnapshot(dir, name, data, cap) {
  if (data.byteLength > cap) {
    await removeSnapshot(dir, name);   // an older state of it would be the one restored: drop it too
    return `it takes ${sizeText(data.byteLength)}, more than the ${sizeText(cap)} kept conversations may use`;
  }
  const others = (await snapshotFiles(dir)).filter((f) => f.name !== name);
  let total = data.byteLength + others.reduce((n, f) => n + f.size, 0);
  for (const f of others) {   // oldest use first
    if (total <= cap) break;
    await removeSnapshot(dir, f.name);
    total -= f.size;
  }
  let w = null;
  try {
    w = await (await dir.getFileHandle(name, {create: true})).createWritable();   // replaced whole on close
    await w.write(data);
    await w.close();
  } catch (e) {
    if (w) { try { await w.abort(); } catch (e2) { /* closed already */ } }
    await removeSnapshot(dir, name);
    return e.name === 'QuotaExceededError' ? "the browser's storage for this site is full" : `${e.name}: ${e.message}`;
  }
  await markUse(dir, name);
  return '';
}

// One line for a notice, of whatever was thrown.
const oneLine = (e) => `${e.name || 'Error'}: ${e.message || e}`.split('\n')[0];

async function snapshotSave(msg) {
  let why = '';
  try {
    const key = kvKey(msg.conversation);
    const dir = key && await kvDir();
    if (!dir) return;
    if (!(msg.cap > 0)) throw new WorkerError('InputError', `cap must be a positive number of bytes, got ${msg.cap}`);
    const proxy = await webapp.save_snapshot();
    if (!proxy) return;   // nothing to keep
    let data;
    const buffer = proxy.getBuffer('u8');
    try {
      data = buffer.data.slice();   // out of the wasm heap: it may move while the file is written
    } finally {
      buffer.release();
      proxy.destroy();
    }
    why = await keepSnapshot(dir, `${msg.conversation}.${key}.snap`, data, msg.cap);
  } catch (e) {
    console.error(e);
    why = oneLine(e);
  }
  if (why) {
    post({type: 'notice', text: `This conversation's prompt cache was not kept in this browser (${why}); the ` +
                                'conversation itself is kept.'});
  }
  await postCache().catch(console.error);
}

async function snapshotRestore(msg) {
  let dir, name, file, reply;
  try {
    const key = kvKey(msg.conversation);
    dir = key && await kvDir(false);
    if (!dir) return;
    name = `${msg.conversation}.${key}.snap`;
    file = await (await dir.getFileHandle(name)).getFile();
  } catch (e) {
    return;   // none kept for this conversation and model
  }
  try {
    reply = JSON.parse(webapp.restore_snapshot(new Uint8Array(await file.arrayBuffer())));
  } catch (e) {
    console.error(e);
    reply = {error: `it could not be read: ${oneLine(e)}`};
  }
  if (reply.error) {
    await removeSnapshot(dir, name);
    post({type: 'notice', text: `This conversation's kept prompt cache was not used and is deleted (${reply.error}); ` +
                                'the next message reads the whole conversation again.'});
    await postCache().catch(console.error);
    return;
  }
  await markUse(dir, name);
  if (reply.tokens) {
    post({type: 'notice', text: 'Resumed this conversation from its prompt cache kept in this browser ' +
                                `(${reply.tokens} tokens): the next message reads only itself.`});
  }
}

async function snapshotDelete(msg) {
  try {
    const dir = await kvDir(false);
    const prefix = msg.conversation == null ? null : `${msg.conversation}.`;
    for (const f of dir ? await snapshotFiles(dir) : []) {
      if (prefix === null || f.name.startsWith(prefix)) await removeSnapshot(dir, f.name);
    }
    await postCache();
  } catch (e) {
    console.error(e);
    post({type: 'notice', text: `A conversation's kept prompt cache could not be deleted (${oneLine(e)}).`});
  }
}

// A served model as the loaded model's draft model (speculative decoding), from the cache or downloaded (and kept);
// no url: drop it. webapp posts 'draft' or 'error'.
async function loadDraft(msg) {
  await ensureBooted(false);
  if (!msg.url) {
    await webapp.load_draft(null, null);
    return;
  }
  const got = await CeraModelStore.open(msg.url, {
    onProgress: (stage, done, total) => post({type: 'progress', stage, done, total}),
    onStatus: (text) => post({type: 'notice', text}),
  });
  status('Loading the draft model…');
  await webapp.load_draft(got.blob || got.buffer || {url: got.url, size: got.size}, got.name);
  if (got.cached) await postCache();
}

// The requests the worker answers itself (protocol.py: handled by "worker"); those marked at once are not queued.
const WORKER_KINDS = {
  load: {run: load},
  'load-draft': {run: loadDraft},
  preflight: {run: preflight},
  'cache-delete': {run: async (msg) => { await CeraModelStore.remove(msg.url); await postCache(); }},
  'snapshot-save': {run: snapshotSave},
  'snapshot-restore': {run: snapshotRestore},
  'snapshot-delete': {run: snapshotDelete},
  'cache-list': {now: true, run: () => postCache().catch(reportError('cache-list'))},
  cancel: {now: true, run: (msg) => cancel(msg.id)},
};

const queued = new Map();      // id -> kind of the requests waiting in the queue
const cancelled = new Set();   // ... of those cancelled while waiting (answered then; skipped when their turn comes)

// A request that fails before Python answers it (not booted yet, cancelled while queued): its 'error', by id.
const requestError = (msg, errorType, kind, message) => post({type: 'error', id: msg.id ?? null, during: msg.type,
  kind, message, error_type: errorType, param: null});

function cancel(id) {
  if (id != null && queued.has(id)) {
    cancelled.add(id);
    requestError({id, type: queued.get(id)}, 'cancelled', 'Cancelled', 'The request was cancelled before it started.');
    queued.delete(id);
  } else if (webapp) {
    webapp.cancel(id ?? null);   // runs between the engine's decode steps (it awaits a GPU readback each step)
  }
}

async function handle(msg) {
  if (msg.id != null) {
    queued.delete(msg.id);
    if (cancelled.delete(msg.id)) return;    // answered when it was cancelled
  }
  const own = WORKER_KINDS[msg.type];
  if (own) return own.run(msg);
  if (!webapp) {   // Python is not up: no model was ever loaded (and a conversation to forget is none)
    if (msg.type !== 'chat-clear') {
      requestError(msg, 'invalid_request_error', 'InputError',
                   'No model is loaded yet: wait for loading to finish, or load a model URL.');
    }
    return;
  }
  let json;
  try {
    json = JSON.stringify(msg);
  } catch (e) {
    requestError(msg, 'invalid_request_error', 'InputError', `The request cannot be sent as JSON: ${e.message}`);
    return;
  }
  await webapp.handle(json);   // posts its answers ('prompt', 'token' or 'chunk', then 'done' or 'error'); never throws
}

const reportError = (during) => (e) => {
  console.error(e);
  post({type: 'error', id: null, during, kind: e.kind || e.name || 'Error', message: e.message || String(e),
        error_type: 'server_error', param: null});
};

let queue = Promise.resolve();

self.onmessage = (event) => {
  const msg = event.data || {};
  const own = WORKER_KINDS[msg.type];
  if (own && own.now) {
    own.run(msg);
    return;
  }
  if (msg.id != null) queued.set(msg.id, msg.type);
  queue = queue.then(() => handle(msg)).catch((e) => {
    console.error(e);
    requestError(msg, 'server_error', e.kind || e.name || 'Error', e.message || String(e));
  });
};
