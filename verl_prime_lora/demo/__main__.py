"""`python -m verl_prime_lora.demo`: the main job (see `verl_prime_lora.demo.cli`)."""

import sys

from verl_prime_lora.demo.cli import main

sys.exit(main())
