// The page's engine without the page: Pyodide under Node on Dawn (the `webgpu` npm package, Dawn for Node), the
// stand-in issue 26 allows where headless Chromium cannot reach the GPU. It runs what web/bench.html runs
// (cera_web.tools.bench.run in Pyodide, through cera_web.gpu.browser) and prints the same JSON, plus the adapter.
//
//   node node_page.mjs REPO WEBGPU_DIR MODEL [PROMPT_TOKENS=128] [DECODE_TOKENS=128] [DAWN_OPTION ...]
//
// REPO: a checkout with .assets/pyodide fetched (cera_web and shaders are read from it through NODEFS);
// WEBGPU_DIR: the unpacked `npm pack webgpu` (package/); DAWN_OPTION: e.g. backend=vulkan (passed to create()).
// Differences from the page, each one a measured difference: no browser (no renderer/GPU-process IPC: Dawn runs in
// this process), Node's event loop instead of the page's, and the cera_web sources read from disk instead of a zip.
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const [repo, webgpuDir, model, promptArg, decodeArg, ...dawnOptions] = process.argv.slice(2);
const { create, globals } = await import(pathToFileURL(path.join(webgpuDir, 'index.js')).href);
Object.assign(globalThis, globals);
const gpu = create(dawnOptions);
Object.defineProperty(globalThis, 'navigator', {value: {gpu, userAgent: 'node ' + process.version},
                                                configurable: true, writable: true});

const adapter = await gpu.requestAdapter({powerPreference: 'high-performance'});
const info = adapter ? adapter.info : null;
const adapterInfo = info ? {vendor: info.vendor, architecture: info.architecture, device: info.device,
                            description: info.description} : null;

if (!adapter) {
  console.error('no WebGPU adapter from Dawn (options: ' + JSON.stringify(dawnOptions) + ')');
  process.exit(3);
}

const indexURL = path.join(repo, '.assets', 'pyodide') + path.sep;
const { loadPyodide } = await import(pathToFileURL(path.join(indexURL, 'pyodide.mjs')).href);
const t0 = performance.now();
const pyodide = await loadPyodide({indexURL});
await pyodide.loadPackage('numpy', {messageCallback: () => {}});
const site = pyodide.runPython("import sysconfig; sysconfig.get_paths()['purelib']");
const wheels = path.join(indexURL, 'wheels');
for (const w of fs.readdirSync(wheels).filter((f) => f.endsWith('.whl'))) {
  const b = fs.readFileSync(path.join(wheels, w));
  pyodide.unpackArchive(new Uint8Array(b.buffer, b.byteOffset, b.byteLength), 'wheel', {extractDir: site});
}
pyodide.FS.mkdirTree('/repo');
pyodide.FS.mount(pyodide.FS.filesystems.NODEFS, {root: path.resolve(repo)}, '/repo');
const buf = fs.readFileSync(model);
globalThis.benchModel = buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.byteLength);
globalThis.benchArgs = {prompt: +(promptArg || 128), decode: +(decodeArg || 128), steps: null, chunk: null};
const loadMs = performance.now() - t0;
const out = await pyodide.runPythonAsync(`
import sys
sys.path.insert(0, "/repo")
import json, js
from cera_web.tools import bench
from cera_web.engine import Engine
from cera_web.gpu.browser import ArrayBufferSource
a = js.benchArgs.to_py()
engine = await Engine.load(ArrayBufferSource(js.benchModel, "model.gguf"), chunk=a["chunk"])
result = await bench.run(engine, a["prompt"], a["decode"], a["steps"])
result["calls_counted"] = "Python->JS calls made by cera_web.gpu.browser (every JS call of the hot loop)"
json.dumps(result)
`);
const result = JSON.parse(out);
result.runtime = 'Pyodide ' + pyodide.version + ' under Node ' + process.version + ' on Dawn (webgpu npm ' +
  JSON.parse(fs.readFileSync(path.join(webgpuDir, 'package.json'))).version + ')';
result.adapter = adapterInfo;
result.dawn_options = dawnOptions;
result.pyodide_load_ms = Math.round(loadMs);
console.log(JSON.stringify(result));
process.exit(0);
