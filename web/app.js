// The page: controls and display only. All Python, model and GPU work happens in web/worker.js (protocol there).
'use strict';

const DEFAULT_MODEL_URL = '/models/SmolLM2-135M-Instruct.Q4_1.gguf';

const $ = (id) => document.getElementById(id);
const ui = {
  modelName: $('model-name'), backend: $('backend'), status: $('status'),
  progress: $('progress'), progressText: $('progress-text'),
  loadForm: $('load-form'), modelUrl: $('model-url'), load: $('load'), modelFile: $('model-file'),
  notice: $('notice'), memory: $('memory'), cacheList: $('cache-list'), cacheUsage: $('cache-usage'),
  dropOverlay: $('drop-overlay'),
  generateForm: $('generate-form'), prompt: $('prompt'), chat: $('chat'), maxTokens: $('max-tokens'),
  generate: $('generate'), stop: $('stop'),
  error: $('error'), output: $('output'), stats: $('stats'),
};

const state = {modelLoaded: false, loading: false, generating: false};

function refreshControls() {
  ui.generate.disabled = !state.modelLoaded || state.loading || state.generating;
  ui.stop.disabled = !state.generating;
  ui.load.disabled = state.loading || state.generating;
  ui.modelUrl.disabled = state.loading || state.generating;
  ui.modelFile.disabled = state.loading || state.generating;
  for (const b of ui.cacheList.querySelectorAll('button')) b.disabled = state.loading || state.generating;
}

function showError(text) { ui.error.textContent = text; }
function clearError() { ui.error.textContent = ''; }

function formatBytes(n) {
  if (n >= 1e9) return `${(n / 1e9).toFixed(2)} GB`;
  return n >= 1e6 ? `${(n / 1e6).toFixed(1)} MB` : `${(n / 1e3).toFixed(1)} kB`;
}

// Progress stages (from the worker and the engine); these count bytes.
const STAGE_LABELS = {download: 'Downloading', verify: 'Checking the cached copy', parse: 'Reading the model header',
                      upload: 'Uploading weights to the GPU', compile: 'Compiling GPU kernels'};
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

function hideProgress(done) {
  ui.progress.max = 1;
  ui.progress.value = done ? 1 : 0;
  ui.progressText.textContent = '';
}

function fmtRate(tokS, count, ms) {
  const rate = tokS == null ? '—' : tokS.toFixed(tokS < 10 ? 2 : 1);
  const time = ms == null ? '' : `, ${Math.round(ms)} ms`;
  return `${rate} tok/s (${count} tokens${time})`;
}

const STOP_REASONS = {eos: 'end of text', max_tokens: 'max tokens reached', cancelled: 'stopped',
                      context: 'context window full'};

const worker = new Worker('/web/worker.js');

worker.onmessage = (event) => {
  const msg = event.data;
  switch (msg.type) {
    case 'status':
      ui.status.textContent = msg.text;
      break;
    case 'progress':
      showProgress(msg.stage, msg.done, msg.total);
      break;
    case 'notice':
      ui.notice.textContent = msg.text;
      break;
    case 'cache':
      showCache(msg);
      break;
    case 'ready':
      state.modelLoaded = true;
      state.loading = false;
      ui.modelName.textContent = msg.model;
      ui.backend.textContent = msg.backend;
      ui.memory.textContent = formatMemory(msg.memory);
      ui.status.textContent = 'Ready';
      hideProgress(true);
      break;
    case 'token':
      ui.output.append(msg.text);   // a text node per token: cheap, and the live region announces politely
      break;
    case 'done':
      state.generating = false;
      ui.status.textContent = `Ready (${STOP_REASONS[msg.stop_reason] || msg.stop_reason})`;
      ui.stats.textContent =
        `Prefill: ${fmtRate(msg.prefill_tok_s, msg.prompt_tokens.length, msg.prefill_ms)} · ` +
        `Decode: ${fmtRate(msg.decode_tok_s, msg.tokens.length, msg.decode_ms)}`;
      break;
    case 'error':
      // Python's last traceback line already starts with the class name.
      showError(msg.message.startsWith(`${msg.kind}:`) ? msg.message : `${msg.kind}: ${msg.message}`);
      if (msg.during === 'load' || state.loading) {
        state.loading = false;
        hideProgress(false);
        ui.status.textContent = state.modelLoaded
          ? `Ready. Loading the new model failed; still using ${ui.modelName.textContent}.`
          : 'Loading failed: see the error below.';
      } else {
        ui.status.textContent = state.modelLoaded ? 'Ready' : ui.status.textContent;
      }
      state.generating = false;
      break;
  }
  refreshControls();
};

worker.onerror = (event) => {
  showError(`The worker failed: ${event.message || 'unknown error'}. Reload the page to start again.`);
  state.loading = state.generating = false;
  refreshControls();
};

function formatMemory(m) {
  if (!m) return '—';
  return `${formatBytes(m.total)}: weights ${formatBytes(m.weights)}, KV cache ${formatBytes(m.kv_cache)}, ` +
         `other ${formatBytes(m.other)} (${m.buffers} buffers)`;
}

function showCache({entries, usage, quota}) {
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

// ?max_binding=BYTES lowers the device's storage-binding limit: what a smaller GPU would allow (for testing).
const params = new URLSearchParams(location.search);
const LIMITS = params.get('max_binding') ? {'max-storage-buffer-binding-size': Number(params.get('max_binding'))} : null;

function startLoading(what) {
  clearError();
  ui.notice.textContent = '';
  state.loading = true;
  ui.status.textContent = `Loading ${what}…`;
  refreshControls();
}

function loadModel(url) {
  startLoading(url);
  worker.postMessage({type: 'load', url, limits: LIMITS});
}

function loadFile(file) {
  if (state.loading || state.generating) {
    showError('Wait for the current load or generation to finish before loading another model.');
    return;
  }
  if (!/\.gguf$/i.test(file.name)) {
    showError(`${file.name} is not a .gguf file: pick or drop a GGUF model file.`);
    return;
  }
  startLoading(file.name);
  ui.modelUrl.value = '';
  worker.postMessage({type: 'load', file, limits: LIMITS});
}

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

ui.loadForm.addEventListener('submit', (event) => {
  event.preventDefault();
  const url = ui.modelUrl.value.trim();
  if (!url) {
    showError('Enter a model URL first: the address of a GGUF file.');
    return;
  }
  loadModel(url);
});

ui.generateForm.addEventListener('submit', (event) => {
  event.preventDefault();
  if (ui.generate.disabled) return;   // e.g. Ctrl+Enter while a run is going
  const prompt = ui.prompt.value;
  if (!prompt.trim()) {
    showError('The prompt is empty: type a prompt, then press Generate.');
    ui.prompt.focus();
    return;
  }
  const maxTokens = Number(ui.maxTokens.value);
  if (!Number.isInteger(maxTokens) || maxTokens < 1) {
    showError('Max tokens must be a whole number of at least 1.');
    ui.maxTokens.focus();
    return;
  }
  clearError();
  ui.output.textContent = '';
  ui.stats.textContent = '';
  state.generating = true;
  ui.status.textContent = 'Generating…';
  refreshControls();
  worker.postMessage({type: 'generate', prompt, maxTokens, chat: ui.chat.checked});
});

ui.prompt.addEventListener('keydown', (event) => {
  if (event.key === 'Enter' && (event.ctrlKey || event.metaKey)) ui.generateForm.requestSubmit();
});

ui.stop.addEventListener('click', () => {
  worker.postMessage({type: 'stop'});
  ui.status.textContent = 'Stopping…';
});

// ?model=URL picks another model to load on open.
const initialUrl = params.get('model') || DEFAULT_MODEL_URL;
ui.modelUrl.value = initialUrl;
loadModel(initialUrl);
worker.postMessage({type: 'cache-list'});
