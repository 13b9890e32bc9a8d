"""Recurrent layers with torch's parameters, gate order, shapes and errors: the cells ``RNNCell``, ``LSTMCell``,
``GRUCell`` (one time step) and the sequence modules ``RNN``, ``LSTM``, ``GRU`` (layers, directions, dropout
between layers, LSTM's ``proj_size``).

Everything is a composition of existing ops: per layer and direction, one product projects the inputs of all time
steps at once, then a Python loop over time steps applies the recurrence.  Under ``@jitgrad.compile`` that loop
unrolls into the graph (one copy of the cell per step), which suits the modest lengths a step function sees.
"""
from __future__ import annotations

import inspect
import math
import numbers
import warnings

from ...library.creation import factories
from ...library.shaping.views import cat, stack
from .. import init
from ..functional.dropouts import dropout as _dropout
from ..functional.linear_forms import linear
from .module import Module
from ..parameter import Parameter, _empty


_GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


# --- one time step ------------------------------------------------------------------------------------------
# Each takes the input's projection ``xi = x @ w_ih.T + b_ih`` (computed for all steps at once by the sequence
# modules) and the previous state; it returns the new state.

def _rnn_step(xi, h, w_hh, b_hh, relu):
    pre = xi + linear(h, w_hh, b_hh)
    return pre.relu() if relu else pre.tanh()


def _lstm_step(xi, state, w_hh, b_hh, w_hr=None):
    h, c = state
    i, f, g, o = (xi + linear(h, w_hh, b_hh)).chunk(4, dim=-1)
    c = f.sigmoid() * c + i.sigmoid() * g.tanh()
    h = o.sigmoid() * c.tanh()
    if w_hr is not None:
        h = linear(h, w_hr)
    return h, c


def _gru_step(xi, h, w_hh, b_hh):
    i_r, i_z, i_n = xi.chunk(3, dim=-1)
    h_r, h_z, h_n = linear(h, w_hh, b_hh).chunk(3, dim=-1)
    r = (i_r + h_r).sigmoid()
    z = (i_z + h_z).sigmoid()
    n = (i_n + r * h_n).tanh()      # torch's GRU: the reset gate scales W_hn h + b_hn, not h
    return (1 - z) * n + z * h


def _step(mode, xi, state, w_hh, b_hh, w_hr=None):
    if mode == "LSTM":
        return _lstm_step(xi, state, w_hh, b_hh, w_hr)
    if mode == "GRU":
        return _gru_step(xi, state, w_hh, b_hh)
    return _rnn_step(xi, state, w_hh, b_hh, mode == "RNN_RELU")


def _reset_uniform(module):
    """torch's initialisation of every recurrent parameter: U(-1/sqrt(hidden_size), 1/sqrt(hidden_size))."""
    stdv = 1.0 / math.sqrt(module.hidden_size) if module.hidden_size > 0 else 0
    for p in module.parameters():
        init.uniform_(p, -stdv, stdv)


# --- cells --------------------------------------------------------------------------------------------------
class RNNCellBase(Module):
    """The parameters of one recurrent cell: ``weight_ih`` (gates*hidden, input), ``weight_hh``
    (gates*hidden, hidden) and, with ``bias``, ``bias_ih`` and ``bias_hh``."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool, num_chunks: int, device=None, dtype=None):
        super().__init__()
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        self.weight_ih = Parameter(_empty(num_chunks * hidden_size, input_size, device=device, dtype=dtype))
        self.weight_hh = Parameter(_empty(num_chunks * hidden_size, hidden_size, device=device, dtype=dtype))
        if bias:
            self.bias_ih = Parameter(_empty(num_chunks * hidden_size, device=device, dtype=dtype))
            self.bias_hh = Parameter(_empty(num_chunks * hidden_size, device=device, dtype=dtype))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        _reset_uniform(self)

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if getattr(self, "nonlinearity", "tanh") != "tanh":
            s += f", nonlinearity={self.nonlinearity}"
        return s

    def _batched(self, input, states, names):
        """Checks ``input`` and the ``states`` as torch does; returns whether the input was batched, the input
        and the states as 2-D (zeros for a missing state)."""
        kind = type(self).__name__
        if input.dim() not in (1, 2):
            raise ValueError(f"{kind}: Expected input to be 1D or 2D, got {input.dim()}D instead")
        if states is not None and states[0].dim() not in (1, 2):
            raise ValueError(f"{kind}: Expected {names} to be 1D or 2D, got {states[0].dim()}D instead")
        batched = input.dim() == 2
        if not batched:
            input = input.unsqueeze(0)
        if states is None:
            zeros = factories.zeros(input.shape[0], self.hidden_size, dtype=input.dtype, device=input.device)
            states = (zeros,) * (2 if kind == "LSTMCell" else 1)
        elif not batched:
            states = tuple(s.unsqueeze(0) for s in states)
        if input.shape[1] != self.input_size:
            raise RuntimeError(f"input has inconsistent input_size: got {input.shape[1]} expected {self.input_size}")
        for k, s in enumerate(states):
            if input.shape[0] != s.shape[0]:
                raise RuntimeError(f"Input batch size {input.shape[0]} doesn't match hidden{k} batch size "
                                   f"{s.shape[0]}")
            if s.shape[1] != self.hidden_size:
                raise RuntimeError(f"hidden{k} has inconsistent hidden_size: got {s.shape[1]}, expected "
                                   f"{self.hidden_size}")
        return batched, input, states


class RNNCell(RNNCellBase):
    """One Elman RNN step: ``h' = tanh(x W_ih^T + b_ih + h W_hh^T + b_hh)`` (or relu), with torch's parameters.

    >>> import jitgrad as jg
    >>> cell = jg.nn.RNNCell(3, 4)
    >>> cell(jg.randn(2, 3)).shape
    jitgrad.Size([2, 4])
    """

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, nonlinearity: str = "tanh",
                 device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, num_chunks=1, device=device, dtype=dtype)
        self.nonlinearity = nonlinearity

    def forward(self, input, hx=None):
        batched, input, (hx,) = self._batched(input, None if hx is None else (hx,), "hidden")
        if self.nonlinearity not in ("tanh", "relu"):
            raise RuntimeError(f"Unknown nonlinearity: {self.nonlinearity}")
        h = _rnn_step(linear(input, self.weight_ih, self.bias_ih), hx, self.weight_hh, self.bias_hh,
                      self.nonlinearity == "relu")
        return h if batched else h.squeeze(0)


class LSTMCell(RNNCellBase):
    """One LSTM step with torch's gate order (input, forget, cell, output); returns ``(h', c')``.

    >>> import jitgrad as jg
    >>> cell = jg.nn.LSTMCell(3, 4)
    >>> h, c = cell(jg.randn(2, 3))
    >>> h.shape, c.shape
    (jitgrad.Size([2, 4]), jitgrad.Size([2, 4]))
    """

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, num_chunks=4, device=device, dtype=dtype)

    def forward(self, input, hx=None):
        batched, input, state = self._batched(input, None if hx is None else tuple(hx), "hx[0]")
        h, c = _lstm_step(linear(input, self.weight_ih, self.bias_ih), state, self.weight_hh, self.bias_hh)
        return (h, c) if batched else (h.squeeze(0), c.squeeze(0))


class GRUCell(RNNCellBase):
    """One GRU step with torch's gate order (reset, update, new) and ``n = tanh(W_in x + b_in + r * (W_hn h +
    b_hn))``.

    >>> import jitgrad as jg
    >>> cell = jg.nn.GRUCell(3, 4)
    >>> cell(jg.randn(3), jg.zeros(4)).shape
    jitgrad.Size([4])
    """

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, num_chunks=3, device=device, dtype=dtype)

    def forward(self, input, hx=None):
        batched, input, (hx,) = self._batched(input, None if hx is None else (hx,), "hidden")
        h = _gru_step(linear(input, self.weight_ih, self.bias_ih), hx, self.weight_hh, self.bias_hh)
        return h if batched else h.squeeze(0)


# --- sequence modules ---------------------------------------------------------------------------------------
class RNNBase(Module):
    """The layers and directions of a recurrent module, with torch's parameter names and order: per layer ``k``
    and direction (``""``, then ``"_reverse"``), ``weight_ih_lk``, ``weight_hh_lk``, ``bias_ih_lk``,
    ``bias_hh_lk`` (with ``bias``) and ``weight_hr_lk`` (LSTM with ``proj_size``)."""

    def __init__(self, mode: str, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, proj_size: int = 0,
                 device=None, dtype=None):
        super().__init__()
        if (not isinstance(dropout, numbers.Number) or not 0 <= dropout <= 1 or isinstance(dropout, bool)):
            raise ValueError("dropout should be a number in range [0, 1] representing the probability of an "
                             "element being zeroed")
        if dropout > 0 and num_layers == 1:
            warnings.warn("dropout option adds dropout after all but last recurrent layer, so non-zero dropout "
                          f"expects num_layers greater than 1, but got dropout={dropout} and num_layers={num_layers}",
                          stacklevel=3)
        if not isinstance(hidden_size, int):
            raise TypeError(f"hidden_size should be of type int, got: {type(hidden_size).__name__}")
        if hidden_size <= 0:
            raise ValueError("hidden_size must be greater than zero")
        if num_layers <= 0:
            raise ValueError("num_layers must be greater than zero")
        if proj_size < 0:
            raise ValueError("proj_size should be a positive integer or zero to disable projections")
        if proj_size >= hidden_size:
            raise ValueError("proj_size has to be smaller than hidden_size")
        if mode not in _GATES:
            raise ValueError(f"Unrecognized RNN mode: {mode}")
        self.mode, self.input_size, self.hidden_size, self.num_layers = mode, input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.dropout = bias, batch_first, float(dropout)
        self.bidirectional, self.proj_size = bidirectional, proj_size
        gate_size = _GATES[mode] * hidden_size
        real_hidden = proj_size if proj_size > 0 else hidden_size
        self._flat_weights_names, self._all_weights = [], []
        for layer in range(num_layers):
            layer_input = input_size if layer == 0 else real_hidden * self._directions
            for suffix in ("", "_reverse")[:self._directions]:
                shapes = [("weight_ih", (gate_size, layer_input)), ("weight_hh", (gate_size, real_hidden))]
                if bias:
                    shapes += [("bias_ih", (gate_size,)), ("bias_hh", (gate_size,))]
                if proj_size > 0:
                    shapes += [("weight_hr", (proj_size, hidden_size))]
                names = []
                for kind, shape in shapes:
                    name = f"{kind}_l{layer}{suffix}"
                    setattr(self, name, Parameter(_empty(*shape, device=device, dtype=dtype)))
                    names.append(name)
                self._flat_weights_names += names
                self._all_weights.append(names)
        self.reset_parameters()

    @property
    def _directions(self):
        return 2 if self.bidirectional else 1

    @property
    def _flat_weights(self):
        return [getattr(self, n) for n in self._flat_weights_names]

    @property
    def all_weights(self):
        """The parameters grouped per layer and direction, as torch's ``all_weights``."""
        return [[getattr(self, n) for n in names] for names in self._all_weights]

    def flatten_parameters(self) -> None:
        """torch packs the weights into one buffer for cuDNN; jitgrad has nothing to pack."""

    def reset_parameters(self) -> None:
        _reset_uniform(self)

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.proj_size != 0:
            s += f", proj_size={self.proj_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if self.batch_first is not False:
            s += f", batch_first={self.batch_first}"
        if self.dropout != 0:
            s += f", dropout={self.dropout}"
        if self.bidirectional is not False:
            s += f", bidirectional={self.bidirectional}"
        return s

    # -- forward --
    def _input_dims(self, input):
        if input.dim() not in (2, 3):
            tensor = " tensor" if self.mode.startswith("RNN") else ""
            raise ValueError(f"{type(self).__name__}: Expected input to be 2D or 3D, got {input.dim()}D{tensor} "
                             "instead")
        return input.dim() == 3

    def _check_input(self, input):
        if input.shape[-1] != self.input_size:
            raise RuntimeError(f"input.size(-1) must be equal to input_size. Expected {self.input_size}, got "
                               f"{input.shape[-1]}")

    def _check_hidden(self, hx, last, batch, what):
        expected = (self.num_layers * self._directions, batch, last)
        if tuple(hx.shape) != expected:
            raise RuntimeError(f"Expected {what} size {expected}, got {list(hx.shape)}")

    def _run(self, input, states):
        """``input`` (L, N, H_in); ``states`` a tuple of (layers*directions, N, .) tensors (h, and c for an LSTM).
        Returns the last layer's output (L, N, directions*H_out) and the final states, stacked as given."""
        weights = self.all_weights
        finals = [[] for _ in states]
        x = input
        for layer in range(self.num_layers):
            outs = []
            for d in range(self._directions):
                k = layer * self._directions + d
                w = weights[k]
                w_ih, w_hh = w[0], w[1]
                b_ih, b_hh = (w[2], w[3]) if self.bias else (None, None)
                w_hr = w[-1] if self.proj_size > 0 else None
                xi = linear(x, w_ih, b_ih)      # every time step's input projection in one product
                state = tuple(s[k] for s in states)
                state = state if self.mode == "LSTM" else state[0]
                steps = range(x.shape[0])
                out = [None] * x.shape[0]
                for t in (reversed(steps) if d == 1 else steps):
                    state = _step(self.mode, xi[t], state, w_hh, b_hh, w_hr)
                    out[t] = state[0] if self.mode == "LSTM" else state
                outs.append(stack(out, 0))
                for f, s in zip(finals, state if self.mode == "LSTM" else (state,)):
                    f.append(s)
            x = outs[0] if len(outs) == 1 else cat(outs, -1)
            if layer < self.num_layers - 1 and self.dropout > 0:
                x = _dropout(x, self.dropout, self.training)
        return x, tuple(stack(f, 0) for f in finals)

    def _run_packed(self, data, sizes, states):
        """``data`` the packed time steps (sum(sizes), H_in), ``sizes`` the batch size of each step
        (non-increasing).  A sequence's state stops changing after its last step, so the final states are taken
        at each sequence's true end; the reverse direction starts each sequence at its own last step."""
        weights = self.all_weights
        lstm = self.mode == "LSTM"
        offsets = [0]
        for b in sizes:
            offsets.append(offsets[-1] + b)
        finals = [[] for _ in states]
        x = data
        for layer in range(self.num_layers):
            outs = []
            for d in range(self._directions):
                k = layer * self._directions + d
                w = weights[k]
                b_ih, b_hh = (w[2], w[3]) if self.bias else (None, None)
                w_hr = w[-1] if self.proj_size > 0 else None
                xi = linear(x, w[0], b_ih)
                init = tuple(s[k] for s in states)
                out = [None] * len(sizes)
                if d == 0:
                    state = init
                    for t, b in enumerate(sizes):
                        if b < state[0].shape[0]:       # sequences that ended keep their last state below
                            done = tuple(s[b:] for s in state)
                            new = _step(self.mode, xi[offsets[t]:offsets[t + 1]], tuple(s[:b] for s in state)
                                        if lstm else state[0][:b], w[1], b_hh, w_hr)
                            new = new if lstm else (new,)
                            state = tuple(cat([n, r], 0) for n, r in zip(new, done))
                        else:
                            new = _step(self.mode, xi[offsets[t]:offsets[t + 1]], state if lstm else state[0],
                                        w[1], b_hh, w_hr)
                            state = new if lstm else (new,)
                            new = state
                        out[t] = new[0]
                else:
                    state = None
                    for t in reversed(range(len(sizes))):
                        b = sizes[t]
                        have = 0 if state is None else state[0].shape[0]
                        if b > have:        # sequences whose last step is t start here from the initial state
                            fresh = tuple(s[have:b] for s in init)
                            state = fresh if state is None else tuple(cat([s, f], 0) for s, f in zip(state, fresh))
                        new = _step(self.mode, xi[offsets[t]:offsets[t + 1]], state if lstm else state[0], w[1],
                                    b_hh, w_hr)
                        state = new if lstm else (new,)
                        out[t] = state[0]
                outs.append(cat(out, 0))
                for f, s in zip(finals, state):
                    f.append(s)
            x = outs[0] if len(outs) == 1 else cat(outs, -1)
            if layer < self.num_layers - 1 and self.dropout > 0:
                x = _dropout(x, self.dropout, self.training)
        return x, tuple(stack(f, 0) for f in finals)

    def _forward_packed(self, packed, hx, hx_names):
        from ..utils.rnn import PackedSequence, _sizes
        data, batch_sizes, sorted_indices, unsorted_indices = packed
        sizes = _sizes(batch_sizes)
        batch = sizes[0]
        lstm = self.mode == "LSTM"
        real_hidden = self.proj_size if self.proj_size > 0 else self.hidden_size
        lasts = (real_hidden, self.hidden_size) if lstm else (self.hidden_size,)
        if hx is None:
            hx = tuple(factories.zeros(self.num_layers * self._directions, batch, n, dtype=data.dtype,
                                       device=data.device) for n in lasts)
        elif sorted_indices is not None:
            hx = tuple(s.index_select(1, sorted_indices) for s in hx)
        self._check_input(data)
        for s, n, what in zip(hx, lasts, hx_names):
            self._check_hidden(s, n, batch, what)
        out, finals = self._run_packed(data, sizes, hx)
        if unsorted_indices is not None:
            finals = tuple(f.index_select(1, unsorted_indices) for f in finals)
        return PackedSequence(out, batch_sizes, sorted_indices, unsorted_indices), finals

    def _forward(self, input, hx, hx_names):
        """The shared forward of RNN and GRU (one state) and LSTM (two): checks as torch, handles the layout and
        the unbatched case; a PackedSequence input gives a PackedSequence output."""
        from ..utils.rnn import PackedSequence
        if isinstance(input, PackedSequence):
            return self._forward_packed(input, hx, hx_names)
        batched = self._input_dims(input)
        batch_dim = 0 if self.batch_first else 1
        lstm = self.mode == "LSTM"
        if not batched:
            input = input.unsqueeze(batch_dim)
            if hx is not None:
                dims = [s.dim() for s in hx]
                if any(n != 2 for n in dims):
                    raise RuntimeError(self._state_dim_message("unbatched 2-D", 2, dims))
                hx = tuple(s.unsqueeze(1) for s in hx)
        elif hx is not None:
            dims = [s.dim() for s in hx]
            if any(n != 3 for n in dims):
                raise RuntimeError(self._state_dim_message("batched 3-D", 3, dims))
        batch = input.shape[batch_dim]
        real_hidden = self.proj_size if self.proj_size > 0 else self.hidden_size
        lasts = (real_hidden, self.hidden_size) if lstm else (self.hidden_size,)
        if hx is None:
            hx = tuple(factories.zeros(self.num_layers * self._directions, batch, n, dtype=input.dtype,
                                       device=input.device) for n in lasts)
        self._check_input(input)
        for s, n, what in zip(hx, lasts, hx_names):
            self._check_hidden(s, n, batch, what)
        if self.batch_first:
            input = input.transpose(0, 1)
        output, finals = self._run(input, hx)
        if self.batch_first:
            output = output.transpose(0, 1)
        if not batched:
            output = output.squeeze(batch_dim)
            finals = tuple(f.squeeze(1) for f in finals)
        return output, finals

    def _state_dim_message(self, what, n, dims):
        if self.mode == "LSTM":
            return (f"For {what} input, hx and cx should also be {n}-D but got ({dims[0]}-D, {dims[1]}-D) "
                    "tensors")
        return f"For {what} input, hx should also be {n}-D but got {dims[0]}-D tensor"


def _args(documented, args, kwargs):
    """torch's RNN/LSTM/GRU take ``*args, **kwargs`` (their documented signatures are overloads): the
    arguments bound to the ``documented`` signature's parameters, by position then keyword, refused with torch's
    messages; the defaults filled in."""
    params = list(documented.parameters.values())[1:]     # after self
    names = [p.name for p in params]
    if "proj_size" in kwargs and "proj_size" not in names:
        raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
    if len(args) > len(names):
        raise TypeError(f"RNNBase.__init__() takes at most {len(names)} positional arguments ({len(args)} given)")
    bound = dict(zip(names, args))
    for k, v in kwargs.items():
        if k not in names:
            raise TypeError(f"RNNBase.__init__() got an unexpected keyword argument '{k}'")
        if k in bound:
            raise TypeError(f"RNNBase.__init__() got multiple values for argument '{k}'")
        bound[k] = v
    missing = [p.name for p in params if p.default is p.empty and p.name not in bound]
    if missing:
        raise TypeError(f"RNNBase.__init__() missing {len(missing)} required positional argument"
                        f"{'s' if len(missing) > 1 else ''}: " + " and ".join(f"'{k}'" for k in missing))
    return {**{p.name: p.default for p in params if p.default is not p.empty}, **bound}


# torch's documented constructor signatures (its overloads); each class's __init__ reports its own as
# __signature__, so help() and inspect.signature show the real parameters
def _rnn_signature(self, input_size: int, hidden_size: int, num_layers: int = 1, nonlinearity: str = "tanh",
                   bias: bool = True, batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                   device=None, dtype=None): ...


def _lstm_signature(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                    batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                    proj_size: int = 0, device=None, dtype=None): ...


def _gru_signature(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                   batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, device=None,
                   dtype=None): ...


class RNN(RNNBase):
    """A multi-layer Elman RNN (tanh or relu) over a sequence, with torch's parameters and shapes:
    ``rnn(input, h0=None) -> (output, h_n)``; input (L, N, H_in), (N, L, H_in) with ``batch_first`` or
    unbatched (L, H_in).  Constructor parameters as torch's: ``input_size, hidden_size, num_layers=1,
    nonlinearity='tanh', bias=True, batch_first=False, dropout=0.0, bidirectional=False, device=None, dtype=None``.

    >>> import jitgrad as jg
    >>> rnn = jg.nn.RNN(3, 4, num_layers=2, bidirectional=True)
    >>> out, h_n = rnn(jg.randn(5, 2, 3))
    >>> out.shape, h_n.shape
    (jitgrad.Size([5, 2, 8]), jitgrad.Size([4, 2, 4]))
    """

    def __init__(self, *args, **kwargs):
        kw = _args(self.__init__.__signature__, args, kwargs)
        nonlinearity = kw.pop("nonlinearity")
        if nonlinearity == "tanh":
            mode = "RNN_TANH"
        elif nonlinearity == "relu":
            mode = "RNN_RELU"
        else:
            raise ValueError(f"Unknown nonlinearity '{nonlinearity}'. Select from 'tanh' or 'relu'.")
        super().__init__(mode, **kw)
        self.nonlinearity = nonlinearity

    __init__.__signature__ = inspect.signature(_rnn_signature)

    def forward(self, input, hx=None):
        output, (h,) = self._forward(input, None if hx is None else (hx,), ("hidden",))
        return output, h


class LSTM(RNNBase):
    """A multi-layer LSTM over a sequence (gate order input, forget, cell, output), with torch's parameters and
    shapes: ``lstm(input, (h0, c0)=None) -> (output, (h_n, c_n))``; with ``proj_size`` the hidden state is
    projected by ``weight_hr_lk`` to that size.  Constructor parameters as torch's: ``input_size, hidden_size,
    num_layers=1, bias=True, batch_first=False, dropout=0.0, bidirectional=False, proj_size=0, device=None,
    dtype=None``.

    >>> import jitgrad as jg
    >>> lstm = jg.nn.LSTM(3, 4, batch_first=True)
    >>> out, (h_n, c_n) = lstm(jg.randn(2, 5, 3))
    >>> out.shape, h_n.shape, c_n.shape
    (jitgrad.Size([2, 5, 4]), jitgrad.Size([1, 2, 4]), jitgrad.Size([1, 2, 4]))
    """

    def __init__(self, *args, **kwargs):
        super().__init__("LSTM", **_args(self.__init__.__signature__, args, kwargs))

    __init__.__signature__ = inspect.signature(_lstm_signature)

    def forward(self, input, hx=None):
        output, (h, c) = self._forward(input, None if hx is None else tuple(hx), ("hidden[0]", "hidden[1]"))
        return output, (h, c)


class GRU(RNNBase):
    """A multi-layer GRU over a sequence (gate order reset, update, new; ``n = tanh(W_in x + b_in + r * (W_hn h
    + b_hn))``), with torch's parameters and shapes: ``gru(input, h0=None) -> (output, h_n)``.  Constructor
    parameters as torch's: ``input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
    bidirectional=False, device=None, dtype=None``.

    >>> import jitgrad as jg
    >>> gru = jg.nn.GRU(3, 4)
    >>> out, h_n = gru(jg.randn(5, 3))
    >>> out.shape, h_n.shape
    (jitgrad.Size([5, 4]), jitgrad.Size([1, 4]))
    """

    def __init__(self, *args, **kwargs):
        super().__init__("GRU", **_args(self.__init__.__signature__, args, kwargs))

    __init__.__signature__ = inspect.signature(_gru_signature)

    def forward(self, input, hx=None):
        output, (h,) = self._forward(input, None if hx is None else (hx,), ("hidden",))
        return output, h


__all__ = ["RNNCellBase", "RNNCell", "LSTMCell", "GRUCell", "RNNBase", "RNN", "LSTM", "GRU"]
