"""jitgrad.distributed and DistributedDataParallel.

``mpiexec -n 2`` launches, each one test (so xdist never runs one twice): ``distributed_checks.py`` runs
every check on both ranks and prints one line per check and rank (``test_two_ranks`` asserts them all);
``distributed_failure.py`` has rank 1 raise while rank 0 waits in a collective; the README's example runs
through ``python -m jitgrad.distributed.run``, and with default settings, an empty cache and one rank's build
held back (``distributed_build_race.py``); a rank stalls past ``timeout=`` (``distributed_timeout.py``).  They skip when mpi4py or mpiexec is missing.  The sampler
(against torch's), the launcher's command line, the collectives in a group of one and the import hygiene run in
this process.
"""
import math
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import jitgrad as jg

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TIMEOUT = 600


def _mpiexec():
    pytest.importorskip("mpi4py")
    from jitgrad.distributed.run import find_mpiexec
    try:
        return find_mpiexec()
    except SystemExit:
        pytest.skip("no mpiexec")


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env["NUMBA_NUM_THREADS"] = "1"
    env["OMP_NUM_THREADS"] = env["OPENBLAS_NUM_THREADS"] = "1"
    return env


CHECKS = ["all_reduce_ops", "all_reduce_non_contiguous_and_async", "broadcast_all_gather_reduce_scatter",
          "groups_and_env", "mismatched_shapes_are_an_error", "collective_primitives_and_their_gradients",
          "all_reduce_inside_compile", "ddp_eager_sgd", "ddp_eager_buckets_start_during_backward", "ddp_eager_adam",
          "ddp_compiled_sgd", "ddp_interpreter_on_one_rank_native_driver_on_the_other", "ddp_compiled_adam", "ddp_batchnorm_eager_and_compiled",
          "ddp_wrap_broadcasts_rank0_state", "ddp_no_sync_accumulates", "distributed_sampler_uses_the_group"]


def test_two_ranks():
    """One launch runs every check on both ranks (one test, so that xdist workers do not launch it twice)."""
    mpiexec = _mpiexec()
    # the compiled checks run the generated Numba kernels (the kernel cache is shared with the other tests)
    cmd = [mpiexec, "-n", "2", sys.executable, os.path.join(HERE, "distributed_checks.py"), "numba"]
    r = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=TIMEOUT)
    out = r.stdout + r.stderr
    results = {}
    for m in re.finditer(r"rank (\d) CHECK (\w+) (ok|FAIL: .*)", out):
        results[(int(m.group(1)), m.group(2))] = m.group(3)
    assert r.returncode == 0 and len(re.findall(r"rank \d DONE", out)) == 2, out[-6000:]
    assert {name for _, name in results} == set(CHECKS), sorted({name for _, name in results} ^ set(CHECKS))
    bad = [f"rank {rank} {name}: {results.get((rank, name))}" for name in CHECKS for rank in (0, 1)
           if results.get((rank, name)) != "ok"]
    assert not bad, "\n".join(bad) + "\n" + out[-4000:]


def test_a_failing_rank_ends_the_job_naming_it():
    mpiexec = _mpiexec()
    cmd = [mpiexec, "-n", "2", sys.executable, os.path.join(HERE, "distributed_failure.py")]
    r = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=120)   # a hang fails here
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    assert "[rank 1] ValueError: boom on purpose" in out, out
    assert "rank 1 of 2 failed (ValueError: boom on purpose)" in out, out
    assert "rank 0 stops because rank 1 failed: ValueError: boom on purpose" in out, out
    assert "should not get here" not in out


def _default_build_env(cache_dir):
    """The user's settings: background builds, the Numba backend, an empty cache (not the suite's test settings)."""
    env = _env()
    for k in ("JITGRAD_BACKGROUND_COMPILE", "JITGRAD_BACKEND", "JITGRAD_DIST_NATIVE"):
        env.pop(k, None)
    env["JITGRAD_CACHE_DIR"] = str(cache_dir)
    return env


def test_readme_example_never_hangs_while_one_ranks_build_lags(tmp_path):
    """Issue 31 item 1: with an empty cache and default settings, ranks whose builds finish at different calls
    still issue the same collectives.  Three rounds of the README's example in one launch: rank 0's code never
    ready while rank 1 runs compiled code from its first call, then the other way round, then no hook at all
    (``distributed_build_race.py``).  A hang fails at the timeout."""
    mpiexec = _mpiexec()
    cmd = [mpiexec, "-n", "2", sys.executable, os.path.join(HERE, "distributed_build_race.py")]
    try:
        r = subprocess.run(cmd, env=_default_build_env(tmp_path / "cache"), capture_output=True, text=True,
                           timeout=240)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the example hung: {(e.stdout or b'')[-3000:]!r} {(e.stderr or b'')[-3000:]!r}")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    assert all(f"rank {rank} ROUND {k} done" in out for rank in (0, 1) for k in range(3)), out[-4000:]
    losses = [float(x) for x in re.findall(r"loss (\S+)", r.stdout)]
    assert len(losses) == 3 and all(v < 0.1 for v in losses), r.stdout


@pytest.mark.parametrize("kind,optype", [("all_reduce", "OpType=ALLREDUCE"), ("barrier", "OpType=BARRIER"),
                                         ("compiled", "OpType=compiled step 'step' (all_reduce_start x1")])
def test_a_stalled_rank_ends_the_job_within_the_timeout(kind, optype, tmp_path):
    """Issue 31 item 2: ``init_process_group(timeout=2 s)``; rank 1 sleeps while rank 0 waits in a collective (eager,
    a barrier, the native MPI steps of a compiled DDP step).  Every rank ends within the timeout + 5 s, with
    torch's watchdog message naming the collective and rank 1 (``distributed_timeout.py``)."""
    import time
    mpiexec = _mpiexec()
    cmd = [mpiexec, "-n", "2", sys.executable, os.path.join(HERE, "distributed_timeout.py"), kind]
    r = subprocess.run(cmd, env=_default_build_env(tmp_path / "cache"), capture_output=True, text=True,
                       timeout=120)
    ended = time.time()
    out = r.stdout + r.stderr
    assert r.returncode != 0 and "should not get here" not in out and "woke up" not in out, out[-4000:]
    entered = float(re.search(r"ENTER (\S+)", r.stdout).group(1))
    assert ended - entered < 2 + 5, (ended - entered, out[-4000:])
    head = "[Rank 0] Watchdog caught collective operation timeout: WorkMPI(SeqNum="
    assert head in out and optype in out and "Timeout(ms)=2000" in out, out[-4000:]
    assert "Ranks 1 did not arrive: rank 1 has not reached a collective of this group since" in out, out[-4000:]
    assert "rank 1 stops because rank 0 failed: DistBackendError: [Rank 0] Watchdog caught" in out, out[-4000:]


def test_launcher_runs_mpiexec():
    from jitgrad.distributed.run import command
    cmd = command(["-n", "4", "--mpiexec", "/x/mpiexec", "--mpi-arg=-bind-to", "--mpi-arg=core", "train.py",
                   "--lr", "0.1"])
    assert cmd == ["/x/mpiexec", "-n", "4", "-bind-to", "core", sys.executable, "train.py", "--lr", "0.1"]
    assert command(["--nproc_per_node", "2", "--mpiexec", "m", "-m", "pkg.train"])[-3:] == [sys.executable, "-m",
                                                                                           "pkg.train"]


def test_import_never_loads_mpi4py():
    code = ("import sys, jitgrad as jg, jitgrad.distributed as dist, jitgrad.nn.parallel\n"
            "x = jg.ones(3, requires_grad=True); (x * 2).sum().backward()\n"
            "assert not dist.is_initialized()\n"
            "bad = [m for m in sys.modules if m.startswith('mpi4py')]\n"
            "assert not bad, bad\n"
            "print('clean')\n")
    r = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "clean" in r.stdout, r.stderr


def test_uninitialised_errors_like_torch():
    import jitgrad.distributed as dist
    with pytest.raises(RuntimeError, match="Default process group has not been initialized"):
        dist.all_reduce(jg.ones(2))
    with pytest.raises(RuntimeError, match="Default process group has not been initialized"):
        dist.get_rank()
    with pytest.raises(ValueError, match="backend 'nccl'"):
        dist.init_process_group("nccl")


# ---- DistributedSampler against torch's --------------------------------------------------------------------

@pytest.mark.parametrize("n,replicas,drop_last", [(10, 3, False), (10, 3, True), (11, 2, False), (2, 5, False),
                                                   (12, 4, True), (7, 1, False)])
def test_sampler_partitions_like_torch(n, replicas, drop_last):
    torch = pytest.importorskip("torch")
    from torch.utils.data.distributed import DistributedSampler as TorchSampler
    from jitgrad.distributed import DistributedSampler
    data = list(range(n))
    for rank in range(replicas):
        ours = DistributedSampler(data, num_replicas=replicas, rank=rank, shuffle=False, drop_last=drop_last)
        theirs = TorchSampler(data, num_replicas=replicas, rank=rank, shuffle=False, drop_last=drop_last)
        assert list(ours) == list(theirs) and len(ours) == len(theirs)
        assert (ours.num_samples, ours.total_size) == (theirs.num_samples, theirs.total_size)
    del torch


@pytest.mark.parametrize("n,replicas,drop_last", [(10, 3, False), (10, 3, True), (2, 5, False)])
def test_sampler_shuffle_partitions(n, replicas, drop_last):
    from jitgrad.distributed import DistributedSampler
    shares = [list(DistributedSampler(range(n), replicas, r, shuffle=True, seed=5, drop_last=drop_last))
              for r in range(replicas)]
    per = math.ceil((n - replicas) / replicas) if drop_last and n % replicas else math.ceil(n / replicas)
    assert all(len(s) == per for s in shares)
    every = [i for s in shares for i in s]
    if drop_last:
        assert len(set(every)) == len(every) == per * replicas          # disjoint, the tail dropped
    else:
        assert set(every) == set(range(n))                              # covering, padded by repeats
    again = [list(DistributedSampler(range(n), replicas, r, shuffle=True, seed=5, drop_last=drop_last))
             for r in range(replicas)]
    assert again == shares                                              # same seed and epoch: same order
    s = DistributedSampler(range(n), replicas, 0, shuffle=True, seed=5)
    s.set_epoch(3)
    assert list(s) != shares[0] or n <= 2
    with pytest.raises(ValueError, match="Invalid rank 3"):
        DistributedSampler(range(n), 3, 3)


def test_sampler_is_torch_utils_data_distributed_and_feeds_a_dataloader():
    """torch's import path and a DataLoader over one rank's share (the batches hold exactly that share)."""
    from jitgrad.utils.data import DataLoader, Sampler, TensorDataset
    from jitgrad.utils.data.distributed import DistributedSampler
    assert issubclass(DistributedSampler, Sampler)
    data = TensorDataset(jg.arange(10))
    share = DistributedSampler(data, num_replicas=3, rank=1, shuffle=False)
    seen = [int(v) for (batch,) in DataLoader(data, batch_size=2, sampler=share) for v in batch]
    assert seen == list(share) == [1, 4, 7, 0]


# ---- the collective primitives in a world of one (no MPI) ----------------------------------------------------

def test_collective_primitives_in_a_group_of_one():
    from jitgrad.ir.ops import OPS
    from jitgrad.runtime.dispatch import bind
    x = jg.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    for name, params, want in (("all_reduce", dict(reduce_op="sum"), x.detach().numpy()),
                               ("broadcast", dict(src=0), x.detach().numpy()),
                               ("all_gather", dict(size=1), x.detach().numpy()[None])):
        y = bind(OPS[name], x, group=0, **params)
        np.testing.assert_array_equal(y.detach().numpy(), want)
        assert jg.autograd.gradcheck(lambda a: bind(OPS[name], a, group=0, **params),
                                     (x.detach().double().requires_grad_(),))
    with pytest.raises(RuntimeError, match="process group 9 does not exist"):
        bind(OPS["all_reduce"], x, group=9, reduce_op="sum")
    with pytest.raises(RuntimeError, match="unknown reduce op 'mean'"):
        bind(OPS["all_reduce"], x, group=0, reduce_op="mean")
    with pytest.raises(RuntimeError, match="ReduceOp.MAX has no gradient"):
        bind(OPS["all_reduce"], x, group=0, reduce_op="max").sum().backward()


def test_readme_example_is_the_file():
    readme = open(os.path.join(ROOT, "README.md")).read()
    block = re.search(r"## Data-parallel.*?```python\n(.*?)```", readme, re.S).group(1)
    body = open(os.path.join(ROOT, "examples", "ddp_train.py")).read().split("\n", 1)[1]
    assert block == body


def test_readme_example_runs_on_two_ranks_through_the_launcher():
    mpiexec = _mpiexec()
    r = subprocess.run([sys.executable, "-m", "jitgrad.distributed.run", "-n", "2", "--mpiexec", mpiexec,
                        os.path.join(ROOT, "examples", "ddp_train.py")],
                       env=dict(_env(), JITGRAD_BACKEND="interpret"), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    loss = float(re.search(r"loss (\S+)", r.stdout).group(1))
    assert loss < 0.1 and r.stdout.count("loss") == 1, r.stdout      # rank 0 prints
