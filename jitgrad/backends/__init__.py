"""``torch.backends``: the flags training scripts set (``torch.backends.cuda.matmul.allow_tf32 = True``,
``torch.backends.cudnn.benchmark = True``, ...), with torch's defaults.  jitgrad keeps them so scripts run and
read them back; none changes jitgrad's arithmetic (it has no TF32, cuDNN or MPS paths)."""
from . import cuda, cudnn, mps, mkldnn, openmp  # noqa: F401

__all__ = ["cuda", "cudnn", "mps", "mkldnn", "openmp"]
