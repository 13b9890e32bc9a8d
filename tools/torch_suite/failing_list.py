"""Markdown list of the failing in-scope tests of a run, each with the first error line.

    python failing_list.py WORK/TAG.xml [REASONS.json]

REASONS.json (optional) maps a test name to a hand-written one-line reason that replaces the error line."""
import json
import sys
import xml.etree.ElementTree as ET


def failures(xml_path):
    """(class name, test name, failure or error element) of each failing test case of a junit file."""
    for tc in ET.parse(xml_path).getroot().iter("testcase"):
        f = tc.find("failure")
        if f is None:
            f = tc.find("error")
        if f is not None:
            yield tc.get("classname").split(".")[-1], tc.get("name"), f


if __name__ == "__main__":
    NOTES = json.load(open(sys.argv[2])) if len(sys.argv) > 2 else {}
    for cls, name, f in failures(sys.argv[1]):
        lines = [l for l in (f.text or "").splitlines() if l.startswith("E ")]
        first = (lines[0][4:] if lines else f.get("message") or "").strip().replace("|", "\\|")[:150]
        note = NOTES.get(name, "")
        print(f"| {cls}::{name} | {note or first} |")
