"""User tools: evaluation of checkpoints (`eval`), adapter export (`export_adapter`), and the tiny
random-weight model and tokenizer the tests and the smoke run use (`tiny`).
"""
