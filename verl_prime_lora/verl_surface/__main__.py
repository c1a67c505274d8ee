import sys

from verl_prime_lora.verl_surface import main

sys.exit(main())
