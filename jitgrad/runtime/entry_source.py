"""The generated eager entries: one template for the straight-line code that binds an op and records its node.

Two kinds of function are rendered from it (and compiled by ``generated_code.make``, once per distinct text):

- ``flat_source(op, arity)``: primitive ``op``'s flat entry point over one or two arguments (``flat_bind.py``),
  rendered from the op's table row (which inputs it differentiates, whether it saves inputs or its output): the text
  holds only the branches that op takes.  Ops with the same row share the text; each op's entry is its function
  with ``_op`` bound to the op, compiled at the entry's first call (``flat_bind.installed``);
- ``record_source()``: ``dispatch._record``, the general path's recording of any op's node, its table row read per
  call; compiled at dispatch's import.

Both are built from the same fragments below (an input's edge, the node's slots, the inputs and output it saves, the
walk to the user's line), so a node has one source whichever path made it; ``tests/test_flat_bind.py`` compares the
two paths' nodes field by field.  ``python -m jitgrad entry add 2`` prints an op's entry; ``python -m jitgrad entry
record`` prints ``_record``.

This module renders text only: the names the text reads are the globals of the module that makes the function
(``generated_code.make``), so it imports nothing of jitgrad.
"""
from __future__ import annotations


# ---- fragments (4-space indented at level 0; ``_at`` indents a filled one) -----------------------------------------

# an input's edge: its grad_fn's output, or its accumulator (a leaf that requires grad); ``{none}`` otherwise.  A view
# whose base was written in place (recorded) after the view was made first takes the base's new history
# (dispatch.refresh_view; the test inline is refresh_view's own, so a current view costs no call)
_EDGE = """\
vb = {x}._base
if vb is not None and ((gf := {x}.grad_fn) is None and vb.grad_fn is not None or gf is not None and (
        gf.view_args is not None and vb.grad_fn is not gf.view_base_fn)):
    refresh_view({x})
gf = {x}.grad_fn
if gf is not None:
    {edge} = (gf, {x}._out_nr){found}
elif {x}._requires_grad:
    acc = {x}._acc
    {edge} = (acc if acc is not None else {x}._accumulator(), 0){found}
else:
    {none}
"""

# the impl's result as an array of the output dtype, and the output tensor (no view, no history yet)
_OUTPUT = """\
try:
    out = hit[6]({arrays}, **params) if params else hit[6]({arrays})     # (no kwargs dict made per call)
except _ERRORS as e:
    raise op_error(_op, hit[1], e) from None
if not hit[10]:     # (else a ufunc whose loop gives an array of the output dtype: rule_entries.exact_ufunc)
    if type(out) is not _ndarray:
        out = np.asarray(out, dtype=hit[2])
    elif out.dtype is not hit[2] and out.dtype != hit[2]:   # (NumPy's built-in dtypes are singletons)
        out = out.astype(hit[2])
t = _new(Tensor)
t._data = out
t._requires_grad = t._retains_grad = t._inference = False
t.grad_fn = t._grad = t._hooks = t._acc = t._view_origin = t._base = None
t._out_nr = 0
t._vc = [0]
"""

# the node, slot by slot (no Node.__init__ frame; tests/test_eager_budget.py checks that every slot is set)
_NODE = """\
node = _new(OpNode)
node.op = {op}
node.params = {params}
node.next_functions = {next_functions}
node.needs_grad = {needs}
node.seq = _next(_node_seq)
node._freed = False
# (_x: hooks, retained grads, packed values, anomaly's stack: node.NodeExtras, when set)
node._x = node.view_args = node.view_base_fn = node.torch_name = None
node.shapes = hit[4]
node.dtypes = hit[5]
node.plans = hit[11]
node.out_meta = hit[7]
"""

# the inputs to save for this pattern of needs (an input whose gradient nobody needs may save nothing)
_SAVED_PLAN = """\
saved = hit[9].get({needs})
if saved is None:
    saved = hit[9][{needs}] = saved_inputs({op}, {n}, {needs})
"""

_SAVED_ONE = """\
if saved:
    node.inputs = (a,)
    node.versions = [(0, a._vc[0])]
else:
    node.inputs = hit[8]
    node.versions = []
"""

_SAVED_EACH = """\
ins = {ins}
vers = []
for i in saved:
    x = {arg}
    ins[i] = x
    if {is_tensor}:
{inference}        vers.append((i, x._vc[0]))
node.inputs = tuple(ins)
node.versions = vers
"""

_SAVED_NONE = """\
node.inputs = hit[8]
node.versions = None
"""

# an inference tensor is never saved (torch's error); the flat path never sees one
_INFERENCE_SAVED = """\
if x._inference:
    raise RuntimeError(with_user_line(
        "Inference tensors cannot be saved for backward. Please do not use Tensors created in "
        "inference mode in computation tracked by autograd. To work around this, you can make a clone "
        "to get a normal tensor and use it in autograd, or use `jitgrad.no_grad()` instead of "
        f"`jitgrad.inference_mode()`. (op {op.name})"))
"""

# the output, kept without its history (saved_output.py: no t -> node -> t cycle, the node dies with t)
_SAVED_OUTPUT = """\
so = _new(Tensor)
so._data, so._vc = {out}, t._vc
so._requires_grad = so._retains_grad = so._inference = False
so.grad_fn = so._grad = so._base = so._hooks = so._acc = so._view_origin = None
so._out_nr = 0
node.outputs = (so,)
node.out_versions = [(0, {version})]
"""

_NO_SAVED_OUTPUT = """\
node.outputs = _NO_OUTPUT
node.out_versions = None
"""

# the node's saved values packed (saved_tensors_hooks), then the user's line: the first frame outside the package above
# the entry's caller (source.user_frame's search, inline; the caller is the package's own code: starting above it
# makes one frame object fewer, and reads one less)
_PACKED_AND_LINE = """\
if _SH.stack{traced}:
    pack_node(node)
try:
    f = _getframe({depth})
except ValueError:      # (called from a module's top level)
    f = _getframe({depth_1})
while f is not None:
    code = f.f_code
    r = _internal_get(code.co_filename)
    if r is None:
        r = _internal(code)
    if not r:
        node._loc = (code, f.f_lasti)     # the line when asked (Node.loc): f_lineno walks the line table
        break
    f = f.f_back
else:
    node._loc = None
"""


def _at(level: int, text: str) -> str:
    pad = "    " * level
    return "".join(pad + line if line.strip() else line for line in text.splitlines(True))


def _edge(level, x, i, none):
    return _at(level, _EDGE.format(x=x, edge=f"e{i}, n{i}", found=", True", none=none))


def _saved(level, op, arity, needs):
    """The node's saved inputs and output, for an op whose table row is ``op`` (``None``: read per call)."""
    saves_in = "op.saves_in" if op is None else bool(op.saves_in)
    saves_out = "op.saves_out" if op is None else bool(op.saves_out)
    name = "op" if op is None else "_op"
    if arity == 1:
        ins = _SAVED_PLAN.format(needs=needs, op=name, n=1) + _SAVED_ONE
    elif arity == 2:
        ins = _SAVED_PLAN.format(needs=needs, op=name, n=2) + _SAVED_EACH.format(
            ins="[None, None]", arg="b if i else a", inference="",
            is_tensor="type(x) is not int and type(x) is not float and type(x) is not bool")
    else:
        ins = _SAVED_PLAN.format(needs=needs, op=name, n="n") + _SAVED_EACH.format(
            ins="[None] * n", arg="args[i]", inference=_at(2, _INFERENCE_SAVED),
            is_tensor="type(x) is Tensor or isinstance(x, Tensor)")
    # (a flat entry's output is fresh: its version is 0; _record's may be a view, whose counter is its base's)
    out = _SAVED_OUTPUT.format(out="t._data", version="t._vc[0]") if op is None else \
        _SAVED_OUTPUT.format(out="out", version="0")
    return _at(level, _choose(saves_in, ins, _SAVED_NONE) + _choose(saves_out, out, _NO_SAVED_OUTPUT))


def _choose(cond, then: str, other: str) -> str:
    """``then`` or ``other`` where ``cond`` is known when rendering; a branch on the expression ``cond`` otherwise."""
    if cond is True:
        return then
    if cond is False:
        return other
    return f"if {cond}:\n{_at(1, then)}else:\n{_at(1, other)}"


# ---- the flat entry of one op ----------------------------------------------------------------------------------------

_FLAT_UNARY = '''\
def _make(_op):
    def flat_unary(a, params=None):
        """A flat entry point over one argument (runtime/flat_bind.py; {row})."""
        ta = type(a)
        if _DEPARTED or _AN.enabled or _d._bind is not _BIND or not (ta is Tensor or ta in _AS_TENSOR):
            return _d._bind(_op, (a,), params or {{}})
        da = a._data
        if type(da) is not _ndarray or a._inference:
            return _d._bind(_op, (a,), params or {{}})
        if params:
            try:
                hit = _RULES.get((_op, da.shape, da.dtype, tuple(params.items())))
            except TypeError:   # (unhashable params: dispatch evaluates the rule uncached)
                hit = None
        else:
            hit = _RULES.get((_op, da.shape, da.dtype))
        if hit is None:
            return _d._bind(_op, (a,), params or {{}})
{output}{record}        return t
    return flat_unary
'''

_FLAT_BINARY = '''\
def _make(_op):
    def flat_binary(a, b, params=None):
        """A flat entry point over two arguments (runtime/flat_bind.py; {row})."""
        if _DEPARTED or _AN.enabled or _d._bind is not _BIND:
            return _d._bind(_op, (a, b), params or {{}})
        ta = type(a)
        tb = type(b)
        if ta is Tensor or ta in _AS_TENSOR:
            da = a._data
            if type(da) is not _ndarray or a._inference:
                return _d._bind(_op, (a, b), params or {{}})
            if tb is Tensor or tb in _AS_TENSOR:
                db = b._data
                if type(db) is not _ndarray or b._inference:
                    return _d._bind(_op, (a, b), params or {{}})
                key = (_op, da.shape, da.dtype, db.shape, db.dtype)
                need = (a._requires_grad or a.grad_fn is not None or b._requires_grad or b.grad_fn is not None
                        or (va := a._base) is not None and va.grad_fn is not None
                        or (va := b._base) is not None and va.grad_fn is not None)
            elif tb is float or tb is int or tb is bool:
                db = b
                key = (_op, da.shape, da.dtype, tb)
                need = a._requires_grad or a.grad_fn is not None or (va := a._base) is not None and \\
                    va.grad_fn is not None
            else:
                return _d._bind(_op, (a, b), params or {{}})
        elif (ta is float or ta is int) and tb is Tensor:      # 0.1 * t (dispatch._bind's key: Tensor itself)
            db = b._data
            if type(db) is not _ndarray or b._inference:
                return _d._bind(_op, (a, b), params or {{}})
            da = a
            key = (_op, ta, db.shape, db.dtype)
            need = b._requires_grad or b.grad_fn is not None or (va := b._base) is not None and \\
                va.grad_fn is not None
        else:
            return _d._bind(_op, (a, b), params or {{}})
        if params:
            try:
                hit = _RULES.get(key + (tuple(params.items()),))
            except TypeError:   # (unhashable params: dispatch evaluates the rule uncached)
                hit = None
        else:
            hit = _RULES.get(key)
        if hit is None:
            return _d._bind(_op, (a, b), params or {{}})
{output}{record}        return t
    return flat_binary
'''


def _row(op, arity) -> str:
    """The table row a flat entry's text is rendered from, in words (its docstring, and its key)."""
    diff = [i for i in range(arity) if i not in op.nondiff_inputs]
    which = "no input" if not diff else f"input {diff[0]}" if len(diff) == 1 else "inputs " + ", ".join(map(str, diff))
    return (f"differentiates {which}; "
            f"{'saves inputs' if op.saves_in else 'saves no input'}; "
            f"{'saves its output' if op.saves_out else 'saves no output'}")


def _flat_record(op, arity) -> str:
    """A flat entry's recording, after its output ``t``: ``return t`` where nothing is recorded."""
    nondiff = op.nondiff_inputs
    if arity == 1:
        if 0 in nondiff:
            return ""
        head = ("if not (hit[3] and _GM.grad_enabled):\n    return t\n"
                + _EDGE.format(x="a", edge="e0", found="", none="return t"))
        nf, needs = "(e0,)", "_NEEDS_ONE"
    else:
        head = "if not (need and hit[3] and _GM.grad_enabled):\n    return t\n"
        head += "# the edges: a scalar (or an input the op does not differentiate) has none\n"
        if 0 in nondiff:
            head += "e0, n0 = _NO_EDGE, False\n"
        else:
            head += (f"if da is not a:\n{_edge(1, 'a', 0, 'e0, n0 = _NO_EDGE, False')}"
                     "else:\n    e0, n0 = _NO_EDGE, False\n")
        if 1 in nondiff:
            head += "if not n0:\n    return t\ne1, n1 = _NO_EDGE, False\n"
        else:
            head += (f"if db is not b:\n{_edge(1, 'b', 1, 'e1, n1 = _NO_EDGE, False')}"
                     "elif n0:\n    e1, n1 = _NO_EDGE, False\nelse:\n    return t\n")
        nf, needs = "(e0, e1)", "needs"
    text = head + _NODE.format(op="_op", params="params or {}", next_functions=nf,
                               needs=needs if arity == 1 else "needs = (n0, n1)")
    text += _saved(0, op, arity, needs)
    text += _PACKED_AND_LINE.format(traced="", depth=2, depth_1=1) + "t.grad_fn = node\n"
    return _at(2, text)


def flat_label(op, arity: int) -> str:
    """The file name's label of ``op``'s flat entry text (the text's row: ops with the same row share it)."""
    return f"flat entry over {arity} argument{'s' * (arity > 1)}: {_row(op, arity)}"


def flat_source(op, arity: int) -> str:
    """The text of primitive ``op``'s flat entry over ``arity`` (1 or 2) arguments: a factory ``_make(_op)`` of the
    entry for ``op`` (ops with the same table row share the text)."""
    row = _row(op, arity)
    output = _at(2, _OUTPUT.format(arrays="da" if arity == 1 else "da, db"))
    return (_FLAT_UNARY if arity == 1 else _FLAT_BINARY).format(row=row, output=output,
                                                                 record=_flat_record(op, arity))


# ---- dispatch._record ------------------------------------------------------------------------------------------------

_RECORD = '''\
def _record(op, params, args, hit, t):
    """Give ``t`` a grad_fn Node; ``hit`` is the signature's entry from ``_rule_entry``.

    The hot path of every recorded op: the node is built here slot by slot and the user's line is found inline (the
    text is runtime/entry_source.py's, shared with the flat entries).  One or two tensors (not inference tensors;
    a view's history made current in its edge) and Python scalars take straight-line code; any other signature the
    general loop (``_edges``)."""
    n = len(args)
    nondiff = op.nondiff_inputs
    a0 = args[0]
    t0 = type(a0)
    if (t0 is Tensor or t0 in _AS_TENSOR) and not a0._inference and n <= 2:
        if nondiff and 0 in nondiff:
            e0, n0 = _NO_EDGE, False
        else:
{edge0}        if n == 1:
            if not n0:
                return
            nf, needs = (e0,), _NEEDS_ONE
        else:
            a1 = args[1]
            t1 = type(a1)
            if t1 is float or t1 is int or t1 is bool:
                e1, n1 = _NO_EDGE, False
            elif (t1 is Tensor or t1 in _AS_TENSOR) and not a1._inference:
                if nondiff and 1 in nondiff:
                    e1, n1 = _NO_EDGE, False
                else:
{edge1}            else:
                e1 = None       # another kind of argument: the general loop
            if e1 is None:
                nf, needs = _edges(op, args)
            elif n0 or n1:
                nf, needs = (e0, e1), (n0, n1)
            else:
                return
    else:
        nf, needs = _edges(op, args)
    if nf is None:
        return              # only inference tensors, or only they "required" grad: nothing to record
{node}{saved}{user_line}    if _AN.enabled:
        node.stack = user_stack(3)
        node.anomaly_parent = _AN.current
    if t._base is not None:
        # the parent weakly: the base's history after a write through this view reaches this node (a cycle)
        node.view_args = (_weakref(args[0]), *args[1:])
        node.view_base_fn = t._base.grad_fn
    t.grad_fn = node
'''


def record_label() -> str:
    return "dispatch._record"


def record_source() -> str:
    """The text of ``dispatch._record``."""
    return _RECORD.format(
        edge0=_edge(3, "a0", 0, "e0, n0 = _NO_EDGE, False"), edge1=_edge(5, "a1", 1, "e1, n1 = _NO_EDGE, False"),
        node=_at(1, _NODE.format(op="op", params="params", next_functions="nf", needs="needs")),
        saved=_saved(1, None, None, "needs"),
        # (a thread's trace binds the traced path's ops here too: their saved values are not packed)
        user_line=_at(1, _PACKED_AND_LINE.format(
            traced=" and (not _DEPARTED or _TR.active is None)", depth=3, depth_1=2)))


__all__ = ["flat_source", "flat_label", "record_source", "record_label"]
