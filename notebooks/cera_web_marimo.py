import marimo

__generated_with = "0.13.15"
app = marimo.App()


@app.cell
def _():
    import marimo as mo

    mo.md("# cera_web in marimo\n\n"
          "An LLM running in this browser tab, driven from Python: the notebook installs the cera_web wheel from a "
          "cera_web site (`python serve.py --cors ORIGIN`, ORIGIN being this notebook site's origin), loads the "
          "default model over HTTP and runs it on the browser's WebGPU (or on the CPU). Set `SITE` below to where "
          "serve.py runs.")
    return (mo,)


@app.cell
async def _(mo):
    SITE = "http://127.0.0.1:8000"   # python serve.py --cors <this notebook's origin>
    DEVICE = None                    # None: the browser's WebGPU; "cpu": the numpy reference model (no GPU needed)

    import micropip
    from pyodide.http import pyfetch

    _wheels = (await (await pyfetch(f"{SITE}/pyodide/wheels/index.json")).json())["wheels"]
    await micropip.install([f"{SITE}/pyodide/wheels/{_name}" for _name in _wheels])   # cera_web, jinja2, markupsafe
    mo.plain_text("installed: " + ", ".join(_wheels))
    return DEVICE, SITE, pyfetch


@app.cell
async def _(DEVICE, SITE, mo, pyfetch):
    from cera_web.engine import Engine
    from cera_web.gpu.browser import ArrayBufferSource

    _models = (await (await pyfetch(f"{SITE}/models/index.json")).json())["models"]
    _default = next(_m for _m in _models if _m["default"])
    _model = await (await pyfetch(SITE + _default["url"])).js_response.arrayBuffer()
    engine = await Engine.load(ArrayBufferSource(_model, _default["file"]), device=DEVICE)
    mo.plain_text(f"loaded {_default['file']} ({_model.byteLength:,} bytes) on {engine.backend}")
    return (engine,)


@app.cell
async def _(engine, mo):
    from cera_web.engine import ChatSession

    _pieces = []

    def _show(token_id, text):            # the reply streams into this cell's output
        _pieces.append(text)
        mo.output.replace(mo.plain_text("".join(_pieces)))

    _result = await ChatSession(engine).send("Write a haiku about the sea.", max_tokens=48, temperature=0,
                                             on_token=_show)
    mo.output.replace(mo.plain_text("".join(_pieces) + f"\n[{_result.stop_reason}, {len(_result.tokens)} tokens]"))
    return


@app.cell
async def _(engine, mo):
    # the OpenAI-style API
    _reply = await engine.chat.completions.create(
        messages=[{"role": "user", "content": "Name three colors."}], max_tokens=32, temperature=0)
    mo.plain_text(f"{_reply['choices'][0]['message']['content']}\n{_reply['usage']}")
    return


@app.cell
async def _(engine, mo):
    # JSON that follows a schema: every token is constrained, so a reply that ends (finish_reason "stop") parses
    import json

    _schema = {"type": "object",
               "properties": {"name": {"type": "string", "maxLength": 20},
                              "age": {"type": "integer"},
                              "hobbies": {"type": "array", "items": {"type": "string", "maxLength": 16},
                                          "maxItems": 3}},
               "required": ["name", "age", "hobbies"]}
    _reply = await engine.chat.completions.create(
        messages=[{"role": "user", "content": "Describe a person as JSON."}], max_tokens=160, temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": _schema}})
    _choice = _reply["choices"][0]
    mo.plain_text(f"finish_reason: {_choice['finish_reason']}\n"
                  f"parsed: {json.dumps(json.loads(_choice['message']['content']))}")
    return


if __name__ == "__main__":
    app.run()
