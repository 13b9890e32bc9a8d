"""A rank that stalls: ``mpiexec -n 2 python tests/distributed_timeout.py KIND`` (tests/test_distributed.py).

``init_process_group(timeout=2 s)``; rank 1 sleeps (a long stop in user code) while rank 0 enters a collective:
an eager ``all_reduce`` (``all_reduce``), a ``barrier`` (``barrier``), or the README's compiled DDP step
(``compiled``: its collectives are native steps of one C call).  The job must end within the timeout (plus the
watchdog's few seconds) on every rank, naming the collective and rank 1.  Rank 0 prints ``ENTER <time>`` just
before it blocks.
"""
import datetime
import sys
import time

import numpy as np

import jitgrad as jg
import jitgrad.distributed as dist
from jitgrad.nn.parallel import DistributedDataParallel as DDP

KIND = sys.argv[1]
dist.init_process_group("mpi", timeout=datetime.timedelta(seconds=2))
R = dist.get_rank()
step = None
if KIND == "compiled":
    model = DDP(jg.nn.Sequential(jg.nn.Linear(4, 8), jg.nn.Tanh(), jg.nn.Linear(8, 1)))
    opt = jg.optim.SGD(model.parameters(), lr=0.1)

    @jg.compile
    def step(x):
        opt.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        return loss
    x = jg.tensor(np.ones((3, 4), np.float32))
    for _ in range(2):
        step(x)         # traced, then its code (the build is waited for: the stall below is the only delay)
    step.wait()
    step(x)
dist.barrier()
if R == 1:
    time.sleep(60)
    print("rank 1 woke up", flush=True)
print(f"ENTER {time.time()}", flush=True)
if KIND == "all_reduce":
    dist.all_reduce(jg.ones(5))
elif KIND == "barrier":
    dist.barrier()
else:
    step(x)
print(f"rank {R} should not get here", flush=True)
