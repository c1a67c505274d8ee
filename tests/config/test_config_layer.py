"""Only `verl_prime_lora/config/` reads the run's configuration by key; every other module reads its typed view.

The scan finds, in a module outside `config/`, a call of a key reader (`get`, `config_value`, `select`,
`OmegaConf.select`, a `.get` method, `getattr`) given a dotted key of a veRL or PRIME section (a literal, or an
f-string that starts with one), and an attribute chain `<config>.<section>` on a config object (`config`, `cfg`,
`self.config`). A key named in a message is no read. The view itself: its keys are veRL's, and `key_of` names them.
"""

import ast
import dataclasses
import re
import typing
from pathlib import Path

import pytest
import verl
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from verl_prime_lora.config.section import key_of
from verl_prime_lora.config.verl_view import VerlView, verl_view

PACKAGE = Path(__file__).resolve().parents[2] / "verl_prime_lora"
CONFIG_LAYER = PACKAGE / "config"
SECTIONS = (
    "actor_rollout_ref",
    "algorithm",
    "trainer",
    "data",
    "reward",
    "critic",
    "prime",
    "ray_kwargs",
    "transfer_queue",
)
DOTTED_KEY = re.compile(rf"(?:{'|'.join(SECTIONS)})(?:\.\w+)+")
KEY_PREFIX = re.compile(rf"(?:{'|'.join(SECTIONS)})\.")
READERS = {"get", "config_value", "select", "getattr"}
CONFIG_OBJECTS = {"config", "cfg"}


def _reader(call: ast.Call) -> str | None:
    func = call.func
    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
    return name if name in READERS else None


def _dotted_key(node: ast.expr) -> str | None:
    """The key a reader's argument names: a dotted section key, or an f-string that starts with one."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and DOTTED_KEY.fullmatch(node.value):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values:
        head = node.values[0]
        if isinstance(head, ast.Constant) and isinstance(head.value, str) and KEY_PREFIX.match(head.value):
            return ast.unparse(node)
    return None


def _is_config_object(node: ast.expr) -> bool:
    return (isinstance(node, ast.Name) and node.id in CONFIG_OBJECTS) or (
        isinstance(node, ast.Attribute) and node.attr in CONFIG_OBJECTS
    )


def key_reads(source: str) -> list[str]:
    """`line: what` for each read of a config key by name in `source`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and _reader(node):
            for arg in node.args[:2]:
                key = _dotted_key(arg)
                if key is not None:
                    found.append(f"{node.lineno}: {_reader(node)}({key})")
        elif isinstance(node, ast.Attribute) and node.attr in SECTIONS and _is_config_object(node.value):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_outside_the_config_layer_reads_a_config_key():
    reads = {
        str(path.relative_to(PACKAGE.parent)): found
        for path in sorted(PACKAGE.rglob("*.py"))
        if CONFIG_LAYER not in path.parents and (found := key_reads(path.read_text(encoding="utf-8")))
    }
    assert not reads, f"read these through verl_prime_lora.config (its VerlView, RunConfig): {reads}"


PLANTED = """
from omegaconf import OmegaConf


def step(config, cfg, view, node, run):
    n = get(config, "actor_rollout_ref.rollout.n", 1)
    beta = config_value(config, "prime.prm.beta")
    units = OmegaConf.select(cfg, "transfer_queue.enable", default=False)
    path = node.get("reward.custom_reward_function.path")
    mode = getattr(config, "trainer.v1.trainer_mode")
    size = get(config, f"ray_kwargs.ray_init.{name}")
    device = config.trainer.device
    estimator = self.config.algorithm.adv_estimator
    with open_dict(run.config.trainer):
        pass
    fail("trainer.n_gpus_per_node", "set actor_rollout_ref.rollout.n=2 or more")
    nodes = view.trainer.nnodes
    clip = node.get("clip_grad")
    seen = options.get("train_batch_size")
    return key_of(view.rollout, "n")
"""


def test_the_scan_finds_every_planted_read_and_nothing_else():
    assert key_reads(PLANTED) == [
        "6: get(actor_rollout_ref.rollout.n)",
        "7: config_value(prime.prm.beta)",
        "8: select(transfer_queue.enable)",
        "9: get(reward.custom_reward_function.path)",
        "10: getattr(trainer.v1.trainer_mode)",
        "11: get(f'ray_kwargs.ray_init.{name}')",
        "12: config.trainer",
        "13: self.config.algorithm",
        "14: run.config.trainer",
    ]


def test_the_scan_would_fail_on_a_module_that_reads_a_key(tmp_path, monkeypatch):
    planted = tmp_path / "verl_prime_lora" / "prime" / "planted.py"
    planted.parent.mkdir(parents=True)
    planted.write_text('def n(config):\n    return get(config, "actor_rollout_ref.rollout.n", 1)\n')
    monkeypatch.setitem(globals(), "PACKAGE", planted.parents[1])
    monkeypatch.setitem(globals(), "CONFIG_LAYER", planted.parents[1] / "config")
    with pytest.raises(AssertionError, match=r"verl_prime_lora/prime/planted.py.*2: get\(actor_rollout_ref"):
        test_no_module_outside_the_config_layer_reads_a_config_key()


# --------------------------------------------------------------------------------------------------
# the view: veRL's keys, named by key_of
# --------------------------------------------------------------------------------------------------

VERL_CONFIG_DIR = str(Path(verl.__file__).parent / "trainer" / "config")
# Keys the view reads that the seed's composed config does not define: veRL reads each with a default (the view has
# it), or it is set only when wanted (a Ray cluster's address, the prompt filter's key).
NOT_IN_THE_COMPOSED_CONFIG = {
    "actor_rollout_ref.model.override_config.attn_implementation",
    "actor_rollout_ref.ref.fsdp_config.mixed_precision.param_dtype",
    "prime.prm.model.override_config.attn_implementation",
    "ray_kwargs.ray_init._temp_dir",
    "ray_kwargs.ray_init.address",
    "ray_kwargs.ray_init.num_gpus",
    "trainer.remove_previous_ckpt_in_save",
    "trainer.v1.sampler.sampler_kwargs.accuracy_key",
}


def _field_paths(cls: type, prefix: str = "") -> list[str]:
    """The dotted field paths of the view's leaves (`rollout.n`), nested sections expanded."""
    paths = []
    hints = typing.get_type_hints(cls)
    for item in dataclasses.fields(cls):
        if item.name in ("root", "node"):
            continue
        path = f"{prefix}{item.name}"
        if dataclasses.is_dataclass(hints[item.name]):
            paths += _field_paths(hints[item.name], f"{path}.")
        else:
            paths.append(path)
    return paths


@pytest.fixture(scope="module")
def seed_config():
    with initialize_config_dir(config_dir=VERL_CONFIG_DIR, version_base=None):
        return compose("ppo_trainer", overrides=["+recipe=prime_lora", "actor_rollout_ref.model.path=/m"])


def test_every_key_of_the_view_is_in_the_composed_config(seed_config):
    keys = {key_of(VerlView, path) for path in _field_paths(VerlView)}
    absent = sorted(key for key in keys if OmegaConf.select(seed_config, key, default="<absent>") == "<absent>")
    assert absent == sorted(NOT_IN_THE_COMPOSED_CONFIG), f"a key the view reads is not veRL's (a typo?): {absent}"


def test_the_view_reads_the_composed_config_and_names_its_keys(seed_config):
    view = verl_view(seed_config)
    assert view.node is seed_config and view.rollout.n == seed_config.actor_rollout_ref.rollout.n
    assert view.prm.engine.param_dtype == seed_config.prime.prm.engine.mixed_precision.param_dtype
    assert key_of(view.rollout, "n") == "actor_rollout_ref.rollout.n"
    assert key_of(view.prm.engine, "param_dtype") == "prime.prm.engine.mixed_precision.param_dtype"
    assert key_of(VerlView, "reward.custom_fn_path") == "reward.custom_reward_function.path"
    empty = verl_view({})
    assert empty.trainer.mode == "sync" and empty.trainer.n_gpus_per_node == 1  # veRL's defaults
    assert empty.rollout.log_prob_micro_batch_size_per_gpu is None
