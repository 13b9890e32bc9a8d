"""Rank 1 raises while rank 0 waits in a collective: ``mpiexec -n 2 python tests/distributed_failure.py``
must end (not hang), with both ranks' messages naming rank 1 (tests/test_distributed.py)."""
import jitgrad as jg
import jitgrad.distributed as dist

dist.init_process_group("mpi")
dist.barrier()
if dist.get_rank() == 1:
    raise ValueError("boom on purpose")
t = jg.ones(4)
dist.all_reduce(t)          # rank 1 never joins: without the failure handling this blocks for ever
print("rank 0 should not get here", flush=True)
