// The page: controls and display only. All Python, model and GPU work happens in web/worker.js (protocol there).
'use strict';

const DEFAULT_MODEL_URL = '/models/SmolLM2-135M-Instruct.Q4_1.gguf';
// The mode the page opens in. Raw completion, so far: the page tests drive the Prompt/Generate/Output flow without
// choosing a mode. ?mode=chat opens in chat mode.
const DEFAULT_MODE = 'raw';

const $ = (id) => document.getElementById(id);
const ui = {
  modelName: $('model-name'), backend: $('backend'), status: $('status'),
  progress: $('progress'), progressText: $('progress-text'),
  loadForm: $('load-form'), modelUrl: $('model-url'), load: $('load'), modelFile: $('model-file'),
  notice: $('notice'), memory: $('memory'), cacheList: $('cache-list'), cacheUsage: $('cache-usage'),
  dropOverlay: $('drop-overlay'),
  generateForm: $('generate-form'), prompt: $('prompt'), chat: $('chat'), maxTokens: $('max-tokens'),
  generate: $('generate'), stop: $('stop'), regenerate: $('regenerate'), clear: $('clear'),
  error: $('error'), output: $('output'), stats: $('stats'),
  promptLabel: $('prompt-label'), chatView: $('chat-view'), rawView: $('raw-view'), conversation: $('conversation'),
  settingsFields: $('settings-fields'), settingsHint: $('settings-hint'), resetSettings: $('reset-settings'),
  cpuOffer: $('cpu-offer'), runCpu: $('run-cpu'),
};

const state = {
  modelLoaded: false, loading: false, generating: false,
  mode: 'raw',            // 'chat' or 'raw' (the Mode radio buttons)
  running: null,          // the mode of the generation in flight
  cpu: false,             // the person chose to run without WebGPU: loads ask for the CPU fallback
  messages: [],           // the conversation as the worker's ChatSession holds it ({role, content})
  stopped: new Set(),     // indexes of assistant messages that were stopped before their end
  pending: null,          // the content element of the assistant turn being streamed
  sending: false,         // the chat run in flight answers a new message (not a Regenerate)
  lastSent: '',           // that message's text
  split: null,            // {tensor: buffers} of the loaded model's weights split across buffers
};

function refreshControls() {
  const busy = !state.modelLoaded || state.loading || state.generating;
  ui.generate.disabled = busy;
  ui.stop.disabled = !state.generating;
  ui.regenerate.disabled = busy || !state.messages.some((m) => m.role === 'user');
  ui.clear.disabled = state.loading || state.generating || !state.messages.length;
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
      state.split = msg.split;   // the tensors split across buffers (listed with the memory)
      ui.memory.textContent = msg.cpu ? 'none (running on the CPU)' : formatMemory(msg.memory);
      ui.status.textContent = 'Ready';
      ui.cpuOffer.hidden = true;
      hideProgress(true);
      state.messages = [];        // a new model starts a new conversation (in the worker too)
      state.stopped.clear();
      renderConversation();
      break;
    case 'settings':
      buildSettings(msg);
      break;
    case 'token':
      // a text node per token: cheap, and the live regions announce politely
      if (state.running === 'chat' && state.pending) state.pending.append(msg.text);
      else ui.output.append(msg.text);
      break;
    case 'done':
      if (msg.mode === 'chat') chatDone(msg);
      state.generating = false;
      state.running = null;
      ui.status.textContent = `Ready (${STOP_REASONS[msg.stop_reason] || msg.stop_reason})`;
      if (msg.memory) ui.memory.textContent = formatMemory(msg.memory);   // after every run: a leak would show
      ui.stats.textContent =
        `Prefill: ${fmtRate(msg.prefill_tok_s, msg.prompt_tokens.length, msg.prefill_ms)} · ` +
        `Decode: ${fmtRate(msg.decode_tok_s, msg.tokens.length, msg.decode_ms)}`;
      break;
    case 'error':
      // Python's last traceback line already starts with the class name.
      showError(msg.message.startsWith(`${msg.kind}:`) ? msg.message : `${msg.kind}: ${msg.message}`);
      if (msg.during === 'load' && msg.kind === 'GPUUnavailableError' && !state.modelLoaded && !state.cpu) {
        ui.cpuOffer.hidden = false;   // offer the CPU fallback
      }
      if (msg.during && msg.during.startsWith('chat-')) {
        renderConversation();   // drop the turn that failed, and give its text back to the message box
        if (msg.during === 'chat-send' && !ui.prompt.value) ui.prompt.value = state.lastSent || '';
      }
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
      state.running = null;
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
  const split = Object.entries(state.split || {}).map(([name, n]) => `${name} split into ${n} buffers`);
  return `${formatBytes(m.total)}: weights ${formatBytes(m.weights)}, KV cache ${formatBytes(m.kv_cache)}, ` +
         `other ${formatBytes(m.other)} (${m.buffers} buffers)` + (split.length ? `; ${split.join(', ')}` : '') +
         (m.wasm_heap ? `; Python heap ${formatBytes(m.wasm_heap)}` : '');
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
  worker.postMessage({type: 'load', url, limits: LIMITS, cpu: state.cpu});
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
  worker.postMessage({type: 'load', file, limits: LIMITS, cpu: state.cpu});
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
  const settings = {...readSettings(), max_tokens: maxTokens};
  if (state.mode === 'chat') {
    state.messages.push({role: 'user', content: prompt});   // shown at once; the worker's reply confirms it
    renderConversation();
    state.messages.pop();
    startRun('chat');
    state.lastSent = prompt;
    state.sending = true;
    ui.prompt.value = '';
    worker.postMessage({type: 'chat-send', text: prompt, settings});
    return;
  }
  ui.output.textContent = '';
  startRun('raw');
  worker.postMessage({type: 'generate', prompt, maxTokens, chat: ui.chat.checked, settings});
});

function startRun(mode) {
  clearError();
  ui.stats.textContent = '';
  state.generating = true;
  state.running = mode;
  if (mode === 'chat') state.pending = addTurn('assistant', '', false);
  ui.status.textContent = 'Generating…';
  refreshControls();
}

// -- chat --------------------------------------------------------------------------------------------------------

const ROLE_LABELS = {user: 'You', assistant: 'Assistant', system: 'System'};

// One turn of the Conversation list; returns the element its text goes in.
function addTurn(role, text, stopped) {
  const li = document.createElement('li');
  li.className = `turn ${role}${stopped ? ' stopped' : ''}`;
  const label = document.createElement('span');
  label.className = 'role';
  label.textContent = ROLE_LABELS[role] || role;
  const content = document.createElement('div');
  content.className = 'content';
  content.textContent = text;
  li.append(label, content);
  if (stopped) {
    const note = document.createElement('span');
    note.className = 'turn-note';
    note.textContent = '(stopped)';
    li.append(note);
  }
  ui.conversation.append(li);
  li.scrollIntoView({block: 'nearest'});
  return content;
}

function renderConversation() {
  ui.conversation.textContent = '';
  state.pending = null;
  state.messages.forEach((m, i) => addTurn(m.role, m.content, state.stopped.has(i)));
}

// A chat turn finished: the worker's conversation is the truth (a turn stopped before any text is dropped there).
function chatDone(msg) {
  const messages = msg.messages || [];
  const last = messages.length - 1;
  for (const i of [...state.stopped]) {   // keep marks only where the message is still the same
    if (i >= last || !state.messages[i] || state.messages[i].content !== messages[i].content) state.stopped.delete(i);
  }
  if (msg.stop_reason === 'cancelled' && last >= 0 && messages[last].role === 'assistant' && msg.tokens.length) {
    state.stopped.add(last);
  }
  state.messages = messages;
  renderConversation();
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
  const shown = state.messages.slice();
  if (shown.length && shown[shown.length - 1].role === 'assistant') shown.pop();   // the reply being replaced
  const keep = state.messages;
  state.messages = shown;
  renderConversation();
  state.messages = keep;
  startRun('chat');
  state.sending = false;
  worker.postMessage({type: 'chat-regenerate', settings: {...readSettings(), max_tokens: maxTokens}});
});

ui.clear.addEventListener('click', () => {
  worker.postMessage({type: 'chat-clear'});
  state.messages = [];
  state.stopped.clear();
  renderConversation();
  clearError();
  ui.stats.textContent = '';
  refreshControls();
});

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
  ui.generate.textContent = chat ? 'Send' : 'Generate';
  ui.prompt.placeholder = chat ? 'Type a message; Ctrl+Enter sends it.'
                               : 'Ask something, or start a text for the model to continue.';
  applyDefaults(false);
  refreshControls();
}

for (const r of document.querySelectorAll('input[name="mode"]')) {
  r.addEventListener('change', () => { if (r.checked) setMode(r.value); });
}

// -- settings ----------------------------------------------------------------------------------------------------

// Built from the worker's 'settings' message (SamplingParams.describe()). Each field shows the default of the mode
// (chat: SamplingParams(); raw completion: greedy) until the person edits it; values go to the engine as typed, so
// a bad one comes back as the engine's InputError.
const settingsForm = {fields: [], raw: {}, edited: new Set()};

const asText = (v) => (v == null ? '' : Array.isArray(v) ? v.join(v.length && typeof v[0] === 'string' ? '\n' : ', ')
                                                         : String(v));

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

ui.resetSettings.addEventListener('click', () => applyDefaults(true));

// The settings as typed: {name: text, or a boolean for checkboxes}; parsed and checked in Python.
function readSettings() {
  const out = {};
  for (const f of settingsForm.fields) {
    const input = $(`setting-${f.name}`);
    out[f.name] = input.type === 'checkbox' ? input.checked : input.value;
  }
  return out;
}

// -- no WebGPU ---------------------------------------------------------------------------------------------------

ui.runCpu.addEventListener('click', () => {
  state.cpu = true;
  ui.cpuOffer.hidden = true;
  loadModel(ui.modelUrl.value.trim() || initialUrl);
});

ui.prompt.addEventListener('keydown', (event) => {
  if (event.key === 'Enter' && (event.ctrlKey || event.metaKey)) ui.generateForm.requestSubmit();
});

ui.stop.addEventListener('click', () => {
  worker.postMessage({type: 'stop'});
  ui.status.textContent = 'Stopping…';
});

// ?mode=chat|raw picks the mode the page opens in (default: raw completion).
setMode(params.get('mode') === 'chat' ? 'chat' : DEFAULT_MODE);

// ?model=URL picks another model to load on open.
const initialUrl = params.get('model') || DEFAULT_MODEL_URL;
ui.modelUrl.value = initialUrl;
loadModel(initialUrl);
worker.postMessage({type: 'cache-list'});
