"""benchmarks/lib/checkpointed_run.py: per-token log-probabilities and a run's folders."""

import pytest
import torch

from verl_prime_lora.tools.tiny import build_model, build_tokenizer


def test_token_log_probs_are_those_of_each_sequence_alone(fake_run):
    """Batched with right padding, each response token's log-prob equals a forward of its sequence alone."""
    from benchmarks.lib import checkpointed_run as bench

    model = build_model(build_tokenizer(["12+3=15, 4-1=3"], 300), seed=0, initializer_range=0.5).eval()
    rows = [(None, [5, 6, 7], [8, 9]), (None, [5, 6], [10, 11, 12, 13])]
    batched = bench.token_log_probs(model, rows)
    for (_, prompt, response), got in zip(rows, batched):
        ids = torch.tensor([prompt + response])
        with torch.no_grad():
            log_probs = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1)
        want = [log_probs[len(prompt) - 1 + t, token].item() for t, token in enumerate(response)]
        assert got == pytest.approx(want, abs=1e-5)


def test_a_learning_benchmark_run_reads_like_a_demo(fake_run, tmp_path):
    """A learning study keeps its runs in OUT/<label>_seed<N> (main_ppo's folder) beside OUT/assets."""
    from benchmarks.lib import checkpointed_run as bench

    out = tmp_path / "learning_out"
    out.mkdir()
    (out / "assets").symlink_to(fake_run / "assets")
    (out / "prime_grpo_seed0").symlink_to(fake_run / "run")
    assert bench.run_folders(out / "prime_grpo_seed0") == (out / "assets", out / "prime_grpo_seed0")
    assert bench.run_folders(fake_run) == (fake_run / "assets", fake_run / "run")
    with pytest.raises(SystemExit, match="neither a demo's --out folder"):
        bench.run_folders(tmp_path)
