#!/usr/bin/env bash
# Outcomes of a checkout, for comparing two versions of the code example by example (a refactor must not change a
# number): the README's quick start (mix + bench --n 200 --attack adaptive-apgd) and, for every built-in mixing
# method, `mixzoo mix` on the digits pair then `mixzoo bench --n 40 --budget quick`, each with an empty cache.
#   bash benchmarks/same_outcomes.sh CHECKOUT OUTDIR     (CHECKOUT: a worktree with its own .venv)
#   python benchmarks/same_outcomes.py OUTDIR_A OUTDIR_B  (exit 1 when any outcome, curve point or card differs)
set -u
wt=$1; out=$2; mkdir -p "$out"; cd "$wt" || exit 2
export OMP_NUM_THREADS=1
mz=$wt/.venv/bin/mixzoo
$mz mix --abc digits-std --rbc digits-pgd --beta 0.95 --out "$out/qs/card.toml" --cache-dir "$out/qs/cache" \
  >"$out/qs.mix.log" 2>&1
$mz bench "$out/qs/card.toml" --n 200 --attack adaptive-apgd --out "$out/qs/bench" --cache-dir "$out/qs/cache" \
  >"$out/qs.bench.log" 2>&1
for m in ${METHODS:-linear mixednuts adaptive-smoothing knn-smoothing local-smoothing local-smoothing-adaptive}; do
  opt=""; case $m in knn-smoothing|local-smoothing) opt="-O target_clean=0.9";; esac
  # shellcheck disable=SC2086
  $mz mix --method "$m" $opt --abc digits-std --rbc digits-pgd --out "$out/$m/card.toml" --cache-dir "$out/$m/cache" \
    >"$out/$m.mix.log" 2>&1 || echo "mix $m failed" >>"$out/fail"
  $mz bench "$out/$m/card.toml" --n 40 --budget quick --out "$out/$m/bench" --cache-dir "$out/$m/cache" \
    >"$out/$m.bench.log" 2>&1 || echo "bench $m failed" >>"$out/fail"
done
