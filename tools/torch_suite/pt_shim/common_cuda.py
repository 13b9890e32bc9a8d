"""Harness stand-in for torch.testing._internal.common_cuda: no CUDA here."""
TEST_CUDA = False
TEST_MULTIGPU = False
TEST_CUDNN = False
TEST_CUDA_GRAPH = False
SM53OrLater = SM60OrLater = SM70OrLater = SM80OrLater = SM90OrLater = False
PLATFORM_SUPPORTS_FLASH_ATTENTION = False
