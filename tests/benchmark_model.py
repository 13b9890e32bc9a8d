"""B9's model, optimiser and step for tests: one definition, ``benchmarks/gpt_model.py``, loaded once by path
(putting benchmarks/ on sys.path would shadow test modules with its harness.py, report.py...)."""
import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "gpt_model", Path(__file__).resolve().parents[1] / "benchmarks" / "gpt_model.py")
gpt_model = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpt_model)
