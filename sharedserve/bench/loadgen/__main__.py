"""``python -m sharedserve.bench.loadgen master|worker ...``: the load generator's process."""

import sys

from sharedserve.bench.loadgen.process import main

sys.exit(main())
