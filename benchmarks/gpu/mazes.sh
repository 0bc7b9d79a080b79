#!/usr/bin/env bash
# The maze studies' GPU work, as one call of a lent GPU machine (benchmarks/gpu/README.md):
# 1. the GPU tests of stacked training (a stacked fit killed and resumed on the GPU);
# 2. the 5L-CNN panels of benchmarks/paper/environment-complexity.toml on the paper's layouts
#    (the block's `layout = "suite"` pin, the layouts of its shipped runs, left out), skipping
#    the runs the shipped export holds, SSILBENCH_GPU_WORKERS (4) units at a time, stopped (SIGTERM) after
#    SECONDS, with a progress line per training run each minute in OUT/run.log;
# 3. every finished run exported to OUT/cnn5.jsonl.gz, to merge into the study's store.
#
#   bash benchmarks/gpu/mazes.sh OUT [SECONDS]        (SECONDS: 420 by default)
#
# Another study's blocks the same way: SSILBENCH_GPU_SWEEP (its file) and SSILBENCH_GPU_BLOCKS
# (comma-separated; the export is then named after them, OUT/lc-mlp5.jsonl.gz for lc,mlp5).
# E.g. the stochastic-environment study's 5L MLP, which `plan --measure` puts at 22.7 h of
# compute on a 2-core CPU (every step, stacked):
#   SSILBENCH_GPU_SWEEP=benchmarks/paper/stochastic-environment.toml \
#   SSILBENCH_GPU_BLOCKS=mlp5 bash benchmarks/gpu/mazes.sh OUT 520
#
# With a .whl folder (benchmarks/gpu/wheels.sh) beside it, the packages the GPU image lacks
# are installed from there first.
set -uo pipefail
out=${1:?usage: bash benchmarks/gpu/mazes.sh OUT [SECONDS]}
seconds=${2:-420}
results=${SSILBENCH_GPU_RESULTS:-/tmp/ssilbench-gpu}
device=${SSILBENCH_GPU_DEVICE:-cuda}  # cpu: a smoke test of this script
# A file whose runs are a subset of the study's (same run ids), e.g. one maze's panel with a
# block per split so that the cheap units are trained first: what cannot finish is lost.
sweep=${SSILBENCH_GPU_SWEEP:-benchmarks/paper/environment-complexity.toml}
blocks=${SSILBENCH_GPU_BLOCKS:-cnn5}
# Units trained at once. A unit's runs are recorded only when all of them stop, and the
# units share the GPU: with 14 at once, none of the 14 maze:50x50 units finished in two
# calls (465 s and 265 s of sweep), so fewer at once, each with a larger share, is what can
# finish units inside one call (device time is 15 minutes a session).
workers=${SSILBENCH_GPU_WORKERS:-4}
# A second call on the same warm machine skips the install and the tests that the first did
# for the same sources (about 35 s of a call).
tree=$(cat pyproject.toml $(find ssilbench plugins -name '*.py' | sort) | sha256sum | cut -c1-16)
if [ -d .whl ]; then
  if [ "$(cat /tmp/site/.sources 2>/dev/null)" != "$tree" ]; then
    python3 -m pip install -q --no-index --no-deps --no-build-isolation --target /tmp/site .whl/* \
      && python3 -m pip install -q --no-index --no-deps --no-build-isolation --upgrade \
        --target /tmp/site . \
      && echo "$tree" > /tmp/site/.sources \
      || exit 3
  fi
  export PYTHONPATH=/tmp/site
fi
export PYTHONUNBUFFERED=1
# Progress lines in run.log (a minute apart): how far the units got when SIGTERM came.
export SSILBENCH_PROGRESS_EVERY=${SSILBENCH_PROGRESS_EVERY:-60}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__)"
mkdir -p "$results"
if [ "$(cat "$results/.gpu-tests-passed" 2>/dev/null)" = "$tree" ]; then
  echo "the GPU tests passed on this machine for these sources: not run again" | tee "$out/tests.log"
elif python3 -m pytest -q -p no:cacheprovider tests/train/test_batched_training.py 2>&1 \
    | tee "$out/tests.log"; then
  echo "$tree" > "$results/.gpu-tests-passed"
fi
python3 -m ssilbench results merge --results "$results" docs/paper/results/mazes-paper.jsonl.gz
# The study files pin blocks to the suite's layouts until runs on the paper's replace their
# shipped ones; a copy without the pins plans them on the paper's (the maze's default).
unpinned="$(mktemp -d)/$(basename "$sweep")"  # a folder of its own, not the store's
sed 's/, layout = "suite"//' "$sweep" > "$unpinned"
sweep=$unpinned
timeout -s TERM "$seconds" python3 -m ssilbench run \
  --sweep "$sweep" --blocks "$blocks" --device "$device" \
  --stack --workers "$workers" --checkpoint-every 5000 --results "$results" --data-root /tmp/ssilbench-data \
  -y 2>&1 | grep -v "breaking the stale lease" > "$out/run.log"
python3 -m ssilbench results export --no-curves --results "$results" --out "$out/${blocks//,/-}.jsonl.gz"
python3 -m ssilbench status --sweep "$sweep" --blocks "$blocks" \
  --results "$results"
