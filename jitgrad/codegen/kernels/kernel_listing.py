"""A kernel IR listing: a ``KernelIR`` as indented pseudo-Python (``Kernel.listing``, tests, errors); nothing reads
it back."""
from __future__ import annotations

from . import kernel_ir as ki


def format_kernel(k: ki.KernelIR) -> str:
    """The kernel as indented pseudo-Python, one statement a line."""
    lines = [f"kernel(A){' parallel' if k.parallel else ''}:"]

    def block(stmts, ind):
        for s in stmts:
            if isinstance(s, ki.Assign):
                lines.append(f"{ind}{s.var.name}: {str(s.var.t)} = {ki.expr_text(s.value)}")
            elif isinstance(s, ki.Store):
                tag = f" !{s.alias[0]}/{s.alias[1]}" if s.alias else ""
                lines.append(f"{ind}{ki.expr_text(s.ptr)}[{ki.expr_text(s.idx)}{tag}] = {ki.expr_text(s.value)}")
            elif isinstance(s, ki.For):
                rng = ki.expr_text(s.stop) if (s.step == 1 and s.start.op == "const" and s.start.attr == 0) else \
                    f"{ki.expr_text(s.start)}, {ki.expr_text(s.stop)}, {s.step}"
                par = f" parallel sum({', '.join(v.name for v in s.reductions)})" if s.parallel else ""
                if s.gate is not None:
                    par += f" from work {ki.expr_text(s.gate[0])} * {s.gate[1]!r}"
                lines.append(f"{ind}for {s.var.name} in range({rng}){par}{' short' * s.short}:")
                block(s.body, ind + "    ")
            elif isinstance(s, ki.If):
                lines.append(f"{ind}if {ki.expr_text(s.cond)}:")
                block(s.then, ind + "    ")
                if s.orelse:
                    lines.append(f"{ind}else:")
                    block(s.orelse, ind + "    ")
            elif isinstance(s, ki.Claim):
                lines.append(f"{ind}claim {ki.expr_text(s.ptr)}[{ki.expr_text(s.at)}] by least key "
                             f"{ki.expr_text(s.key)}, locked by the next slot:")
                block(s.body, ind + "    ")
            elif isinstance(s, ki.Continue):
                lines.append(f"{ind}continue")
            elif isinstance(s, ki.Comment):
                lines.append(f"{ind}# {s.text}")
    block(k.body, "    ")
    return "\n".join(lines)


__all__ = ["format_kernel"]
