"""verl_prime_lora.cpu.launch: a SIGTERM to the launcher still runs its cleanup (the run sits in its own
session, so nothing else would stop Ray's and vLLM's processes)."""

import os
import signal
import threading

import pytest

from verl_prime_lora.cpu.launch import _sigterm_unwinds


def test_sigterm_unwinds_in_the_main_thread_and_restores_the_handler():
    before = signal.getsignal(signal.SIGTERM)
    cleaned = []
    with pytest.raises(SystemExit) as exit_info:
        with _sigterm_unwinds():
            try:
                os.kill(os.getpid(), signal.SIGTERM)  # Python runs the handler right after the call
                pytest.fail("SIGTERM did not unwind")
            finally:
                cleaned.append(True)
    assert exit_info.value.code == 128 + signal.SIGTERM and cleaned == [True]
    assert signal.getsignal(signal.SIGTERM) is before


def test_sigterm_unwinds_is_a_no_op_off_the_main_thread():
    seen = []
    thread = threading.Thread(target=lambda: seen.append(_enter_and_read_handler()))
    thread.start()
    thread.join()
    assert seen == [signal.getsignal(signal.SIGTERM)]


def _enter_and_read_handler():
    with _sigterm_unwinds():
        return signal.getsignal(signal.SIGTERM)
