"""Light experiment: does Ray's GCS grow per actor task (task-event store), and does a cap bound it? The raylet's
RSS is recorded beside it (added after the first four runs, whose files lack it).

Mimics veRL 0.9.1's per-response Ray traffic in the agent loop (verl/workers/rollout/llm_server.py:70-88,150):
an async worker actor calls `lb.acquire_server.remote()` (which returns `(server_id, server_handle)`, i.e. an
actor handle serialized in every reply), then `server.generate.remote()`, then fire-and-forget
`lb.release_server.remote()`: 3 actor tasks per "response". The job carries veRL's PPO runtime_env env vars
(each task event's TaskInfoEntry stores the runtime_env), like a real run.

    nice -n 15 python gcs_task_events_exp.py MODE REQUESTS OUT.json
    MODE: default (Ray's defaults) | cap (task_events_max_num_task_in_gcs=3000)
          | off (task_events_report_interval_ms=0: no task events) | nohandle (default, LB returns only the id)

Starts its own local Ray cluster (own temp dir) and kills every process it started, by pid, at the end.
"""

import asyncio
import json
import os
import re
import signal
import sys
import time

import psutil
import ray

MODE, REQUESTS, OUT = sys.argv[1], int(sys.argv[2]), sys.argv[3]
BATCH = 500
CAP = 3000

system_config = {"event_stats_print_interval_ms": 5000}  # GCS debug dump (task-event counters) every 5 s
if MODE == "cap":
    system_config["task_events_max_num_task_in_gcs"] = CAP
elif MODE == "off":
    system_config["task_events_report_interval_ms"] = 0

# veRL 0.9.1 PPO_RAY_RUNTIME_ENV (verl/trainer/constants_ppo.py) + the plugin's recipe env vars
ENV_VARS = {
    "TOKENIZERS_PARALLELISM": "true",
    "NCCL_DEBUG": "WARN",
    "VLLM_LOGGING_LEVEL": "WARN",
    "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "true",
    "VLLM_DISABLE_COMPILE_CACHE": "1",
    "HCCL_HOST_SOCKET_PORT_RANGE": "auto",
    "HCCL_NPU_SOCKET_PORT_RANGE": "auto",
    "HSA_NO_SCRATCH_RECLAIM": "1",
    "TRANSFER_QUEUE_ENABLE": "1",
    "VERL_PRIME_LORA_PRIME_RUN": "1",
    "TORCH_COMPILE_DISABLE": "1",
}


@ray.remote(num_cpus=0)
class Server:
    async def generate(self, request_id, prompt_ids):
        return {"request_id": request_id, "token_ids": prompt_ids[:8]}


@ray.remote(num_cpus=0)
class LoadBalancer:
    def __init__(self, servers, return_handle):
        self.servers, self.return_handle, self.n = servers, return_handle, 0

    def acquire_server(self, request_id):
        self.n += 1
        i = self.n % len(self.servers)
        return (str(i), self.servers[i]) if self.return_handle else str(i)

    def release_server(self, server_id):
        return None


@ray.remote(num_cpus=0)
class AgentLoopWorker:
    def __init__(self, lb, servers, return_handle):
        self.lb, self.servers, self.return_handle = lb, servers, return_handle

    async def run(self, start, n, concurrency=16):
        sem = asyncio.Semaphore(concurrency)

        async def one(i):
            async with sem:
                reply = await self.lb.acquire_server.remote(f"req-{i}")
                if self.return_handle:
                    server_id, server = reply
                else:
                    server_id, server = reply, self.servers[int(reply)]
                await server.generate.remote(f"req-{i}", list(range(64)))
                self.lb.release_server.remote(server_id)

        await asyncio.gather(*(one(start + i) for i in range(n)))
        return n


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def last_gcs_counters(session_dir):
    text = open(os.path.join(session_dir, "logs", "gcs_server.out")).read()
    out = {}
    for key, pat in [
        ("reported", r"Total num task events reported: (\d+)"),
        ("stored", r"Current num of task events stored: (\d+)"),
        ("status_dropped", r"Total num status task events dropped: (\d+)"),
        ("actor_tasks", r"Total num of actor tasks: (\d+)"),
    ]:
        m = re.findall(pat, text)
        out[key] = int(m[-1]) if m else None
    return out


def main():
    me = psutil.Process()
    temp_dir = f"/tmp/gcsx_{os.getpid()}"
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        _temp_dir=temp_dir,
        _system_config=system_config,
        runtime_env={"env_vars": ENV_VARS},
        log_to_driver=False,
    )
    node = ray._private.worker._global_node
    gcs_pid = node.all_processes["gcs_server"][0].process.pid
    raylet_pid = node.all_processes["raylet"][0].process.pid
    session_dir = node.get_session_dir_path()
    records = []
    try:
        return_handle = MODE != "nohandle"
        servers = [Server.remote() for _ in range(2)]
        lb = LoadBalancer.remote(servers, return_handle)
        worker = AgentLoopWorker.remote(lb, servers, return_handle)
        ray.get([s.generate.remote("warm", [0]) for s in servers] + [lb.release_server.remote("0")])
        time.sleep(2)
        t0 = time.time()
        records.append({"requests": 0, "t": 0.0, "gcs_rss_mb": rss_mb(gcs_pid), "raylet_rss_mb": rss_mb(raylet_pid)})
        done = 0
        while done < REQUESTS:
            n = min(BATCH, REQUESTS - done)
            ray.get(worker.run.remote(done, n))
            done += n
            time.sleep(1.2)  # task events are flushed to the GCS every 1 s
            records.append(
                {
                    "requests": done,
                    "t": round(time.time() - t0, 1),
                    "gcs_rss_mb": rss_mb(gcs_pid),
                    "raylet_rss_mb": rss_mb(raylet_pid),
                }
            )
            print(MODE, records[-1], flush=True)
        time.sleep(6)  # let the GCS print one more debug dump
        counters = last_gcs_counters(session_dir)
        records.append(
            {
                "requests": done,
                "t": round(time.time() - t0, 1),
                "gcs_rss_mb": rss_mb(gcs_pid),
                "raylet_rss_mb": rss_mb(raylet_pid),
                **counters,
            }
        )
        print(MODE, records[-1], flush=True)
    finally:
        descendants = me.children(recursive=True)
        ray.shutdown()
        time.sleep(2)
        for p in descendants:
            try:
                if p.is_running():
                    p.send_signal(signal.SIGKILL)
            except psutil.NoSuchProcess:
                pass
        alive = [p.pid for p in descendants if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        print("left alive:", alive, flush=True)
    r0, r1 = records[0], records[-1]
    summary = {
        "mode": MODE,
        "system_config": system_config,
        "ray_version": ray.__version__,
        "requests": REQUESTS,
        "actor_tasks_per_request": 3,
        "gcs_rss_growth_mb": round(r1["gcs_rss_mb"] - r0["gcs_rss_mb"], 2),
        "kb_per_request": round((r1["gcs_rss_mb"] - r0["gcs_rss_mb"]) * 1024 / REQUESTS, 3),
        "raylet_rss_growth_mb": round(r1["raylet_rss_mb"] - r0["raylet_rss_mb"], 2),
        "records": records,
    }
    json.dump(summary, open(OUT, "w"), indent=1)
    print(json.dumps({k: v for k, v in summary.items() if k != "records"}), flush=True)


if __name__ == "__main__":
    main()
