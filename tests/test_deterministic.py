"""``use_deterministic_algorithms(True)``: the same bits run to run (issue 32, item 4).

By default a compiled function's first calls run eagerly while its code builds, and eager ops switch from NumPy to
their native kernels once linked; the switch's timing reaches the last bits.  Under the flag, compiled code is
built before the first call and eager kernels at theirs.  Counted with the ``JITGRAD_BUILD_AFTER_CALL`` hook (which
would hold a background build until call k), never timed; each script runs in a fresh process on a fresh cache.
"""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# a small MLP with LayerNorm (64 x 128: an eager native kernel's size) and a softmax cross-entropy, SGD, 12 steps
# compiled; then 3 eager steps of a copy; the final parameters hashed
SCRIPT = textwrap.dedent("""
    import hashlib, json, sys
    import numpy as np, jitgrad as jg
    import jitgrad.nn.functional as F
    from jitgrad.jit import eager_kernels
    if sys.argv[1] == "1":
        jg.use_deterministic_algorithms(True)
    rng = np.random.default_rng(0)
    x = jg.tensor(rng.standard_normal((64, 32), dtype=np.float32))
    y = jg.tensor(rng.integers(0, 10, 64))
    ws = [rng.standard_normal((32, 128), dtype=np.float32) * 0.2, np.zeros(128, np.float32),
          rng.standard_normal((128, 10), dtype=np.float32) * 0.2, np.zeros(10, np.float32)]

    def make():
        params = [jg.tensor(w.copy(), requires_grad=True) for w in ws]
        W1, b1, W2, b2 = params

        def step(x, y):
            h = F.layer_norm(jg.tanh(x @ W1 + b1), (128,))
            loss = F.cross_entropy(h @ W2 + b2, y)
            loss.backward()
            with jg.no_grad():
                for p in params:
                    p -= 0.1 * p.grad
                    p.grad = None
            return loss.detach()
        return step, params

    def digest(params):
        return hashlib.sha1(b"".join(p.detach().numpy().tobytes() for p in params)).hexdigest()

    step, params = make()
    f = jg.compile(step, backend="numba")
    for _ in range(12):
        f(x, y)
    estep, eparams = make()
    for _ in range(3):
        estep(x, y)
    print(json.dumps({"compiled": digest(params), "eager": digest(eparams),
                      "stats": {k: v for k, v in f.stats.items() if isinstance(v, (int, float, str, type(None)))},
                      "numpy_calls": eager_kernels.COUNTS["numpy_calls"],
                      "native_calls": eager_kernels.COUNTS["native_calls"]}))
""")


def _run(tmp_path, name, flag, **extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("JITGRAD_BACKGROUND_COMPILE", "JITGRAD_BACKEND", "JITGRAD_BUILD_AFTER_CALL",
                        "JITGRAD_EAGER_KERNELS")}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["JITGRAD_CACHE_DIR"] = str(tmp_path / name / "cache")
    env["NUMBA_CACHE_DIR"] = str(tmp_path / name / "numba")
    env.update({k: str(v) for k, v in extra.items()})
    r = subprocess.run([sys.executable, "-c", SCRIPT, "1" if flag else "0"], env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_the_flag_builds_before_the_first_call_and_gives_the_bits_of_code_built_up_front(tmp_path):
    # without the flag, the hook holds the build: calls 1..5 run before it, and eager LayerNorm starts on NumPy
    off = _run(tmp_path, "off", False, JITGRAD_BUILD_AFTER_CALL=5)
    s = off["stats"]
    assert s["eager_calls"] + s["interpreted_calls"] == 5 and s["first_compiled_call"] == 6, s
    assert off["numpy_calls"] >= 1, off
    # with it, the same hook holds nothing: every call compiled, every eager kernel call native from the first
    on = _run(tmp_path, "on", True, JITGRAD_BUILD_AFTER_CALL=5)
    s = on["stats"]
    assert s["eager_calls"] == s["interpreted_calls"] == 0 and s["first_compiled_call"] == 1, s
    assert s["compiled_calls"] == 12, s
    assert on["numpy_calls"] == 0 and on["native_calls"] >= 3, on
    # ... and its bits are those of a run that builds everything before use (what the flag promises run to run)
    up_front = _run(tmp_path, "up_front", False, JITGRAD_BACKGROUND_COMPILE=0, JITGRAD_EAGER_KERNELS="sync")
    assert up_front["stats"]["first_compiled_call"] == 1, up_front["stats"]
    assert (on["compiled"], on["eager"]) == (up_front["compiled"], up_front["eager"])
    # a second run on its own fresh cache: the same bits
    again = _run(tmp_path, "again", True)
    assert (again["compiled"], again["eager"]) == (on["compiled"], on["eager"])
