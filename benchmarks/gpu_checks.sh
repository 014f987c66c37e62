#!/usr/bin/env bash
# The GPU checks (parity with AutoAttack, adaptive smoothing's training time), as one command on a lent GPU machine (the `device` tool):
#
#   1. parity with AutoAttack: benchmarks/autoattack_parity.py on the first 1,000 Fashion-MNIST evaluation images, pyautoattack's
#      standard evaluation against mixzoo's `adaptive`, both on the GPU; one process per 250-image chunk (4 at once);
#   2. adaptive smoothing: the adaptive-smoothing setting-C training time on the GPU (100 batches of 128 train-split images, the
#      CPU figure's configuration; an epoch of 428 batches is scaled from it);
#   3. parity with AutoAttack: MMAA vs pyautoattack at equal work on a large network on the GPU (timm ConvNeXt-Tiny, random
#      weights, 224x224).
#
# The machine has no network: the caller carries `.devdata/` (this repo's ignored folder) holding the Fashion-MNIST
# files (t10k whole; train images: the first 13,000 real, zeros up to 55,000, the real calibration images 55,000-55,999)
# and the Python files of pyautoattack and tomli_w in `.devdata/site`; chunks of an earlier run in `.devdata/chunks`.
# Every step has its own time limit and the results are packed into $OUT/results.tgz even when a step fails.
# SMOKE=1 runs every step tiny on the CPU (a check of this script before device time is spent).
# `bash benchmarks/gpu_checks.sh prepare` builds .devdata here (from the Debian dataset and .venv); then call the
# device tool with command `bash benchmarks/gpu_checks.sh` and carry [".devdata"] (about 11 MB).
set -u
if [ "${1:-}" = prepare ]; then
  SRC=/usr/share/datasets/fashion-mnist SITE=$(.venv/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  grep -qx '/.devdata/' .git/info/exclude 2>/dev/null || echo /.devdata/ >>.git/info/exclude
  rm -rf .devdata && mkdir -p .devdata/site/pyautoattack
  cp "$SRC"/t10k-*.gz "$SRC"/train-labels-idx1-ubyte.gz .devdata/
  cp "$SITE"/pyautoattack/*.py .devdata/site/pyautoattack/ && cp -r "$SITE"/pyautoattack-*.dist-info "$SITE"/tomli_w .devdata/site/
  .venv/bin/python - "$SRC" <<'PY'
import gzip, struct, sys
raw = gzip.open(sys.argv[1] + "/train-images-idx3-ubyte.gz").read()
magic, _, rows, cols = struct.unpack(">IIII", raw[:16]); px = rows * cols
keep, calib = 13000, 56000  # first 13,000 real; zeros up to the calibration split; its first 1,000 real
body = raw[16:16 + keep * px] + bytes((55000 - keep) * px) + raw[16 + 55000 * px:16 + calib * px]
with gzip.open(".devdata/train-images-idx3-ubyte.gz", "wb", compresslevel=6) as f:
    f.write(struct.pack(">IIII", magic, calib, rows, cols) + body)
PY
  rm -rf .devdata/site/*/__pycache__; du -sh .devdata; exit 0
fi
OUT=${OUT:?set OUT to an empty folder}
RES=$OUT/work
mkdir -p "$RES"
SMOKE=${SMOKE:-0}
PY=${PY:-python3}
DEV=cuda
[ "$SMOKE" = 1 ] && DEV=cpu
export PYTHONUNBUFFERED=1 MIXZOO_CACHE=$RES/cache
export PYTHONPATH=$PWD/.devdata/site${PYTHONPATH:+:$PYTHONPATH}
log() { echo "[$(date -u +%T)] $*"; }
pack() { tar -C "$RES" --exclude=cache --exclude='*.safetensors' --exclude='*.pt' -czf "$OUT/results.tgz" . ; }
trap pack EXIT

log setup
if [ "$SMOKE" != 1 ]; then
  mkdir -p /usr/share/datasets/fashion-mnist && cp .devdata/*.gz /usr/share/datasets/fashion-mnist/
  $PY -m pip install -q --no-deps --no-build-isolation --no-index -e . >"$RES/pip.log" 2>&1 || { log "pip failed"; cat "$RES/pip.log"; }
fi
{ nvidia-smi -L; nproc; $PY -c "import torch, timm, mixzoo; from mixzoo.core.compat import import_autoattack;
import_autoattack(); print('torch', torch.__version__, 'timm', timm.__version__, 'cuda', torch.cuda.is_available())"; } \
  >"$RES/env.txt" 2>&1
cat "$RES/env.txt"

N=1000; T_PARITY=${T_PARITY:-280}; T_TRAIN=${T_TRAIN:-110}; T_MMAA=${T_MMAA:-70}
NTRAIN=13000; read -r -a CNX <<<"${CNX_ARGS:---n 64 --n-iter 25 --targets 9 --repeats 2}"
if [ "$SMOKE" = 1 ]; then N=16; NTRAIN=400; CNX=(--n 2 --n-iter 2 --targets 2 --repeats 1); fi
BS=$((N / 4))

STEPS=${STEPS:-123}  # e.g. STEPS=1: the parity only
log "1. parity, $N images, 4 processes"
mkdir -p "$RES/parity/chunks"
# chunks kept from an earlier run (one side done) are carried in .devdata/chunks and resumed
[ -d .devdata/chunks ] && cp .devdata/chunks/*.json "$RES/parity/chunks/"
[[ $STEPS == *1* ]] && {
for k in 0 1 2 3; do
  timeout -k 5 "$T_PARITY" $PY benchmarks/autoattack_parity.py --card benchmarks/results/cards/fmnist_mixednuts.toml --n $N \
    --batch-size $BS --attack adaptive --device $DEV --threads 2 --chunk-dir "$RES/parity/chunks" --chunks $k \
    --out "$RES/parity/parity" >"$RES/parity/chunk$k.log" 2>&1 &
done
wait
# the report only from four finished chunks (without them this run would attack the missing ones itself)
if [ "$(grep -l 'adaptive@' "$RES"/parity/chunks/*.json 2>/dev/null | wc -l)" = 4 ]; then
  timeout -k 5 60 $PY benchmarks/autoattack_parity.py --card benchmarks/results/cards/fmnist_mixednuts.toml --n $N \
    --batch-size $BS --attack adaptive --device $DEV --chunk-dir "$RES/parity/chunks" --out "$RES/parity/parity" \
    >"$RES/parity/report.log" 2>&1
fi
tail -n 3 "$RES"/parity/*.log
}
[[ $STEPS == *2* ]] && {

log "2. adaptive smoothing setting C training time"
timeout -k 5 "$T_TRAIN" $PY benchmarks/adaptive_smoothing.py train --setting C --epochs 1 --n-train $NTRAIN --n-val 200 \
  --steps-lo 5 --steps-hi 10 --lr 1e-3 --device $DEV --threads 4 --no-progress --out "$RES/as_c" >"$RES/as_c.log" 2>&1
echo "rc $?" >>"$RES/as_c.log"
cp benchmarks/adaptive_smoothing.json "$RES/" 2>/dev/null
tail -n 5 "$RES/as_c.log"
}
[[ $STEPS == *3* ]] && {

log "3. MMAA vs pyautoattack, ConvNeXt-T"
timeout -k 5 "$T_MMAA" $PY benchmarks/mmaa_speed.py --model convnext-t "${CNX[@]}" --device $DEV --threads 4 \
  --json "$RES/mmaa_convnext.json" >"$RES/mmaa.log" 2>&1
echo "rc $?" >>"$RES/mmaa.log"
tail -n 3 "$RES/mmaa.log"
}
log done
