import gc, sys
import mlx.core as mx
from contracts.engine import CancelToken
from contracts.sampling import SamplingParams
from engines.runtime import load_runtime
rt = load_runtime("/tmp/demo-nowin/target", dtype="float32")
text = open("/work/main/engines/runtime.py").read() * 3
ids = rt.bundle.tokenizer.encode(text)[:6000]
for engine in ("mtp", "ddtree"):
    gc.collect(); mx.clear_cache()
    base = mx.get_active_memory()
    chunks = rt.generate(ids, SamplingParams(temperature=0.0, max_tokens=64), engine, CancelToken())
    for _ in range(3):
        next(chunks)
    gc.collect(); mx.clear_cache()
    print(engine, "active during decode MiB", round((mx.get_active_memory() - base) / 2**20, 1), flush=True)
    chunks.close()
