"""Stage entry points, run in the engine environment: `python -m tt_engine_adapter.stages.<stage> REQUEST.json`
(and `stages.export`, the merged export `tt models export --merged` runs).

Importing this package (before any stage imports torch) makes torch's idle OpenMP threads wait passively unless
the user chose otherwise: spinning idle threads take the cores other processes need, and on a busy 2-core machine
they made LoRA training on a real 135M model 5.6x slower (docs/performance.md, "A real base against TRL"). And
bitsandbytes stays unimported on a machine without a GPU (runtime/bitsandbytes_gate.py).
"""

import os

from tt_engine_adapter.runtime import bitsandbytes_gate

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
bitsandbytes_gate.hide_where_unusable()
