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


def test_porting_a_torch_script_is_the_one_documented_line():
    """The README's porting line, then a script written for torch: every import resolves to jitgrad's modules."""
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    text = open(os.path.join(root, "README.md")).read()
    section = text.split("## Porting a PyTorch script", 1)[1]
    line = re.search(r"```\n(.*?)\n```", section, re.S).group(1)
    assert line.count("\n") == 0
    script = line + """
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
import jitgrad
assert torch is jitgrad and nn is jitgrad.nn and F is jitgrad.nn.functional
model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in DataLoader(TensorDataset(torch.randn(8, 3), torch.randn(8, 1)), batch_size=4):
    loss = F.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print("ok", type(loss).__module__)
"""
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["ok", "jitgrad.runtime.tensor"]
