// The page: controls and display only. All Python, model and GPU work happens in web/worker.js (protocol there).
'use strict';

const DEFAULT_MODEL_URL = '/models/SmolLM2-135M-Instruct.Q4_1.gguf';

const $ = (id) => document.getElementById(id);
const ui = {
  modelName: $('model-name'), backend: $('backend'), status: $('status'),
  progress: $('progress'), progressText: $('progress-text'),
  loadForm: $('load-form'), modelUrl: $('model-url'), load: $('load'),
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
}

function showError(text) { ui.error.textContent = text; }
function clearError() { ui.error.textContent = ''; }

function formatBytes(n) {
  return n >= 1e6 ? `${(n / 1e6).toFixed(1)} MB` : `${(n / 1e3).toFixed(1)} kB`;
}

// Progress stages (from the worker and the engine); these two count bytes.
const STAGE_LABELS = {download: 'Downloading', parse: 'Reading the model header', upload: 'Uploading weights to the GPU',
                      compile: 'Compiling GPU kernels'};
const BYTE_STAGES = new Set(['download', 'upload']);

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
    ui.progressText.textContent = total > 0
      ? `${label}: ${formatBytes(done)} of ${formatBytes(total)}${pct}`
      : `${label}: ${formatBytes(done)}`;
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
    case 'ready':
      state.modelLoaded = true;
      state.loading = false;
      ui.modelName.textContent = msg.model;
      ui.backend.textContent = msg.backend;
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

function loadModel(url) {
  clearError();
  state.loading = true;
  ui.status.textContent = `Loading ${url}…`;
  refreshControls();
  worker.postMessage({type: 'load', url});
}

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
const initialUrl = new URLSearchParams(location.search).get('model') || DEFAULT_MODEL_URL;
ui.modelUrl.value = initialUrl;
loadModel(initialUrl);
