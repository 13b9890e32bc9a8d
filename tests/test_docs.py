"""README.md and ARCHITECTURE.md are for someone who has only this repository: their links point at files inside
it, and the files they name exist."""
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = ["README.md", "ARCHITECTURE.md"]
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|^\[[^\]]+\]:\s*(\S+)", re.M)
_FILE = re.compile(r"`([\w./-]+\.(?:py|md|ipynb|toml))`")


def _text(name):
    with open(os.path.join(ROOT, name), encoding="utf-8") as f:
        return f.read()


def _repo_files():
    out = []
    for d, dirs, files in os.walk(ROOT):
        dirs[:] = [x for x in dirs if not x.startswith(".") and x not in ("__pycache__", "build") and
                   not x.endswith(".egg-info")]
        out += [os.path.relpath(os.path.join(d, f), ROOT) for f in files]
    return out


@pytest.mark.parametrize("name", DOCS)
def test_links_stay_inside_the_repository(name):
    text = _text(name)
    links = [a or b for a, b in _LINK.findall(text)]
    assert links or name == "ARCHITECTURE.md"
    root = os.path.realpath(ROOT)
    for link in links:
        target = link.split("#", 1)[0]
        assert not re.match(r"^[a-z][a-z0-9+.-]*:", target), f"{name} links outside the repository: {link}"
        assert target and not target.startswith("/"), f"{name}: {link!r} is not a path inside the repository"
        path = os.path.realpath(os.path.join(ROOT, target))
        assert path == root or path.startswith(root + os.sep), f"{name}: {link} leaves the repository"
        assert os.path.exists(path), f"{name}: {link} does not exist"
    assert "../" not in re.sub(r"```.*?```", "", text, flags=re.S), f"{name} refers to a path outside the repository"


@pytest.mark.parametrize("name", DOCS)
def test_files_named_in_the_docs_exist(name):
    files = _repo_files()
    names = set(files) | {os.path.basename(f) for f in files}
    for d in ("jitgrad", "tests"):
        names |= {os.path.relpath(f, d) for f in files if f.startswith(d + os.sep)}
    for mentioned in set(_FILE.findall(_text(name))):
        assert mentioned.rstrip("/") in names, f"{name} names {mentioned}, which is not in the repository"


def test_the_readme_links_the_architecture_and_the_notebooks():
    text = _text("README.md")
    assert "(ARCHITECTURE.md)" in text and "(notebooks/)" in text and "(BENCHMARKS.md)" in text
