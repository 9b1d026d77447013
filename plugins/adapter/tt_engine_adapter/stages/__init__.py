"""Stage entry points, run in the engine environment: `python -m tt_engine_adapter.stages.<stage> REQUEST.json`
(and `stages.export`, the merged export `tt models export --merged` runs).

Importing this package (before any stage imports torch) makes torch's idle OpenMP threads wait passively unless
the user chose otherwise: spinning idle threads take the cores other processes need, and on a busy 2-core machine
they made LoRA training on a real 135M model 5.6x slower (docs/performance.md, "A real base against TRL").
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
