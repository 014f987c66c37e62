#!/usr/bin/env bash
# The lineage bench of issues 26 and 27: every method on the built-in Fashion-MNIST pair, first 1,000 evaluation
# images, full adaptive attack plus each method's extra attacks, two ranks with one thread each on the 2-core CPU.
# Resumable: finished batches are kept in cache/bench (committed), so a later session re-runs this and goes on.
set -euo pipefail
cd "$(dirname "$0")/../../.."
D=benchmarks/results/lineage_bench_n1000
OMP_NUM_THREADS=1 .venv/bin/torchrun --nproc-per-node 2 -m mixzoo.cli bench \
  fmnist-adaptive-smoothing-c benchmarks/results/fmnist_card_v2.toml \
  benchmarks/results/local_smoothing_adaptive_full/card.toml \
  fmnist-adaptive-smoothing-a fmnist-adaptive-smoothing-b $D/linear_card.toml \
  --n-images 1000 --attack adaptive --batch-size 100 --no-curve --no-plots --save-adversarial \
  --cache-dir $D/cache --out $D/report "$@"
