#!/usr/bin/env bash
# The lineage bench: every method on the built-in Fashion-MNIST pair, first 1,000 evaluation
# images, full adaptive attack plus each method's extra attacks, two ranks with one thread each on the 2-core CPU.
# Resumable: finished batches are kept in cache/bench (committed), so a later session re-runs this and goes on.
# Finished (2026-11-26): report/ is its output (verify.txt: `mixzoo verify` on it); with the code
# below (34e8c08) and this cache, re-running it only reloads the cached rows and writes the same report.
# Every cached outcome here was attacked with `adaptive` before its code version exact-apgd-1 (commit 34e8c08 and
# earlier); the current `adaptive` (with AutoAttack's APGD on the exact gradient) has another cache key, so with
# the current code this script attacks everything again (many CPU-days; hours on a GPU). To finish the run with
# the code it was measured with, in a separate checkout with its own environment:
#   git worktree add ../mixzoo-lineage 34e8c08 && cd ../mixzoo-lineage && make .venv/.mixzoo-installed data
#   rm -r benchmarks/results/every_method_fmnist_n1000/cache
#   ln -s /path/to/this/checkout/benchmarks/results/every_method_fmnist_n1000/cache benchmarks/results/every_method_fmnist_n1000/
#   bash benchmarks/results/every_method_fmnist_n1000/run.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
D=benchmarks/results/every_method_fmnist_n1000
OMP_NUM_THREADS=1 .venv/bin/torchrun --nproc-per-node 2 -m mixzoo.cli bench \
  fmnist-adaptive-smoothing-c benchmarks/results/cards/fmnist_mixednuts.toml \
  benchmarks/results/local_smoothing_fmnist/adaptive_full_split/card.toml \
  fmnist-adaptive-smoothing-a fmnist-adaptive-smoothing-b $D/linear_card.toml \
  --n-images 1000 --attack adaptive --batch-size 100 --no-curve --no-plots --save-adversarial \
  --cache-dir $D/cache --out $D/report "$@"
