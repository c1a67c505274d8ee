"""The PRIME trainers (`prime.trainer`) without Ray: the mode they present to veRL, their refusal outside a PRIME
run's Ray job, the advantage hook that hands the step what it reads of veRL, and the step's state and the PRM
through veRL's checkpoint save and resume (`_save_checkpoint` / `_load_checkpoint`)."""

from pathlib import Path

import pytest
from main_ppo_driver import compose_ppo
from omegaconf import OmegaConf

from verl_prime_lora.config import run_config
from verl_prime_lora.config.run import PRIME_RUN_ENV, REF_FROZEN
from verl_prime_lora.config.section import PrimeConfigError
from verl_prime_lora.prime import prime_step as prime_step_module
from verl_prime_lora.prime import trainer as trainer_module
from verl_prime_lora.prime.trainer import PrimeTrainerSeparateAsync, PrimeTrainerSync


@pytest.fixture(autouse=True)
def _in_a_prime_runs_task_runner(monkeypatch):
    """The trainers here are built where a PRIME trainer runs: in a Ray job that the PRIME recipe marked."""
    monkeypatch.setenv(PRIME_RUN_ENV, "1")


def colocated(*overrides):
    return compose_ppo("+recipe=prime_lora_colocated", "actor_rollout_ref.model.path=/m", *overrides)


class VerlTrainer:
    """veRL's `PPOTrainer.__init__`, as far as the PRIME mixin's own `__init__` reads it."""

    def __init__(self, config):
        self.config = config
        self.use_reference_policy = False


class StepTrainer(trainer_module.PrimeTrainerMixin, VerlTrainer):
    """The PRIME trainer over `VerlTrainer`: its `__init__` is the mixin's own, only veRL's part is left out."""


def test_prime_trainers_present_their_verl_mode():
    for cls, base, name in (
        (PrimeTrainerSync, "sync", "prime_sync"),
        (PrimeTrainerSeparateAsync, "separate_async", "prime_separate_async"),
    ):
        trainer = object.__new__(cls)
        trainer.trainer_mode = name  # what PPOTrainer.__init__ assigns
        assert trainer.trainer_mode == base and trainer.prime_trainer_mode == name
    from verl.trainer.ppo.v1.trainer_base import get_trainer_cls

    assert get_trainer_cls("prime_sync") is PrimeTrainerSync
    assert get_trainer_cls("prime_separate_async") is PrimeTrainerSeparateAsync


def test_a_prime_trainer_outside_a_marked_ray_job_is_refused_naming_the_key(monkeypatch):
    """Without the recipe's marker its workers would train unpatched: the trainer stops before anything starts."""
    monkeypatch.delenv(PRIME_RUN_ENV)
    with pytest.raises(PrimeConfigError, match=rf"^ray_kwargs\.ray_init\.runtime_env\.env_vars\.{PRIME_RUN_ENV}: "):
        StepTrainer(colocated())


def test_the_trainers_advantage_hook_hands_the_step_what_it_reads_of_veRL():
    """`_compute_advantage` delegates to the step it owns, with the step number, the weight-sync cadence, the timing
    dict, the tokenizer, the actor's worker group and the KL controller of veRL's trainer as a `StepContext`."""
    trainer = StepTrainer(colocated())
    assert trainer.prime_step is None and trainer.prm_reference  # built with the PRM, once the pools exist
    seen = []

    class Step:
        def compute_advantage(self, batch, metrics, context):
            seen.append((batch, metrics, context))
            return "written back"

    trainer.prime_step = Step()
    trainer.global_steps, trainer.parameter_sync_step, trainer.timing_raw = 7, 2, {"gen": 1.0}
    trainer.tokenizer, trainer.actor_rollout_wg, trainer.kl_ctrl_in_reward = "tok", "actor", "kl"
    assert trainer._compute_advantage("batch", {"m": 1}) == "written back"
    [(batch, metrics, context)] = seen
    assert (batch, metrics) == ("batch", {"m": 1})
    assert context == prime_step_module.StepContext(7, 2, {"gen": 1.0}, "tok", "actor", "kl")


class VerlCheckpoint:
    """veRL's save and resume, as far as the PRIME hooks around them need: the actor's folder and the tracker
    (written last), and a resume that reads the tracker into `global_steps`."""

    def _save_checkpoint(self):
        root = Path(self.config.trainer.default_local_dir)
        (root / f"global_step_{self.global_steps}" / "actor").mkdir(parents=True)
        (root / "latest_checkpointed_iteration.txt").write_text(str(self.global_steps))

    def _load_checkpoint(self):
        tracker = Path(self.config.trainer.default_local_dir) / "latest_checkpointed_iteration.txt"
        self.global_steps = int(tracker.read_text()) if tracker.exists() else 0


class CheckpointedTrainer(trainer_module.PrimeTrainerMixin, VerlCheckpoint):
    """The PRIME trainer's `_save_checkpoint` / `_load_checkpoint` over `VerlCheckpoint`, its PRM's save and load
    recorded; the gate's running mean as `__init__` leaves it (½)."""

    def __init__(self, root):
        self.config = OmegaConf.create(
            {
                "trainer": {
                    "default_local_dir": str(root),
                    "default_hdfs_dir": None,
                    "max_actor_ckpt_to_keep": None,
                    "resume_mode": "auto",
                    "resume_from_path": None,
                    "del_local_ckpt_after_load": False,
                },
                "actor_rollout_ref": {"actor": {"checkpoint": {}}},
            }
        )
        self.run = run_config(self.config)
        self.global_steps = 0
        self.watchdog = trainer_module.StepWatchdog()
        self.prm = RecordingPRM()
        self.prime_step = prime_step_module.PrimeStep(self.run, self.prm, REF_FROZEN, prm_dropout=0.0, prm_fp32=True)


class RecordingPRM:
    """The PRM worker group's save and load, recorded."""

    def __init__(self):
        self.calls = []

    def save(self, local_path, remote_path, global_step, max_ckpt_to_keep):
        self.calls.append(("save", local_path))

    def load(self, local_path, del_local_after_load=False):
        self.calls.append(("load", local_path))


def test_the_trainers_checkpoint_save_and_resume_carry_the_steps_state_and_the_prm(tmp_path):
    """`_save_checkpoint` writes the step's state (a distinctive running mean, 0.8125, not the ½ a fresh trainer
    starts from) and the PRM into step 3's folder; after `_load_checkpoint` a resumed trainer holds that mean,
    beside the PRM restored from that step. (The state's own round trip through its file:
    tests/algo/test_process_gate.py.)"""
    saved = CheckpointedTrainer(tmp_path)
    saved.global_steps = 3
    saved.prime_step.load_state_dict({"prm_pairwise_ema": 0.8125})
    saved._save_checkpoint()
    assert (tmp_path / "latest_checkpointed_iteration.txt").read_text() == "3"

    resumed = CheckpointedTrainer(tmp_path)
    assert resumed.prime_step.gate.pairwise_ema == 0.5
    resumed._load_checkpoint()
    assert resumed.global_steps == 3
    assert resumed.prime_step.gate.pairwise_ema == 0.8125
    assert saved.prm.calls == [("save", str(tmp_path / "global_step_3" / "prm"))]
    assert resumed.prm.calls == [("load", str(tmp_path / "global_step_3" / "prm"))]


def test_a_fresh_start_keeps_the_gate_at_one_half(tmp_path):
    """No checkpoint to resume (step 0): the gate's mean stays ½ and no PRM state is loaded."""
    fresh = CheckpointedTrainer(tmp_path)
    fresh._load_checkpoint()
    assert (fresh.global_steps, fresh.prime_step.gate.pairwise_ema, fresh.prm.calls) == (0, 0.5, [])


def test_a_checkpoint_without_the_prime_state_restarts_the_gate_at_one_half(tmp_path, caplog):
    """A checkpoint older than `prime_state.json`: the resume warns that the gate restarts at ½ and still restores the
    PRM from that step."""
    saved = CheckpointedTrainer(tmp_path)
    saved.global_steps = 3
    saved.prime_step.load_state_dict({"prm_pairwise_ema": 0.8125})
    saved._save_checkpoint()
    (tmp_path / "global_step_3" / "prime_state.json").unlink()
    resumed = CheckpointedTrainer(tmp_path)
    with caplog.at_level("WARNING"):
        resumed._load_checkpoint()
    assert resumed.global_steps == 3 and resumed.prime_step.gate.pairwise_ema == 0.5
    assert "the gate restarts at 1/2" in caplog.text
    assert resumed.prm.calls == [("load", str(tmp_path / "global_step_3" / "prm"))]
