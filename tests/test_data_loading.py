"""``jitgrad.utils.data`` against ``torch.utils.data``: batches, order, samplers, collation, worker processes and
their seeding and errors, and torch's argument checks."""
from __future__ import annotations

import collections

import numpy as np
import pytest

import jitgrad as jg
from jitgrad.utils import data as jdata

torch = pytest.importorskip("torch")
tdata = torch.utils.data


def _lists(batches):
    """Batches as nested Python lists (tensors -> tolist), to compare the libraries."""
    def conv(b):
        if hasattr(b, "tolist"):
            return b.tolist()
        if isinstance(b, dict):
            return {k: conv(v) for k, v in b.items()}
        if isinstance(b, (list, tuple)):
            return [conv(x) for x in b]
        return b
    return [conv(b) for b in batches]


def _tensor_ds(lib, mod, n=10):
    return mod.TensorDataset(lib.arange(n * 2.0).reshape(n, 2), lib.arange(n))


class _Items:
    """A map-style dataset of mixed samples (defined once, used with both libraries' loaders)."""

    def __init__(self, lib, n=7):
        self.lib, self.n = lib, n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return {"x": self.lib.tensor([i, i + 1.0]), "i": i, "f": i / 2, "name": f"s{i}",
                "pair": (np.int64(i), np.array([i, -i]))}


@pytest.mark.parametrize("kw", [dict(batch_size=4), dict(batch_size=4, drop_last=True), dict(batch_size=3),
                                dict(batch_size=None), dict(batch_size=1),
                                dict(batch_sampler=[[0, 3], [9, 1, 2], [5]]),
                                dict(sampler=[9, 8, 7, 0], batch_size=3),
                                dict(batch_size=4, collate_fn=lambda b: len(b))])
@pytest.mark.parametrize("workers", [0, 2])
def test_batches_match_torch(kw, workers):
    kw = dict(kw, num_workers=workers)
    got = _lists(jdata.DataLoader(_tensor_ds(jg, jdata), **kw))
    want = _lists(tdata.DataLoader(_tensor_ds(torch, tdata), **kw))
    assert got == want
    assert len(jdata.DataLoader(_tensor_ds(jg, jdata), **kw)) == len(tdata.DataLoader(_tensor_ds(torch, tdata), **kw))


def test_default_collate_matches_torch():
    got = _lists(jdata.DataLoader(_Items(jg), batch_size=3))
    want = _lists(tdata.DataLoader(_Items(torch), batch_size=3))
    assert got == want
    b = next(iter(jdata.DataLoader(_Items(jg), batch_size=3)))
    assert b["f"].dtype is jg.float64 and b["i"].dtype is jg.int64 and b["x"].dtype is jg.float32
    Point = collections.namedtuple("Point", "x y")
    pts = jdata.default_collate([Point(1, 2.0), Point(3, 4.0)])
    assert isinstance(pts, Point) and pts.x.tolist() == [1, 3]


def test_shuffle_is_a_permutation_per_epoch_reproducible_with_a_generator():
    ds = _tensor_ds(jg, jdata, 12)
    dl = jdata.DataLoader(ds, batch_size=5, shuffle=True, generator=jg.Generator().manual_seed(7))
    e1 = [i for _, y in dl for i in y.tolist()]
    e2 = [i for _, y in dl for i in y.tolist()]
    assert sorted(e1) == sorted(e2) == list(range(12)) and e1 != e2
    again = jdata.DataLoader(ds, batch_size=5, shuffle=True, generator=jg.Generator().manual_seed(7))
    assert [i for _, y in again for i in y.tolist()] == e1
    jg.manual_seed(3)
    a = [y.tolist() for _, y in jdata.DataLoader(ds, batch_size=5, shuffle=True)]
    jg.manual_seed(3)
    assert [y.tolist() for _, y in jdata.DataLoader(ds, batch_size=5, shuffle=True)] == a   # the default generator


def test_samplers():
    s = jdata.RandomSampler(range(5), replacement=True, num_samples=40, generator=jg.Generator().manual_seed(0))
    draws = list(s)
    assert len(draws) == len(s) == 40 and set(draws) <= set(range(5)) and len(set(draws)) > 1
    s = jdata.RandomSampler(range(4), num_samples=10, generator=jg.Generator().manual_seed(0))
    d = list(s)
    assert len(d) == 10 and sorted(d[:4]) == [0, 1, 2, 3] and sorted(d[4:8]) == [0, 1, 2, 3]
    assert list(jdata.BatchSampler(jdata.SequentialSampler(range(7)), 3, False)) == \
        list(tdata.BatchSampler(tdata.SequentialSampler(range(7)), 3, False))
    assert len(jdata.BatchSampler(range(7), 3, True)) == 2
    assert sorted(jdata.SubsetRandomSampler([4, 6, 8])) == [4, 6, 8]
    with pytest.raises(ValueError, match="num_samples should be a positive integer value"):
        jdata.RandomSampler(range(3), num_samples=0)
    with pytest.raises(ValueError, match="batch_size should be a positive integer value"):
        jdata.BatchSampler(range(3), 0, False)


def test_datasets():
    ds = _tensor_ds(jg, jdata, 6)
    parts = jdata.random_split(ds, [4, 2], generator=jg.Generator().manual_seed(0))
    idx = sorted(int(p[i][1]) for p in parts for i in range(len(p)))
    assert [len(p) for p in parts] == [4, 2] and idx == list(range(6))
    cat = ds + ds
    assert len(cat) == 12 and int(cat[7][1]) == 1 and int(cat[-1][1]) == 5
    with pytest.raises(AssertionError, match="Size mismatch between tensors"):
        jdata.TensorDataset(jg.ones(3), jg.ones(4))


class _Stream:
    """An iterable dataset that splits its range between workers with get_worker_info(), as torch's docs show."""

    def __init__(self, mod, n):
        self.mod, self.n = mod, n

    def make(self):
        mod, n = self.mod, self.n

        class S(mod.IterableDataset):
            def __iter__(self):
                w = mod.get_worker_info()
                lo, step = (0, 1) if w is None else (w.id, w.num_workers)
                return iter(range(lo, n, step))
        return S()


@pytest.mark.parametrize("kw", [dict(batch_size=2), dict(batch_size=2, drop_last=True), dict(batch_size=None),
                                dict(batch_size=4)])
@pytest.mark.parametrize("workers", [0, 2])
def test_iterable_dataset_matches_torch(kw, workers):
    got = _lists(jdata.DataLoader(_Stream(jdata, 9).make(), num_workers=workers, **kw))
    want = _lists(tdata.DataLoader(_Stream(tdata, 9).make(), num_workers=workers, **kw))
    assert got == want


class _Seeds(jdata.Dataset):
    def __len__(self):
        return 6

    def __getitem__(self, i):
        info = jdata.get_worker_info()
        return jg.tensor([i, -1 if info is None else info.id, -1 if info is None else info.seed % 1000]), \
            jg.rand(()).item()


def test_workers_are_seeded_and_report_their_info():
    jg.manual_seed(0)
    out = list(jdata.DataLoader(_Seeds(), batch_size=2, num_workers=2))
    ids = [b[0][:, 1].tolist() for b in out]
    assert ids == [[0, 0], [1, 1], [0, 0]]      # round-robin, in sampler order
    seeds = {tuple(b[0][:, 2].tolist()) for b in out}
    assert len(seeds) == 2                      # base_seed + worker id
    jg.manual_seed(0)
    again = list(jdata.DataLoader(_Seeds(), batch_size=2, num_workers=2))
    assert [b[1].tolist() for b in again] == [b[1].tolist() for b in out]     # the same draws after the same seed
    assert jdata.get_worker_info() is None


class _Broken(jdata.Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        if i == 2:
            raise KeyError("bad item 2")
        return i


def test_a_worker_error_is_raised_in_the_main_process():
    with pytest.raises(KeyError, match="Caught KeyError in DataLoader worker process 0"):
        list(jdata.DataLoader(_Broken(), batch_size=1, num_workers=2))
    with pytest.raises(KeyError, match="bad item 2"):
        list(jdata.DataLoader(_Broken(), batch_size=1))


def test_worker_init_fn_runs_in_each_worker():
    seen = list(jdata.DataLoader(_InitProbe(), batch_size=None, num_workers=2,
                                 worker_init_fn=_set_worker_flag))
    assert sorted(seen) == [0, 1, 102, 103]      # the flag set by worker_init_fn in each worker


_FLAG = {"v": 0}


def _set_worker_flag(worker_id):
    _FLAG["v"] = 100


class _InitProbe(jdata.Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        return i + _FLAG["v"] if i >= 2 else i


def test_argument_errors_as_torch():
    ds = _tensor_ds(jg, jdata)
    cases = [dict(num_workers=-1), dict(prefetch_factor=2), dict(persistent_workers=True),
             dict(sampler=[0], shuffle=True), dict(batch_sampler=[[0]], batch_size=2),
             dict(batch_size=None, drop_last=True)]
    for kw in cases:
        with pytest.raises(ValueError) as jerr:
            jdata.DataLoader(ds, **kw)
        with pytest.raises(ValueError) as terr:
            tdata.DataLoader(_tensor_ds(torch, tdata), **kw)
        assert str(jerr.value) == str(terr.value)
    with pytest.raises(ValueError, match="expected unspecified shuffle option"):
        jdata.DataLoader(_Stream(jdata, 3).make(), shuffle=True)


def test_pin_memory_without_an_accelerator_warns_as_torch():
    if jg.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.warns(UserWarning, match="no accelerator is found"):
        dl = jdata.DataLoader(_tensor_ds(jg, jdata), batch_size=5, pin_memory=True)
    assert len(list(dl)) == 2


class _Pids(jdata.Dataset):
    """Each sample says which process made it and how many samples that worker's dataset copy served."""

    def __init__(self):
        self.served = 0

    def __len__(self):
        return 6

    def __getitem__(self, i):
        import os
        self.served += 1
        return jg.tensor([i, os.getpid(), self.served])


def test_persistent_workers_serve_every_epoch():
    loader = jdata.DataLoader(_Pids(), batch_size=2, num_workers=2, persistent_workers=True, shuffle=True,
                              generator=jg.Generator().manual_seed(3))
    epochs = [list(loader) for _ in range(3)]
    pids = [{int(p) for b in e for p in b[:, 1].tolist()} for e in epochs]
    assert pids[0] == pids[1] == pids[2] and len(pids[0]) == 2      # the same two processes throughout
    # each worker's dataset copy keeps its state (torch: the copies live as long as the workers)
    assert max(int(b[:, 2].max()) for b in epochs[2]) == 12         # worker 0 serves batches 0 and 2 of each
    for e in epochs:
        assert sorted(int(i) for b in e for i in b[:, 0].tolist()) == list(range(6))
    assert [int(i) for b in epochs[0] for i in b[:, 0].tolist()] != \
        [int(i) for b in epochs[1] for i in b[:, 0].tolist()]     # reshuffled per epoch
    # an epoch left early: its unread batches are dropped, the next epoch is whole
    it = iter(loader)
    next(it)
    assert sorted(int(i) for b in loader for i in b[:, 0].tolist()) == list(range(6))
    # non-persistent: new processes each epoch
    plain = jdata.DataLoader(_Pids(), batch_size=2, num_workers=2)
    assert {int(p) for b in plain for p in b[:, 1].tolist()}.isdisjoint(
        {int(p) for b in plain for p in b[:, 1].tolist()})


def test_persistent_workers_iterable_dataset_restarts_each_epoch():
    loader = jdata.DataLoader(_Stream(jdata, 9).make(), batch_size=2, num_workers=2, persistent_workers=True)
    want = _lists(tdata.DataLoader(_Stream(tdata, 9).make(), batch_size=2, num_workers=2, persistent_workers=True))
    assert _lists(loader) == want
    assert _lists(loader) == want


class _BigItems(jdata.Dataset):
    """Items of 1 MiB: one unread batch fills a worker's pipe to the loader."""

    def __len__(self):
        return 16

    def __getitem__(self, i):
        return np.full(1 << 18, i, np.float32)


def test_abandoned_iterator_lets_its_workers_exit_cleanly():
    # a loop that stops early leaves prefetched batches unread; the workers must exit on their own (exit code 0),
    # not sit on a full pipe until the shutdown's join times out and terminates them
    loader = jdata.DataLoader(_BigItems(), batch_size=2, num_workers=2, prefetch_factor=2)
    it = iter(loader)
    first = next(it)
    assert first.shape == (2, 1 << 18)
    workers = list(it.workers)
    it._shutdown()
    assert [p.exitcode for p in workers] == [0, 0]
