"""Print each failing test with the tail of its traceback:  python details.py WORK/TAG.xml [N lines]."""
import sys

from failing_list import failures

for cls, name, f in failures(sys.argv[1]):
    lines = [l for l in (f.text or "").splitlines() if l.strip()]
    print("###", cls, name)
    print("\n".join(lines[-int(sys.argv[2]) if len(sys.argv) > 2 else -8:]))
