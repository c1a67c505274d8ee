"""What the run's typed config decides (`config.run`): the cheapest correct reference for the PRM's implicit
reward, and the folder a run resumes from (with the PRM's checkpoint nested in it)."""

from main_ppo_driver import compose_ppo
from omegaconf import OmegaConf

from verl_prime_lora.checkpoints import prm_checkpoint_dir
from verl_prime_lora.config import prime_config
from verl_prime_lora.config.run import (
    REF_ACTOR_BASE,
    REF_ACTOR_REF,
    REF_FROZEN,
    REF_POLICY_OLD,
    REF_POLICY_T1,
    REF_PRM_ADAPTER_OFF,
    reference_source,
    resume_folder,
)
from verl_prime_lora.config.verl_view import verl_view


def colocated(*overrides):
    return compose_ppo("+recipe=prime_lora_colocated", "actor_rollout_ref.model.path=/m", *overrides)


def reference_of(config, use_reference_policy):
    view = verl_view(config)
    return reference_source(view, prime_config(view).prm, use_reference_policy)


def test_reference_source_picks_the_cheapest_correct_one():
    assert reference_of(colocated(), use_reference_policy=False) == REF_ACTOR_BASE  # T=0.7: recompute at 1
    assert reference_of(colocated("actor_rollout_ref.rollout.temperature=1.0"), True) == REF_ACTOR_REF
    assert reference_of(colocated("actor_rollout_ref.rollout.temperature=1.0"), False) == REF_ACTOR_BASE
    assert reference_of(colocated("prime.prm.model.lora_rank=8"), False) == REF_PRM_ADAPTER_OFF
    assert reference_of(colocated("prime.prm.model.path=/other"), False) == REF_FROZEN
    assert reference_of(colocated("actor_rollout_ref.model.lora_rank=0"), False) == REF_FROZEN
    assert reference_of(colocated("prime.prm.reference=policy"), False) == REF_POLICY_T1
    assert (
        reference_of(colocated("prime.prm.reference=policy", "actor_rollout_ref.rollout.temperature=1.0"), False)
        == REF_POLICY_OLD
    )


def test_resume_folder_and_prm_nesting(tmp_path, monkeypatch):
    ckpt = tmp_path / "ckpts"
    (ckpt / "global_step_2").mkdir(parents=True)
    (ckpt / "latest_checkpointed_iteration.txt").write_text("2")
    c = OmegaConf.create({"trainer": {"resume_mode": "auto", "default_local_dir": str(ckpt), "resume_from_path": None}})
    t = c.trainer
    assert resume_folder(verl_view(c)) == str(ckpt / "global_step_2")
    assert prm_checkpoint_dir(resume_folder(verl_view(c))) == str(ckpt / "global_step_2" / "prm")
    t.resume_mode = "disable"
    assert resume_folder(verl_view(c)) is None
    t.resume_mode, t.resume_from_path = "resume_path", "rel/global_step_7"
    monkeypatch.chdir(tmp_path)
    assert resume_folder(verl_view(c)) == str(tmp_path / "rel" / "global_step_7")
    t.resume_mode, t.default_local_dir = "auto", str(tmp_path / "empty")
    assert resume_folder(verl_view(c)) is None
