"""``Tensor.storage()`` / ``untyped_storage()`` (runtime/storage_objects.py) against torch: sizes in elements and
bytes, which tensors share one (views, ``detach``, ``.data``, slices detached), addresses, elements read and
written through the storage, the deprecation warning, and the refusal inside ``@jg.compile``."""
import warnings

import numpy as np
import pytest

import jitgrad as jg

torch = pytest.importorskip("torch")


def _quiet(fn, *a):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*a)


MAKERS = {
    "root": lambda M: M.arange(6.0),
    "slice of a root": lambda M: M.arange(6.0)[2:5],
    "detached slice": lambda M: M.arange(5.0)[:4].detach(),
    "transposed": lambda M: M.arange(12.0, dtype=M.float64).reshape(3, 4).t(),
    "strided rows": lambda M: M.arange(12.0).reshape(3, 4)[:, 1],
    "scalar": lambda M: M.tensor(3.0),
    "empty": lambda M: M.ones(0),
    "int64": lambda M: M.arange(7),
}


@pytest.mark.parametrize("name", sorted(MAKERS))
def test_sizes_and_elements_equal_torch(name):
    got, want = MAKERS[name](jg), MAKERS[name](torch)
    gs, ws = _quiet(got.storage), _quiet(want.storage)
    assert len(gs) == len(ws) and gs.size() == ws.size()
    assert gs.nbytes() == ws.nbytes() and gs.element_size() == ws.element_size()
    assert got.untyped_storage().nbytes() == want.untyped_storage().nbytes() == len(want.untyped_storage())
    assert gs.tolist() == ws.tolist()
    assert str(gs.dtype) == str(ws.dtype).replace("torch", "jitgrad")
    assert (gs.data_ptr() == 0) == (ws.data_ptr() == 0)


def test_tensors_over_the_same_memory_share_a_storage():
    for M in (jg, torch):
        x = M.randn(4, 3)
        others = [x[1:], x.t(), x.view(12), x.detach(), x[:, 1].detach(), x.data]
        for o in others:
            assert o.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
            assert _quiet(o.storage).data_ptr() == _quiet(x.storage).data_ptr()
            assert len(_quiet(o.storage)) == 12
        # one untyped storage object per memory block: identity (and so ==) says whether memory is shared
        assert x[1:].untyped_storage() is x.untyped_storage()
        assert x.untyped_storage() == x.t().untyped_storage()
        assert x.clone().untyped_storage() is not x.untyped_storage()
        assert x.clone().untyped_storage().data_ptr() != x.untyped_storage().data_ptr()


def test_writing_the_storage_writes_the_tensors_over_it():
    for M in (jg, torch):
        x = M.zeros(2, 3)
        s = _quiet(x.t().storage)
        s[4] = 7.0
        s[-1] = 2.5
        assert x.tolist() == [[0.0, 0.0, 0.0], [0.0, 7.0, 2.5]]
        assert s[4] == 7.0 and list(s) == [0.0, 0.0, 0.0, 0.0, 7.0, 2.5]
        s.fill_(1.0)
        assert x.sum().item() == 6.0
        with pytest.raises(IndexError):
            s[6]


def test_storage_warns_that_typed_storage_is_deprecated_once():
    import jitgrad.runtime.storage_objects as so
    so._WARNED[0] = False
    with pytest.warns(UserWarning, match="TypedStorage is deprecated"):
        jg.ones(2).storage()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        jg.ones(2).storage()


def test_storage_inside_compile_is_refused_clearly():
    step = jg.compile(lambda x: len(x.storage()), backend="interpret")
    with pytest.raises(jg.UnsupportedError, match=r"storage\(\) inside @jg.compile"):
        step(jg.ones(3))


def test_the_storage_of_a_resized_or_restrided_tensor():
    for M in (jg, torch):
        x = M.arange(6.0)
        x.as_strided_((2,), (2,), 1)
        assert len(_quiet(x.storage)) == 6 and x.storage_offset() == 1
        y = M.arange(4.0)
        y.resize_(2)
        assert len(_quiet(y.storage)) == 4
    assert np.array_equal(np.asarray(_quiet(jg.arange(6.0).storage).tolist()), np.arange(6.0))
