"""Print each failing test with the tail of its traceback:  python details.py WORK/TAG.xml [N lines]."""
import sys
import xml.etree.ElementTree as ET
for tc in ET.parse(sys.argv[1]).getroot().iter("testcase"):
    f = tc.find("failure")
    if f is None:
        f = tc.find("error")
    if f is None:
        continue
    lines = [l for l in (f.text or "").splitlines() if l.strip()]
    print("###", tc.get("classname").split(".")[-1], tc.get("name"))
    print("\n".join(lines[-int(sys.argv[2]) if len(sys.argv) > 2 else -8:]))
