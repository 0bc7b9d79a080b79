#!/usr/bin/env bash
# The maze studies' GPU work, as one call of a lent GPU machine (benchmarks/gpu/README.md):
# 1. the GPU tests of stacked training (a stacked fit killed and resumed on the GPU);
# 2. the 5L-CNN panels of benchmarks/paper/environment-complexity.toml, skipping the runs the
#    shipped export holds, stopped (SIGTERM) after SECONDS;
# 3. every finished run exported to OUT/cnn5.jsonl.gz, to merge into the study's store.
#
#   bash benchmarks/gpu/mazes.sh OUT [SECONDS]        (SECONDS: 420 by default)
#
# With a .whl folder (benchmarks/gpu/wheels.sh) beside it, the packages the GPU image lacks
# are installed from there first.
set -uo pipefail
out=${1:?usage: bash benchmarks/gpu/mazes.sh OUT [SECONDS]}
seconds=${2:-420}
results=${SSILBENCH_GPU_RESULTS:-/tmp/ssilbench-gpu}
device=${SSILBENCH_GPU_DEVICE:-cuda}  # cpu: a smoke test of this script
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-build-isolation --target /tmp/site .whl/* \
    && python3 -m pip install -q --no-index --no-deps --no-build-isolation --target /tmp/site . \
    || exit 3
  export PYTHONPATH=/tmp/site
fi
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__)"
python3 -m pytest -q -p no:cacheprovider tests/test_batched_training.py 2>&1 | tee "$out/tests.log"
python3 -m ssilbench results merge --results "$results" docs/paper/results/mazes-paper.jsonl.gz
timeout -s TERM "$seconds" python3 -m ssilbench run \
  --sweep benchmarks/paper/environment-complexity.toml --blocks cnn5 --device "$device" \
  --stack --workers 14 --checkpoint-every 5000 --results "$results" --data-root /tmp/ssilbench-data \
  -y -q 2>&1 | tee "$out/run.log"
python3 -m ssilbench results export --no-curves --results "$results" --out "$out/cnn5.jsonl.gz"
python3 -m ssilbench status --sweep benchmarks/paper/environment-complexity.toml --blocks cnn5 \
  --results "$results"
