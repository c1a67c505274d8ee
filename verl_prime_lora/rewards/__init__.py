"""Reward functions: the seed's math-verify accuracy + `<think>` format reward (`math_format`) and the
keys a reward reports to the PRIME trainers (`reward_info`).
"""
