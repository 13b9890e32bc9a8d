"""Harness stand-ins for torch.testing._internal.* (test infrastructure only)."""
