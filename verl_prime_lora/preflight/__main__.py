"""`python -m verl_prime_lora.preflight`: the CLI (`cli.main`)."""

import sys

from verl_prime_lora.preflight.cli import main

sys.exit(main())
