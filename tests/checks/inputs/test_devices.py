"""Input checks before Ray starts (verl_prime_lora.checks.inputs), `devices`: the devices and CPUs the layout
asks Ray for, and with `ray_kwargs.ray_init.num_cpus` unset the CPUs Ray counts on this machine (cgroup quota,
cpuset), each failure naming the key and the ways out."""

import functools
import multiprocessing
import os
import re
import shutil
from pathlib import Path

import pytest
from input_configs import config, fails
from main_ppo_driver import compose_ppo

import verl_prime_lora.plugin.patches  # noqa: F401 - the driver-side hook under test (also loaded at `import verl`)
from verl_prime_lora.checks.inputs import InputCheckError, check_inputs
from verl_prime_lora.checks.inputs import devices as inputs_devices
from verl_prime_lora.config.verl_view import verl_view

# --------------------------------------------------------------------------------------------------
# devices
# --------------------------------------------------------------------------------------------------


ONE_RAY_GPU = "ray_kwargs.ray_init.num_gpus=1"  # the CPU preset otherwise gives Ray the layout's GPUs


def test_split_recipe_on_one_device(assets):
    message = fails(
        config(assets, ONE_RAY_GPU, recipe="prime_lora,cpu"), r"^trainer\.n_gpus_per_node: the layout needs 2 GPUs"
    )
    for key in ("actor_rollout_ref.rollout.n_gpus_per_node", "ray_kwargs.ray_init.num_gpus=1", "prime_lora_colocated"):
        assert key in message
    check_inputs(config(assets, recipe="prime_lora,cpu"))  # the preset's own count: 1 trainer + 1 rollout GPU


def test_trainer_pool_larger_than_ray_gpus(assets):
    pattern = r"^trainer\.n_gpus_per_node: the layout needs 2 GPUs.*num_gpus=1"
    fails(config(assets, "trainer.n_gpus_per_node=2", ONE_RAY_GPU), pattern)


def test_missing_devices_are_blamed_before_the_micro_batch_arithmetic(assets):
    """Four trainer ranks on one device: the driver says the devices are missing, not that the micro-batches
    do not divide over four ranks (what validate_prime_config alone would say)."""
    import verl.utils.config as verl_config

    from verl_prime_lora.checks.config_checks import validate_prime_config

    cfg = config(assets, "trainer.n_gpus_per_node=4", ONE_RAY_GPU)
    with pytest.raises(ValueError, match=r"4 (training )?ranks") as alone:
        validate_prime_config(cfg, check_tokenizers=False)
    assert "num_gpus" not in str(alone.value)
    with pytest.raises(InputCheckError) as err:
        verl_config.validate_config(cfg, use_reference_policy=False, use_critic=False)
    message = str(err.value)
    assert message.startswith("trainer.n_gpus_per_node: the layout needs 4 GPUs (4 for the trainer pool")
    assert "ray_kwargs.ray_init.num_gpus=1" in message


def test_storage_units_beyond_ray_cpus(assets):
    key = "transfer_queue.backend.SimpleStorage.num_data_storage_units"
    message = fails(config(assets, f"{key}=8"), rf"^{re.escape(key)}: is 8: the run holds 12 CPUs")
    assert "ray_kwargs.ray_init.num_cpus=8" in message and "Set it <= 4" in message
    check_inputs(config(assets, f"{key}=4"))  # 1 + 4 + 3 = 8: fits


def test_ray_cpus_below_the_placement_groups(assets):
    pattern = r"^ray_kwargs\.ray_init\.num_cpus: is 4: the run holds 5 CPUs"
    message = fails(config(assets, "ray_kwargs.ray_init.num_cpus=4"), pattern)
    assert "num_data_storage_units" in message


@pytest.fixture
def ray_start_record(tmp_path, monkeypatch):
    """A cluster that `ray start` recorded as this machine's current one (in a private Ray temp dir)."""
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    monkeypatch.delenv("RAY_ADDRESS")
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "ray_current_cluster").write_text("127.0.0.1:6379")
    return tmp_path / "ray" / "ray_current_cluster"


def test_a_cluster_left_by_ray_start_is_not_joined_with_num_cpus(assets, ray_start_record):
    """The CPU preset gives ray.init num_cpus and num_gpus, which Ray refuses when it joins a running
    cluster; a bare ray.init() joins the one `ray start` recorded. The message names both ways out."""
    pattern = (
        r"^ray_kwargs\.ray_init\.num_cpus: is set, "
        r"but ray\.init would join the running Ray cluster at 127\.0\.0\.1:6379"
    )
    message = fails(config(assets), pattern)
    assert str(ray_start_record) in message and "RAY_ADDRESS=local" in message
    assert "ray_kwargs.ray_init.num_cpus=null ray_kwargs.ray_init.num_gpus=null" in message


def test_a_cluster_named_by_ray_address_is_blamed_on_it(assets, monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.7:6379")
    fails(config(assets), r"^ray_kwargs\.ray_init\.num_cpus: .* at 10\.0\.0\.7:6379 \(RAY_ADDRESS\)")


def test_joining_a_cluster_without_resources_or_starting_one_passes(assets, ray_start_record, monkeypatch):
    check_inputs(config(assets, "ray_kwargs.ray_init.num_cpus=null", "ray_kwargs.ray_init.num_gpus=null"))
    monkeypatch.setenv("RAY_ADDRESS", "local")
    check_inputs(config(assets))
    monkeypatch.delenv("RAY_ADDRESS")
    ray_start_record.unlink()  # `ray stop` removes the record
    check_inputs(config(assets))


def test_ray_joins_as_the_check_says(ray_start_record, monkeypatch):
    """Ray's own resolution (what ray.init runs) agrees: it joins the recorded cluster, and with
    RAY_ADDRESS=local (what `cpu.launch` gives every CPU run) it starts one."""
    from ray._private.services import canonicalize_bootstrap_address

    assert canonicalize_bootstrap_address(None).endswith(":6379")  # localhost as this node's IP
    monkeypatch.setenv("RAY_ADDRESS", "local")
    assert canonicalize_bootstrap_address(None) is None


def test_agent_workers_are_not_counted(assets):
    """AgentLoopWorkers are default Ray actors (1 CPU to place, 0 held): more of them than CPUs do not hang."""
    check_inputs(config(assets, "actor_rollout_ref.rollout.agent.num_workers=16"))


# -- with ray_kwargs.ray_init.num_cpus unset: the CPUs Ray counts on this machine ---------------------------------

SPLIT = ("+recipe=prime_lora", "actor_rollout_ref.model.path=/m")  # the GPU recipes leave num_cpus unset
COLOCATED = ("+recipe=prime_lora_colocated", "actor_rollout_ref.model.path=/m")
EIGHT_GPUS = (  # docs/operations.md's one-node 8-GPU example
    *SPLIT,
    "trainer.n_gpus_per_node=4",
    "actor_rollout_ref.rollout.n_gpus_per_node=4",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
)
UNITS = "transfer_queue.backend.SimpleStorage.num_data_storage_units"
# the files Ray reads under /sys/fs/cgroup: v1's quota, period and cpuset (v2's quota is cpu.max)
V1_QUOTA, V1_PERIOD, V1_CPUSET = "cpu/cpu.cfs_quota_us", "cpu/cpu.cfs_period_us", "cpuset/cpuset.cpus"


@pytest.fixture
def host(tmp_path, monkeypatch):
    """This machine as Ray counts its CPUs: 64 logical CPUs (`machine.logical`) and the cgroup files written by
    `machine.cgroup({path relative to /sys/fs/cgroup: text})` under a stand-in for /sys/fs/cgroup."""
    root = tmp_path / "cgroup"
    root.mkdir()
    monkeypatch.setattr(inputs_devices, "CGROUP_ROOT", root)
    monkeypatch.delenv("RAY_USE_MULTIPROCESSING_CPU_COUNT", raising=False)
    machine = type("Machine", (), {})()

    def logical(count):
        monkeypatch.setattr(multiprocessing, "cpu_count", lambda: count)

    def cgroup(files):
        for name, text in files.items():
            path = root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text + "\n")

    machine.root, machine.logical, machine.cgroup = root, logical, cgroup
    logical(64)
    return machine


def check_host(*overrides: str) -> None:
    inputs_devices.check_host_cpus(verl_view(compose_ppo(*overrides)))


def test_the_split_recipe_in_a_container_of_8_cpus_is_refused(host):
    """`docker run --cpus=8` on a 64-CPU host: Ray counts 8 (cgroup v2 quota), the split recipe holds 14. The
    message names the storage units (8 -> 2 makes it fit), num_cpus and the quota it read; both ways out pass."""
    host.cgroup({"cpu.max": "800000 100000"})
    with pytest.raises(InputCheckError) as err:
        check_host(*SPLIT)
    message = str(err.value)
    assert message.startswith(f"{UNITS}: is 8: the run holds 14 CPUs (the TransferQueue controller (1), 8 storage")
    assert "more than the 8 CPUs Ray counts on this machine (the container's limit: a CPU quota of 8" in message
    assert f"{host.root / 'cpu.max'}: 800000 100000); the machine has 64 logical CPUs)" in message
    assert "Set it <= 2 or set ray_kwargs.ray_init.num_cpus=14" in message and "docker run --cpus=14" in message
    check_host(*SPLIT, f"{UNITS}=2")
    check_host(*SPLIT, "ray_kwargs.ray_init.num_cpus=14")
    inputs_devices.check_devices(verl_view(compose_ppo(*SPLIT, "ray_kwargs.ray_init.num_cpus=14")))
    host.cgroup({"cpu.max": "1400000 100000"})  # 14 CPUs: fits
    check_host(*SPLIT)
    host.cgroup({"cpu.max": "max 100000"})  # no quota: the 64 logical CPUs
    check_host(*EIGHT_GPUS)


def test_a_v1_cpuset_or_a_small_machine_is_counted_and_named(host):
    """cgroup v1 without a quota (-1) but a cpuset of 4 CPUs: the colocated recipe's 12 do not fit, and fewer
    storage units cannot make them (the placement group alone holds 3 + the controller 1 of 4): num_cpus is named."""
    host.cgroup({V1_QUOTA: "-1", V1_PERIOD: "100000", V1_CPUSET: "0-3"})
    pattern = r"^ray_kwargs\.ray_init\.num_cpus: is unset: the run holds 12 CPUs .* more than the 4 CPUs Ray counts"
    with pytest.raises(InputCheckError, match=pattern) as err:
        check_host(*COLOCATED)
    assert f"the cpuset 0-3 ({host.root / 'cpuset/cpuset.cpus'})" in str(err.value)
    assert "Set ray_kwargs.ray_init.num_cpus=12" in str(err.value)
    shutil.rmtree(host.root / "cpuset")
    host.logical(8)  # a VM of 8 CPUs, no container limit
    with pytest.raises(InputCheckError, match=r"more than the 8 CPUs Ray counts on this machine \(the machine's 8 "):
        check_host(*COLOCATED)
    host.logical(12)
    check_host(*COLOCATED)


def test_no_host_check_with_num_cpus_given_or_a_cluster_to_join(host, monkeypatch):
    """Given num_cpus, Ray counts nothing (check_devices compares with it); a joined cluster counted its CPUs when
    `ray start` ran, on its own nodes."""
    host.logical(1)
    check_host(*SPLIT, "ray_kwargs.ray_init.num_cpus=14")
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.7:6379")
    check_host(*SPLIT)


def test_the_driver_checks_the_host_cpus(assets, host):
    """veRL's validate_config, as main_ppo calls it before Ray, and check_inputs run the check: the CPU preset with
    num_cpus unset holds 5 CPUs (TransferQueue 1 + 1, the placement group 3) on a machine of 4."""
    import verl.utils.config as verl_config

    host.logical(4)
    cfg = config(assets, "ray_kwargs.ray_init.num_cpus=null")
    pattern = r"^ray_kwargs\.ray_init\.num_cpus: is unset: the run holds 5 CPUs .* the 4 CPUs Ray counts"
    with pytest.raises(InputCheckError, match=pattern):
        verl_config.validate_config(cfg, use_reference_policy=False, use_critic=False)
    with pytest.raises(InputCheckError, match=pattern):
        check_inputs(cfg)
    host.logical(5)
    check_inputs(cfg)


@pytest.mark.parametrize(
    "files, counted",
    [
        ({}, 64),
        ({"cpu.max": "max 100000"}, 64),  # cgroup v2, no quota
        ({"cpu.max": "800000 100000"}, 8),
        ({"cpu.max": "750000 100000"}, 7),  # truncated
        ({"cpu.max": "50000 100000"}, 0),  # half a CPU: Ray counts none
        ({"cpu.max": "0 100000"}, 1),
        ({V1_QUOTA: "400000", V1_PERIOD: "100000"}, 4),
        ({V1_QUOTA: "-1", V1_PERIOD: "100000", V1_CPUSET: "0-3,8"}, 5),  # no quota; a cpuset of 5
        ({V1_QUOTA: "800000", V1_PERIOD: "100000", V1_CPUSET: "0-4"}, 5),  # the smaller
        ({V1_QUOTA: "200000", V1_PERIOD: "100000", "cpu.max": "800000 100000"}, 2),  # v1 first
        ({V1_CPUSET: "0-127"}, 128),  # a cpuset beyond the machine's count: Ray takes it
    ],
)
def test_the_count_is_rays_own(host, monkeypatch, files, counted):
    """`ray_cpu_count` counts what Ray's own `get_num_cpus` counts (the default num_cpus of a cluster that ray.init
    starts) with its cgroup files pointed at the same stand-ins, on a machine of 64 logical CPUs."""
    from ray._private import utils as ray_utils

    host.cgroup(files)
    docker_cpus = functools.partial(
        ray_utils._get_docker_cpus,
        cpu_quota_file_name=str(host.root / V1_QUOTA),
        cpu_period_file_name=str(host.root / V1_PERIOD),
        cpuset_file_name=str(host.root / V1_CPUSET),
        cpu_max_file_name=str(host.root / "cpu.max"),
    )
    monkeypatch.setattr(ray_utils, "_get_docker_cpus", docker_cpus)
    assert inputs_devices.ray_cpu_count()[0] == ray_utils.get_num_cpus(override_docker_cpu_warning=True) == counted
    monkeypatch.setenv("RAY_USE_MULTIPROCESSING_CPU_COUNT", "1")
    because = "the machine's 64 logical CPUs, as RAY_USE_MULTIPROCESSING_CPU_COUNT is set"
    assert inputs_devices.ray_cpu_count() == (ray_utils.get_num_cpus(), because)


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or (os.cpu_count() or 1) < 2, reason="needs 2 CPUs")
def test_ray_counts_cpus_that_the_affinity_excludes():
    """Restricted to one CPU (`taskset -c 0`), this process still gets the machine's count from Ray and from the
    check: Ray's default ignores the affinity, so an affinity alone makes no actor wait."""
    from ray._private import utils as ray_utils

    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(before)})
    try:
        counted, _ = inputs_devices.ray_cpu_count()
        assert counted == ray_utils.get_num_cpus(override_docker_cpu_warning=True) > len(os.sched_getaffinity(0))
    finally:
        os.sched_setaffinity(0, before)


def test_the_cpu_needs_install_md_quotes():
    """docs/install.md's prerequisites give the CPUs each layout holds; they are this accounting's."""
    needs = {
        name: inputs_devices.cpus_held(verl_view(compose_ppo(*layout))).held
        for name, layout in (("split", SPLIT), ("colocated", COLOCATED), ("8 GPUs", EIGHT_GPUS))
    }
    assert needs == {"split": 14, "colocated": 12, "8 GPUs": 29}
    install = (Path(__file__).resolve().parents[3] / "docs" / "install.md").read_text()
    for layout, held in needs.items():
        assert re.search(rf"^\| {re.escape(layout)}\b[^\n]*\| {held} \|", install, re.M), layout
