"""A test agent loop: veRL's single-turn loop that also appends each rollout's token ids, as the batch holds them,
to the JSONL file named by `ROLLOUT_IDS_ENV`, so that a test can recompute from the exact tokens what a worker
computed on them (veRL's `trainer.rollout_data_dir` keeps only decoded text, which does not re-encode to the
sampled ids)."""

import json
import os

from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

ROLLOUT_IDS_ENV = "PRIME_E2E_ROLLOUT_IDS"


class RecordingAgentLoop(SingleTurnAgentLoop):
    async def run(self, sampling_params, **kwargs):
        output = await super().run(sampling_params, **kwargs)
        row = {"prompt_ids": list(output.prompt_ids), "response_ids": list(output.response_ids)}
        with open(os.environ[ROLLOUT_IDS_ENV], "a") as ids:
            ids.write(json.dumps(row) + "\n")
        return output
