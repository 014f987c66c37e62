#!/usr/bin/env bash
# The GPU checks, as one command on a lent GPU machine (the `device` tool), most valuable first:
#
#   1. nccl:    `mixzoo bench` of the Fashion-MNIST card (adaptive-apgd, 100 images) in one process, then under
#               `torchrun --nproc-per-node 1` and 2 (NCCL; mixzoo gives rank r the GPU LOCAL_RANK, so 2 ranks need
#               2 GPUs: on one GPU the error is kept), per-example outcomes compared with the single process
#               (nccl/compare.json); and a bare NCCL probe with both ranks on GPU 0 (nccl/probe2.log);
#   2. scale:   benchmarks/gpu_scale.py: MMAA and the `adaptive` attack, images/s and peak memory, on the
#               Fashion-MNIST pair (full settings) and on ConvNeXt V2-L + Swin-L with random weights (few iterations,
#               scaled), then the labelled ESTIMATE of a 5,000-image ImageNet evaluation on 1 and 8 GPUs;
#   3. eval:    benchmarks/eval_speed.py (pyautoattack vs adaptive vs the sides fast and auto, the precision
#               policy) on the first EVAL_N (default 1,000) Fashion-MNIST images, at most T_EVAL seconds (default
#               600) and what is left of BUDGET; EVAL_BS images per batch on both sides (default EVAL_N: one batch);
#   7. big:     benchmarks/gpu_scale.py on ConvNeXt V2-L + Swin-L (random weights) per component at BIG_BS (default
#               auto) images per batch under the precision policy BIG_PRECISION (default auto), BIG_ARGS (default
#               32 images, 5 iterations, 100 queries, scaled as in step 2), and the 5,000-image ESTIMATE
#               (big/estimate.json) computed as step 2's; T_BIG seconds at most (default 240). The run for the
#               precision policy and memory: STEPS=73 BUDGET=540 (one device call, timeout_s 570);
#   8. stale:   the two 1,000-image Fashion-MNIST reports docs/results.md quotes, re-run with today's code on the GPU
#               (stale/adaptive_apgd_n1000: the card under adaptive-apgd with its baseline and curve;
#               stale/every_method: every method's card under adaptive plus declared attacks, as
#               benchmarks/results/every_method_fmnist_n1000/run.sh). Replace the committed reports with them and run
#               `make results`. Not in the default STEPS: STEPS=8 BUDGET=540 (one device call);
#   4. export:  benchmarks/gpu_export.py: the card's torch.export / ONNX artifacts run on CUDA against mixzoo on CUDA;
#   5. certify: benchmarks/certify_lipschitz_fmnist.py --device cuda: randomized smoothing (fmnist-rs050, fmnist-rs025;
#               soft and hard from one pass) and the Lipschitz certificates (fmnist-lip050/075/100) on the first 1,000
#               evaluation images;
# nvidia-smi samples utilisation and memory every 500 ms all along (smi.csv); steps.tsv holds each step's Unix start
# and end times and exit status, so benchmarks/gpu_results.py can attribute the samples to steps.
#
# The machine has no network: the caller carries `.devdata/` (this repo's ignored folder) holding the Fashion-MNIST
# files (t10k whole; train images: the first 13,000 real, zeros up to 55,000, the real calibration images
# 55,000-55,999), in `.devdata/site` the Python packages the device surely lacks (pyautoattack, tomli_w,
# deel-torchlip) and in `.devdata/fallback` pure-Python ones it may have (typer, click, rich, pluggy, safetensors,
# ...), linked onto the path only when they do not import there.
# Every step has its own time limit and the results are packed into $OUT/results.tgz (plus $OUT/summary.txt) even
# when a step fails. STEPS picks steps and their order does not matter (default 12453; 6 adds bench rows of the
# Lipschitz RBC LIP_RBC, default fmnist-lip100, 1,000 images per threat model: minutes, for a second run).
# SMOKE=1 runs every step tiny on the CPU (gloo for torchrun). BUDGET (default 450 s) bounds the whole run.
# `bash benchmarks/gpu_checks.sh prepare` builds .devdata here (from the Debian dataset and .venv); then call the
# device tool with command `bash benchmarks/gpu_checks.sh` and carry [".devdata"] (about 21 MB), timeout_s 540.
set -u
if [ "${1:-}" = prepare ]; then
  SRC=/usr/share/datasets/fashion-mnist
  EXCL=$(git rev-parse --git-path info/exclude) && mkdir -p "$(dirname "$EXCL")"
  grep -qx '/.devdata/' "$EXCL" 2>/dev/null || echo /.devdata/ >>"$EXCL"
  rm -rf .devdata && mkdir -p .devdata/site .devdata/fallback
  { git rev-parse HEAD; git status --short | wc -l | sed 's/$/ uncommitted paths/'; } >.devdata/commit
  cp "$SRC"/t10k-*.gz "$SRC"/train-labels-idx1-ubyte.gz .devdata/
  .venv/bin/python - "$SRC" <<'PY'
import gzip, importlib, importlib.metadata as md, shutil, struct, sys
from pathlib import Path
raw = gzip.open(sys.argv[1] + "/train-images-idx3-ubyte.gz").read()
magic, _, rows, cols = struct.unpack(">IIII", raw[:16]); px = rows * cols
keep, calib = 13000, 56000  # first 13,000 real; zeros up to the calibration split; its first 1,000 real
body = raw[16:16 + keep * px] + bytes((55000 - keep) * px) + raw[16 + 55000 * px:16 + calib * px]
with gzip.open(".devdata/train-images-idx3-ubyte.gz", "wb", compresslevel=6) as f:
    f.write(struct.pack(">IIII", magic, calib, rows, cols) + body)
# (distribution, top-level module, where): site is always on the path, fallback only where the module is missing
PKGS = [("pyautoattack", "pyautoattack", "site"), ("tomli_w", "tomli_w", "site"), ("deel-torchlip", "deel", "site"),
        ("typer", "typer", "fallback"), ("click", "click", "fallback"), ("rich", "rich", "fallback"),
        ("markdown-it-py", "markdown_it", "fallback"), ("mdurl", "mdurl", "fallback"),
        ("pygments", "pygments", "fallback"), ("shellingham", "shellingham", "fallback"),
        ("pluggy", "pluggy", "fallback"), ("safetensors", "safetensors", "fallback")]
ignore = shutil.ignore_patterns("__pycache__", "examples", "*.pyc")
for dist, mod, where in PKGS:
    src = Path(importlib.import_module(mod).__path__[0])
    shutil.copytree(src, Path(".devdata", where, mod), ignore=ignore)
    info = Path(md.distribution(dist)._path)
    shutil.copytree(info, Path(".devdata", where, info.name))
    if where == "fallback":
        Path(".devdata/fallback", mod + ".dist").write_text(info.name + "\n")  # which dist-info goes with it
PY
  du -sh .devdata; exit 0
fi
OUT=${OUT:?set OUT to an empty folder}
RES=$OUT/work
mkdir -p "$RES"
SMOKE=${SMOKE:-0}
PY=${PY:-python3}
DEV=cuda
[ "$SMOKE" = 1 ] && { DEV=cpu; PY=${PY_SMOKE:-.venv/bin/python}; }
BUDGET=${BUDGET:-450}
T0=$(date +%s)
CARD=benchmarks/results/cards/fmnist_mixednuts.toml
export PYTHONUNBUFFERED=1 MIXZOO_CACHE=$RES/cache
log() { echo "[$(date -u +%T) +$(($(date +%s) - T0))s] $*"; }
left() { echo $((BUDGET - ($(date +%s) - T0))); }
SMI_PID=
finish() {
  [ -n "$SMI_PID" ] && kill "$SMI_PID" 2>/dev/null
  {
    echo "GPU checks, $(date -u +%FT%TZ), $(($(date +%s) - T0)) s, SMOKE=$SMOKE, prepared at commit $(tr '\n' ' ' <.devdata/commit 2>/dev/null)"
    head -n 4 "$RES/env.txt" 2>/dev/null
    echo "--- steps (name, rc, seconds)"
    awk -F'\t' '{printf "%s rc=%s %ds\n", $1, $4, $3 - $2}' "$RES/steps.tsv" 2>/dev/null
    for f in nccl/compare.json scale/fmnist.json scale/imagenet.json scale/estimate.json big/estimate.json \
      export/gpu_export.json; do
      [ -f "$RES/$f" ] && { echo "--- $f"; head -c 1500 "$RES/$f"; echo; }
    done
    [ -f "$RES/certify/summary.json" ] && { echo "--- certify"; grep -h "images x" "$RES"/certify*.log; }
    [ -f "$RES/eval/eval_speed.md" ] && { echo "--- eval_speed"; head -c 2000 "$RES/eval/eval_speed.md"; }
  } >"$OUT/summary.txt" 2>&1
  tar -C "$RES" --exclude=cache --exclude='*.safetensors' --exclude='*.onnx' --exclude='*.pt2' \
    -czf "$OUT/results.tgz" .
}
trap finish EXIT

# step NAME SECONDS CMD...: run CMD with a time limit, output in NAME.log, times and status in steps.tsv
step() {
  local name=$1 limit=$2 t rc; shift 2
  [ "$limit" -lt 5 ] && { log "$name skipped: no time left"; printf '%s\t%s\t%s\tskipped\n' "$name" "$(date +%s)" "$(date +%s)" >>"$RES/steps.tsv"; return 1; }
  t=$(date +%s); log "$name (limit ${limit}s)"
  timeout -k 5 "$limit" "$@" >"$RES/$name.log" 2>&1; rc=$?
  printf '%s\t%s\t%s\t%s\n' "$name" "$t" "$(date +%s)" "$rc" >>"$RES/steps.tsv"
  log "$name rc=$rc"; tail -n 4 "$RES/$name.log"
  return $rc
}

log setup
mkdir -p .devdata/extra
if [ "$SMOKE" != 1 ]; then
  mkdir -p /usr/share/datasets/fashion-mnist && cp .devdata/*.gz /usr/share/datasets/fashion-mnist/
  $PY -m pip install -q --no-deps --no-build-isolation --no-index -e . >"$RES/pip.log" 2>&1 || { log "pip failed"; cat "$RES/pip.log"; }
  # a fallback package only where the device's Python lacks it
  for info in .devdata/fallback/*.dist; do
    mod=$(basename "$info" .dist)
    $PY -c "import $mod" 2>/dev/null && continue
    ln -sfn "$PWD/.devdata/fallback/$mod" .devdata/extra/ && ln -sfn "$PWD/.devdata/fallback/$(cat "$info")" .devdata/extra/
    echo "carried: $mod" >>"$RES/carried.txt"
  done
fi
export PYTHONPATH=$PWD/.devdata/site:$PWD/.devdata/extra${PYTHONPATH:+:$PYTHONPATH}
{ nvidia-smi -L 2>&1; echo "cores $(nproc --all)"; $PY -c "
import platform, torch, timm
print('python', platform.python_version(), 'torch', torch.__version__, 'cuda', torch.version.cuda, 'timm', timm.__version__,
      'gpu', torch.cuda.is_available() and torch.cuda.get_device_name(0))
print('nccl', torch.cuda.nccl.version() if torch.cuda.is_available() else None)
for m in ('mixzoo', 'mixzoo.cli', 'pyautoattack', 'tomli_w', 'deel.torchlip', 'typer', 'rich', 'pluggy', 'safetensors',
          'sklearn', 'matplotlib', 'onnx', 'onnxscript', 'onnxruntime', 'huggingface_hub'):
    try:
        __import__(m); print('import', m, 'ok')
    except Exception as e:
        print('import', m, 'FAILED', type(e).__name__, e)
"; cat "$RES/carried.txt" 2>/dev/null; nvidia-smi 2>&1 | head -n 15; } >"$RES/env.txt" 2>&1
cat "$RES/env.txt"
if command -v nvidia-smi >/dev/null && [ "$SMOKE" != 1 ]; then
  nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv,noheader,nounits -lms 500 >"$RES/smi.csv" 2>&1 &
  SMI_PID=$!
fi

STEPS=${STEPS:-12453}
# sizes: GPU run / SMOKE
if [ "$SMOKE" = 1 ]; then
  NB=8; BB=4; FM=(--n 8 --n-iter 2 --n-queries 10 --mmaa-iter 2 --targets 2)
  IM=(--n 1 --n-iter 1 --n-queries 2 --mmaa-iter 1 --targets 1 --abc-arch convnextv2_atto --rbc-arch swin_tiny_patch4_window7_224)
  RS=(--n-rs 8 --samples 200 --n-lip 50); EVAL_N=${EVAL_N:-16}; EXN=20
  BIG=(--n 2 --n-iter 1 --n-queries 2 --mmaa-iter 1 --targets 1 --abc-arch convnextv2_atto --rbc-arch swin_tiny_patch4_window7_224)
else
  NB=${NCCL_N:-100}; BB=25; read -r -a FM <<<"${FMNIST_ARGS:---n 200}"
  read -r -a IM <<<"${IMAGENET_ARGS:---n 16 --n-iter 5 --n-queries 100 --mmaa-iter 5}"
  RS=(--n-rs 1000 --samples 10000 --n-lip 1000 --batch-size 10000); EVAL_N=${EVAL_N:-1000}; EXN=1000
  read -r -a BIG <<<"${BIG_ARGS:---n 32 --n-iter 5 --n-queries 100 --mmaa-iter 5}"
fi

[[ $STEPS == *1* ]] && {
  mkdir -p "$RES/nccl"
  BENCH=(bench "$CARD" --attack adaptive-apgd --n-images "$NB" --no-curve --no-baseline --no-plots --batch-size "$BB"
         --device "$DEV")
  port() { $PY -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"; }
  step nccl/one 90 $PY -m mixzoo.cli "${BENCH[@]}" --out "$RES/nccl/one" --cache-dir "$RES/cache/one"
  step nccl/torchrun1 90 $PY -m torch.distributed.run --nproc-per-node 1 --master-addr 127.0.0.1 --master-port "$(port)" \
    -m mixzoo.cli "${BENCH[@]}" --out "$RES/nccl/torchrun1" --cache-dir "$RES/cache/tr1"
  step nccl/torchrun2 90 $PY -m torch.distributed.run --nproc-per-node 2 --master-addr 127.0.0.1 --master-port "$(port)" \
    -m mixzoo.cli "${BENCH[@]}" --out "$RES/nccl/torchrun2" --cache-dir "$RES/cache/tr2"
  # does NCCL itself take two ranks on one GPU? (mixzoo gives rank r the GPU LOCAL_RANK, so its 2-rank run above
  # needs two GPUs): both ranks on device 0, one all_gather_object and one all_reduce
  cat >"$RES/nccl/probe.py" <<'PY'
import datetime, sys, torch, torch.distributed as dist
cuda = sys.argv[1] == "cuda"
if cuda:
    torch.cuda.set_device(0)
dist.init_process_group("nccl" if cuda else "gloo", timeout=datetime.timedelta(seconds=40))
rank, size = dist.get_rank(), dist.get_world_size()
out = [None] * size
dist.all_gather_object(out, {"rank": rank})
t = torch.full((1,), float(rank), device="cuda" if cuda else "cpu")
dist.all_reduce(t)
print(f"rank {rank}/{size}: all_gather_object {out}, all_reduce sum {t.item()}", flush=True)
dist.destroy_process_group()
PY
  step nccl/probe2 60 $PY -m torch.distributed.run --nproc-per-node 2 --master-addr 127.0.0.1 --master-port "$(port)" \
    "$RES/nccl/probe.py" "$DEV"
  $PY - "$RES/nccl" >"$RES/nccl/compare.json" 2>&1 <<'PY'
import json, sys
from pathlib import Path
root = Path(sys.argv[1])
def report(name):
    p = root / name / "report.json"
    return json.loads(p.read_text()) if p.exists() else None
one, out = report("one"), {}
for name in ("torchrun1", "torchrun2"):
    other = report(name)
    if one is None or other is None:
        log = (root / f"{name}.log")
        tail = log.read_text().strip().splitlines()[-6:] if log.exists() else []
        out[name] = {"compared": False, "why": "no report.json" + (" from the single process" if one is None else ""),
                     "log_tail": tail}
        continue
    rows = {}
    for a, b in zip(one["models"], other["models"]):
        ra, rb = a["robust_outcomes"], b["robust_outcomes"]
        rows[a["kind"]] = {"equal": ra == rb and a.get("clean_accuracy") == b.get("clean_accuracy"),
                           "robust_single": a.get("robust_accuracy"), "robust_torchrun": b.get("robust_accuracy"),
                           "differing_examples": [i for i, (x, y) in enumerate(zip(ra, rb)) if x != y]}
    out[name] = {"compared": True, "all_equal": all(r["equal"] for r in rows.values()), "models": rows,
                 "devices": [m.get("device") for m in other["models"]][:1]}
print(json.dumps(out, indent=1))
PY
  cat "$RES/nccl/compare.json" | head -c 1500; echo
}

[[ $STEPS == *7* ]] && {
  # the ImageNet-size pair per component (MMAA, each adaptive component, Square) under the precision policy
  # BIG_PRECISION (default auto: bf16 on this GPU, every break confirmed in float32) at BIG_BS images per batch
  # (default auto: from the free memory), then the 5,000-image ESTIMATE computed as step 2 computes it
  mkdir -p "$RES/big"
  step big/imagenet "${T_BIG:-240}" $PY benchmarks/gpu_scale.py measure --pair imagenet "${BIG[@]}" \
    --precision "${BIG_PRECISION:-auto}" --batch-size "${BIG_BS:-auto}" --device "$DEV" --json "$RES/big/imagenet.json"
  [ -f "$RES/big/imagenet.json" ] && step big/estimate 30 $PY benchmarks/gpu_scale.py estimate \
    "$RES/big/imagenet.json" --images 5000 --gpus 1,8 --json "$RES/big/estimate.json"
}

[[ $STEPS == *3* ]] && {
  mkdir -p "$RES/eval"
  if [ -f benchmarks/eval_speed.py ]; then
    T=$(left); [ "$T" -gt "${T_EVAL:-600}" ] && T=${T_EVAL:-600}
    # EVAL_DATASET=digits (a rehearsal where Fashion-MNIST is missing): the digits card eval_speed.py fits itself
    EVD=(--dataset fmnist --card "$CARD"); [ "${EVAL_DATASET:-fmnist}" = digits ] && EVD=(--dataset digits)
    step eval/run "$T" $PY benchmarks/eval_speed.py "${EVD[@]}" --n "$EVAL_N" --batch-size "${EVAL_BS:-$EVAL_N}" --device "$DEV" \
      --side fast=fast --side auto=adaptive,precision=auto \
      --out "$RES/eval/eval_speed"
  else
    log "eval: benchmarks/eval_speed.py is not in this checkout; step skipped"
    printf 'eval/run\t%s\t%s\tmissing-script\n' "$(date +%s)" "$(date +%s)" >>"$RES/steps.tsv"
  fi
}
[[ $STEPS == *2* ]] && {
  mkdir -p "$RES/scale"
  step scale/fmnist 150 $PY benchmarks/gpu_scale.py measure --pair fmnist "${FM[@]}" --device "$DEV" --json "$RES/scale/fmnist.json"
  step scale/imagenet 150 $PY benchmarks/gpu_scale.py measure --pair imagenet "${IM[@]}" --device "$DEV" \
    --json "$RES/scale/imagenet.json"
  [ -f "$RES/scale/imagenet.json" ] && step scale/estimate 30 $PY benchmarks/gpu_scale.py estimate \
    "$RES/scale/imagenet.json" --images 5000 --gpus 1,8 --json "$RES/scale/estimate.json"
}

[[ $STEPS == *4* ]] && {
  mkdir -p "$RES/export"
  step export/run 90 $PY benchmarks/gpu_export.py --card "$CARD" --n $EXN --device "$DEV" --out "$RES/export"
}

[[ $STEPS == *5* ]] && {
  # the lip stage also writes benchmarks/certify_lipschitz_fmnist.{json,png}: kept as they were in this checkout
  cp benchmarks/certify_lipschitz_fmnist.json benchmarks/certify_lipschitz_fmnist.png "$RES/" 2>/dev/null
  mkdir -p "$RES/certify"
  step certify_rs 170 $PY benchmarks/certify_lipschitz_fmnist.py --stage rs "${RS[@]}" --device "$DEV" --out "$RES/certify"
  step certify_lip 60 $PY benchmarks/certify_lipschitz_fmnist.py --stage lip "${RS[@]}" --device "$DEV" --out "$RES/certify"
  for f in certify_lipschitz_fmnist.json certify_lipschitz_fmnist.png; do
    [ -f "$RES/$f" ] && mv "$RES/$f" "benchmarks/$f"
  done
}

[[ $STEPS == *6* ]] && {
  # optional (not in the default STEPS): bench rows of the Lipschitz RBC LIP_RBC alone and mixed with fmnist-std at
  # constant alpha (the alpha the certify step matched to 90 % clean accuracy, else 0.8), next to fmnist-pgd (the Fashion-MNIST
  # card's RBC), under L-inf 0.1, L2 0.5 and L2 1.0
  mkdir -p "$RES/lip"
  LIP_RBC=${LIP_RBC:-fmnist-lip100}; LT=${LIP_RBC#fmnist-}
  ALPHA=$($PY -c "import json,sys; print(json.load(open(sys.argv[1]))['lipschitz'][sys.argv[2]]['matched_alpha'])" \
    "$RES/certify/summary.json" "$LIP_RBC" 2>/dev/null || echo 0.8)
  LATT=adaptive; LN=${LIP_N:-1000}; [ "$SMOKE" = 1 ] && { LATT=adaptive-apgd; LN=8; }
  step lip/mix 60 $PY -m mixzoo.cli mix --abc fmnist-std --rbc "$LIP_RBC" --method linear -O alpha="$ALPHA" \
    --device "$DEV" --out "$RES/lip/${LT}_linear.toml"
  for threat in "Linf 0.1" "L2 0.5" "L2 1.0"; do
    read -r NORM EPS <<<"$threat"
    for c in "${LT}_linear:$RES/lip/${LT}_linear.toml" pgd_mixednuts:"$CARD"; do
      step "lip/${c%%:*}_${NORM}_${EPS}" "$(left)" $PY -m mixzoo.cli bench "${c#*:}" --attack $LATT --norm "$NORM" --eps "$EPS" \
        --n-images "$LN" --no-curve --no-baseline --no-plots --batch-size 500 --device "$DEV" \
        --out "$RES/lip/${c%%:*}_${NORM}_${EPS}"
    done
  done
}

[[ $STEPS == *8* ]] && {
  mkdir -p "$RES/stale"
  SN=1000; SBS=500; [ "$SMOKE" = 1 ] && { SN=4; SBS=4; }
  step stale/adaptive_apgd_n1000 "$(( $(left) / 3 ))" $PY -m mixzoo.cli bench "$CARD" --attack adaptive-apgd \
    --n-images "$SN" --batch-size "$SBS" --save-adversarial --device "$DEV" --out "$RES/stale/adaptive_apgd_n1000"
  D=benchmarks/results/every_method_fmnist_n1000
  step stale/every_method "$(left)" $PY -m mixzoo.cli bench fmnist-adaptive-smoothing-c "$CARD" \
    benchmarks/results/local_smoothing_fmnist/adaptive_full_split/card.toml fmnist-adaptive-smoothing-a \
    fmnist-adaptive-smoothing-b $D/linear_card.toml --n-images "$SN" --attack adaptive --batch-size "$SBS" --no-curve \
    --no-plots --save-adversarial --device "$DEV" --out "$RES/stale/every_method"
}

log done
