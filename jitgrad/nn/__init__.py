"""``jitgrad.nn``: modules with torch's names, signatures, defaults, initialisation and parameter layout, plus
``functional``, ``init`` and ``utils``.  Modules are plain Python over Tensor ops, so a training step that calls
them compiles under ``@jitgrad.compile``."""
from . import functional  # noqa: F401
from . import init  # noqa: F401
from . import utils  # noqa: F401
from . import parallel  # noqa: F401  (DistributedDataParallel; imports no MPI)
from .parameter import Parameter
from .modules import Module, Sequential, ModuleList, ModuleDict, ParameterList, ParameterDict, Identity, Linear, \
    Bilinear, Flatten, Unflatten, Embedding, EmbeddingBag, ReLU, GELU, Tanh, Sigmoid, Softmax, SiLU, Softplus, \
    LogSigmoid, Threshold, Hardtanh, ReLU6, ELU, CELU, SELU, Mish, Hardsigmoid, Hardswish, LeakyReLU, RReLU, PReLU, \
    Hardshrink, Softshrink, Tanhshrink, Softsign, GLU, Softmin, LogSoftmax, Softmax2d, MultiheadAttention, LayerNorm, \
    GroupNorm, LocalResponseNorm, RMSNorm, BatchNorm1d, BatchNorm2d, BatchNorm3d, SyncBatchNorm, InstanceNorm1d, \
    InstanceNorm2d, InstanceNorm3d, Dropout, Dropout1d, Dropout2d, Dropout3d, AlphaDropout, FeatureAlphaDropout, \
    CTCLoss, MSELoss, NLLLoss, CrossEntropyLoss, BCEWithLogitsLoss, KLDivLoss, L1Loss, SmoothL1Loss, HuberLoss, \
    BCELoss, MultiLabelSoftMarginLoss, SoftMarginLoss, MarginRankingLoss, HingeEmbeddingLoss, CosineEmbeddingLoss, \
    MultiMarginLoss, GaussianNLLLoss, PoissonNLLLoss, TripletMarginLoss, Conv1d, Conv2d, Conv3d, ConvTranspose1d, \
    ConvTranspose2d, ConvTranspose3d, Unfold, Fold, MaxPool1d, MaxPool2d, MaxPool3d, AvgPool1d, AvgPool2d, AvgPool3d, \
    AdaptiveAvgPool1d, AdaptiveAvgPool2d, AdaptiveAvgPool3d, AdaptiveMaxPool1d, AdaptiveMaxPool2d, AdaptiveMaxPool3d, \
    MaxUnpool1d, MaxUnpool2d, MaxUnpool3d, LPPool1d, LPPool2d, LPPool3d, ConstantPad1d, ConstantPad2d, ConstantPad3d, \
    ZeroPad1d, ZeroPad2d, ReflectionPad1d, ReflectionPad2d, ReplicationPad1d, ReplicationPad2d, PixelShuffle, \
    PixelUnshuffle, ChannelShuffle, Upsample, UpsamplingNearest2d, UpsamplingBilinear2d, CosineSimilarity, \
    PairwiseDistance, RNNCellBase, RNNCell, LSTMCell, GRUCell, RNNBase, RNN, LSTM, GRU, TransformerEncoderLayer, \
    TransformerDecoderLayer, TransformerEncoder, TransformerDecoder, Transformer
from .parallel import DataParallel

__all__ = ["Parameter", "Module", "Sequential", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict",
           "Identity", "Linear", "Bilinear", "Flatten", "Unflatten", "Embedding", "EmbeddingBag", "ReLU", "GELU",
           "Tanh", "Sigmoid", "Softmax", "SiLU", "Softplus", "LogSigmoid", "Threshold", "Hardtanh", "ReLU6", "ELU",
           "CELU", "SELU", "Mish", "Hardsigmoid", "Hardswish", "LeakyReLU", "RReLU", "PReLU", "Hardshrink",
           "Softshrink", "Tanhshrink", "Softsign", "GLU", "Softmin", "LogSoftmax", "Softmax2d", "MultiheadAttention",
           "LayerNorm", "GroupNorm", "LocalResponseNorm", "RMSNorm", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d",
           "SyncBatchNorm", "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "Dropout", "Dropout1d", "Dropout2d",
           "Dropout3d", "AlphaDropout", "FeatureAlphaDropout", "CTCLoss", "MSELoss", "NLLLoss", "CrossEntropyLoss",
           "BCEWithLogitsLoss", "KLDivLoss", "L1Loss", "SmoothL1Loss", "HuberLoss", "BCELoss",
           "MultiLabelSoftMarginLoss", "SoftMarginLoss", "MarginRankingLoss", "HingeEmbeddingLoss",
           "CosineEmbeddingLoss", "MultiMarginLoss", "GaussianNLLLoss", "PoissonNLLLoss", "TripletMarginLoss",
           "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d", "Unfold", "Fold",
           "MaxPool1d", "MaxPool2d", "MaxPool3d", "AvgPool1d", "AvgPool2d", "AvgPool3d", "AdaptiveAvgPool1d",
           "AdaptiveAvgPool2d", "AdaptiveAvgPool3d", "AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "AdaptiveMaxPool3d",
           "MaxUnpool1d", "MaxUnpool2d", "MaxUnpool3d", "LPPool1d", "LPPool2d", "LPPool3d", "ConstantPad1d",
           "ConstantPad2d", "ConstantPad3d", "ZeroPad1d", "ZeroPad2d", "ReflectionPad1d", "ReflectionPad2d",
           "ReplicationPad1d", "ReplicationPad2d", "PixelShuffle", "PixelUnshuffle", "ChannelShuffle", "Upsample",
           "UpsamplingNearest2d", "UpsamplingBilinear2d", "CosineSimilarity", "PairwiseDistance", "RNNCellBase",
           "RNNCell", "LSTMCell", "GRUCell", "RNNBase", "RNN", "LSTM", "GRU", "TransformerEncoderLayer",
           "TransformerDecoderLayer", "TransformerEncoder", "TransformerDecoder", "Transformer", "DataParallel"]
