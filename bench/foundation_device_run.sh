#!/usr/bin/env bash
# The foundation checks for a CUDA machine whose python3 has torch, tokenizers, safetensors, numpy, pyarrow
# (and transformers for the HF comparison): engine tests, the CUDA path check, GPU and CPU throughput.
# Writes logs under $OUT (default ./bench-out).
OUT=${OUT:-bench-out}; mkdir -p "$OUT"
set -o pipefail
export PYTHONPATH=$PWD/plugins/foundation PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch, tokenizers, transformers; print(torch.__version__, tokenizers.__version__, transformers.__version__)"
(timeout 200 python3 -m pytest -q -p no:cacheprovider plugins/foundation/tests -x 2>&1 | tail -15) | tee $OUT/tests.log
(timeout 60 python3 bench/foundation_cuda_check.py 2>&1 | tail -5) | tee $OUT/cuda_check.log
(timeout 240 python3 bench/foundation_pretrain.py --cuda --steps 20 2>&1 | tail -5) | tee $OUT/cuda_bench.log
(timeout 120 python3 bench/foundation_pretrain.py --steps 6 2>&1 | tail -5) | tee $OUT/cpu16_bench.log
