"""The profiler's tables: ``EventList.table()`` text (torch's layout) and its HTML form for notebooks."""
from __future__ import annotations

import html

MAX_NAME_COLUMN_WIDTH = 55
MAX_SHAPES_COLUMN_WIDTH = 80
MAX_SRC_COLUMN_WIDTH = 75
_SORT_KEYS = ("cpu_time", "cuda_time", "cpu_time_total", "cuda_time_total", "self_cpu_time_total",
              "self_cuda_time_total", "self_cpu_time", "count", "cpu_memory_usage", "self_cpu_memory_usage",
              "cuda_memory_usage", "self_cuda_memory_usage")


def _fmt_time(us: float) -> str:
    """Format a time in microseconds like torch: ``691.816us``, ``32.048ms``, ``1.500s``."""
    if us >= 1e6:
        return f"{us / 1e6:.3f}s"
    if us >= 1e3:
        return f"{us / 1e3:.3f}ms"
    return f"{us:.3f}us"


def _fmt_mem(nbytes: int) -> str:
    for unit, k in (("Gb", 1 << 30), ("Mb", 1 << 20), ("Kb", 1 << 10)):
        if abs(nbytes) >= k:
            return f"{nbytes / k:.2f} {unit}"
    return f"{nbytes} b"


def _build_table(events, sort_by, row_limit, header, top_level_only, profile_memory):
    layout = _table_layout(events, sort_by, row_limit, top_level_only, profile_memory)
    if layout is None:
        return ""
    cols, rows, self_total = layout

    def clip(s, w):
        return s if len(s) <= w else s[:w - 3] + "..."

    fmt = "  ".join("{:%s%d}" % (a, w) for _, w, a in cols)
    sep = "  ".join("-" * w for _, w, _ in cols)
    out = []
    if header is not None:
        out += ["=" * len(sep), header]
    out += [sep, fmt.format(*[clip(h, w) for h, w, _ in cols]).rstrip(), sep]
    for cells, stack in rows:
        if stack is not None:
            cells = cells + [stack[0] if stack else ""]
        out.append(fmt.format(*[clip(c, w) if a == "<" else c for c, (_, w, a) in zip(cells, cols)]).rstrip())
        for s in (stack or [])[1:]:
            out.append(fmt.format(*([""] * (len(cols) - 1) + [clip(s, cols[-1][1])])).rstrip())
    out += [sep, f"Self CPU time total: {_fmt_time(self_total)}"]
    cuda_total = sum(e.self_cuda_time_total for e in events)
    if cuda_total:
        out.append(f"Self CUDA time total: {_fmt_time(cuda_total)}")
    return "\n".join(out) + "\n"


def _table_layout(events, sort_by, row_limit, top_level_only, profile_memory):
    """What ``table()`` shows, unformatted: the columns ``(title, width, align)``, per row its cells and (when
    the Source Location column is shown) its innermost 5 stack entries, and the self CPU total; None if empty."""
    if len(events) == 0:
        return None
    if sort_by is not None:
        if sort_by not in _SORT_KEYS:
            raise ValueError(f"table(sort_by={sort_by!r}): expected one of {', '.join(_SORT_KEYS)}")
        events = sorted(events, key=lambda e: getattr(e, sort_by), reverse=True)
    self_total = sum(e.self_cpu_time_total for e in events)

    def pct(part):
        return f"{100.0 * part / self_total:.2f}%" if self_total > 0 else "0.00%"

    rows = []
    for e in events:
        if len(rows) == row_limit:
            break
        if not (top_level_only and getattr(e, "parent", None) is not None):
            rows.append(e)
    has_shapes = any(e.input_shapes for e in events)
    has_stack = any(e.stack for e in events)
    has_mem = profile_memory or any(e.cpu_memory_usage for e in events)
    has_cuda = any(e.self_cuda_time_total for e in events)     # kernels timed by CUDA events
    name_w = min(max([len(e.key) for e in rows] + [4]) + 4, MAX_NAME_COLUMN_WIDTH)
    cols = [("Name", name_w, "<")] + [(h, 12, ">") for h in (
        "Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg")]
    if has_cuda:
        cols += [(h, 12, ">") for h in ("Self CUDA", "Self CUDA %", "CUDA total", "CUDA time avg")]
    if has_mem:
        cols += [("CPU Mem", 12, ">"), ("Self CPU Mem", 12, ">")]
    cols.append(("# of Calls", 12, ">"))
    if has_shapes:
        cols.append(("Input Shapes", min(max(len(str(e.input_shapes)) for e in rows) + 4 if rows else 16,
                                         MAX_SHAPES_COLUMN_WIDTH), "<"))
    if has_stack:
        cols.append(("Source Location", min(max([len(s) for e in rows for s in e.stack] + [15]) + 4,
                                            MAX_SRC_COLUMN_WIDTH), "<"))
    out = []
    for e in rows:
        row = [e.key, pct(e.self_cpu_time_total), _fmt_time(e.self_cpu_time_total),
               pct(e.cpu_time_total), _fmt_time(e.cpu_time_total), _fmt_time(e.cpu_time)]
        if has_cuda:
            cuda_total = sum(x.self_cuda_time_total for x in events)
            row += [_fmt_time(e.self_cuda_time_total),
                    f"{100.0 * e.self_cuda_time_total / cuda_total:.2f}%" if cuda_total > 0 else "0.00%",
                    _fmt_time(e.cuda_time_total), _fmt_time(e.cuda_time)]
        if has_mem:
            row += [_fmt_mem(e.cpu_memory_usage), _fmt_mem(e.self_cpu_memory_usage)]
        row.append(str(e.count))
        if has_shapes:
            row.append(str(e.input_shapes) if e.input_shapes is not None else "")
        out.append((row, e.stack[:5] if has_stack else None))
    return cols, out, self_total


def _html_table(events, sort_by=None, row_limit=100, top_level_only=False, profile_memory=False) -> str:
    """``table()`` as an HTML table (Jupyter's view of an EventList): the same columns and rows, unclipped."""
    layout = _table_layout(events, sort_by, row_limit, top_level_only, profile_memory)
    if layout is None:
        return "<p>(no events)</p>"
    cols, rows, self_total = layout
    esc = html.escape
    left = 'style="text-align:left;font-family:monospace;white-space:pre"'
    right = 'style="text-align:right;font-family:monospace;white-space:pre"'
    out = ['<table class="jitgrad-profile">', "<thead><tr>"]
    out += [f"<th {left if a == '<' else right}>{esc(t)}</th>" for t, _, a in cols]
    out.append("</tr></thead><tbody>")
    for cells, stack in rows:
        if stack is not None:
            cells = cells + ["\n".join(stack)]
        out.append("<tr>" + "".join(f"<td {left if a == '<' else right}>{esc(c)}</td>"
                                    for c, (_, _, a) in zip(cells, cols)) + "</tr>")
    out.append(f"</tbody></table><p>Self CPU time total: {esc(_fmt_time(self_total))}</p>")
    return "".join(out)
