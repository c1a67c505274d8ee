"""Checks of a run before Ray starts: the config's keys (`config_checks`) and the files, folders and
devices it names (`inputs`).
"""
