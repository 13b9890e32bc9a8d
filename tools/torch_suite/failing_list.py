"""Markdown list of the failing in-scope tests of a run, each with the first error line.

    python failing_list.py WORK/TAG.xml [REASONS.json]

REASONS.json (optional) maps a test name to a hand-written one-line reason that replaces the error line."""
import json
import sys
import xml.etree.ElementTree as ET

NOTES = json.load(open(sys.argv[2])) if len(sys.argv) > 2 else {}
for tc in ET.parse(sys.argv[1]).getroot().iter("testcase"):
    f = tc.find("failure")
    if f is None:
        f = tc.find("error")
    if f is None:
        continue
    cls = tc.get("classname").split(".")[-1]
    name = tc.get("name")
    lines = [l for l in (f.text or "").splitlines() if l.startswith("E ")]
    first = (lines[0][4:] if lines else f.get("message") or "").strip().replace("|", "\\|")[:150]
    note = NOTES.get(name, "")
    print(f"| {cls}::{name} | {note or first} |")
