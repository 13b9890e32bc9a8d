"""``jitgrad.nn.modules``: the Module classes, one file per family as torch has them."""
from .module import Module
from .container import Sequential, ModuleList, ModuleDict, ParameterList, ParameterDict
from .linear import Identity, Linear, Bilinear
from .flatten import Flatten, Unflatten
from .sparse import Embedding, EmbeddingBag
from .activation import ReLU, GELU, Tanh, Sigmoid, Softmax, SiLU, Softplus, LogSigmoid, Threshold, Hardtanh, ReLU6, \
    ELU, CELU, SELU, Mish, Hardsigmoid, Hardswish, LeakyReLU, RReLU, PReLU, Hardshrink, Softshrink, Tanhshrink, \
    Softsign, GLU, Softmin, LogSoftmax, Softmax2d, MultiheadAttention
from .normalization import LayerNorm, GroupNorm, LocalResponseNorm, RMSNorm
from .batchnorm import BatchNorm1d, BatchNorm2d, BatchNorm3d, SyncBatchNorm
from .instancenorm import InstanceNorm1d, InstanceNorm2d, InstanceNorm3d
from .dropout import Dropout, Dropout1d, Dropout2d, Dropout3d, AlphaDropout, FeatureAlphaDropout
from .loss import CTCLoss, MSELoss, NLLLoss, CrossEntropyLoss, BCEWithLogitsLoss, KLDivLoss, L1Loss, SmoothL1Loss, \
    HuberLoss, BCELoss, MultiLabelSoftMarginLoss, SoftMarginLoss, MarginRankingLoss, HingeEmbeddingLoss, \
    CosineEmbeddingLoss, MultiMarginLoss, GaussianNLLLoss, PoissonNLLLoss, TripletMarginLoss
from .conv import Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d, ConvTranspose3d
from .fold import Unfold, Fold
from .pooling import MaxPool1d, MaxPool2d, MaxPool3d, AvgPool1d, AvgPool2d, AvgPool3d, AdaptiveAvgPool1d, \
    AdaptiveAvgPool2d, AdaptiveAvgPool3d, AdaptiveMaxPool1d, AdaptiveMaxPool2d, AdaptiveMaxPool3d, MaxUnpool1d, \
    MaxUnpool2d, MaxUnpool3d, LPPool1d, LPPool2d, LPPool3d
from .padding import ConstantPad1d, ConstantPad2d, ConstantPad3d, ZeroPad1d, ZeroPad2d, ReflectionPad1d, \
    ReflectionPad2d, ReplicationPad1d, ReplicationPad2d
from .pixelshuffle import PixelShuffle, PixelUnshuffle
from .channelshuffle import ChannelShuffle
from .upsampling import Upsample, UpsamplingNearest2d, UpsamplingBilinear2d
from .distance import CosineSimilarity, PairwiseDistance
from .rnn import RNNCellBase, RNNCell, LSTMCell, GRUCell, RNNBase, RNN, LSTM, GRU
from .transformer import TransformerEncoderLayer, TransformerDecoderLayer, TransformerEncoder, TransformerDecoder, \
    Transformer

__all__ = ["Module", "Sequential", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict", "Identity", "Linear",
           "Bilinear", "Flatten", "Unflatten", "Embedding", "EmbeddingBag", "ReLU", "GELU", "Tanh", "Sigmoid",
           "Softmax", "SiLU", "Softplus", "LogSigmoid", "Threshold", "Hardtanh", "ReLU6", "ELU", "CELU", "SELU",
           "Mish", "Hardsigmoid", "Hardswish", "LeakyReLU", "RReLU", "PReLU", "Hardshrink", "Softshrink",
           "Tanhshrink", "Softsign", "GLU", "Softmin", "LogSoftmax", "Softmax2d", "MultiheadAttention", "LayerNorm",
           "GroupNorm", "LocalResponseNorm", "RMSNorm", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm",
           "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "Dropout", "Dropout1d", "Dropout2d", "Dropout3d",
           "AlphaDropout", "FeatureAlphaDropout", "CTCLoss", "MSELoss", "NLLLoss", "CrossEntropyLoss",
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
           "TransformerDecoderLayer", "TransformerEncoder", "TransformerDecoder", "Transformer"]
