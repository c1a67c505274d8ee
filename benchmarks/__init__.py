"""The lab: studies and benchmarks of verl-prime-lora, not shipped with the package (which never imports it).

Run a script as a module of this package from the repository root, `python -m benchmarks.<name> ...`; its tests are
their own tier (`make lab`: tests/lab/). The runs it launches load lab modules by name (`pkg://benchmarks.<name>`
as veRL's reward or process-rewards function): `RUN_ENV` puts the repository root on their `PYTHONPATH`.
"""

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RUN_ENV = {"PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
