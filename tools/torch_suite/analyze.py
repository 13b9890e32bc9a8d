"""Summarise a junit run: pass counts by class, failures grouped by cause (missing name / wrong behaviour)."""
import re
import sys
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict

from scope import ISSUE_CLASSES as ISSUE


def load(path):
    res = {}
    for tc in ET.parse(path).getroot().iter("testcase"):
        cls = tc.get("classname").split(".")[-1]
        fname = tc.get("file") or ("test_functional.py" if "Functional" in cls else "test_autograd.py")
        name = tc.get("name")
        bad = tc.find("failure")
        if bad is None:
            bad = tc.find("error")
        skip = tc.find("skipped")
        if bad is not None:
            msg = (bad.get("message") or "") or (bad.text or "")
            res[(cls, name)] = ("fail", msg)
        elif skip is not None:
            res[(cls, name)] = ("skip", skip.get("message") or "")
        else:
            res[(cls, name)] = ("pass", "")
    return res


def forward_mode_ids(xml_path):
    """{(class, name)} of the tests scope.json tags forward-mode (beside the junit file: OUT/scope.json), or None."""
    import json
    import os
    path = os.path.join(os.path.dirname(os.path.abspath(xml_path)), "scope.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        scope = json.load(f)
    return {(tid.split("::")[1], tid.split("::")[2]) for tid, v in scope.items() if v.get("forward_mode")}


def cause(msg):
    m = re.search(r"jitgrad does not support ([\w.]+)", msg)
    if m:
        return "missing", m.group(1)
    m = re.search(r"jitgrad has no ([\w.]+)", msg)
    if m:
        return "missing", m.group(1)
    m = re.search(r"AttributeError: (?:module )?'?([\w.]+)'? (?:object )?has no attribute '(\w+)'", msg)
    if m:
        return "missing", f"{m.group(1)}.{m.group(2)}"
    first = msg.strip().splitlines()[0] if msg.strip() else "?"
    return "behaviour", first[:160]


def main(path):
    res = load(path)
    by_cls = defaultdict(Counter)
    for (cls, name), (st, _) in res.items():
        base = cls[:-3] if cls.endswith("CPU") else cls
        by_cls[base][st] += 1
    tot = Counter()
    for c in sorted(by_cls):
        cnt = by_cls[c]
        n = sum(cnt.values())
        mark = "" if c in ISSUE else "   (not in the issue's five classes)"
        print(f"{c:40s} {cnt['pass']:4d} / {n:4d}{mark}")
        tot.update(cnt)
    print(f"{'TOTAL':40s} {tot['pass']:4d} / {sum(tot.values()):4d}")
    fwd = forward_mode_ids(path)
    if fwd is not None:
        # RULE.md's 2026-11-29 amendment: the forward-mode tagged tests on their own line (issue 29), and the five
        # classes without them (the measurement before the amendment)
        tagged = Counter(st for key, (st, _) in res.items() if key in fwd)
        five = Counter(st for (cls, name), (st, _) in res.items()
                       if (cls[:-3] if cls.endswith("CPU") else cls) in ISSUE and (cls, name) not in fwd)
        print(f"{'forward-mode tagged (issue 29)':40s} {tagged['pass']:4d} / {sum(tagged.values()):4d}")
        print(f"{'five classes without them':40s} {five['pass']:4d} / {sum(five.values()):4d}")
    groups = defaultdict(list)
    for (cls, name), (st, msg) in sorted(res.items()):
        if st == "fail":
            kind, key = cause(msg)
            groups[(kind, key)].append(f"{cls}::{name}")
    print()
    for (kind, key), tests in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        print(f"[{kind}] {len(tests):3d}  {key}")
        for t in tests:
            print(f"         {t}")


if __name__ == "__main__":
    main(sys.argv[1])
