// The page: controls and display only. All Python, model and GPU work happens in web/worker.js (the messages between
// them are declared in cera_web/protocol.py).
'use strict';

const DEFAULT_MODEL_URL = '/models/SmolLM2-135M-Instruct.Q4_1.gguf';
const MODELS_INDEX_URL = '/models/index.json';   // the served models, for the model menu (serve.py models_index)

const $ = (id) => document.getElementById(id);
const ui = {
  modelName: $('model-name'), backend: $('backend'), status: $('status'),
  progress: $('progress'), progressText: $('progress-text'), progressRow: $('progress-row'),
  modelSelect: $('model-select'), modelState: $('model-state'), drawer: $('drawer'), loadError: $('load-error'),
  system: $('system'), modeHint: $('mode-hint'), chatRadio: document.querySelector('input[name="mode"][value="chat"]'),
  loadForm: $('load-form'), modelUrl: $('model-url'), modelUrlName: $('model-url-name'), load: $('load'),
  modelFile: $('model-file'), preflight: $('preflight'), preflightPanel: $('preflight-panel'),
  notice: $('notice'), memory: $('memory'), draftRow: $('draft-row'), useDraft: $('use-draft'),
  draftName: $('draft-name'), cacheList: $('cache-list'), cacheUsage: $('cache-usage'),
  keepState: $('keep-state'), snapshotUsage: $('snapshot-usage'),
  dropOverlay: $('drop-overlay'),
  generateForm: $('generate-form'), prompt: $('prompt'), chat: $('chat'), maxTokens: $('max-tokens'),
  generate: $('generate'), stop: $('stop'), regenerate: $('regenerate'), clear: $('clear'),
  error: $('error'), output: $('output'), stats: $('stats'),
  promptLabel: $('prompt-label'), chatView: $('chat-view'), rawView: $('raw-view'), conversation: $('conversation'),
  settingsFields: $('settings-fields'), settingsHint: $('settings-hint'), resetSettings: $('reset-settings'),
  cpuOffer: $('cpu-offer'), runCpu: $('run-cpu'), backendBadge: $('backend-badge'),
  convSelect: $('conversation-select'), newChat: $('new-chat'), renameChat: $('rename-chat'),
  deleteChat: $('delete-chat'), editing: $('editing'), cancelEdit: $('cancel-edit'),
  structured: $('structured'), schema: $('structured-schema'), grammar: $('structured-grammar'),
  structuredError: $('structured-error'), tokenProbs: $('token-probs'),
  lost: $('lost'), lostText: $('lost-text'), reloadModel: $('reload-model'),
};

const state = {
  modelLoaded: false, loading: false, generating: false,
  mode: 'chat',           // 'chat' or 'raw' (the Mode radio buttons)
  modeChosen: false,      // the person (or ?mode=) picked the mode: a new model does not change it
  loadingName: '',        // the file name of the model being loaded (named by file until its name is known)
  loadingUrl: null,       // its URL (null for a picked or dropped file)
  modelUrl: null,         // the URL of the loaded model (null for a file)
  loadingFile: null,      // the File being loaded (null for a URL), and the loaded one: what "Reload model" loads
  modelFileObj: null,
  lost: false,            // the loaded model's GPU device was lost: nothing runs until it is loaded again
  modelFile: '',          // the loaded model's file name (its name is in ui.modelName, as the menu names it)
  served: [],             // the served models [{name, file, url, size}] (the model menu)
  names: new Map(),       // absolute URL -> the model's name read from its GGUF header (web/ggufmeta.js)
  preflight: new Map(),   // absolute URL -> the worker's 'preflight' answer (cera_web/preflight.py), once asked
  cached: new Set(),      // absolute URLs of the models in the browser cache
  meta: new Map(),        // index of an assistant message -> {tokens, tok_s, seed, json, logprobs} of its run
  running: null,          // the mode of the generation in flight
  runId: 0,               // the id of the last generation request sent (1, 2, ...)
  backend: 'auto',        // what loads ask for: 'auto', 'webgpu' or 'cpu' (?backend=, else the remembered choice)
  messages: [],           // the conversation as the worker's ChatSession holds it ({role, content})
  stopped: new Set(),     // indexes of assistant messages that were stopped before their end
  pending: null,          // the content element of the assistant turn being streamed
  sending: false,         // the chat run in flight answers a new message (not a Regenerate)
  lastSent: '',           // that message's text
  split: null,            // {tensor: buffers} of the loaded model's weights split across buffers
  runJson: false,         // the run in flight is in a JSON mode of Structured output (its reply shows as JSON)
  raw: null,              // the last raw completion {text, json, logprobs}, shown again when the view changes
  editAt: null,           // the index of the user message being edited (the composer holds its new text)
  snapshots: null,        // {count, bytes} of the conversations' kept state (the worker's 'cache' message)
};
const CONV_KEY = 'cera_web.conversations';
const CONV_MAX = 50;
const convs = {list: [], current: null};   // the kept conversations (see "conversations" below)

function refreshControls() {
  const busy = !state.modelLoaded || state.loading || state.generating || state.lost;
  ui.generate.disabled = busy;
  ui.stop.disabled = !state.generating;
  ui.regenerate.disabled = busy || !state.messages.some((m) => m.role === 'user');
  ui.clear.disabled = state.loading || state.generating || !state.messages.length;
  ui.load.disabled = state.loading || state.generating;
  ui.modelUrl.disabled = state.loading || state.generating;
  ui.modelFile.disabled = state.loading || state.generating;
  ui.modelSelect.disabled = state.loading || state.generating;
  ui.convSelect.disabled = ui.newChat.disabled = state.generating;
  ui.renameChat.disabled = ui.deleteChat.disabled = state.generating || !convs.current;
  for (const b of ui.cacheList.querySelectorAll('button')) b.disabled = state.loading || state.generating;
  ui.reloadModel.disabled = state.loading;
}

// The GPU device was lost (a driver reset, the system reclaiming memory, a tab in the background): one line beside
// the conversation, which stays, and "Reload model" (the conversation's kept prompt cache comes back with it).
function showLost(text) {
  clearError();
  state.lost = true;
  ui.lostText.textContent = `${text.charAt(0).toUpperCase()}${text.slice(1)}. Your conversation is kept.`;
  ui.lost.hidden = false;
  ui.status.textContent = 'The GPU was lost: reload the model';
}

// What the person sees for an error kind (the worker's Python or JS class name, kept in data-kind for tests and
// tools, never shown).
const ERROR_LABELS = {
  GGUFFormatError: 'This is not a usable model file', DownloadError: 'The download failed',
  UnsupportedModelError: 'This model cannot run here', GPUUnavailableError: 'No usable GPU',
  ContextOverflowError: 'The conversation is too long', InputError: 'Check the input', TemplateError: 'Chat template',
  GrammarError: 'Structured output', GPUMemoryError: 'The GPU ran out of memory',
};

// An error, shown next to what caused it: a load's (`where` 'load') under the model bar at the top, a bad schema or
// grammar (kind GrammarError) under the Structured output field, a generation's next to the message box. Only one
// error shows at a time.
function showError(text, kind = '', where = 'run') {
  clearError();
  if (kind === 'GrammarError') where = 'structured';   // a bad schema or grammar: next to its field
  const box = where === 'load' ? ui.loadError : where === 'structured' ? ui.structuredError : ui.error;
  if (where === 'structured') $('settings').open = true;
  let message = kind && text.startsWith(`${kind}: `) ? text.slice(kind.length + 2) : text;
  message = message.replace(/^[A-Z]\w*(Error|Exception): /, '');   // a Python traceback's last line
  if (kind) message = `${ERROR_LABELS[kind] || 'Something went wrong'}: ${message}`;
  box.textContent = message;
  box.dataset.kind = kind;
}
function clearError() {
  for (const box of [ui.error, ui.loadError, ui.structuredError]) {
    box.textContent = '';
    delete box.dataset.kind;
  }
}

function formatBytes(n) {
  if (n >= 1e9) return `${(n / 1e9).toFixed(2)} GB`;
  return n >= 1e6 ? `${(n / 1e6).toFixed(1)} MB` : `${(n / 1e3).toFixed(1)} kB`;
}

// Progress stages (from the worker and the engine); these count bytes.
const STAGE_LABELS = {download: 'Downloading', verify: 'Checking the cached copy', parse: 'Reading the model header',
                      upload: 'Uploading weights to the GPU', compile: 'Compiling GPU kernels',
                      weights: 'Unpacking the weights for the CPU'};
const BYTE_STAGES = new Set(['download', 'verify', 'upload']);

// The rate of a byte stage: bytes since its first message over the time since then.
const rate = {stage: null, t0: 0, done0: 0};

function rateText(stage, done) {
  const now = performance.now();
  if (stage !== rate.stage || done < rate.done0) Object.assign(rate, {stage, t0: now, done0: done});
  const seconds = (now - rate.t0) / 1000;
  return seconds >= 0.2 && done > rate.done0 ? ` · ${formatBytes((done - rate.done0) / seconds)}/s` : '';
}

function showProgress(stage, done, total) {
  if (total > 0) {
    ui.progress.max = total;
    ui.progress.value = Math.min(done, total);
  } else {
    ui.progress.removeAttribute('value');   // indeterminate
  }
  const pct = total > 0 ? ` (${Math.floor((100 * done) / total)}%)` : '';
  const label = STAGE_LABELS[stage] || stage;
  if (BYTE_STAGES.has(stage)) {
    ui.progressText.textContent = (total > 0
      ? `${label}: ${formatBytes(done)} of ${formatBytes(total)}${pct}`
      : `${label}: ${formatBytes(done)}`) + rateText(stage, done);
  } else {
    ui.progressText.textContent = total > 0 ? `${label}: ${done} of ${total}${pct}` : `${label}…`;
  }
}

// A load ended: the progress row goes away (it shows only while a model loads).
function hideProgress(done) {
  ui.progress.max = 1;
  ui.progress.value = done ? 1 : 0;
  ui.progressText.textContent = '';
  ui.progressRow.hidden = true;
}

function fmtRate(tokS, count, ms) {
  const rate = tokS == null ? '—' : tokS.toFixed(tokS < 10 ? 2 : 1);
  const time = ms == null ? '' : `, ${Math.round(ms)} ms`;
  return `${rate} tok/s (${count} tokens${time})`;
}

// The stats line of a finished run. Prefill counts only the prompt tokens processed now (not those the KV cache
// already held from the last turn), so its rate is theirs.
function statsText(msg) {
  const reused = msg.cached_tokens || 0;
  const first = state.firstTokenMs == null ? '' : ` · First token after ${(state.firstTokenMs / 1000).toFixed(2)} s`;
  return `Prefill: ${fmtRate(msg.prefill_tok_s, msg.prompt_tokens.length - reused, msg.prefill_ms)}` +
    (reused ? `, ${reused} more from the cache` : '') +
    ` · Decode: ${fmtRate(msg.decode_tok_s, msg.tokens.length, msg.decode_ms)}` +
    (msg.drafted ? ` · Speculative: ${msg.accepted} of ${msg.drafted} drafted tokens accepted` : '') + first;
}

// A "seed N" button: clicking it puts N in the Seed setting, so the next run repeats this one.
function seedButton(seed) {
  const b = document.createElement('button');
  b.type = 'button';
  b.className = 'seed';
  b.textContent = `seed ${seed}`;
  b.title = 'Use this seed again';
  b.setAttribute('aria-label', `Use seed ${seed}`);
  b.addEventListener('click', () => {
    const input = $('setting-seed');
    if (!input) return;
    input.value = seed;
    settingsForm.edited.add('seed');
    ui.status.textContent = `Seed ${seed} set: the next run with the same settings repeats this one.`;
  });
  return b;
}

// What the status says for each stop reason: protocol.STOP_REASONS, from the worker's 'settings' message.
let stopReasons = {};

const worker = new Worker('/web/worker.js');

worker.onmessage = (event) => {
  const msg = event.data;
  switch (msg.type) {
    case 'status':
      ui.status.textContent = msg.text;
      break;
    case 'progress':
      if (state.loadTimes && state.loading) {
        const ms = performance.now() - state.loadTimes.t0;
        (state.loadTimes.stages[msg.stage] ||= [ms, ms])[1] = ms;
      }
      showProgress(msg.stage, msg.done, msg.total);
      break;
    case 'notice':
      ui.notice.textContent = msg.text;
      break;
    case 'cache':
      showCache(msg);
      break;
    case 'preflight':
      if (msg.url) state.preflight.set(absolute(msg.url), msg);
      showPreflight();
      showMenu();
      // a typed URL's verdict beside its name, before anything downloads
      if (msg.url && ui.modelUrl.value.trim() && absolute(ui.modelUrl.value.trim()) === absolute(msg.url) &&
          ui.modelUrlName.textContent && !ui.modelUrlName.textContent.includes(' — ')) {
        ui.modelUrlName.textContent += ` — ${msg.error ? 'not checked' : msg.summary}`;
      }
      break;
    case 'ready': {
      if (state.loadTimes) {
        state.loadTimes.ready_ms = performance.now() - state.loadTimes.t0;
        state.loadTimes.origin = msg.origin;
      }
      const first = !state.modelLoaded;
      state.modelLoaded = true;
      state.loading = false;
      state.modelUrl = state.loadingUrl;
      state.modelFileObj = state.loadingFile;
      state.lost = false;
      ui.lost.hidden = true;
      // named as the menu names it (webapp: cera_web/names.py, ggufmeta.js's rule); its file on hover
      ui.modelName.textContent = msg.name || msg.file || state.loadingName;
      state.modelFile = msg.file || state.loadingName;
      ui.modelName.title = state.modelFile;
      if (state.modelUrl && msg.name) state.names.set(state.modelUrl, msg.name);
      ui.backend.textContent = msg.backend;
      ui.backendBadge.textContent = msg.backend_kind === 'cpu' ? 'CPU' : 'WebGPU';
      ui.backendBadge.title = `Runs on ${msg.backend_reason}: ${msg.backend}`;
      ui.backendBadge.hidden = false;
      state.split = msg.split;   // the tensors split across buffers (listed with the memory)
      ui.memory.textContent = msg.cpu ? 'none (running on the CPU)' : formatMemory(msg.memory);
      ui.status.textContent = 'Ready';
      ui.cpuOffer.hidden = true;
      hideProgress(true);
      // the conversation goes on with the new model (the worker starts with none: give it this one, and its kept
      // state for this model if there is one)
      if (state.messages.length) worker.postMessage({type: 'chat-set', messages: state.messages});
      restoreState();
      renderConversation();
      modelHasTemplate(msg.chat_template);
      showMenu();
      offerDraft();
      if (first) ui.drawer.open = false;   // the conversation first; the model controls fold into the bar
      break;
    }
    case 'draft':
      ui.useDraft.checked = msg.name != null;
      ui.useDraft.disabled = false;
      hideProgress(true);
      ui.status.textContent = 'Ready';
      ui.notice.textContent = msg.name != null
        ? `${msg.name} drafts, ${ui.modelName.textContent} checks: replies are the same, in fewer passes.`
        : 'Speculative decoding is off.';
      break;
    case 'device-lost':
      showLost(msg.text);
      break;
    case 'settings':
      stopReasons = msg.stop_reasons;
      buildSettings(msg);
      break;
    case 'prompt': {    // the prompt is being processed: progress and rate in the status (and the reply bubble)
      const now = performance.now();
      if (msg.done === 0) state.promptT0 = now;
      const seconds = (now - state.promptT0) / 1000;
      const rate = msg.done > 0 && seconds > 0 ? ` · ${(msg.done / seconds).toFixed(1)} tok/s` : '';
      const text = `Reading the prompt: ${msg.done} of ${msg.total} tokens${rate}`;
      ui.status.textContent = text;
      if (state.running === 'chat' && state.pending && !state.pendingText) {
        state.pending.textContent = text;
        state.pending.classList.add('prompt-progress');
      }
      break;
    }
    case 'token':
      if (state.firstTokenMs == null) {
        state.firstTokenMs = performance.now() - state.runT0;
        if (state.generating) ui.status.textContent = 'Generating…';
      }
      if (state.running === 'chat' && state.pending) {
        state.pending.classList.remove('prompt-progress');
        state.pendingText += msg.text;
        renderPending();
      } else {
        ui.output.append(msg.text);   // a text node per token: cheap, and the live region announces politely
      }
      break;
    case 'done':
      if (msg.mode === 'chat') chatDone(msg);
      else rawDone(msg);
      state.generating = false;
      state.running = null;
      ui.status.textContent = `Ready (${stopReasons[msg.stop_reason] || msg.stop_reason})`;
      if (msg.memory) ui.memory.textContent = formatMemory(msg.memory);   // after every run: a leak would show
      ui.stats.textContent = statsText(msg);
      if (msg.seed != null && msg.mode !== 'chat') ui.stats.append(' · ', seedButton(msg.seed));
      break;
    case 'error':
      if (msg.error_type === 'cancelled') {   // stopped while still queued: it never ran
        ui.status.textContent = `Ready (${stopReasons.cancelled})`;
      } else {
        showError(msg.message, msg.kind, msg.during === 'load' || msg.during === 'cache-delete' ? 'load' : 'run');
      }
      if (msg.during === 'load' && msg.kind === 'GPUUnavailableError' && !state.modelLoaded && state.backend !== 'cpu') {
        ui.cpuOffer.hidden = false;   // offer the CPU fallback
      }
      if (msg.during && msg.during.startsWith('chat-')) {
        renderConversation();   // drop the turn that failed, and give its text back to the message box
        if (msg.during === 'chat-send' && !ui.prompt.value) ui.prompt.value = state.lastSent || '';
      }
      if (msg.during === 'load-draft') {
        ui.useDraft.checked = false;
        ui.useDraft.disabled = false;
        hideProgress(false);
      }
      if (msg.during === 'load' || state.loading) {
        if (state.loadTimes) state.loadTimes.error = msg.message || msg.kind || 'error';
        state.loading = false;
        hideProgress(false);
        ui.status.textContent = state.modelLoaded
          ? `Ready. Loading the new model failed; still using ${ui.modelName.textContent}.`
          : 'Loading failed: see the error below.';
        showMenu();
      } else {
        ui.status.textContent = state.modelLoaded ? 'Ready' : ui.status.textContent;
      }
      state.generating = false;
      state.running = null;
      if (msg.kind === 'DeviceLostError') showLost(msg.message);
      break;
  }
  refreshControls();
};

worker.onerror = (event) => {
  showError(`The worker failed: ${event.message || 'unknown error'}. Reload the page to start again.`, '', 'load');
  state.loading = state.generating = false;
  refreshControls();
};

function formatMemory(m) {
  if (!m) return '—';
  const split = Object.entries(state.split || {}).map(([name, n]) => `${name} split into ${n} buffers`);
  return `${formatBytes(m.total)}: weights ${formatBytes(m.weights)}, KV cache ${formatBytes(m.kv_cache)}, ` +
         `other ${formatBytes(m.other)} (${m.buffers} buffers)` + (split.length ? `; ${split.join(', ')}` : '') +
         (m.wasm_heap ? `; Python heap ${formatBytes(m.wasm_heap)}` : '');
}

function showCache({entries, usage, quota, snapshots}) {
  state.cached = new Set(entries.map((e) => e.url));
  state.snapshots = snapshots;
  showSnapshots();
  showMenu();
  ui.cacheList.textContent = '';
  for (const e of entries) {
    const li = document.createElement('li');
    const name = document.createElement('span');
    name.className = 'name';
    name.textContent = e.name;
    name.title = e.url;
    const size = document.createElement('span');
    size.className = 'size';
    size.textContent = formatBytes(e.size);
    const open = document.createElement('button');   // "Open", not "Load": the Load button's name stays unique
    open.type = 'button';
    open.textContent = 'Open';
    open.setAttribute('aria-label', `Open ${e.name}`);
    open.addEventListener('click', () => { ui.modelUrl.value = e.url; loadModel(e.url); });
    const del = document.createElement('button');
    del.type = 'button';
    del.textContent = 'Delete';
    del.setAttribute('aria-label', `Delete ${e.name}`);
    del.addEventListener('click', () => worker.postMessage({type: 'cache-delete', url: e.url}));
    li.append(name, size, open, del);
    ui.cacheList.append(li);
  }
  ui.cacheUsage.textContent = usage != null && quota != null
    ? `This site uses ${formatBytes(usage)} of the ${formatBytes(quota)} the browser allows it.` : '';
  refreshControls();
}

// The composer's conventions depend on the keyboard: a touch screen's Enter adds a line; Macs say Cmd.
const TOUCH = matchMedia('(pointer: coarse)').matches && !matchMedia('(any-pointer: fine)').matches;
const MOD = /Mac|iPhone|iPad/.test(navigator.platform || '') ? 'Cmd' : 'Ctrl';

// ?max_binding=BYTES lowers the device's storage-binding limit: what a smaller GPU would allow (for testing).
const params = new URLSearchParams(location.search);
const LIMITS = params.get('max_binding') ? {'max-storage-buffer-binding-size': Number(params.get('max_binding'))} : null;

// ?backend=webgpu|cpu forces where the model runs; else the choice the person made ("Run on the CPU", remembered in
// this browser), else 'auto' (WebGPU, or the CPU on a software fallback adapter: webapp.choose_backend).
const BACKEND_KEY = 'cera_web.backend';
const BACKENDS = ['auto', 'webgpu', 'cpu'];
state.backend = (() => {
  if (BACKENDS.includes(params.get('backend'))) return params.get('backend');
  try {
    const kept = localStorage.getItem(BACKEND_KEY);
    if (BACKENDS.includes(kept)) return kept;
  } catch (e) { /* storage off */ }
  return 'auto';
})();

function startLoading(what) {
  clearError();
  ui.notice.textContent = '';
  state.loading = true;
  state.loadingName = what;
  ui.status.textContent = `Loading ${what}…`;
  ui.progressText.textContent = '';
  ui.progressRow.hidden = false;
  refreshControls();
}

const absolute = (url) => new URL(url, location.href).href;
const fileName = (url) => new URL(url, location.href).pathname.split('/').pop() || url;

function loadModel(url) {
  // timings of this load, for tests/bench_browser.py --app: ms from this request to each progress stage's first and
  // last message, and to 'ready' (origin: 'download' or 'cache', as the worker says)
  state.loadTimes = {url, t0: performance.now(), stages: {}, ready_ms: null, origin: null, error: null};
  startLoading(fileName(url));
  state.loadingUrl = absolute(url);
  state.loadingFile = null;
  showMenu();
  menuListed.then(() => nameModel(url));   // a served model's size from the list first: its kept name needs no request
  worker.postMessage({type: 'load', url, limits: LIMITS, backend: state.backend});
}

// -- speculative decoding: the served draft model of the loaded one (serve.py's index: "draft") -------------------

// Offer "Speed up with …" when the loaded model is a served one that names a draft model that is served too.
function offerDraft() {
  const served = state.served.find((m) => absolute(m.url) === absolute(state.modelUrl || ''));
  const draft = served && served.draft && state.served.find((m) => m.url === served.draft);
  ui.draftRow.hidden = !draft;
  ui.useDraft.checked = false;   // a newly loaded model has none
  ui.useDraft.disabled = false;
  if (draft) ui.draftName.textContent = state.names.get(absolute(draft.url)) || draft.file;
}

ui.useDraft.addEventListener('change', () => {
  const served = state.served.find((m) => absolute(m.url) === absolute(state.modelUrl || ''));
  ui.useDraft.disabled = true;
  ui.status.textContent = ui.useDraft.checked ? 'Loading the draft model…' : 'Ready';
  worker.postMessage({type: 'load-draft', url: ui.useDraft.checked ? served.draft : null});
});

// -- the model menu: the served models, with size and cache state ------------------------------------------------

let listedMenu;
const menuListed = new Promise((resolve) => { listedMenu = resolve; });   // the list has come (or failed)

async function fetchMenu() {
  try {
    const resp = await fetch(MODELS_INDEX_URL);
    if (!resp.ok) throw new Error(`HTTP ${resp.status}`);
    state.served = (await resp.json()).models || [];
  } catch (e) {
    state.served = [];   // a static host without the list: the menu shows the loaded model only
  }
  listedMenu();
  showMenu();
  for (const m of state.served) nameModel(m.url);
}

// Reads the model's name from its header (Range requests of its first bytes, before any download) into the menu,
// once a URL; resolves to the name, or null where the header cannot be read (the menu keeps the file name). Names
// read before are kept in this browser (ggufmeta.js describe): a served model's, whose size the list gives, is
// not asked for again while its size stays the same.
const nameReads = new Map();
function nameModel(url) {
  const key = absolute(url);
  if (!nameReads.has(key)) {
    const served = state.served.find((m) => absolute(m.url) === key);
    const size = served && Number.isFinite(served.size) ? served.size : null;
    nameReads.set(key, CeraGGUFMeta.describe(key, {size}).then((found) => {
      if (found) state.names.set(key, found.name);
      showMenu();
      return found && found.name;
    }));
  }
  return nameReads.get(key);
}

// -- will it run here? (issue 30): each listed model's preflight, from its header, before any download ----------

// Asked when a person looks: the panel opened, the menu pointed at or keyed (each model once a page), a URL typed;
// not at page open, where it would queue ahead of the first message (the worker runs one request at a time).
const preflightAsked = new Set();
function askPreflights() {
  for (const m of state.served) askPreflight(m.url);
}
ui.preflightPanel.addEventListener('toggle', () => { if (ui.preflightPanel.open) askPreflights(); });
ui.modelSelect.addEventListener('pointerdown', askPreflights);
ui.modelSelect.addEventListener('keydown', askPreflights);
function askPreflight(url) {
  const key = absolute(url);
  if (preflightAsked.has(key)) return;
  preflightAsked.add(key);
  worker.postMessage({type: 'preflight', url, limits: LIMITS, backend: state.backend});
}

// The preflight of the model at url when it cannot run here at any context (null when it can, or is not known yet).
function refusal(url) {
  const p = state.preflight.get(absolute(url));
  return p && p.report && p.report.refused ? p.report.refused : null;
}

// The list under "Will it run here?": one entry a model asked about (the served ones, a typed URL), its one-line
// summary, and the numbers on opening it.
function showPreflight() {
  ui.preflight.textContent = '';
  for (const [url, p] of state.preflight) {
    const li = document.createElement('li');
    const details = document.createElement('details');
    const summary = document.createElement('summary');
    const name = state.names.get(url) || fileName(url);
    summary.textContent = p.error ? `${name}: not checked (${p.error.message})` : `${name}: ${p.summary}`;
    li.dataset.url = url;
    li.dataset.fits = p.report ? String(!p.report.refused) : '';
    details.append(summary);
    for (const line of p.lines || []) {
      const row = document.createElement('div');
      row.className = 'hint';
      row.textContent = line;
      details.append(row);
    }
    li.append(details);
    ui.preflight.append(li);
  }
}

// The menu: every served model ("name · size · cached", the name from its header, else its file; the file name is
// the entry's title), selected: the loaded (or loading) one; a model loaded from elsewhere (a URL, a file) shows as
// one more entry.
function showMenu() {
  const current = state.loading ? state.loadingUrl : state.modelUrl;
  const currentName = state.names.get(current) || (state.loading ? state.loadingName : ui.modelName.textContent);
  ui.modelSelect.textContent = '';
  let selected = false;
  for (const m of state.served) {
    const url = absolute(m.url);
    const option = document.createElement('option');
    option.value = m.url;
    const cached = state.cached.has(url) ? 'cached' : 'download';
    option.textContent = `${state.names.get(url) || m.file} · ${formatBytes(m.size)} · ${cached}`;
    option.title = m.file;
    const p = state.preflight.get(url);
    if (p && p.summary) option.dataset.preflight = p.summary;   // its line under "Will it run here?"
    if (url === current) option.selected = selected = true;
    ui.modelSelect.append(option);
  }
  if (!selected) {
    const option = document.createElement('option');
    option.value = '';
    option.disabled = true;
    option.selected = true;
    option.textContent = state.modelLoaded || state.loading ? currentName : 'none loaded';
    const file = current ? fileName(current) : state.loading ? state.loadingName : state.modelFile;
    if (file) option.title = file;
    ui.modelSelect.prepend(option);
  }
  // the loaded (or loading) model's size and cache state beside the menu: in view even where a phone cuts the
  // menu's text short
  const served = state.served.find((m) => absolute(m.url) === current);
  ui.modelState.textContent = state.loading ? 'loading…'
    : served ? `${formatBytes(served.size)} · ${state.cached.has(current) ? 'cached' : 'not cached'}` : '';
}

// A model whose preflight says it cannot run here at any context is refused before any download, with the numbers.
function refuse(url) {
  const why = refusal(url);
  if (!why) return false;
  showError(`${state.names.get(absolute(url)) || fileName(url)} cannot run here, so it was not downloaded: ${why}`,
            '', 'load');
  showMenu();   // the menu shows the loaded model again
  return true;
}

// A download over this many bytes asks first (a phone on a metered connection, a slow line).
const CONFIRM_BYTES = 200e6;

ui.modelSelect.addEventListener('change', () => {
  const url = ui.modelSelect.value;
  const served = state.served.find((m) => m.url === url);
  if (url && refuse(url)) return;
  if (served && served.size > CONFIRM_BYTES && !state.cached.has(absolute(url)) &&
      !confirm(`Download ${state.names.get(absolute(url)) || served.file} (${served.file}, ` +
               `${formatBytes(served.size)})? It is kept in this browser afterwards.`)) {
    showMenu();   // the menu shows the loaded model again
    return;
  }
  if (url && !state.loading && !state.generating) {
    ui.modelUrl.value = url;
    loadModel(url);
  }
});

function loadFile(file) {
  if (state.loading || state.generating) {
    showError('Wait for the current load or generation to finish before loading another model.', '', 'load');
    return;
  }
  if (!/\.gguf$/i.test(file.name)) {
    showError(`${file.name} is not a .gguf file: pick or drop a GGUF model file.`, '', 'load');
    return;
  }
  startLoading(file.name);
  state.loadingUrl = null;
  state.loadingFile = file;
  showMenu();
  ui.modelUrl.value = '';
  worker.postMessage({type: 'load', file, limits: LIMITS, backend: state.backend});
}

ui.reloadModel.addEventListener('click', () => {
  if (state.modelFileObj) loadFile(state.modelFileObj);
  else loadModel(state.modelUrl);
});

ui.modelFile.addEventListener('change', () => {
  const file = ui.modelFile.files[0];
  if (file) loadFile(file);
  ui.modelFile.value = '';   // picking the same file again loads it again
});

// Drag-and-drop a file anywhere on the page.
let dragDepth = 0;
const hasFiles = (event) => event.dataTransfer && Array.from(event.dataTransfer.types).includes('Files');
document.addEventListener('dragenter', (event) => {
  if (!hasFiles(event)) return;
  dragDepth += 1;
  ui.dropOverlay.hidden = false;
});
document.addEventListener('dragleave', () => {
  dragDepth = Math.max(0, dragDepth - 1);
  if (!dragDepth) ui.dropOverlay.hidden = true;
});
document.addEventListener('dragover', (event) => { if (hasFiles(event)) event.preventDefault(); });
document.addEventListener('drop', (event) => {
  if (!hasFiles(event)) return;
  event.preventDefault();
  dragDepth = 0;
  ui.dropOverlay.hidden = true;
  const file = event.dataTransfer.files[0];
  if (file) loadFile(file);
});

// A URL typed or pasted into the Model URL field is named (from its header) before anything downloads.
let urlTyped = 0;
ui.modelUrl.addEventListener('input', () => {
  const typed = ++urlTyped;
  ui.modelUrlName.textContent = '';
  setTimeout(async () => {
    const url = ui.modelUrl.value.trim();
    if (typed !== urlTyped || !url) return;
    let file, name;
    try {
      file = fileName(url);
      name = await nameModel(url);
    } catch (e) {
      return;   // not a URL (yet)
    }
    if (typed === urlTyped) ui.modelUrlName.textContent = name ? `${name} (${file})` : file;
    if (typed === urlTyped) askPreflight(url);   // its preflight under "Will it run here?", before any download
  }, 400);
});

ui.loadForm.addEventListener('submit', (event) => {
  event.preventDefault();
  const url = ui.modelUrl.value.trim();
  if (!url) {
    showError('Enter a model URL first: the address of a GGUF file.', '', 'load');
    return;
  }
  if (refuse(url)) return;
  loadModel(url);
});

ui.generateForm.addEventListener('submit', (event) => {
  event.preventDefault();
  if (ui.generate.disabled) return;   // e.g. Ctrl+Enter while a run is going
  const prompt = ui.prompt.value;
  if (!prompt.trim()) {
    showError(state.mode === 'chat' ? 'The message is empty: type a message, then press Send.'
                                    : 'The prompt is empty: type a prompt, then press Generate.');
    ui.prompt.focus();
    return;
  }
  const maxTokens = Number(ui.maxTokens.value);
  if (!Number.isInteger(maxTokens) || maxTokens < 1) {
    showError('Max tokens must be a whole number of at least 1.');
    ui.maxTokens.focus();
    return;
  }
  let extra;
  try {
    extra = structuredSettings();
  } catch (e) {   // a schema that is not JSON: said next to it (as Python's GrammarErrors are), nothing runs
    showError(e.message, 'GrammarError');
    return;
  }
  const settings = {...readSettings(), max_tokens: maxTokens, ...extra};
  if (state.mode === 'chat') {
    if (state.editAt != null) {   // an edited message: the conversation is cut before it, then it is sent
      state.messages = state.messages.slice(0, state.editAt);
      for (const marks of [state.stopped, state.meta]) {
        for (const i of [...marks.keys()]) if (i >= state.editAt) marks.delete(i);
      }
      worker.postMessage({type: 'chat-set', messages: state.messages});
      endEdit();
    }
    state.messages.push({role: 'user', content: prompt});   // shown at once; the worker's reply confirms it
    renderConversation();
    state.messages.pop();
    startRun('chat');
    state.lastSent = prompt;
    state.sending = true;
    ui.prompt.value = '';
    worker.postMessage({type: 'chat-send', id: state.runId, text: prompt, settings, system: ui.system.value});
    return;
  }
  ui.output.textContent = '';
  state.raw = null;
  startRun('raw');
  worker.postMessage({type: 'generate', id: state.runId, prompt, max_tokens: maxTokens, chat: ui.chat.checked,
                      settings});
});

function startRun(mode) {
  state.runId += 1;   // the id of the request about to be sent: its answers and a Stop carry it
  clearError();
  state.runJson = JSON_MODES.has(ui.structured.value);
  ui.stats.textContent = '';
  state.generating = true;
  state.running = mode;
  if (mode === 'chat') {
    state.pending = addTurn('assistant', '', false);
    state.pendingText = '';
  }
  ui.status.textContent = 'Generating…';
  state.runT0 = performance.now();
  state.firstTokenMs = null;
  refreshControls();
}

// -- chat --------------------------------------------------------------------------------------------------------

const ROLE_LABELS = {user: 'You', assistant: 'Assistant', system: 'System'};

// Whether the conversation is scrolled to its end (then it follows new text; else the person is reading back).
const atEnd = () => ui.conversation.scrollHeight - ui.conversation.scrollTop - ui.conversation.clientHeight < 40;
function follow(wasAtEnd) {
  if (wasAtEnd) ui.conversation.scrollTop = ui.conversation.scrollHeight;
}

// One turn of the Conversation list; returns the element its text goes in. Assistant text is rendered as Markdown
// (web/markdown.js: DOM nodes, never HTML); the person's own text as typed. meta: {tokens, tok_s, seed} of the run.
function addTurn(role, text, stopped, meta, index) {
  const li = document.createElement('li');
  li.className = `turn ${role}${stopped ? ' stopped' : ''}`;
  const label = document.createElement('span');
  label.className = 'role';
  label.textContent = ROLE_LABELS[role] || role;
  const content = document.createElement('div');
  content.className = role === 'assistant' ? 'content md' : 'content';
  if (role === 'assistant') showReply(content, text, meta || {});
  else content.textContent = text;
  li.append(label, content);
  if (stopped) {
    const note = document.createElement('span');
    note.className = 'turn-note';
    note.textContent = '(stopped)';
    li.append(note);
  }
  if (meta) {
    const line = document.createElement('div');
    line.className = 'turn-meta';
    line.append(`${meta.tokens} tokens · ${meta.tok_s == null ? '—' : meta.tok_s.toFixed(1)} tok/s`);
    if (meta.seed != null) line.append(' · ', seedButton(meta.seed));
    if (role === 'assistant') line.append(' · ', CeraMarkdown.copyButton(text, 'Copy reply', 'seed'));
    if (meta.stop === 'max_tokens' && index === state.messages.length - 1) line.append(' · ', continueButton());
    li.append(line);
  }
  if (role === 'user' && index != null) {
    const edit = document.createElement('button');
    edit.type = 'button';
    edit.className = 'seed turn-tools';
    edit.textContent = 'Edit';
    edit.setAttribute('aria-label', `Edit message ${index + 1}`);
    edit.addEventListener('click', () => startEdit(index));
    li.append(edit);
  }
  const end = atEnd();
  ui.conversation.append(li);
  follow(end);
  return content;
}

// The reply being streamed, rendered again from its whole text (a code fence may open or close at any token).
let pendingFrame = 0;
function renderPending() {
  if (pendingFrame) return;
  pendingFrame = requestAnimationFrame(() => {
    pendingFrame = 0;
    if (!state.pending) return;
    const end = atEnd();
    state.pending.replaceChildren(state.runJson ? jsonBlock(state.pendingText, false)
                                                : CeraMarkdown.render(state.pendingText));
    follow(end);
  });
}

function renderConversation() {
  ui.conversation.textContent = '';
  state.pending = null;
  state.messages.forEach((m, i) => addTurn(m.role, m.content, state.stopped.has(i), state.meta.get(i), i));
  ui.conversation.scrollTop = ui.conversation.scrollHeight;
}

// A chat turn finished: the worker's conversation is the truth (a turn stopped before any text is dropped there).
function chatDone(msg) {
  const messages = msg.messages || [];
  const last = messages.length - 1;
  for (const marks of [state.stopped, state.meta]) {   // keep marks only where the message is still the same
    for (const i of [...marks.keys()]) {
      if (i >= last || !state.messages[i] || !messages[i] || state.messages[i].content !== messages[i].content) {
        marks.delete(i);
      }
    }
  }
  if (msg.stop_reason === 'cancelled' && last >= 0 && messages[last].role === 'assistant' && msg.tokens.length) {
    state.stopped.add(last);
  }
  if (last >= 0 && messages[last].role === 'assistant') {
    state.meta.set(last, {tokens: msg.tokens.length, tok_s: msg.decode_tok_s, seed: msg.seed, json: state.runJson,
                          logprobs: msg.logprobs, stop: msg.stop_reason});
  }
  state.messages = messages;
  renderConversation();
  saveConversation();
  if (!(msg.stop_reason === 'cancelled' && !msg.tokens.length)) saveState();   // after 'done': the reply never waits
  // Stopped before any reply: the worker dropped the turn; give its message back to the box.
  if (msg.stop_reason === 'cancelled' && !msg.tokens.length && state.sending && !ui.prompt.value) {
    ui.prompt.value = state.lastSent || '';
  }
}

ui.regenerate.addEventListener('click', () => {
  if (ui.regenerate.disabled) return;
  const maxTokens = Number(ui.maxTokens.value);
  if (!Number.isInteger(maxTokens) || maxTokens < 1) {
    showError('Max tokens must be a whole number of at least 1.');
    return;
  }
  let extra;
  try {
    extra = structuredSettings();
  } catch (e) {
    showError(e.message, 'GrammarError');
    return;
  }
  const shown = state.messages.slice();
  if (shown.length && shown[shown.length - 1].role === 'assistant') shown.pop();   // the reply being replaced
  const keep = state.messages;
  state.messages = shown;
  renderConversation();
  state.messages = keep;
  startRun('chat');
  state.sending = false;
  worker.postMessage({type: 'chat-regenerate', id: state.runId,
                      settings: {...readSettings(), max_tokens: maxTokens, ...extra}, system: ui.system.value});
});

ui.clear.addEventListener('click', () => {
  worker.postMessage({type: 'chat-clear'});
  endEdit();
  state.messages = [];
  saveConversation();
  state.stopped.clear();
  state.meta.clear();
  renderConversation();
  clearError();
  ui.stats.textContent = '';
  if (state.modelLoaded) ui.status.textContent = 'Ready';   // not the last run's stop reason
  refreshControls();
});

// -- conversations: kept in this browser, restored after a reload, kept across model switches -------------------

// localStorage[CONV_KEY] = {list: [{id, title, model, messages, updated}] newest first, current: id}: the messages.
// Their model state (the KV cache) is kept apart, by the worker in OPFS (see "prompt cache" below).

function readConversations() {
  try {
    const kept = JSON.parse(localStorage.getItem(CONV_KEY) || 'null');
    if (kept && Array.isArray(kept.list)) Object.assign(convs, {list: kept.list, current: kept.current});
  } catch (e) { /* storage off or damaged: start with none */ }
}

function writeConversations() {
  try {
    localStorage.setItem(CONV_KEY, JSON.stringify({list: convs.list.slice(0, CONV_MAX), current: convs.current}));
  } catch (e) { /* storage off or full: kept for this page only */ }
}

const currentConversation = () => convs.list.find((c) => c.id === convs.current) || null;

// The conversation shown is saved after each turn (a new one gets its first message as its title); an emptied one
// is dropped from the list.
function saveConversation() {
  let c = currentConversation();
  if (!state.messages.some((m) => m.role !== 'system')) {
    if (c) {
      convs.list = convs.list.filter((x) => x !== c);
      forgetState(c.id);
    }
    convs.current = null;
  } else {
    if (!c) {
      const first = state.messages.find((m) => m.role === 'user');
      c = {id: `${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`,
           title: (first ? first.content : 'Chat').replace(/\s+/g, ' ').trim().slice(0, 40)};
      convs.current = c.id;
    }
    Object.assign(c, {messages: state.messages, model: ui.modelName.textContent, updated: Date.now()});
    convs.list = [c, ...convs.list.filter((x) => x !== c)];
    for (const old of convs.list.splice(CONV_MAX)) forgetState(old.id);   // the oldest beyond the limit go
  }
  writeConversations();
  showConversations();
}

function showConversations() {
  ui.convSelect.textContent = '';
  const fresh = document.createElement('option');
  fresh.value = '';
  fresh.textContent = 'New chat';
  ui.convSelect.append(fresh);
  for (const c of convs.list) {
    const o = document.createElement('option');
    o.value = c.id;
    o.textContent = `${c.title} · ${c.messages.filter((m) => m.role !== 'system').length} messages`;
    ui.convSelect.append(o);
  }
  ui.convSelect.value = convs.current || '';
  ui.renameChat.disabled = ui.deleteChat.disabled = !convs.current;
}

// Show conversation c (null: a new, empty one) and give it to the worker, with its kept state. The System prompt
// field shows c's system message (a new one leaves the field as it is).
function openConversation(c) {
  endEdit();
  convs.current = c ? c.id : null;
  state.messages = c ? c.messages.map((m) => ({role: m.role, content: m.content})) : [];
  if (c) ui.system.value = (state.messages.find((m) => m.role === 'system') || {content: ''}).content;
  state.stopped.clear();
  state.meta.clear();
  renderConversation();
  writeConversations();
  showConversations();
  if (state.modelLoaded) worker.postMessage({type: 'chat-set', messages: state.messages});
  restoreState();
  refreshControls();
}

ui.convSelect.addEventListener('change', () => {
  if (state.generating) {
    ui.convSelect.value = convs.current || '';
    return;
  }
  openConversation(convs.list.find((c) => c.id === ui.convSelect.value) || null);
});
ui.newChat.addEventListener('click', () => { if (!state.generating) openConversation(null); });
ui.renameChat.addEventListener('click', () => {
  const c = currentConversation();
  if (!c) return;
  const title = prompt('Name this conversation', c.title);
  if (title == null || !title.trim()) return;
  c.title = title.trim().slice(0, 80);
  writeConversations();
  showConversations();
});
ui.deleteChat.addEventListener('click', () => {
  const c = currentConversation();
  if (!c || state.generating || !confirm(`Delete the conversation "${c.title}"?`)) return;
  convs.list = convs.list.filter((x) => x !== c);
  forgetState(c.id);
  openConversation(null);
});

// -- prompt cache: each conversation's model state, kept in this browser per conversation and model --------------

// The worker keeps the state of the conversation shown (its KV cache, ChatSession.save) in OPFS after each turn and
// restores it when the conversation is shown again (a reload, a switch, another model), so that the next message
// prefills only itself; a kept state that does not fit (another model file, damaged) is deleted with a notice. All of
// them together take at most SNAPSHOT_CAP bytes (the least recently used go first; ?snapshot_cap=BYTES sets it).
// "Keep each chat's prompt cache in this browser" off (remembered): nothing is written, and what was kept goes.
const KEEP_KEY = 'cera_web.keep_state';
const SNAPSHOT_CAP = Number(params.get('snapshot_cap')) || 256 * 2 ** 20;

const keepingState = () => ui.keepState.checked;

function restoreState() {
  if (keepingState() && convs.current && state.modelLoaded) {
    worker.postMessage({type: 'snapshot-restore', conversation: convs.current});
  }
}

function saveState() {
  if (keepingState() && convs.current && state.modelLoaded) {
    worker.postMessage({type: 'snapshot-save', conversation: convs.current, cap: SNAPSHOT_CAP});
  }
}

function forgetState(id) {
  worker.postMessage({type: 'snapshot-delete', conversation: id});
}

function showSnapshots() {
  const s = state.snapshots;
  ui.snapshotUsage.textContent = !keepingState()
    ? 'Off: conversations are kept without their model state; a reopened one reads its whole text again.'
    : s ? `Prompt caches kept: ${s.count} (${formatBytes(s.bytes)} of at most ${formatBytes(SNAPSHOT_CAP)}; the ` +
          'least recently used go first).' : '';
}

try {
  ui.keepState.checked = localStorage.getItem(KEEP_KEY) !== 'off';
} catch (e) { /* storage off: on, for this page */ }
showSnapshots();
ui.keepState.addEventListener('change', () => {
  try { localStorage.setItem(KEEP_KEY, keepingState() ? 'on' : 'off'); } catch (e) { /* storage off */ }
  if (!keepingState()) worker.postMessage({type: 'snapshot-delete'});   // what was kept goes too
  else if (!state.generating) saveState();   // the conversation shown is kept from now on
  showSnapshots();
});

// Edit a sent message: its text goes back to the composer; sending replaces it and drops the turns after it.
function startEdit(index) {
  if (state.generating) return;
  state.editAt = index;
  ui.prompt.value = state.messages[index].content;
  ui.editing.hidden = false;
  ui.prompt.focus();
}
function endEdit() {
  state.editAt = null;
  ui.editing.hidden = true;
}
ui.cancelEdit.addEventListener('click', () => {
  endEdit();
  ui.prompt.value = '';
});

// "Continue" on a reply cut by max tokens: the model goes on with it (the text is appended to the same turn).
function continueButton() {
  const b = document.createElement('button');
  b.type = 'button';
  b.className = 'seed';
  b.textContent = 'Continue';
  b.setAttribute('aria-label', 'Continue this reply');
  b.addEventListener('click', () => {
    if (state.generating || !state.modelLoaded) return;
    const maxTokens = Number(ui.maxTokens.value);
    const last = state.messages.length - 1;
    startRun('chat');
    state.sending = false;
    // the reply streams on where it stopped: its bubble is the one being written
    if (state.pending) state.pending.closest('.turn').remove();   // the new, empty turn startRun added
    const bubbles = ui.conversation.querySelectorAll('.turn.assistant .content');
    state.pending = bubbles[bubbles.length - 1];
    state.pendingText = state.messages[last].content;
    worker.postMessage({type: 'chat-continue', id: state.runId, settings: {...readSettings(), max_tokens: maxTokens},
                        system: ui.system.value});
  });
  return b;
}

// -- mode --------------------------------------------------------------------------------------------------------

function setMode(mode) {
  state.mode = mode;
  const chat = mode === 'chat';
  for (const r of document.querySelectorAll('input[name="mode"]')) r.checked = r.value === mode;
  ui.chatView.hidden = !chat;
  ui.rawView.hidden = chat;
  for (const el of document.querySelectorAll('.chat-only')) el.hidden = !chat;
  for (const el of document.querySelectorAll('.raw-only')) el.hidden = chat;
  ui.promptLabel.textContent = chat ? 'Message' : 'Prompt';
  ui.stats.textContent = '';
  ui.generate.textContent = chat ? 'Send' : 'Generate';
  ui.prompt.placeholder = chat ? (TOUCH ? 'Type a message; the Send button sends it.'
                                       : 'Type a message; Enter sends it, Shift+Enter adds a line.')
                               : `Start a text for the model to continue; ${MOD}+Enter generates.`;
  applyDefaults(false);
  refreshControls();
}

for (const r of document.querySelectorAll('input[name="mode"]')) {
  r.addEventListener('change', () => {
    if (!r.checked) return;
    state.modeChosen = true;
    setMode(r.value);
  });
}

// A loaded model with a chat template opens in chat mode (unless the person chose a mode); one without is a base
// model: raw completion only, and the Chat template box (which would fall back to ChatML) starts unticked.
function modelHasTemplate(has) {
  ui.chatRadio.disabled = !has;
  ui.chat.checked = false;
  ui.modeHint.textContent = has ? '' : 'This model has no chat template: it continues text.';
  if (!has) setMode('raw');
  else if (!state.modeChosen) setMode('chat');
}

// -- settings ----------------------------------------------------------------------------------------------------

// Built from the worker's 'settings' message (SamplingParams.describe()). Each field shows the default of the mode
// (chat: SamplingParams(); raw completion: greedy) until the person edits it; values go to the engine as typed, so
// a bad one comes back as the engine's InputError.
const settingsForm = {fields: [], raw: {}, edited: new Set()};

const asText = (v) => (v == null ? '' : Array.isArray(v) ? v.join(v.length && typeof v[0] === 'string' ? '\n' : ', ')
                       : typeof v === 'object' ? JSON.stringify(v) : String(v));   // logit_bias: JSON text

function buildSettings({fields, raw}) {
  settingsForm.fields = fields.filter((f) => f.name !== 'max_tokens');   // Max tokens sits next to the buttons
  settingsForm.raw = raw;
  ui.settingsFields.textContent = '';
  for (const f of settingsForm.fields) {
    const row = document.createElement('div');
    row.className = 'setting';
    const id = `setting-${f.name}`;
    let input;
    const label = document.createElement('label');
    label.htmlFor = id;
    label.textContent = f.label;
    if (typeof f.default === 'boolean') {
      input = document.createElement('input');
      input.type = 'checkbox';
    } else if (f.name === 'stop') {
      input = document.createElement('textarea');
      input.rows = 2;
    } else {
      input = document.createElement('input');
      input.type = 'text';
      input.inputMode = Number.isInteger(f.default) || f.name === 'seed' || f.name === 'stop_token_ids'
        ? 'numeric' : 'decimal';
      input.spellcheck = false;
      input.autocomplete = 'off';
    }
    input.id = id;
    input.dataset.name = f.name;
    const help = document.createElement('span');
    help.className = 'hint';
    help.id = `${id}-help`;
    const range = f.min != null && f.max != null && typeof f.default === 'number'
      ? ` (${f.min} to ${f.max})` : '';
    help.textContent = f.help + range + (f.name === 'stop' ? '; one a line, \\n for a newline' : '') +
      (f.name === 'stop_token_ids' ? '; separated by commas' : '');
    input.setAttribute('aria-describedby', help.id);
    input.addEventListener('input', () => settingsForm.edited.add(f.name));
    row.append(label, input, help);
    ui.settingsFields.append(row);
  }
  ui.settingsHint.textContent = 'Chat uses these defaults; a raw completion starts greedy (temperature 0, no ' +
    'repetition penalty). Edited values are kept for both.';
  ui.resetSettings.hidden = false;
  applyDefaults(false);
}

// Show the current mode's defaults in every field the person has not edited (all of them when `all`).
function applyDefaults(all) {
  if (all) settingsForm.edited.clear();
  for (const f of settingsForm.fields) {
    if (settingsForm.edited.has(f.name)) continue;
    const value = state.mode === 'raw' && f.name in settingsForm.raw ? settingsForm.raw[f.name] : f.default;
    const input = $(`setting-${f.name}`);
    if (input.type === 'checkbox') input.checked = !!value;
    else input.value = asText(value);
  }
}

ui.resetSettings.addEventListener('click', () => {
  applyDefaults(true);
  if (ui.error.dataset.kind === 'InputError') {   // a setting's error: the defaults fixed it
    ui.error.textContent = '';
    delete ui.error.dataset.kind;
  }
});

// The settings as typed: {name: text, or a boolean for checkboxes}; parsed and checked in Python.
function readSettings() {
  const out = {};
  for (const f of settingsForm.fields) {
    const input = $(`setting-${f.name}`);
    out[f.name] = input.type === 'checkbox' ? input.checked : input.value;
  }
  return out;
}

// -- structured output and token probabilities --------------------------------------------------------------------

// Structured output (Off, JSON object, JSON Schema, Grammar) and "Show token probabilities" live in the Settings
// panel and apply to every run from the next one on, chat and raw completion alike. Like the other settings they
// stay as set for the life of the page (mode switches and new models keep them).
const JSON_MODES = new Set(['json', 'schema']);   // their replies show as a formatted JSON code block
const TOP_N = 5;                                  // the alternatives a token's tooltip lists

// The run's extra settings: response_format (OpenAI-style, checked in Python) and, only when the probabilities are
// shown, logprobs. Throws an Error with a one-line message for a field that cannot be sent (a schema that is not
// JSON); the message box keeps its text.
function structuredSettings() {
  const out = {};
  const mode = ui.structured.value;
  if (mode === 'json') {
    out.response_format = {type: 'json_object'};
  } else if (mode === 'schema') {
    const text = ui.schema.value.trim();
    if (!text) throw new Error('Paste a JSON Schema into the field first, or set Structured output to Off.');
    let schema;
    try {
      schema = JSON.parse(text);
    } catch (e) {
      throw new Error(`the JSON Schema is not valid JSON (the browser says: ${e.message}); fix it, then send again.`);
    }
    out.response_format = {type: 'json_schema', json_schema: {name: 'page', schema}};
  } else if (mode === 'grammar') {
    if (!ui.grammar.value.trim()) throw new Error('Type a GBNF grammar into the field first (root ::= ...), ' +
                                                  'or set Structured output to Off.');
    out.response_format = {type: 'grammar', grammar: ui.grammar.value};
  }
  if (ui.tokenProbs.checked) Object.assign(out, {logprobs: true, top_logprobs: TOP_N});
  return out;
}

function showStructuredField() {
  ui.schema.hidden = ui.structured.value !== 'schema';
  ui.grammar.hidden = ui.structured.value !== 'grammar';
  ui.structuredError.textContent = '';
}
ui.structured.addEventListener('change', showStructuredField);
showStructuredField();   // the browser may have restored the fields of a reloaded page

// A reply's text as it should be read: token by token with probabilities (when they were asked for and are
// shown), a formatted JSON code block (JSON modes), else Markdown.
function showReply(el, text, meta) {
  if (meta.logprobs && ui.tokenProbs.checked) el.replaceChildren(tokenView(meta.logprobs));
  else el.replaceChildren(meta.json ? jsonBlock(text, true) : CeraMarkdown.render(text));
}

// JSON text as a code block: indented when it parses (final), as it is while it streams or when it was cut short.
function jsonBlock(text, final) {
  return CeraMarkdown.render('```json\n' + (final ? prettyJson(text) : text) + '\n```');
}
function prettyJson(text) {
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch (e) {
    return text;
  }
}

const percent = (logprob) => `${(100 * Math.exp(logprob)).toPrecision(3)}%`;
const tokenInfo = new WeakMap();   // a token's span -> its {text, logprob, top} (webapp.token_probs)

// The tokens of a reply, each a span tinted by its probability (red: unlikely, green: certain); hovering (or
// tapping) one shows its probability and the top alternatives. A token holding a newline shows a ↵ before it, one
// holding only part of a character (completed by the next token) a …, so that each has something to hover.
function tokenView(entries) {
  const view = document.createElement('div');
  view.className = 'token-view';
  view.tabIndex = 0;   // keyboard: focus the reply, then the arrow keys go from token to token
  view.setAttribute('aria-label', 'Reply tokens: the arrow keys go from token to token, each with its probability');
  for (const e of entries) {
    const span = document.createElement('span');
    span.className = e.text.includes('\n') ? 'tok nl' : e.text ? 'tok' : 'tok part';   // CSS marks these visibly
    span.textContent = e.text;
    const p = Math.exp(e.logprob);
    span.dataset.p = p.toFixed(4);
    span.tabIndex = -1;
    span.style.backgroundColor = `hsl(${Math.round(120 * p)} 75% 50% / ${(0.1 + 0.35 * (1 - p)).toFixed(2)})`;
    tokenInfo.set(span, e);
    view.append(span);
  }
  return view;
}

const tip = document.createElement('div');
tip.id = 'token-tip';
tip.setAttribute('role', 'tooltip');
tip.hidden = true;
document.body.append(tip);

function tokenCode(text) {   // a token's text quoted, with its spaces and newlines visible
  const c = document.createElement('code');
  c.textContent = JSON.stringify(text);
  return c;
}

function showTip(span) {
  const e = tokenInfo.get(span);
  if (!e) return;
  const head = document.createElement('div');
  head.className = 'tip-head';
  head.append(tokenCode(e.text), ` ${percent(e.logprob)}`);
  const list = document.createElement('ol');
  for (const [text, logprob] of e.top) {
    const li = document.createElement('li');
    const p = document.createElement('span');
    p.className = 'p';
    p.textContent = percent(logprob);
    li.append(tokenCode(text), p);
    list.append(li);
  }
  tip.replaceChildren(head, list);
  tip.hidden = false;
  span.setAttribute('aria-describedby', 'token-tip');
  const r = span.getBoundingClientRect();
  const w = tip.offsetWidth;
  const h = tip.offsetHeight;
  tip.style.left = `${Math.max(4, Math.min(r.left, innerWidth - w - 4))}px`;
  tip.style.top = `${r.bottom + 4 + h <= innerHeight ? r.bottom + 4 : Math.max(4, r.top - h - 4)}px`;
}

for (const box of [ui.conversation, ui.output]) {
  box.addEventListener('mouseover', (event) => {
    const span = event.target.closest('.tok');
    if (span) showTip(span);
  });
  box.addEventListener('mouseout', (event) => {
    if (event.target.closest('.tok')) tip.hidden = true;
  });
  box.addEventListener('click', (event) => {   // a touch screen has no hover: a tap shows it
    const span = event.target.closest('.tok');
    if (span) showTip(span);
  });
  box.addEventListener('scroll', () => { tip.hidden = true; });
  box.addEventListener('focusin', (event) => {
    if (event.target.classList.contains('token-view')) event.target.querySelector('.tok')?.focus();
    else if (event.target.classList.contains('tok')) showTip(event.target);
  });
  box.addEventListener('focusout', () => { tip.hidden = true; });
  box.addEventListener('keydown', (event) => {
    const span = event.target.closest('.tok');
    const next = span && {ArrowRight: span.nextElementSibling, ArrowLeft: span.previousElementSibling}[event.key];
    if (next) {
      event.preventDefault();
      next.focus();
    }
  });
}

// A raw completion finished: show it again as JSON or as tokens when it should be (else the streamed text stays).
function rawDone(msg) {
  state.raw = {text: msg.text, json: state.runJson, logprobs: msg.logprobs};
  if (state.raw.json || state.raw.logprobs) showRaw();
}
function showRaw() {
  const r = state.raw;
  if (!r) return;
  if (r.logprobs && ui.tokenProbs.checked) ui.output.replaceChildren(tokenView(r.logprobs));
  else ui.output.textContent = r.json ? prettyJson(r.text) : r.text;
}

// The toggle changes how the finished replies show (a run in flight asked for probabilities or not when it began).
ui.tokenProbs.addEventListener('change', () => {
  tip.hidden = true;
  if (state.generating) return;
  const top = ui.conversation.scrollTop;
  renderConversation();
  ui.conversation.scrollTop = top;
  showRaw();
});

// -- no WebGPU ---------------------------------------------------------------------------------------------------

ui.runCpu.addEventListener('click', () => {
  state.backend = 'cpu';
  try { localStorage.setItem(BACKEND_KEY, 'cpu'); } catch (e) { /* storage off: not remembered */ }
  ui.cpuOffer.hidden = true;
  loadModel(ui.modelUrl.value.trim() || initialUrl);
});

// The composer, as chat apps have it: in chat, Enter sends and Shift+Enter adds a line (on a touch screen Enter adds
// a line and the Send button sends); a raw prompt is text, so Enter adds a line there and Ctrl/Cmd+Enter generates.
// A key that ends an IME composition (isComposing, or keyCode 229 in some browsers) is the IME's, never a send.
ui.prompt.addEventListener('keydown', (event) => {
  if (event.key !== 'Enter' || event.isComposing || event.keyCode === 229) return;
  const send = event.ctrlKey || event.metaKey || (state.mode === 'chat' && !event.shiftKey && !event.altKey && !TOUCH);
  if (!send) return;
  event.preventDefault();
  ui.generateForm.requestSubmit();
});

ui.stop.addEventListener('click', () => {
  worker.postMessage({type: 'cancel', id: state.runId});
  ui.status.textContent = 'Stopping…';
});

// ?mode=chat|raw picks the mode the page opens in (default: chat for a model with a chat template, else raw).
if (['chat', 'raw'].includes(params.get('mode'))) state.modeChosen = true;
setMode(params.get('mode') === 'raw' ? 'raw' : 'chat');

// The conversations kept in this browser: the last one shown comes back (the worker gets it once a model is ready).
readConversations();
showConversations();
if (currentConversation()) openConversation(currentConversation());

// ?model=URL picks another model to load on open.
const initialUrl = params.get('model') || DEFAULT_MODEL_URL;
ui.modelUrl.value = initialUrl;
loadModel(initialUrl);
worker.postMessage({type: 'cache-list'});
fetchMenu();
