"""``jitgrad.nn.functional``: the functions of ``torch.nn.functional``, one module per family (activation, loss,
conv, pooling, normalization...); each is written with primitives, so it differentiates and compiles."""
from .activation import sigmoid, tanh, softmax, log_softmax, gelu, relu, relu_, threshold, threshold_, hardtanh, \
    hardtanh_, relu6, leaky_relu, leaky_relu_, elu, elu_, silu, celu, celu_, selu, selu_, hardsigmoid, hardswish, \
    mish, rrelu, rrelu_, softplus, logsigmoid, hardshrink, softshrink, tanhshrink, softsign, glu, softmin, prelu
from .loss import mse_loss, l1_loss, nll_loss, cross_entropy, binary_cross_entropy_with_logits, kl_div, \
    smooth_l1_loss, huber_loss, binary_cross_entropy, gaussian_nll_loss, poisson_nll_loss, multilabel_soft_margin_loss
from .margin_loss import margin_ranking_loss, hinge_embedding_loss, cosine_embedding_loss, soft_margin_loss, \
    multi_margin_loss, triplet_margin_loss
from .ctc import ctc_loss
from .linear_forms import linear, bilinear
from .sparse import embedding, one_hot, embedding_bag
from .normalization import layer_norm, batch_norm, group_norm, local_response_norm, instance_norm, rms_norm, normalize
from .dropouts import dropout, dropout1d, dropout2d, dropout3d, alpha_dropout, feature_alpha_dropout
from .conv import conv1d, conv2d, conv3d, conv_transpose1d, conv_transpose2d, conv_transpose3d, unfold, fold
from .pooling import max_pool1d, max_pool2d, max_pool3d, max_pool1d_with_indices, max_pool2d_with_indices, \
    max_pool3d_with_indices, avg_pool1d, avg_pool2d, avg_pool3d, adaptive_avg_pool1d, adaptive_avg_pool2d, \
    adaptive_avg_pool3d
from .pooling_variants import adaptive_max_pool1d, adaptive_max_pool2d, adaptive_max_pool3d, \
    adaptive_max_pool1d_with_indices, adaptive_max_pool2d_with_indices, adaptive_max_pool3d_with_indices, \
    max_unpool1d, max_unpool2d, max_unpool3d, lp_pool1d, lp_pool2d, lp_pool3d
from .padding import pad
from .attention import multi_head_attention_forward, scaled_dot_product_attention
from .distance import cosine_similarity, pairwise_distance, pdist
from .pixelshuffle import pixel_shuffle, pixel_unshuffle, channel_shuffle
from .upsampling import interpolate, upsample, upsample_nearest, upsample_bilinear

__all__ = ["sigmoid", "tanh", "softmax", "log_softmax", "gelu", "relu", "relu_", "threshold", "threshold_",
           "hardtanh", "hardtanh_", "relu6", "leaky_relu", "leaky_relu_", "elu", "elu_", "silu", "celu", "celu_",
           "selu", "selu_", "hardsigmoid", "hardswish", "mish", "rrelu", "rrelu_", "softplus", "logsigmoid",
           "hardshrink", "softshrink", "tanhshrink", "softsign", "glu", "softmin", "prelu", "mse_loss", "l1_loss",
           "nll_loss", "cross_entropy", "binary_cross_entropy_with_logits", "kl_div", "smooth_l1_loss", "huber_loss",
           "binary_cross_entropy", "gaussian_nll_loss", "poisson_nll_loss", "multilabel_soft_margin_loss",
           "margin_ranking_loss", "hinge_embedding_loss", "cosine_embedding_loss", "soft_margin_loss",
           "multi_margin_loss", "triplet_margin_loss", "ctc_loss", "linear", "bilinear", "embedding", "one_hot",
           "embedding_bag", "layer_norm", "batch_norm", "group_norm", "local_response_norm", "instance_norm",
           "rms_norm", "normalize", "dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout",
           "feature_alpha_dropout", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
           "conv_transpose3d", "unfold", "fold", "max_pool1d", "max_pool2d", "max_pool3d", "max_pool1d_with_indices",
           "max_pool2d_with_indices", "max_pool3d_with_indices", "avg_pool1d", "avg_pool2d", "avg_pool3d",
           "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d", "adaptive_max_pool1d",
           "adaptive_max_pool2d", "adaptive_max_pool3d", "adaptive_max_pool1d_with_indices",
           "adaptive_max_pool2d_with_indices", "adaptive_max_pool3d_with_indices", "max_unpool1d", "max_unpool2d",
           "max_unpool3d", "lp_pool1d", "lp_pool2d", "lp_pool3d", "pad", "multi_head_attention_forward",
           "scaled_dot_product_attention", "cosine_similarity", "pairwise_distance", "pdist", "pixel_shuffle",
           "pixel_unshuffle", "channel_shuffle", "interpolate", "upsample", "upsample_nearest", "upsample_bilinear"]


def __getattr__(name):
    """A name torch.nn.functional has and jitgrad lacks raises "not supported yet" (library/torch_surface.py)."""
    from ...library.torch_names import NN_FUNCTIONAL
    from ...library.torch_surface import unsupported_attribute
    raise unsupported_attribute("jitgrad.nn.functional", name, NN_FUNCTIONAL)
