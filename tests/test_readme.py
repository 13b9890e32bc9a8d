"""The README's tour runs as written."""
import os
import re
import warnings


def test_readme_tour_runs(capsys):
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")
    code = re.search(r"```python\n(.*?)```", open(path).read(), re.S).group(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(code, "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert "Function 'SqrtBackward0' returned nan values in its 0th output." in out
    assert "matmul" in out and "README.md:" in out          # step.ir() names the README's lines
    assert "'traces': 1" in out
