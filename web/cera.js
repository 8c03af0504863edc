// cera.js: the OpenAI-shaped API of cera_web from JavaScript, as an ES module. No Python to write: the engine runs in
// a Web Worker (web/worker.js: Pyodide, WebGPU), and this module speaks its message protocol (declared in
// cera_web/protocol.py): a request {type: 'chat.completions.create' | 'completions.create', id, params} and
// {type: 'cancel', id}, answered by 'chunk's (streamed) and then one 'done' (its result: the reply) or one 'error'.
//
//   import {Cera} from '/web/cera.js';
//   const cera = await Cera.load({model: '/models/SmolLM2-135M-Instruct.Q4_1.gguf',
//                                 onProgress: ({stage, done, total}) => console.log(stage, done, total)});
//   const reply = await cera.chat.completions.create({messages: [{role: 'user', content: 'Hi!'}], max_tokens: 64});
//   reply.choices[0].message.content;
//   const stream = await cera.chat.completions.create({messages, stream: true});
//   for await (const chunk of stream) out.textContent += chunk.choices[0].delta.content ?? '';
//   stream.controller.abort();                       // or create(params, {signal}) with an AbortController's signal
//   await cera.completions.create({prompt: 'Once upon a time', max_tokens: 16});     // raw text
//
// Requests and replies are those of the OpenAI API (and of cera_web's Python engine.chat.completions.create: the same
// arguments and dict shapes). Tools are given as JSON schemas ({type: 'function', function: {name, description,
// parameters}}): functions cannot cross to the worker, so a reply's tool_calls are for the caller to run, whose
// results go back as {role: 'tool', tool_call_id, content} messages. Requests run one at a time, in order (one GPU).
// Stopping a request (abort) ends it as a stop would: a stream ends with finish_reason 'stop' after the text so far,
// a non-streamed reply resolves with that text; a request aborted before it started rejects with an AbortError.
//
// This folder (web/), Pyodide and the wheels (/pyodide/) are fetched from the site this module comes from, in the
// layout serve.py uses. Imported by a page of another origin, the worker is started through a same-origin blob
// worker that imports web/worker.js (browsers start workers only from the page's own origin); that site must then
// allow the page's origin (python serve.py --cors ORIGIN), or the worker fails to import its scripts.

const DEFAULT_MODEL = new URL('../models/SmolLM2-135M-Instruct.Q4_1.gguf', import.meta.url).href;

// An error answered by the worker: message (one line), type ('invalid_request_error', 'server_error', 'cancelled':
// the 'error' message's error_type), param (the request argument at fault, or null), kind (the engine's error class,
// e.g. 'InputError').
export class CeraError extends Error {
  constructor({message, type = 'server_error', param = null, kind = 'Error'} = {}) {
    super(message);
    this.name = 'CeraError';
    Object.assign(this, {type, param, kind});
  }
}

const abortError = () => new DOMException('The request was aborted.', 'AbortError');

// Tools must be plain JSON; a JS function among them is refused here, saying what to do instead.
function checkParams(params) {
  if (!params || typeof params !== 'object' || Array.isArray(params)) {
    throw new TypeError('create() takes one object of request arguments, e.g. {messages: [...], max_tokens: 64}.');
  }
  for (const tool of params.tools || []) {
    if (typeof tool === 'function' || (tool && typeof tool.function === 'function')) {
      throw new TypeError('tools must be JSON schemas ({type: "function", function: {name, description, ' +
        'parameters}}): functions cannot cross to the worker. Run the function yourself for each of the ' +
        "reply's tool_calls and send its result back as a {role: 'tool', tool_call_id, content} message.");
    }
  }
}

// The chunks of one streamed request, as an async iterator; .controller.abort() stops the request.
class ChunkStream {
  constructor(controller) {
    this.controller = controller;
    this._chunks = [];      // chunks not read yet; null marks the end
    this._waiting = null;   // the resolve of a next() waiting for a chunk
    this._ended = false;    // the request has ended (this._error: how, if it failed)
    this._error = null;
    this._done = false;     // the end has been read
  }

  _push(item) {
    if (this._waiting) {
      const resolve = this._waiting;
      this._waiting = null;
      resolve(item);
    } else {
      this._chunks.push(item);
    }
  }

  _finish(error = null) {
    this._ended = true;
    this._error = error;
    this._push(null);
  }

  async next() {
    const item = this._chunks.length ? this._chunks.shift()
      : this._done ? null : await new Promise((resolve) => { this._waiting = resolve; });
    if (item !== null) return {value: item, done: false};
    this._done = true;
    if (this._error) {
      const error = this._error;
      this._error = null;
      throw error;
    }
    return {value: undefined, done: true};
  }

  async return() {     // the consumer left its for-await loop early: stop the request
    if (!this._ended) this.controller.abort();
    return {value: undefined, done: true};
  }

  [Symbol.asyncIterator]() { return this; }
}

// A worker running the script at `url`: directly when it is of the page's origin, else through a same-origin blob
// worker that imports it (CERA_WORKER_URL: the base worker.js resolves its assets against).
function startWorker(url) {
  const href = new URL(url, import.meta.url).href;
  if (!globalThis.location || new URL(href).origin === globalThis.location.origin) return new Worker(href);
  const shim = `self.CERA_WORKER_URL = ${JSON.stringify(href)};\nimportScripts(self.CERA_WORKER_URL);\n`;
  return new Worker(URL.createObjectURL(new Blob([shim], {type: 'text/javascript'})));
}

export class Cera {
  // Start a worker and load a model into it. options: model (a GGUF URL; default the bundled SmolLM2), onProgress
  // ({stage, done, total}: 'download' and 'verify' in bytes, then the engine's 'parse', 'upload', ...), onStatus
  // (text of each step), worker (the worker script's URL; default web/worker.js next to this module), limits (device
  // limits to lower, {kebab-case name: bytes}), backend ('auto': WebGPU, or the CPU path where the adapter is a
  // software fallback such as SwiftShader; 'webgpu'; 'cpu': no adapter needed, slower than a GPU).
  // Resolves to a Cera whose .info is the worker's 'ready' message (model, backend, memory, ...).
  static async load({model = DEFAULT_MODEL, onProgress, onStatus, worker, limits, backend = 'auto'} = {}) {
    const w = startWorker(worker || new URL('./worker.js', import.meta.url));
    const cera = new Cera(w);
    try {
      await cera.loadModel(model, {onProgress, onStatus, limits, backend});
    } catch (e) {
      w.terminate();
      throw e;
    }
    return cera;
  }

  constructor(worker) {
    this.worker = worker;
    this.info = null;
    this._nextId = 1;
    this._requests = new Map();   // id -> {chunk(c), done(result), fail(error)} of each request not answered yet
    this._loading = null;         // {resolve, reject, onProgress, onStatus} while a load runs
    this._drafting = null;        // {resolve, reject} while a draft model loads
    this.chat = {completions: {create: (params, options) => this._create('chat.completions.create', params, options)}};
    this.completions = {create: (params, options) => this._create('completions.create', params, options)};
    worker.onmessage = (event) => this._onMessage(event.data);
    worker.onerror = (event) => this._fail(new CeraError({message: `The worker failed: ${event.message}`}));
  }

  // Load another model into the same worker (the one loaded before stays in use if this fails).
  loadModel(url, {onProgress, onStatus, limits, backend = 'auto'} = {}) {
    if (this._loading) return Promise.reject(new Error('A model is loading already: wait for it.'));
    const href = new URL(url, globalThis.location ? globalThis.location.href : import.meta.url).href;
    return new Promise((resolve, reject) => {
      this._loading = {resolve, reject, onProgress, onStatus};
      this.worker.postMessage({type: 'load', url: href, limits, backend});
    });
  }

  // Load a draft model for speculative decoding: a smaller model with this one's tokenizer proposes tokens that this
  // one checks several at a time (the same replies in fewer passes; the `speculative` request setting: 'auto', the
  // default, uses it; without one 'auto' is prompt lookup where it pays). url null: drop it. Resolves to the worker's
  // 'draft' message ({name, file}, null when none); rejects with a CeraError when it cannot be used (another
  // tokenizer, a failed download). Loading another model drops it.
  loadDraft(url) {
    if (this._drafting) return Promise.reject(new Error('A draft model is loading already: wait for it.'));
    const href = url == null ? null
      : new URL(url, globalThis.location ? globalThis.location.href : import.meta.url).href;
    return new Promise((resolve, reject) => {
      this._drafting = {resolve, reject};
      this.worker.postMessage({type: 'load-draft', url: href});
    });
  }

  // Stop the worker (and free its GPU memory); pending requests reject.
  terminate() {
    this.worker.terminate();
    this._fail(new CeraError({message: 'The engine was terminated.', type: 'cancelled', kind: 'Cancelled'}));
  }

  _fail(error) {
    for (const key of ['_loading', '_drafting']) {
      if (this[key]) this[key].reject(error);
      this[key] = null;
    }
    for (const req of this._requests.values()) req.fail(error);
    this._requests.clear();
  }

  _onMessage(msg) {
    const load = this._loading;
    if (msg.type === 'progress') {
      if (load && load.onProgress) load.onProgress({stage: msg.stage, done: msg.done, total: msg.total});
    } else if (msg.type === 'status' || msg.type === 'notice') {
      if (load && load.onStatus) load.onStatus(msg.text);
    } else if (msg.type === 'ready') {
      this.info = msg;
      if (load) { this._loading = null; load.resolve(msg); }
    } else if (msg.type === 'draft') {
      if (this._drafting) { this._drafting.resolve(msg); this._drafting = null; }
    } else if (msg.type === 'error' && msg.id == null) {
      if (load && msg.during === 'load') {
        this._loading = null;
        load.reject(new CeraError({message: msg.message, type: 'server_error', kind: msg.kind}));
      } else if (this._drafting && msg.during === 'load-draft') {
        this._drafting.reject(new CeraError({message: msg.message, type: 'server_error', kind: msg.kind}));
        this._drafting = null;
      }
    } else if (msg.type === 'chunk' || msg.type === 'done' || msg.type === 'error') {
      const req = this._requests.get(msg.id);
      if (!req) return;
      if (msg.type === 'chunk') {
        req.chunk(msg.chunk);
        return;
      }
      this._requests.delete(msg.id);
      if (msg.type === 'done') req.done(msg.result);
      else if (msg.error_type === 'cancelled') req.fail(abortError());
      else req.fail(new CeraError({message: msg.message, type: msg.error_type, param: msg.param, kind: msg.kind}));
    }
  }

  // One request. options.signal: an AbortSignal that stops it. stream: true resolves to a ChunkStream at once.
  async _create(method, params, {signal} = {}) {
    checkParams(params);
    const id = this._nextId++;
    const controller = new AbortController();
    const cancel = () => this.worker.postMessage({type: 'cancel', id});
    const onAbort = () => controller.abort();
    if (signal) {
      if (signal.aborted) throw abortError();
      signal.addEventListener('abort', onAbort, {once: true});
    }
    controller.signal.addEventListener('abort', cancel, {once: true});
    const cleanup = () => {
      if (signal) signal.removeEventListener('abort', onAbort);
      controller.signal.removeEventListener('abort', cancel);
    };
    const message = {type: method, id, params};
    if (params.stream) {
      const stream = new ChunkStream(controller);
      this._requests.set(id, {
        chunk: (c) => stream._push(c),
        done: () => { cleanup(); stream._finish(); },
        fail: (e) => { cleanup(); stream._finish(e); },
      });
      try {
        this.worker.postMessage(message);
      } catch (e) {     // a value that cannot be copied to the worker (DataCloneError)
        this._requests.delete(id);
        cleanup();
        throw new TypeError(`The request cannot be sent to the worker: ${e.message}`);
      }
      return stream;
    }
    return new Promise((resolve, reject) => {
      this._requests.set(id, {
        chunk: () => {},
        done: (r) => { cleanup(); resolve(r); },
        fail: (e) => { cleanup(); reject(e); },
      });
      try {
        this.worker.postMessage(message);
      } catch (e) {
        this._requests.delete(id);
        cleanup();
        reject(new TypeError(`The request cannot be sent to the worker: ${e.message}`));
      }
    });
  }
}

export default Cera;
