#!/usr/bin/env bash
# Wheels of what benchmarks/gpu/check.py needs beyond PyTorch, for a machine without network
# access (Python 3.12, x86-64): bash benchmarks/gpu/wheels.sh DIR
# (gym3, which procgen imports, needs cffi: the lent GPU image has none, so procgen did not
# import there without it)
set -euo pipefail
dir=${1:-.whl}
python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$dir" pydantic pydantic-core annotated-types typing-inspection gymnasium farama-notifications \
  procgen-mirror==0.10.7 gym3 gym-notices cloudpickle cffi pycparser
# gym 0.26 is published as a source archive only; procgen imports it
python3 -m pip download --no-deps --no-binary=:all: -d "$dir" gym==0.26.2
