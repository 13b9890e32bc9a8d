"""``jitgrad.nn``: modules with torch's names, signatures, defaults, initialisation and parameter layout, plus
``functional``, ``init`` and ``utils``.  Modules are plain Python over Tensor ops, so a training step that calls
them compiles under ``@jitgrad.compile``."""
from . import functional  # noqa: F401
from . import init  # noqa: F401
from . import utils  # noqa: F401
from . import parallel  # noqa: F401  (DistributedDataParallel; imports no MPI)
from .parameter import Parameter
from .module import Module
from .containers import Sequential, ModuleList, ModuleDict
from .parameter_containers import ParameterList, ParameterDict
from .layers import Identity, Flatten, Unflatten, Linear, Embedding, LayerNorm, BatchNorm1d, BatchNorm2d, BatchNorm3d
from .sync_batch_norm import SyncBatchNorm
from .embedding_bag import EmbeddingBag
from .ctc import CTCLoss
from .activation import ReLU, GELU, Tanh, Sigmoid, Softmax, SiLU, Softplus, LogSigmoid
from .activation_modules import *  # noqa: F401,F403
from . import activation_modules as _activation_modules
from .loss import *  # noqa: F401,F403
from . import loss as _loss
from .distance import CosineSimilarity, PairwiseDistance
from .norm_scaling import RMSNorm
from .dropout import Dropout, Dropout1d, Dropout2d, Dropout3d, AlphaDropout, FeatureAlphaDropout
from .group_norm import GroupNorm, LocalResponseNorm
from .pixel_shuffle import PixelShuffle, PixelUnshuffle, ChannelShuffle
from .upsampling import Upsample, UpsamplingNearest2d, UpsamplingBilinear2d
from .bilinear import Bilinear
from .multihead_attention import MultiheadAttention
from .recurrent import RNNCellBase, RNNCell, LSTMCell, GRUCell, RNNBase, RNN, LSTM, GRU
from .transformer import Transformer, TransformerEncoder, TransformerDecoder, TransformerEncoderLayer, \
    TransformerDecoderLayer
from .instance_norm import InstanceNorm1d, InstanceNorm2d, InstanceNorm3d
from .parallel import DataParallel
from .padding import ConstantPad1d, ConstantPad2d, ConstantPad3d, ZeroPad1d, ZeroPad2d, ReflectionPad1d, \
    ReflectionPad2d, ReplicationPad1d, ReplicationPad2d
from . import padding as _padding
from .conv import Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d, ConvTranspose3d, Unfold, Fold
from .pooling import MaxPool1d, MaxPool2d, MaxPool3d, AvgPool1d, AvgPool2d, AvgPool3d, AdaptiveAvgPool1d, \
    AdaptiveAvgPool2d, AdaptiveAvgPool3d
from . import pooling as _pooling
from .pooling_variants import AdaptiveMaxPool1d, AdaptiveMaxPool2d, AdaptiveMaxPool3d, MaxUnpool1d, MaxUnpool2d, \
    MaxUnpool3d, LPPool1d, LPPool2d, LPPool3d
from . import pooling_variants as _pooling_variants

__all__ = ["Parameter", "Module", "Sequential", "ModuleList", "ModuleDict", "Identity", "Flatten", "Linear",
           "Embedding", "LayerNorm", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm", "EmbeddingBag", "CTCLoss", "Dropout1d", "Dropout2d",
           "ReLU", "GELU", "Tanh", "Sigmoid", "Softmax", "MSELoss",
           "NLLLoss", "CrossEntropyLoss", "Dropout", "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d",
           "DataParallel", "SiLU", "Softplus", "LogSigmoid", "BCEWithLogitsLoss", "KLDivLoss", "RMSNorm",
           "Unflatten", "MultiheadAttention", "Transformer", "TransformerEncoder", "TransformerDecoder",
           "TransformerEncoderLayer", "TransformerDecoderLayer", "ParameterList", "ParameterDict", "Conv1d", "Conv2d",
           "ConvTranspose1d", "ConvTranspose2d", "Unfold", "Conv3d", "ConvTranspose3d", "Fold", "RNNCellBase", "RNNCell", "LSTMCell", "GRUCell",
           "RNNBase", "RNN", "LSTM", "GRU"] + _padding.MODULES + _pooling.MODULES + _pooling_variants.MODULES + _activation_modules.__all__ + \
    [n for n in _loss.MODULES if n not in ("MSELoss", "NLLLoss", "CrossEntropyLoss", "BCEWithLogitsLoss",
                                           "KLDivLoss")] + \
    ["CosineSimilarity", "PairwiseDistance", "Dropout3d", "AlphaDropout", "FeatureAlphaDropout", "GroupNorm",
     "LocalResponseNorm", "PixelShuffle", "PixelUnshuffle", "ChannelShuffle", "Upsample", "UpsamplingNearest2d",
     "UpsamplingBilinear2d", "Bilinear"]
