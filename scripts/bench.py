#!/usr/bin/env python3
"""Speed benchmarks: `python scripts/bench.py --help`. The cases and the code live in benchmarks/bench.py (the
benchmarks' one home, beside the reference implementation and the micro-benchmarks it shares the folder with);
this is its command. Each case runs in a fresh process of that file, so its figures and output are the same.

    python scripts/bench.py                      # every case
    python scripts/bench.py --cases cartpole-4x128,cartpole-4x128-reference
    python scripts/bench.py --devices 1,2,4,8     # one data-parallel workload over 1, 2, 4, 8 devices
"""

import os
import sys

from hephaestus.tools.entry_points import load_script, require_this_checkout

# benchmarks/ is run, not installed: its module, loaded from its file (CASES, case_config, bench_hephaestus, ...)
bench = load_script(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks",
                                 "bench.py"), "bench")
globals().update({name: value for name, value in vars(bench).items() if not name.startswith("__")})

if __name__ == "__main__":
    require_this_checkout(__file__)
    sys.exit(bench.main())
