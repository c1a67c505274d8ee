"""The seed recipe's rule-based rewards (Tina / open-rs2-PRIME) as a veRL 0.9.1 custom reward function.

Plug it in with::

    reward.custom_reward_function.path=pkg://verl_prime_lora.rewards.math_format
    reward.custom_reward_function.name=compute_score
    +reward.custom_reward_function.reward_kwargs.accuracy_weight=2.0   # optional; keys: see compute_score

veRL's reward manager (``naive``) calls ``compute_score(data_source=, solution_str=, ground_truth=,
extra_info=)`` from a thread of the reward loop's executor, with ``reward_kwargs`` merged into the call.
A dict result gives the row's reward (``score``, placed on the last response token) and its
``reward_extra_info`` (all keys; veRL reads the key set from the first row, so every row returns the same
keys). String values are fine there: veRL's validation metrics skip them, and a ``pred`` key turns on
its maj@N metrics.

Accuracy is checked with math-verify in helper processes (see ``_VerifierPool``), because math-verify's
own timeouts use SIGALRM, which works only in a process's main thread, and no signal stops a long
big-integer computation in C: a verification past its deadline has its process killed instead.
"""

import logging
import math
import numbers
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
from collections import Counter
from multiprocessing.connection import Connection

from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

from verl_prime_lora.rewards.reward_info import LABEL_UNKNOWN_KEY

logger = logging.getLogger(__name__)

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"

# Reason codes, one per row (`reason` in the result). Only CORRECT and WRONG rows earn a reward; the
# others are "bad rows" and score 0.
CORRECT = "correct"  # the final answer verifies against the ground truth
WRONG = "wrong"  # a final answer was parsed and does not verify
NO_ANSWER = "no_answer"  # no final answer that math-verify could parse (no \boxed{}, no "final answer is ...")
EMPTY_RESPONSE = "empty_response"  # blank response
BAD_GROUND_TRUTH = "bad_ground_truth"  # ground truth missing, empty, or not math (see _judge): no signal
TIMEOUT = "timeout"  # verification ran past `timeout_s` (its process was killed)
VERIFIER_ERROR = "verifier_error"  # the verifier failed (exception, crashed or unstartable process)
REASONS = (CORRECT, WRONG, NO_ANSWER, EMPTY_RESPONSE, BAD_GROUND_TRUTH, TIMEOUT, VERIFIER_ERROR)
# Reasons that point at the data or the verifier rather than the policy: logged with the row.
_ANOMALIES = (BAD_GROUND_TRUTH, TIMEOUT, VERIFIER_ERROR)

_PRED_MAX_CHARS = 200
_SUMMARY_EVERY = 4096  # calls between two INFO summaries of the reason counts
_STARTUP_TIMEOUT_S = 120.0  # a fresh verifier process imports sympy; generous for a loaded machine

# Ground truths are wrapped in \boxed{} and parsed as LaTeX or a plain expression.
_GOLD_CONFIG = (LatexExtractionConfig(), ExprExtractionConfig())
# Responses (already cut to their last \boxed{} when there is one): LaTeX only when boxed or anchored
# ("the final answer is $...$"), as the seed's accuracy_reward; plain expressions ("Answer: 42") too.
_PRED_CONFIG = (
    LatexExtractionConfig(boxed_match_priority=0, try_extract_without_anchor=False),
    ExprExtractionConfig(),
)

_BOXED_RE = re.compile(r"\\(?:boxed|fbox)\s*\{")
_BRACE_RE = re.compile(r"[{}]")


def compute_score(
    data_source,
    solution_str,
    ground_truth,
    extra_info=None,
    *,
    accuracy_weight: float = 1.0,
    format_weight: float = 1.0,
    timeout_s: float = 10.0,
    verify_workers: int = 2,
    **kwargs,
) -> dict:
    """Score one response: ``accuracy_weight * acc + format_weight * format``, or 0 for a bad row.

    Defaults are the seed's as its model card states them (Tina-PRIME: accuracy 1.0 + format 1.0).
    The Tina / open-rs2 training yamls weight ``[format, accuracy]`` as ``[1.0, 2.0]``; to reproduce
    those runs exactly pass ``accuracy_weight=2.0`` through ``reward_kwargs``.

    - ``acc`` (0/1, the PRM label): the response's final answer (see ``answer_text``) verifies against
      ``ground_truth`` with math-verify. ``ground_truth`` is an answer (``"1/2"``, ``"$\\frac12$"``, 42)
      or a full solution, whose last ``\\boxed{}`` is then the answer.
    - ``format`` (0/1): ``format_reward``; reported for every row.
    - ``reason``: one of ``REASONS``. Bad rows (anything but ``correct``/``wrong``: empty response, no
      parsable answer, bad ground truth, timeout, verifier failure) get ``score = acc = 0`` whatever
      their format (the seed still paid the format weight to a formatted row without a parsable
      answer: a reward for looking right); they never raise. Per-process counts: ``reason_counts()``; the data/verifier
      anomalies are also logged (at their 1st, 10th, 100th, ... occurrence).
    - ``pred``: the extracted final answer as text ("" when none), for maj@N and generation dumps.
    - ``label_unknown`` (``reward_info.LABEL_UNKNOWN_KEY``): 1.0 for the anomalies (bad ground truth,
      timeout, verifier failure), whose ``acc`` = 0 says nothing about the response: the PRIME trainers
      leave such rows out of the PRM's loss and metrics (the actor still gets their 0 reward).

    ``timeout_s`` bounds one verification (waiting for a free verifier process is not counted);
    ``verify_workers`` sizes this process's verifier pool and is read when the pool is created (first
    call). ``data_source``, ``extra_info`` and other veRL keyword arguments are accepted and unused.
    """
    response = solution_str if isinstance(solution_str, str) else ""
    fmt = format_reward(response)
    gold = _gold_text(ground_truth)
    pred = ""
    if not response.strip():
        reason = EMPTY_RESPONSE
    elif gold is None:
        reason = BAD_GROUND_TRUTH
    else:
        reason, pred = _verify(gold, answer_text(response), timeout_s, verify_workers)
    acc = float(reason == CORRECT)
    score = accuracy_weight * acc + format_weight * fmt if reason in (CORRECT, WRONG) else 0.0
    _record(reason, response, ground_truth)
    return {
        "score": float(score),
        "acc": acc,
        "format": fmt,
        "pred": pred[:_PRED_MAX_CHARS],
        "reason": reason,
        LABEL_UNKNOWN_KEY: float(reason in _ANOMALIES),
    }


def format_reward(response: str) -> float:
    """1.0 iff the response is exactly one think block followed by an answer, else 0.0.

    Precisely: ``</think>`` occurs exactly once; ``<think>`` occurs at most once and, if it does, only
    whitespace precedes it (R1-style chat templates end the prompt with ``<think>\\n``, so a response may
    start inside the block); the reasoning inside the block and the answer after ``</think>`` are both
    non-blank.

    The seed's ``format_reward`` (Tina rewards.py) gave 1.0 iff ``"\\n</think>\\n"`` occurs exactly once;
    this keeps its "one closing tag" core, drops the newline requirement, and adds the non-blank
    reasoning/answer and the "no stray <think>" checks, so that a bare ``</think>`` or a response that
    stops right after the block does not earn it.
    """
    if response.count(THINK_CLOSE) != 1:
        return 0.0
    head, answer = response.split(THINK_CLOSE)
    before, _, reasoning = head.rpartition(THINK_OPEN)
    if before.strip() or THINK_OPEN in answer:
        return 0.0
    return float(bool(reasoning.strip() and answer.strip()))


def answer_text(response: str) -> str:
    """The part of a response that holds its final answer, as handed to math-verify.

    The text after the last ``</think>`` (the whole response if it has none); within it, the last
    balanced ``\\boxed{...}`` (or ``\\fbox{...}``) alone when there is one, so that an earlier box or a
    formula after the box is never taken for the answer.
    """
    section = response.rpartition(THINK_CLOSE)[2]
    boxed = last_boxed(section)
    return section if boxed is None else "\\boxed{" + boxed + "}"


def last_boxed(text: str) -> str | None:
    """Content of the last balanced ``\\boxed{...}``/``\\fbox{...}`` in ``text``; None when there is none.

    Linear in ``len(text)`` (one brace-matching pass), so degenerate responses with thousands of
    unclosed boxes stay cheap.
    """
    starts = [match.end() for match in _BOXED_RE.finditer(text)]
    if not starts:
        return None
    closing, open_braces = {}, []
    for brace in _BRACE_RE.finditer(text):
        if brace.group() == "{":
            open_braces.append(brace.start())
        elif open_braces:
            closing[open_braces.pop()] = brace.start()
    for start in reversed(starts):
        if start - 1 in closing:
            return text[start : closing[start - 1]]
    return None


def reason_counts() -> dict[str, int]:
    """How many rows this process scored, by reason (cumulative since the process started)."""
    with _COUNTS_LOCK:
        return dict(_COUNTS)


def _gold_text(ground_truth) -> str | None:
    """The ground truth as ``\\boxed{answer}`` for math-verify; None when it is missing or empty."""
    if isinstance(ground_truth, numbers.Real) and not isinstance(ground_truth, bool):
        if not math.isfinite(ground_truth):
            return None
        text = str(int(ground_truth)) if float(ground_truth).is_integer() else str(ground_truth)
    elif isinstance(ground_truth, str):
        text = ground_truth.strip()
    else:
        return None
    boxed = last_boxed(text)
    if boxed is not None:
        text = boxed.strip()
    elif len(text) >= 2 and text[0] == text[-1] == "$" and not text.endswith("\\$"):
        text = text.strip("$").strip()
    return "\\boxed{" + text + "}" if text else None


def _judge(gold: str, answer: str) -> tuple[str, str]:
    """(reason, extracted answer) for one verification; runs in a verifier process.

    A ground truth that yields no math object (only math-verify's raw-text fallback) still matches an
    identical answer text; anything else against it is BAD_GROUND_TRUTH, not WRONG.
    """
    gold_parsed = parse(gold, _GOLD_CONFIG, extraction_mode="first_match", parsing_timeout=None)
    pred = parse(answer, _PRED_CONFIG, extraction_mode="first_match", parsing_timeout=None)
    pred_text = pred[-1] if pred and isinstance(pred[-1], str) else ""
    if verify(gold_parsed, pred, timeout_seconds=None):
        return CORRECT, pred_text
    if all(isinstance(g, str) for g in gold_parsed):
        return BAD_GROUND_TRUTH, pred_text
    if all(isinstance(p, str) for p in pred):
        return NO_ANSWER, pred_text
    return WRONG, pred_text


def _serve(conn) -> None:
    """Verifier process main loop: answer ``(gold, answer)`` jobs with ``_judge`` until the socket closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    logging.getLogger("math_verify").setLevel(logging.ERROR)  # "timeout disabled": the parent enforces it
    conn.send("ready")
    while True:
        try:
            job = conn.recv()
        except EOFError:  # the parent closed its end or exited
            return
        try:
            result = _judge(*job)
        except Exception:  # noqa: BLE001 - reported to the caller as a reason, never a crash
            result = (VERIFIER_ERROR, "")
        conn.send(result)


class _Verifier:
    """One verifier process, ``python -m verl_prime_lora.rewards.math_format <fd>``, and the socket it answers on.

    A plain subprocess rather than multiprocessing: nothing of the host process (its ``__main__``, its
    threads, whether it is itself a daemon) is involved in starting it.
    """

    def __init__(self):
        parent_sock, child_sock = socket.socketpair()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        self.process = subprocess.Popen(
            [sys.executable, "-m", __name__, str(child_sock.fileno())],
            pass_fds=(child_sock.fileno(),),
            stdin=subprocess.DEVNULL,
            env=env,
        )
        child_sock.close()
        self.conn = Connection(parent_sock.detach())
        if not self.conn.poll(_STARTUP_TIMEOUT_S):
            self.kill()
            raise RuntimeError(f"math-verify process did not start within {_STARTUP_TIMEOUT_S} s")
        self.conn.recv()

    def call(self, job: tuple[str, str], timeout_s: float) -> tuple[str, str]:
        self.conn.send(job)
        if not self.conn.poll(timeout_s):
            raise TimeoutError
        return self.conn.recv()

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()
        self.conn.close()


class _VerifierPool:
    """Up to ``size`` verifier processes shared by the threads of one process; each call checks one out.

    Processes start on first use and are replaced when one is killed (timeout), fails, or died.
    """

    def __init__(self, size: int):
        self.pid = os.getpid()
        self._idle: queue.LifoQueue = queue.LifoQueue()
        for _ in range(max(1, int(size))):
            self._idle.put(None)

    def run(self, job: tuple[str, str], timeout_s: float) -> tuple[str, str]:
        verifier = self._idle.get()
        try:
            if verifier is not None and not verifier.alive():  # died since its last job
                verifier.kill()
                verifier = None
            if verifier is None:
                verifier = _Verifier()
            return verifier.call(job, timeout_s)
        except BaseException:
            if verifier is not None:
                verifier.kill()
                verifier = None
            raise
        finally:
            self._idle.put(verifier)


_POOL: _VerifierPool | None = None
_POOL_LOCK = threading.Lock()
_LOGGED_ERRORS: set[type] = set()


def _verify(gold: str, answer: str, timeout_s: float, workers: int) -> tuple[str, str]:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL.pid != os.getpid():  # none yet, or inherited through a fork
            _POOL = _VerifierPool(workers)
        pool = _POOL
    try:
        return pool.run((gold, answer), timeout_s)
    except TimeoutError:
        return TIMEOUT, ""
    except Exception as exc:  # noqa: BLE001 - a verifier failure is a counted reason, never a crash
        if type(exc) not in _LOGGED_ERRORS:  # the traceback once per error type; counts go through _record
            _LOGGED_ERRORS.add(type(exc))
            logger.exception("verl_prime_lora.rewards.math_format: math-verify process failed")
        return VERIFIER_ERROR, ""


_COUNTS: Counter = Counter()
_COUNTS_LOCK = threading.Lock()


def _record(reason: str, response: str, ground_truth) -> None:
    with _COUNTS_LOCK:
        _COUNTS[reason] += 1
        n_reason, total = _COUNTS[reason], sum(_COUNTS.values())
        counts = dict(_COUNTS)
    if reason in _ANOMALIES and n_reason == 10 ** (len(str(n_reason)) - 1):  # 1st, 10th, 100th, ...
        logger.warning(
            "reward: %s row #%d (ground_truth=%r, response tail=%r); reasons so far: %s",
            reason,
            n_reason,
            ground_truth,
            response[-200:],
            counts,
        )
    if total % _SUMMARY_EVERY == 0:
        logger.info("reward: reasons over %d rows: %s", total, {r: f"{c / total:.1%}" for r, c in counts.items()})


if __name__ == "__main__":
    _serve(Connection(int(sys.argv[1])))
