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
// (cera_web.gpu.browser.BlobSource): neither the wasm heap nor the JS heap ever holds the whole model. A picked or
// dropped file is uploaded the same way from the File. Only when the cache is unavailable (no OPFS, storage full)
// is a download held in one ArrayBuffer in JS memory (not the wasm heap) while it is uploaded.
//
// Protocol. Every message is a plain object with a `type`.
//
// page → worker
//   {type: 'load', url, limits, backend}        load the model at `url` (the first load also boots Pyodide): from the
//                                               browser cache when it holds a good copy, else downloaded (and kept).
//                                               If the load fails, the model loaded before (if any) stays in use.
//   {type: 'load', file, limits}                load a model from a File (file picker, drag-and-drop); not cached.
//                                               limits (optional): device limits to lower, {kebab-case name: bytes},
//                                               e.g. {'max-storage-buffer-binding-size': 16e6}, to simulate a GPU.
//                                               backend: 'auto' (default: WebGPU, except on a software fallback
//                                               adapter such as SwiftShader, where the CPU path is faster and is
//                                               taken for models that fit it: webapp.choose_backend), 'webgpu' (the
//                                               adapter, whatever it is) or 'cpu' (no adapter needed: the engine runs
//                                               the numpy reference model in Pyodide).
//   {type: 'generate', prompt, maxTokens, chat, settings}
//                                               run one raw completion; `chat` wraps the prompt in the chat template;
//                                               settings: the settings form's values as typed ({name: string|bool},
//                                               see cera_web.webapp.parse_settings); greedy unless they say otherwise.
//                                               settings may add response_format (an OpenAI-style object: json_object,
//                                               json_schema, grammar; a bad one is an 'error' of kind GrammarError
//                                               before anything runs) and logprobs/top_logprobs (as do chat turns)
//   {type: 'chat-send', text, settings, system} the next user turn of the worker's one ChatSession (its KV cache is
//                                               kept between turns); the reply streams as 'token's, then 'done'.
//                                               system (optional): the conversation's system message ('' for none)
//   {type: 'chat-regenerate', settings, system} the last reply again
//   {type: 'chat-continue', settings, system}   more of the last reply (after a max-tokens stop), appended to it
//   {type: 'chat-set', messages}                the conversation becomes `messages` ([{role, content}]): one restored
//                                               after a reload or kept across a model switch, or cut at an edit
//   {type: 'chat-clear'}                        forget the conversation (a new model also starts a new one)
//   {type: 'stop'}                              cancel the running generation (handled at once, not queued: the
//                                               engine stops within one decode step and still sends 'done').
//   {type: 'cache-list'}                        answer with a 'cache' message (at once, not queued)
//   {type: 'cache-delete', url}                 delete a cached model, then answer with a 'cache' message
//   {type: 'api', id, method, params}           one request of the OpenAI-shaped API (web/cera.js sends these):
//                                               method 'chat.completions.create' or 'completions.create'; params
//                                               the OpenAI request as JSON (tools as JSON schemas; auto_call and
//                                               other functions cannot cross to the worker); id: a number or
//                                               string the answers carry
//   {type: 'api-cancel', id}                    stop that request (handled at once, not queued): running, it ends
//                                               within a decode step as a stop would (finish_reason 'stop', the
//                                               text so far); still queued, it is answered at once with an
//                                               api-error of type 'cancelled' and never runs
//   'load', 'generate', 'chat-*', 'api' and 'cache-delete' are queued and run one at a time, in order (one GPU).
//
// worker → page
//   {type: 'status', text}                      a human-readable step ("Loading Pyodide…")
//   {type: 'notice', text}                      something worth keeping on screen about the last load ("Loaded X
//                                               from the browser cache", "the cached copy was damaged: downloading
//                                               it again", "not cached: ...")
//   {type: 'progress', stage, done, total}      stage: 'download' or 'verify' (the cache check) in bytes (total 0
//                                               when the size is unknown), or an engine stage: 'parse', 'upload'
//                                               (bytes), 'compile', ... (its units)
//   {type: 'settings', fields, raw}             after Python starts: the generation settings (name, label, default,
//                                               min, max, help: SamplingParams.describe()) and the raw-completion
//                                               defaults (greedy), for the settings form
//   {type: 'ready', model, file, chat_template, backend, memory, origin, cpu, split: {tensor: buffers} of weights
//    split across buffers}                      a model is loaded and usable; model: its general.name; file: the
//                                               file it came from; chat_template: whether the file has one;
//                                               backend describes the GPU adapter;
//                                               memory: {weights, kv_cache, other, total, buffers} GPU bytes (null
//                                               on the CPU); origin: 'cache', 'download' or 'file'; cpu: running on
//                                               the CPU; backend_kind: 'webgpu' or 'cpu'; backend_reason: why, in
//                                               words for the page
//   {type: 'cache', entries, usage, quota}      the cached models [{url, name, size, stored}], newest first, and the
//                                               origin's storage use and quota in bytes (null when unknown)
//   {type: 'prompt', done, total}               a run's prompt is being processed: done of its total tokens (those
//                                               not reused from the KV cache), at the start and after each chunk
//   {type: 'token', id, text}                   one generated token and its new text ('' while a UTF-8 character
//                                               is still incomplete)
//   {type: 'done', text, stop_reason, prompt_tokens, tokens, reused_tokens (prompt tokens the KV cache held: not
//    prefilled again), seed (text; null when greedy), prefill_tok_s, decode_tok_s, prefill_ms, decode_ms,
//    memory: webapp.memory_summary + wasm_heap (bytes of the Pyodide heap; in 'ready' too) | null on the CPU
//    fallback}
//                                               a generation finished; stop_reason is 'eos', 'max_tokens',
//                                               'context' (context window full) or 'cancelled'; prompt_tokens and
//                                               tokens are lists of token ids; rates and times may be null. Chat
//                                               turns add mode: 'chat' and messages (the conversation after it).
//                                               logprobs: null, or when the settings asked for them one entry a
//                                               token {text, logprob, top: [[text, logprob], ...]}
//   {type: 'api-chunk', id, chunk}              stream: true: one chat.completion.chunk (or text_completion) dict
//   {type: 'api-result', id, result}            the request's reply: the chat.completion / text_completion dict
//                                               (null after a stream: its chunks were the reply)
//   {type: 'api-error', id, error: {message, type, param, kind}}
//                                               the request failed: a one-line message; type
//                                               'invalid_request_error' (fix the request), 'server_error' or
//                                               'cancelled'; param the argument at fault (or null); kind the error
//                                               class. The worker stays usable: the next request runs.
//   {type: 'error', kind, message, during}      something failed; kind is the error class name (e.g.
//                                               'GGUFFormatError', 'GPUUnavailableError', 'DownloadError');
//                                               during is the message type that failed. The worker stays usable.
'use strict';

// Relative to this file (web/worker.js), so a site may serve the whole tree under a folder of its own. Started from a
// page of another origin, cera.js runs this file through a same-origin blob worker that sets CERA_WORKER_URL to this
// file's real address first (a blob's own address is no base for these).
const WORKER_URL = self.CERA_WORKER_URL || self.location.href;
const PYODIDE_URL = new URL('../pyodide/', WORKER_URL).href;
const WHEELS_URL = PYODIDE_URL + 'wheels/';

importScripts(PYODIDE_URL + 'pyodide.js');   // defines self.loadPyodide
importScripts(new URL('modelstore.js', WORKER_URL).href);   // defines self.CeraModelStore

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
  const [entries, estimate] = await Promise.all([CeraModelStore.list(), CeraModelStore.estimate()]);
  post({type: 'cache', entries, usage: estimate ? estimate.usage : null, quota: estimate ? estimate.quota : null});
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
  });
  post({type: 'notice', text: got.note});
  status('Loading the model…');
  const origin = got.fromCache ? 'cache' : 'download';
  const ok = got.blob ? await webapp.load_blob(got.blob, got.name, origin)
                      : await webapp.load(got.buffer, got.name, origin);
  if (got.cached) await postCache();   // a new entry (or a checked one) to list
  return ok;
}

const needModel = () => {
  if (!webapp) {
    throw new WorkerError('InputError', 'No model is loaded yet: wait for loading to finish, or load a model URL.');
  }
};
const settingsJson = (msg) => (msg.settings ? JSON.stringify(msg.settings) : '');

async function handle(msg) {
  if (msg.type === 'load') {
    await load(msg);
  } else if (msg.type === 'generate') {
    needModel();
    // posts 'token's, then 'done' or 'error' (as do the chat calls)
    await webapp.generate(msg.prompt, msg.maxTokens, !!msg.chat, settingsJson(msg));
  } else if (msg.type === 'chat-send') {
    needModel();
    if (msg.system != null) webapp.set_system(msg.system);
    await webapp.chat_send(msg.text, settingsJson(msg));
  } else if (msg.type === 'chat-regenerate') {
    needModel();
    if (msg.system != null) webapp.set_system(msg.system);
    await webapp.chat_regenerate(settingsJson(msg));
  } else if (msg.type === 'chat-continue') {
    needModel();
    if (msg.system != null) webapp.set_system(msg.system);
    await webapp.chat_continue(settingsJson(msg));
  } else if (msg.type === 'chat-set') {
    needModel();
    webapp.chat_set(JSON.stringify(msg.messages || []));
  } else if (msg.type === 'chat-clear') {
    if (webapp) webapp.chat_clear();
  } else if (msg.type === 'api') {
    await handleApi(msg);
  } else if (msg.type === 'cache-delete') {
    await CeraModelStore.remove(msg.url);
    await postCache();
  } else {
    throw new WorkerError('ProtocolError', `Unknown message type ${JSON.stringify(msg.type)}.`);
  }
}

// The OpenAI-shaped API: webapp.api answers (api-chunk..., then api-result or api-error) and never throws; what fails
// before it runs (no model yet, a boot error, a request cancelled while queued) is answered here, by id.
const apiQueued = new Set();      // ids of 'api' requests waiting in the queue
const apiCancelled = new Set();   // ... of those cancelled while waiting

const apiError = (id, type, message, kind) => post({type: 'api-error', id, error: {message, type, param: null, kind}});

async function handleApi(msg) {
  apiQueued.delete(msg.id);
  if (apiCancelled.delete(msg.id)) return;    // answered when it was cancelled
  if (!webapp) {
    apiError(msg.id, 'invalid_request_error', 'No model is loaded yet: load one first (Cera.load).', 'InputError');
    return;
  }
  let json;
  try {
    json = JSON.stringify({id: msg.id, method: msg.method, params: msg.params});
  } catch (e) {
    apiError(msg.id, 'invalid_request_error', `The request cannot be sent as JSON: ${e.message}`, 'InputError');
    return;
  }
  await webapp.api(json);
}

const reportError = (during) => (e) => {
  console.error(e);
  post({type: 'error', kind: e.kind || e.name || 'Error', message: e.message || String(e), during});
};

let queue = Promise.resolve();

self.onmessage = (event) => {
  const msg = event.data || {};
  if (msg.type === 'stop') {
    // Runs between the engine's decode steps (it awaits a GPU readback each step), so cancel takes effect at once.
    if (webapp) webapp.stop();
    return;
  }
  if (msg.type === 'api-cancel') {
    if (apiQueued.delete(msg.id)) {           // still waiting: answered now, and skipped when its turn comes
      apiCancelled.add(msg.id);
      apiError(msg.id, 'cancelled', 'The request was cancelled before it started.', 'Cancelled');
    } else if (webapp) {
      webapp.api_cancel(msg.id);
    }
    return;
  }
  if (msg.type === 'api') apiQueued.add(msg.id);
  if (msg.type === 'cache-list') {
    postCache().catch(reportError('cache-list'));
    return;
  }
  queue = queue.then(() => handle(msg)).catch(msg.type === 'api'
    ? (e) => apiError(msg.id, 'server_error', e.message || String(e), e.kind || e.name || 'Error')
    : reportError(msg.type));
};
