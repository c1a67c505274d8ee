"""User tools: evaluation of checkpoints (`eval`), adapter export (`export_adapter`), the configuration
reference generated from the typed config (`config_reference`), and the tiny random-weight model and tokenizer
the tests and the smoke run use (`tiny`).
"""
