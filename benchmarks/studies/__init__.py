"""The studies, one folder each: registration, plan, runs, analysis, README and the scripts only it uses (index:
README.md)."""
