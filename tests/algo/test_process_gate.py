"""The process gate (`algo.process_gate`): its weight, its running mean, and its state through a checkpoint."""

import json

import pytest

from verl_prime_lora.algo import process_gate as pg
from verl_prime_lora.algo.process_gate import GATE_EMA_DECAY, ProcessGate, ema, process_gate_weight


@pytest.mark.parametrize(
    "acc, full_at, weight",
    [
        (0.3, 0.75, 0.0),
        (0.5, 0.75, 0.0),
        (0.625, 0.75, 0.5),
        (0.75, 0.75, 1.0),
        (0.9, 0.75, 1.0),
        (0.55, 0.6, 0.5),
        (0.2, None, 1.0),
        (1.0, 1.0, 1.0),
    ],
)
def test_process_gate_weight(acc, full_at, weight):
    assert process_gate_weight(acc, full_at) == pytest.approx(weight)


def test_gate_ema_needs_several_steps_of_evidence():
    """One lucky step (a = 1) moves the running mean from chance by 0.05 only; ten steady steps at 0.9 open it."""
    assert process_gate_weight(ema(0.5, 1.0, GATE_EMA_DECAY), 0.75) == pytest.approx(0.2)
    running = 0.5
    for _ in range(10):
        running = ema(running, 0.9, GATE_EMA_DECAY)
    assert running == pytest.approx(0.9 - 0.4 * 0.9**10) and process_gate_weight(running, 0.75) > 0.9


def test_the_gate_starts_at_chance_and_moves_by_each_steps_held_out_ranking():
    gate = ProcessGate(0.75)
    assert (gate.pairwise_ema, gate.weight) == (0.5, 0.0)
    assert gate.update(1.0) == pytest.approx(0.2) and gate.pairwise_ema == pytest.approx(0.55)
    assert gate.update(0.3) == pytest.approx(0.1) and gate.pairwise_ema == pytest.approx(0.9 * 0.55 + 0.1 * 0.3)
    assert gate.update(0.0) == 0.0  # ā = 0.4725, below chance: closed
    assert ProcessGate(None).update(0.0) == 1.0  # no gate: full weight whatever the ranking


def test_the_gates_state_round_trips_through_a_checkpoint_file(tmp_path):
    """What `global_step_N/prime_state.json` holds: {"prm_pairwise_ema": ā}; a gate loaded from it gives the same
    weight and moves on from the same ā."""
    saved = ProcessGate(0.75)
    for ranking in (0.9, 0.8, 0.7):
        saved.update(ranking)
    path = tmp_path / "prime_state.json"
    path.write_text(json.dumps(saved.state_dict()))
    assert json.loads(path.read_text()) == {pg.STATE_KEY: saved.pairwise_ema} and pg.STATE_KEY == "prm_pairwise_ema"
    loaded = ProcessGate(0.75)
    loaded.load_state_dict(json.loads(path.read_text()))
    assert (loaded.pairwise_ema, loaded.weight) == (saved.pairwise_ema, saved.weight)
    assert loaded.update(0.6) == saved.update(0.6)
