"""A/B: sampled DDTree trees ranked by the drafter at T=1 (shipped) vs at the request's temperature."""
import json, statistics, sys, time
import numpy as np
from contracts.engine import CancelToken
from engines.runtime import load_runtime
import engines.ddtree as dd
from bench.run import model_defaults, sampling_params
from bench.workloads import CLASSES, load_class

variants = sys.argv[1].split(",")     # e.g. "1.0,req"
repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 2
rt = load_runtime(dtype="float32")
sampled = model_defaults(rt.bundle.generation)
orig_init = dd._TreeDrafting.__init__
current = {"v": "1.0"}
def patched(self, engine, request, context):
    orig_init(self, engine, request, context)
    if not request.cfg.greedy:
        v = current["v"]
        self.tree_temperature = request.cfg.temperature if v == "req" else float(v)
dd._TreeDrafting.__init__ = patched
res = {v: {k: [] for k in CLASSES} for v in variants}
t0 = time.time()
for k in CLASSES:
    for prompt in load_class(k)[8:24]:
        ids = rt.encode_chat(list(prompt.messages))
        for rep in range(repeats):
            params = sampling_params("sampled", 128, prompt.id, rep, sampled)
            for v in (variants if rep % 2 == 0 else variants[::-1]):
                current["v"] = v
                acc = [c.step.accepted for c in rt.generate(ids, params, "ddtree", CancelToken())
                       if c.step is not None and c.step.drafted > 0]
                res[v][k].append(acc)
    print(k, "done", round(time.time() - t0), file=sys.stderr, flush=True)
for v in variants:
    row = []
    for k in CLASSES:
        cyc = [a for r in res[v][k] for a in r]
        row.append(f"{k} {statistics.fmean(cyc):.3f} (n={len(cyc)})")
    allc = [a for k in CLASSES for r in res[v][k] for a in r]
    print(v, " | ".join(row), f"| all {statistics.fmean(allc):.3f}")
json.dump(res, open(f"/tmp/treetemp-{sys.argv[1].replace(',', '_')}.json", "w"))
