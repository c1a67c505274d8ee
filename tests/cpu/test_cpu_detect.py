"""verl_prime_lora.cpu.detect: a GPU host is recognised by its device nodes before the CUDA driver is asked."""

import pytest
import torch

from verl_prime_lora.cpu import detect


def test_a_host_with_an_nvidia_device_node_is_not_asked_through_cuda(monkeypatch):
    def ask_cuda():
        raise AssertionError("torch.cuda.is_available() called on a host whose device nodes already answer")

    monkeypatch.setattr(torch.cuda, "is_available", ask_cuda)
    monkeypatch.setattr(detect.shutil, "which", lambda name: None)
    monkeypatch.setattr(detect.Path, "exists", lambda path: str(path) == "/dev/nvidiactl")
    monkeypatch.delenv("VERL_PLATFORM", raising=False)
    assert detect.accelerator_present() and not detect.cpu_platform_wanted()


@pytest.mark.parametrize("cuda, expected", [(True, True), (False, False)])
def test_without_device_nodes_cuda_decides(monkeypatch, cuda, expected):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(detect.shutil, "which", lambda name: None)
    monkeypatch.setattr(detect.Path, "exists", lambda path: False)
    monkeypatch.setattr(detect.importlib.util, "find_spec", lambda name: None)
    assert detect.accelerator_present() is expected
