"""The seed's GPU-only paths, checked on CPU: the strategy every test runs, fp32 log-probs from a bf16 model, the
packages the GPU path imports and what only loading them shows, the visible GPUs and wandb's credentials (refused
before Ray with the fix; the probes' results stood in for), and the split placement's NCCL weight sync as far as it
goes without a GPU (its module imports and builds its 1 + 1 topology)."""

import importlib
import sys
import types

import pytest
import torch
from main_ppo_driver import compose_ppo

import verl_prime_lora.plugin.patches  # noqa: F401 - the driver-side hook under test (also loaded at `import verl`)
from verl_prime_lora.checks import environment_checks
from verl_prime_lora.checks.config_checks import validate_prime_config
from verl_prime_lora.checks.environment_checks import (
    FLASH_ATTN_PROBE,
    GPU_COUNT_PROBE,
    NCCL_CHECK,
    NCCL_PROBE,
    SDPA_OVERRIDES,
    WANDB_PROBE,
    check_environment,
)
from verl_prime_lora.config.section import PrimeConfigError
from verl_prime_lora.config.verl_view import verl_view

SEED = ("+recipe=prime_lora", "actor_rollout_ref.model.path=/m")
COLOCATED = ("+recipe=prime_lora_colocated", "actor_rollout_ref.model.path=/m")


def without(monkeypatch, *missing, **probed):
    """`check_environment` on a machine where the named modules are not installed (and every other one is), and
    where each probe passes with no output (no CUDA device is counted), unless `probed` gives its result by name:
    flash_attn, nccl, gpus, wandb. Returns the probes that ran, by name."""
    monkeypatch.setattr(environment_checks, "installed", lambda module: module not in missing)
    names = {FLASH_ATTN_PROBE: "flash_attn", NCCL_PROBE: "nccl", GPU_COUNT_PROBE: "gpus", WANDB_PROBE: "wandb"}
    ran = []

    def run_probe(code, timeout_s=None):
        ran.append(names[code])
        return probed.get(names[code], (True, ""))

    monkeypatch.setattr(environment_checks, "run_probe", run_probe)
    return ran


# -- the strategy -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("recipe", ["prime_lora", "prime_lora_colocated", "[prime_lora,cpu]"])
def test_the_recipes_run_fsdp2_for_actor_reference_and_prm(recipe):
    """The GPU recipes pin the strategy the CPU tests run (the CPU preset cannot run FSDP1)."""
    cfg = compose_ppo(f"+recipe={recipe}", "actor_rollout_ref.model.path=/m")
    actor = cfg.actor_rollout_ref.actor
    assert actor.strategy == actor.fsdp_config.strategy == "fsdp2"
    assert cfg.actor_rollout_ref.ref.fsdp_config.strategy == "fsdp2"
    assert cfg.prime.prm.engine.strategy == "fsdp2"


# -- fp32 log-probs from a bf16 model ---------------------------------------------------------------------------


def test_fused_log_probs_are_the_fp32_log_softmax_of_the_bf16_logits():
    """`model.use_fused_kernels` (the recipe's): veRL's torch fused linear + log-softmax takes the bf16 model's
    logits to fp32 before the softmax. veRL's default path without flash-attn (`logprobs_from_logits` → a row-wise
    bf16 log_softmax) rounds each log-prob to bf16, 0.03 nats at log p ≈ -5: more than a young PRM's log-ratio."""
    from verl.utils.experimental.torch_functional import FusedLinearForPPO
    from verl.utils.torch_functional import FLAH_ATTN_CROSS_ENTROPY_LOSS_AVAILABLE, logprobs_from_logits

    assert not FLAH_ATTN_CROSS_ENTROPY_LOSS_AVAILABLE  # this machine takes veRL's bf16 path when not fused
    gen = torch.Generator().manual_seed(0)
    hidden = torch.randn(64, 32, generator=gen).to(torch.bfloat16)
    weight = (torch.randn(1000, 32, generator=gen) * 0.5).to(torch.bfloat16)
    labels = torch.randint(0, 1000, (64,), generator=gen)
    logits = hidden @ weight.t()  # bf16, as the model computes them
    exact = torch.log_softmax(logits.double(), dim=-1).gather(-1, labels[:, None]).squeeze(-1)

    fused, _ = FusedLinearForPPO(impl_backend="torch").forward(hidden[None], weight, labels[None], temperature=1.0)
    assert fused.dtype == torch.float32
    assert (fused[0].double() - exact).abs().max() < 1e-5
    default = logprobs_from_logits(logits, labels)
    assert default.dtype == torch.bfloat16 and (default.double() - exact).abs().max() > 5e-3


UNTIED_LM_HEAD_FORWARD = """
import json, sys
import torch, torch.distributed as dist
from peft import LoraConfig, get_peft_model
from torch.distributed.device_mesh import init_device_mesh
from transformers import Qwen2Config, Qwen2ForCausalLM
import verl.utils.fsdp_utils as fsdp_utils
from verl.models.transformers.monkey_patch import apply_monkey_patch

dist.init_process_group("gloo", init_method="file://" + sys.argv[2], rank=0, world_size=1)
if sys.argv[1] == "patched":
    from verl_prime_lora.plugin.patches import keep_untied_lm_head_in_root_unit
    keep_untied_lm_head_in_root_unit(fsdp_utils)
torch.manual_seed(0)
config = Qwen2Config(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                     num_attention_heads=1, num_key_value_heads=1, head_dim=64, tie_word_embeddings=False)
model = Qwen2ForCausalLM(config)
apply_monkey_patch(model, use_remove_padding=False, use_fused_kernels=True, fused_kernels_backend="torch")
model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
fsdp_utils.apply_fsdp2(model, {"mesh": init_device_mesh("cpu", (1,))}, {})
try:
    out = model(input_ids=torch.randint(0, 128, (2, 12)), temperature=1.0, return_dict=True)
    out.log_probs.sum().backward()
    print(json.dumps({"error": None, "finite": bool(out.log_probs.isfinite().all())}))
except RuntimeError as error:
    print(json.dumps({"error": str(error)}))
"""


@pytest.mark.parametrize("patched", [False, True], ids=["verl", "patched"])
def test_the_fused_forward_of_an_untied_lm_head_under_fsdp2(patched, tmp_path):
    """The seed model's lm_head is its own (not the input embedding). veRL shards it as an FSDP2 unit of its own,
    and its fused log-prob forward (`use_fused_kernels`, the recipe's) reads `lm_head.weight` without calling it:
    the weight is still sharded and the first forward dies. `patches.keep_untied_lm_head_in_root_unit` leaves it to
    the root unit; the LoRA model then runs forward and backward under FSDP2 (one process, gloo).
    Should veRL's own path stop failing, the patch is no longer needed."""
    import json
    import subprocess
    import sys

    args = [sys.executable, "-c", UNTIED_LM_HEAD_FORWARD, "patched" if patched else "verl", str(tmp_path / "store")]
    run = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    if patched:
        assert result == {"error": None, "finite": True}
    else:
        assert "mixed torch.Tensor and DTensor" in result["error"]


# -- packages the GPU path imports ------------------------------------------------------------------------------


def test_flash_attention_without_flash_attn_is_refused_with_both_fixes(monkeypatch):
    without(monkeypatch, "flash_attn")
    with pytest.raises(PrimeConfigError) as err:
        check_environment(verl_view(compose_ppo(*SEED)))
    message = str(err.value)
    assert message.startswith("actor_rollout_ref.model.override_config.attn_implementation: is flash_attention_2")
    assert "pip install --no-build-isolation flash-attn==2.8.3" in message  # veRL 0.9.1's pin
    assert SDPA_OVERRIDES in message
    # the way out it names: the actor's overrides, which the PRM follows, pass this check and the config checks
    fixed = compose_ppo(*SEED, *SDPA_OVERRIDES.split())
    assert fixed.prime.prm.model.override_config.attn_implementation == "sdpa"
    check_environment(verl_view(fixed))
    validate_prime_config(fixed, check_tokenizers=False)


def test_a_lora_prm_with_its_own_flash_attention_is_refused(monkeypatch):
    without(monkeypatch, "flash_attn")
    cfg = compose_ppo(
        *SEED, *SDPA_OVERRIDES.split(), "prime.prm.model.lora_rank=8", "prime.prm.model.override_config={}"
    )
    with pytest.raises(PrimeConfigError, match=r"^prime\.prm\.model\.override_config\.attn_implementation: "):
        check_environment(verl_view(cfg))


def test_flash_attention_with_flash_attn_and_the_cpu_preset_pass(monkeypatch):
    without(monkeypatch)
    check_environment(verl_view(compose_ppo(*SEED)))
    without(monkeypatch, "flash_attn", "cupy")
    check_environment(
        verl_view(compose_ppo("+recipe=[prime_lora,cpu]", "actor_rollout_ref.model.path=/m"))
    )  # sdpa, cpu_zmq


def test_the_split_placements_nccl_sync_without_cupy_is_refused(monkeypatch):
    without(monkeypatch, "cupy")
    with pytest.raises(PrimeConfigError) as err:
        check_environment(verl_view(compose_ppo(*SEED)))
    message = str(err.value)
    assert message.startswith("actor_rollout_ref.rollout.checkpoint_engine.backend: is nccl")
    assert "pip install cupy-cuda13x==14.0.1" in message and NCCL_CHECK in message
    check_environment(verl_view(compose_ppo(*COLOCATED)))  # colocated: the in-process `naive` sync, no cupy


def test_the_driver_runs_the_environment_checks(monkeypatch):
    """veRL's validate_config, as main_ppo calls it before Ray, runs them for PRIME runs (and only for those)."""
    import verl.utils.config as verl_config

    without(monkeypatch, "flash_attn")
    cfg = compose_ppo(*COLOCATED)
    with pytest.raises(PrimeConfigError, match=r"attn_implementation: is flash_attention_2"):
        verl_config.validate_config(cfg, use_reference_policy=False, use_critic=False)


# -- what only loading shows, the visible GPUs, wandb: probed in a fresh interpreter -----------------------------


def test_a_flash_attn_that_does_not_load_against_this_torch_is_refused(monkeypatch):
    """Installed (find_spec passes) but built for another torch: `flash_attn_2_cuda` fails to import."""
    broken = (False, "exit 1: ImportError: flash_attn_2_cuda.so: undefined symbol: _ZN3c10")
    without(monkeypatch, flash_attn=broken)
    with pytest.raises(PrimeConfigError) as err:
        check_environment(verl_view(compose_ppo(*SEED)))
    message = str(err.value)
    assert message.startswith("actor_rollout_ref.model.override_config.attn_implementation: is flash_attention_2")
    assert "undefined symbol" in message and "--no-build-isolation --no-cache-dir flash-attn==2.8.3" in message
    assert SDPA_OVERRIDES in message
    ran = without(monkeypatch, flash_attn=broken)
    check_environment(verl_view(compose_ppo(*SEED, *SDPA_OVERRIDES.split())))
    assert "flash_attn" not in ran  # sdpa: flash-attn is not probed


def test_cupy_without_a_loadable_nccl_is_refused_with_the_library_path(monkeypatch):
    without(monkeypatch, nccl=(False, "exit 1: RuntimeError: libnccl.so.2: cannot open shared object file"))
    with pytest.raises(PrimeConfigError) as err:
        check_environment(verl_view(compose_ppo(*SEED)))
    message = str(err.value)
    assert message.startswith("actor_rollout_ref.rollout.checkpoint_engine.backend: is nccl")
    assert "libnccl.so.2" in message and "LD_LIBRARY_PATH" in message and "nvidia.nccl" in message
    ran = without(monkeypatch, nccl=(False, "no"))
    check_environment(verl_view(compose_ppo(*COLOCATED)))  # the in-process `naive` sync: no NCCL probed
    assert "nccl" not in ran


def test_fewer_visible_gpus_than_the_layout_is_refused(monkeypatch):
    """The split recipe needs 2 GPUs (trainer pool 1 + vLLM 1); this machine shows 1."""
    without(monkeypatch, gpus=(True, "1"))
    with pytest.raises(PrimeConfigError) as err:
        check_environment(verl_view(compose_ppo(*SEED)))
    message = str(err.value)
    assert message.startswith("trainer.n_gpus_per_node: the layout needs 2 GPUs")
    assert "shows 1" in message and "+recipe=prime_lora_colocated" in message
    without(monkeypatch, gpus=(True, "2"))
    check_environment(verl_view(compose_ppo(*SEED)))
    without(monkeypatch, gpus=(True, "1"))
    check_environment(verl_view(compose_ppo(*COLOCATED)))  # one GPU holds the colocated recipe
    # Ray given a GPU count (checked by checks.inputs.devices), several nodes, or a cluster to join: not counted here
    monkeypatch.delenv("RAY_ADDRESS", raising=False)  # (the tests' RAY_ADDRESS=local would keep Ray off that cluster)
    for extra in ("+ray_kwargs.ray_init.num_gpus=2", "trainer.nnodes=2", "+ray_kwargs.ray_init.address=10.0.0.7:6379"):
        ran = without(monkeypatch, gpus=(True, "1"))
        check_environment(verl_view(compose_ppo(*SEED, extra)))
        assert "gpus" not in ran, extra


def test_wandb_without_credentials_is_refused_with_the_ways_out(monkeypatch):
    without(monkeypatch, wandb=(False, "exit 1: no credentials for api.wandb.ai"))
    with pytest.raises(PrimeConfigError) as err:
        check_environment(verl_view(compose_ppo(*SEED, "trainer.logger=[console,wandb]")))
    message = str(err.value)
    assert message.startswith("trainer.logger: includes wandb")
    assert "wandb login" in message and "WANDB_MODE=offline" in message and "trainer.logger=[console]" in message
    ran = without(monkeypatch, wandb=(False, "no"))
    check_environment(verl_view(compose_ppo(*SEED, "trainer.logger=[console]")))
    assert "wandb" not in ran


def test_the_wandb_probe_finds_each_kind_of_credentials(monkeypatch, tmp_path):
    """The probe itself (a real interpreter): nothing fails; a key, an offline mode, a .netrc entry pass."""
    for name in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_DISABLED", "WANDB_IDENTITY_TOKEN_FILE", "WANDB_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("NETRC", str(tmp_path / ".netrc"))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb_config"))
    found, detail = environment_checks.run_probe(WANDB_PROBE)
    assert not found and "no credentials for api.wandb.ai" in detail
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert environment_checks.run_probe(WANDB_PROBE)[0]
    monkeypatch.delenv("WANDB_MODE")
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    assert environment_checks.run_probe(WANDB_PROBE)[0]
    monkeypatch.delenv("WANDB_API_KEY")
    (tmp_path / ".netrc").write_text("machine api.wandb.ai\n  login user\n  password " + "k" * 40 + "\n")
    (tmp_path / ".netrc").chmod(0o600)
    assert environment_checks.run_probe(WANDB_PROBE)[0]


def test_a_probe_that_crashes_or_hangs_is_reported_not_inherited():
    crashed, detail = environment_checks.run_probe("import os; os.abort()")
    assert not crashed and detail.startswith("exit -6")
    hung, detail = environment_checks.run_probe("import time; time.sleep(30)", timeout_s=1)
    assert not hung and detail == "did not finish in 1 s"
    assert environment_checks.run_probe("print(7)") == (True, "7")


@pytest.mark.parametrize("recipe", ["[prime_lora,cpu]", "[prime_lora_colocated,cpu]"])
def test_cpu_runs_probe_nothing(monkeypatch, recipe):
    """The CPU preset (sdpa, cpu_zmq or naive sync, trainer.device=cpu) takes no probed path, even with wandb."""
    ran = without(monkeypatch, "flash_attn", "cupy")
    cfg = compose_ppo(f"+recipe={recipe}", "actor_rollout_ref.model.path=/m", "trainer.logger=[console,file]")
    check_environment(verl_view(cfg))
    assert ran == []


# -- the split placement's NCCL weight sync ---------------------------------------------------------------------


@pytest.fixture
def nccl_engine_module(monkeypatch):
    """veRL's nccl checkpoint engine, imported with a stand-in for cupy (a CUDA library: none on this machine)."""
    cupy = types.ModuleType("cupy")
    cupy.ndarray = type("ndarray", (), {})
    cupy.uint8 = "uint8"
    cupy.zeros = lambda *args, **kwargs: None
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    from verl.checkpoint_engine.base import CheckpointEngineRegistry

    # the import registers the engine: into a copy of the registry, which the test's end puts back
    monkeypatch.setattr(CheckpointEngineRegistry, "_registry", dict(CheckpointEngineRegistry._registry))
    name = "verl.checkpoint_engine.nccl_checkpoint_engine"
    monkeypatch.delitem(sys.modules, name, raising=False)
    yield importlib.import_module(name)
    sys.modules.pop(name, None)


def test_the_nccl_weight_sync_imports_with_cupy_and_registers(nccl_engine_module):
    from verl.checkpoint_engine.base import CheckpointEngineRegistry

    assert CheckpointEngineRegistry.get("nccl") is nccl_engine_module.NCCLCheckpointEngine


def test_the_nccl_topology_of_the_seed_layout_is_one_sender_and_one_receiver(nccl_engine_module):
    """1 trainer GPU (actor rank 0 sends) + 1 vLLM GPU (receives): one NCCL group of two, rank 0 the sender."""
    engine = nccl_engine_module.NCCLCheckpointEngine
    master = nccl_engine_module.MasterMetadata(zmq_ip="10.0.0.1", zmq_port=5555, multi_sender=True)
    actor_kwargs, rollout_kwargs = engine.build_topology(
        actor_wg_world_size=1,
        rollout_world_size=1,
        metadata=[nccl_engine_module.WorkerMetadata(node_id="gpu0-node", master=master)],
    )
    assert actor_kwargs == {"rank": [0], "world_size": [2], "master_metadata": [master], "num_senders": [1]}
    assert rollout_kwargs == {"rank": [1], "world_size": [2], "master_metadata": [master], "num_senders": [1]}
