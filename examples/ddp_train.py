"""Data-parallel training on MPI, the README's example: mpiexec -n 2 python examples/ddp_train.py"""
import numpy as np
import jitgrad as jg, jitgrad.distributed as dist
from jitgrad.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("mpi")                       # rank and world size come from mpiexec
rank, world = dist.get_rank(), dist.get_world_size()
model = DDP(jg.nn.Sequential(jg.nn.Linear(8, 32), jg.nn.Tanh(), jg.nn.Linear(32, 1)))  # rank 0's weights everywhere
opt = jg.optim.Adam(model.parameters(), lr=1e-2)

@jg.compile                                          # the all-reduces are ops of the compiled step
def step(x, y):
    opt.zero_grad()
    loss = jg.nn.functional.mse_loss(model(x), y)
    loss.backward()                                  # gradients averaged over the ranks, bucket by bucket
    opt.step()
    return loss

rng = np.random.default_rng(rank)                    # each rank its own shard of the data
for i in range(100):
    x = jg.tensor(rng.standard_normal((64, 8), dtype=np.float32))
    loss = step(x, x.sum(1, keepdim=True).tanh())
if rank == 0:
    print("loss", loss.item())
dist.destroy_process_group()
