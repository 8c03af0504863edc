// cera_web page worker: runs Pyodide and the cera_web engine off the main thread, so the page never freezes.
//
// A classic (non-module) dedicated worker: `new Worker('/web/worker.js')`. It pulls Pyodide in with importScripts,
// which works in every browser that has WebGPU in workers, with no bundler or module-worker support needed.
//
// Assets it fetches (all same-origin, served by serve.py):
//   /pyodide/            Pyodide core (indexURL); numpy comes from its lock file via loadPackage
//   /pyodide/wheels/...  pure-Python wheels (jinja2, markupsafe), unpacked into site-packages
//   /app/cera_web.zip    the cera_web package and its shaders, unpacked into the working directory
//   the model URL        any GGUF URL the page asks for, streamed into one ArrayBuffer
//
// Protocol. Every message is a plain object with a `type`.
//
// page → worker
//   {type: 'load', url}                         load the model at `url` (the first one also boots Pyodide). If the
//                                               load fails, the model loaded before (if any) stays in use.
//   {type: 'generate', prompt, maxTokens, chat} run one generation; `chat` wraps the prompt in the chat template.
//   {type: 'stop'}                              cancel the running generation (handled at once, not queued: the
//                                               engine stops within one decode step and still sends 'done').
//   'load' and 'generate' are queued and run one at a time, in order.
//
// worker → page
//   {type: 'status', text}                      a human-readable step ("Loading Pyodide…")
//   {type: 'progress', stage, done, total}      stage: 'download' (bytes; total 0 when the size is unknown) or an
//                                               engine stage: 'parse', 'upload' (bytes), 'compile', ... (its units)
//   {type: 'ready', model, backend}             a model is loaded and usable; backend describes the GPU adapter
//   {type: 'token', id, text}                   one generated token and its new text ('' while a UTF-8 character
//                                               is still incomplete)
//   {type: 'done', text, stop_reason, prompt_tokens, tokens, prefill_tok_s, decode_tok_s, prefill_ms, decode_ms}
//                                               a generation finished; stop_reason is 'eos', 'max_tokens',
//                                               'context' (context window full) or 'cancelled'; prompt_tokens and
//                                               tokens are lists of token ids; rates and times may be null
//   {type: 'error', kind, message, during}      something failed; kind is the error class name (e.g.
//                                               'GGUFFormatError', 'GPUUnavailableError', 'DownloadError');
//                                               during is 'load' or 'generate'. The worker stays usable.
'use strict';

const PYODIDE_URL = '/pyodide/';
const WHEELS_URL = '/pyodide/wheels/';
// Pure-Python wheels the package needs in Pyodide (jinja2 renders chat templates); the names are pinned in assets.json.
const WHEELS = ['markupsafe-2.1.5-py3-none-any.whl', 'jinja2-3.1.6-py3-none-any.whl'];
const APP_ZIP_URL = '/app/cera_web.zip';
const PROGRESS_INTERVAL_MS = 100;   // at most one download progress message per interval

importScripts(PYODIDE_URL + 'pyodide.js');   // defines self.loadPyodide

const post = (msg) => self.postMessage(msg);
const status = (text) => post({type: 'status', text});

// An error raised on the JS side, with a kind the page shows like a Python error class name.
class WorkerError extends Error {
  constructor(kind, message) { super(message); this.kind = kind; }
}

let webapp = null;     // the cera_web.webapp module (a PyProxy) once Python is up
let booting = null;    // the boot promise, shared by every message until it settles

// WebGPU must be there before anything heavy is fetched: say exactly what is missing.
async function checkWebGPU() {
  if (!('gpu' in navigator) || !navigator.gpu) {
    throw new WorkerError('GPUUnavailableError',
      'WebGPU is not available in this browser (navigator.gpu is missing in the worker). ' +
      'Use a recent Chrome or Edge with WebGPU enabled; headless Chromium needs --enable-unsafe-webgpu.');
  }
  let adapter = null;
  try {
    adapter = await navigator.gpu.requestAdapter();
  } catch (e) {
    adapter = null;
  }
  if (!adapter) {
    throw new WorkerError('GPUUnavailableError',
      'WebGPU is present but no GPU adapter was offered (navigator.gpu.requestAdapter() returned null). ' +
      'Enable hardware acceleration or WebGPU in the browser settings (chrome://gpu shows why); ' +
      'headless Chromium needs --enable-unsafe-webgpu.');
  }
  const info = adapter.info || {};
  return [info.vendor, info.architecture, info.description].filter(Boolean).join(' ') || 'unknown adapter';
}

async function fetchBytes(url, what) {
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

async function boot() {
  status('Checking WebGPU…');
  const adapter = await checkWebGPU();
  status(`WebGPU adapter: ${adapter}. Loading Pyodide…`);
  const pyodide = await loadPyodide({
    indexURL: PYODIDE_URL,
    stdout: (s) => console.log(s),
    stderr: (s) => console.warn(s),
  });
  status('Loading numpy…');
  await pyodide.loadPackage('numpy', {messageCallback: () => {}});
  status('Installing Python packages…');
  const sitePackages = pyodide.runPython("import sysconfig; sysconfig.get_paths()['purelib']");
  for (const wheel of WHEELS) {
    const resp = await fetchBytes(WHEELS_URL + wheel, 'a Python wheel');
    pyodide.unpackArchive(await resp.arrayBuffer(), 'wheel', {extractDir: sitePackages});
  }
  const app = await fetchBytes(APP_ZIP_URL, 'the cera_web package');
  pyodide.unpackArchive(await app.arrayBuffer(), 'zip');   // into the working directory, which is on sys.path
  const module = pyodide.pyimport('cera_web.webapp');
  module.init((json) => post(JSON.parse(json)));
  webapp = module;
}

function ensureBooted() {
  if (!booting) {
    booting = boot().catch((e) => { booting = null; throw e; });   // a failed boot may be retried by the next load
  }
  return booting;
}

function allocate(n) {
  try {
    return new Uint8Array(n);
  } catch (e) {   // RangeError: the browser would not give this much memory to one buffer
    throw new WorkerError('DownloadError',
      `The model file is ${(n / 1e9).toFixed(2)} GB, more than this browser can hold in memory (${e.message}). ` +
      'Try a smaller model, or a browser or device with more memory.');
  }
}

// Stream `url` into one ArrayBuffer, reporting {stage: 'download', done, total} as bytes arrive.
async function download(url) {
  const resp = await fetchBytes(url, 'the model');
  const total = Number(resp.headers.get('Content-Length')) || 0;
  const reader = resp.body.getReader();
  // Preallocate when the length is known; otherwise keep chunks and join them at the end.
  let buf = total ? allocate(total) : null;
  const chunks = [];
  let done = 0;
  let lastPost = 0;
  post({type: 'progress', stage: 'download', done: 0, total});
  for (;;) {
    const {done: finished, value} = await reader.read();
    if (finished) break;
    if (buf && done + value.length > buf.length) {   // the server sent more than it announced: fall back to chunks
      chunks.push(buf.subarray(0, done));
      buf = null;
    }
    if (buf) buf.set(value, done); else chunks.push(value);
    done += value.length;
    const now = performance.now();
    if (now - lastPost >= PROGRESS_INTERVAL_MS) {
      post({type: 'progress', stage: 'download', done, total});
      lastPost = now;
    }
  }
  post({type: 'progress', stage: 'download', done, total: total || done});
  if (buf) {
    return done === buf.length ? buf.buffer : buf.slice(0, done).buffer;   // a short body is passed on as it is
  }
  const joined = allocate(done);
  let at = 0;
  for (const c of chunks) { joined.set(c, at); at += c.length; }
  return joined.buffer;
}

function modelName(url) {
  const path = new URL(url, self.location.href).pathname;
  return decodeURIComponent(path.slice(path.lastIndexOf('/') + 1)) || 'model.gguf';
}

async function handle(msg) {
  if (msg.type === 'load') {
    await ensureBooted();
    status(`Downloading ${modelName(msg.url)}…`);
    const buffer = await download(msg.url);
    status('Loading the model onto the GPU…');
    await webapp.load(buffer, modelName(msg.url));   // posts 'progress', then 'ready' or 'error'
  } else if (msg.type === 'generate') {
    if (!webapp) {
      throw new WorkerError('InputError', 'No model is loaded yet: wait for loading to finish, or load a model URL.');
    }
    await webapp.generate(msg.prompt, msg.maxTokens, !!msg.chat);   // posts 'token's, then 'done' or 'error'
  } else {
    throw new WorkerError('ProtocolError', `Unknown message type ${JSON.stringify(msg.type)}.`);
  }
}

let queue = Promise.resolve();

self.onmessage = (event) => {
  const msg = event.data || {};
  if (msg.type === 'stop') {
    // Runs between the engine's decode steps (it awaits a GPU readback each step), so cancel takes effect at once.
    if (webapp) webapp.stop();
    return;
  }
  queue = queue.then(() => handle(msg)).catch((e) => {
    console.error(e);
    post({type: 'error', kind: e.kind || e.name || 'Error', message: e.message || String(e), during: msg.type});
  });
};
