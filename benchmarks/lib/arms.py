"""The arms a study on chain arithmetic can name: the demo's estimators (`learning_run.ESTIMATORS`) and the credit
controls, arms whose token rewards are known rather than learned (`credit_controls`), on the ungated PRIME path:
the PRM still trains, and its rewards are replaced before the advantage."""

from verl_prime_lora.demo.learning_run import ESTIMATORS

# veRL loads the controls by this path (registered plans name it too)
CONTROLS = "pkg://benchmarks.credit_controls"
CREDIT_ARMS: dict[str, list[str]] = {
    "oracle": [
        *ESTIMATORS["prime_grpo_ungated"],
        f"reward.custom_reward_function.path={CONTROLS}",
        "reward.custom_reward_function.name=compute_score",
        f"prime.process_rewards_fn.path={CONTROLS}",
        "prime.process_rewards_fn.name=oracle_rewards",
    ],
    "prime_grpo_shuffled": [
        *ESTIMATORS["prime_grpo_ungated"],
        f"prime.process_rewards_fn.path={CONTROLS}",
        "prime.process_rewards_fn.name=shuffled_rewards",
    ],
}
ARMS = {**ESTIMATORS, **CREDIT_ARMS}
