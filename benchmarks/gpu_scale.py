"""Images per second of the two attacks a MixedNUTS evaluation spends its time in, and peak GPU memory: MMAA on the
RBC (paper 000 App. B.1, Algorithm 1's calibration data) and an evaluation attack (default ``adaptive``, App.
B.2.1) on the mixed classifier; from them an ESTIMATE of a full ImageNet evaluation on 1 and on 8 GPUs.

    python benchmarks/gpu_scale.py measure --pair fmnist --n 250 --device cuda --json fmnist.json
    python benchmarks/gpu_scale.py measure --pair imagenet --n 16 --n-iter 5 --n-queries 50 --device cuda \\
        --json imagenet.json
    python benchmarks/gpu_scale.py estimate imagenet.json --images 5000 --gpus 1,8 --json estimate.json

Pairs (``--pair``):

* ``fmnist``: the Fashion-MNIST card ``benchmarks/results/cards/fmnist_mixednuts.toml`` (fmnist-std + fmnist-pgd,
  trained weights) on the first ``--n`` evaluation images at the card's threat model: real outcomes, real early
  stopping.
* ``imagenet``: timm's ConvNeXt V2-L (ABC) and Swin-L (RBC, ``swin_large_patch4_window7_224``) with random weights
  at 224 px behind ImageNet normalisation, mixed with the published ImageNet card's parameters
  (``plugins/cards/mixednuts-imagenet.toml``: s, p, c, alpha, top-250 layer norm), on uniform random images
  labelled with the mixture's own predictions, at eps 1e-4 so that (nearly) no image breaks: every image goes
  through every component, the cost of an image that stays robust (per image, an upper bound of a real run, where
  broken images leave the pipeline early). Random weights make only timings meaningful.

``measure`` times, each after a warm-up forward pass: a no-grad forward pass of the mixture, MMAA on the RBC
(``--n-iter`` iterations, ``--targets`` target classes) and the attack (``--n-iter`` for APGD and FAB,
``--n-queries`` for Square, all other options at their defaults) through ``mixzoo.core.plugins.lookup("attack",
NAME)``, the object ``mixzoo bench`` runs per batch (without its cache and report writing). Each phase records its
wall time, images per second, peak ``torch.cuda.max_memory_allocated`` and its start/end Unix times (to match
``nvidia-smi`` samples). With fewer iterations than the defaults (APGD/FAB 100, Square 5,000, MMAA 100) the
per-component seconds are also scaled linearly to the defaults, labelled ``scaled_to_defaults`` (an estimate: the
per-iteration cost is taken as constant and fixed costs are scaled too).

``--precision`` runs the attack under a precision policy (``float32``, ``tf32``, ``bf16``, ``auto``;
:mod:`mixzoo.attacks.precision`, every break confirmed in float32; MMAA stays float32) and ``--batch-size auto``
picks the batch from the GPU's free memory (:func:`mixzoo.attacks.memory.auto_batch_size`); both are recorded,
with the policy each resolved to.

``estimate`` turns an ``imagenet`` measurement into the labelled ESTIMATE of the paper's ImageNet evaluation:
``--images`` images, the full attack, ``--batch-size`` images per batch; on G GPUs the batches are shared
round-robin (``mixzoo bench`` under ``torchrun``), so the time is ceil(batches / G) batches, each costing
``--batch-size`` times the per-image time measured at the measurement's batch size; MMAA on the
calibration images (``--calib``) runs once, in one process, before the evaluation.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time
from pathlib import Path
from typing import Any

import torch

from mixzoo.attacks.apgd import ApgdSettings

ROOT = Path(__file__).resolve().parent.parent
FMNIST_CARD = ROOT / "benchmarks/results/cards/fmnist_mixednuts.toml"
IMAGENET_CARD = ROOT / "plugins/cards/mixednuts-imagenet.toml"
DEFAULT_ITERS = {"n_iter": 100, "n_queries": 5000}
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


class Phase:
    """Wall time, Unix start/end and peak GPU memory of one block."""

    def __init__(self, device: str):
        self.device = device
        self.row: dict[str, Any] = {}

    def __enter__(self) -> Phase:
        sync(self.device)
        if self.device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats()
        self.row["unix_start"] = time.time()
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        sync(self.device)
        self.row["seconds"] = time.perf_counter() - self.t0
        self.row["unix_end"] = time.time()
        if self.device.startswith("cuda"):
            self.row["peak_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30


def fmnist_pair(n: int, device: str) -> tuple[Any, Any, torch.Tensor, torch.Tensor, float, str]:
    """(mixture, RBC, images, labels, eps, norm) of the Fashion-MNIST card."""
    from mixzoo.core.card import MixCard
    from mixzoo.zoo.data import load_dataset
    from mixzoo.zoo.pairs import load_mixed

    card = MixCard.load(FMNIST_CARD)
    mix = load_mixed(card, device=device)
    data = load_dataset("fashion-mnist", "evaluation", n=n)
    return mix, mix.rbc, data.images.to(device), data.labels.to(device), float(card.attack["eps"]), card.attack["norm"]


def imagenet_pair(n: int, device: str, archs: tuple[str, str] = ("convnextv2_large", "swin_large_patch4_window7_224")
                  ) -> tuple[Any, Any, torch.Tensor, torch.Tensor, float, str]:
    """(mixture, RBC, images, labels, eps, norm): random-weight ConvNeXt V2-L + Swin-L with the ImageNet card's
    mixing parameters, images labelled with the mixture's predictions, eps 1e-4."""
    import tomllib

    from torch import nn

    from mixzoo.core.compat import import_timm
    from mixzoo.methods.mixednuts.mixing import MixedClassifier, MixingParams
    from mixzoo.zoo.models import Normalize, freeze

    timm = import_timm()
    torch.manual_seed(0)

    def net(name: str) -> nn.Module:
        return freeze(nn.Sequential(Normalize(IMAGENET_MEAN, IMAGENET_STD),
                                    timm.create_model(name, pretrained=False)).to(device))

    p = tomllib.loads(IMAGENET_CARD.read_text())["mixednuts"]
    mix = MixedClassifier(net(archs[0]), net(archs[1]), MixingParams(
        s=p["s"], p=p["p"], c=p["c"], alpha=p["alpha"], clamp=p["clamp"], temperature=p["temperature"],
        top_k=p["top_k"])).eval()
    x = torch.rand(n, 3, 224, 224, generator=torch.Generator().manual_seed(0)).to(device)
    with torch.no_grad():
        y = torch.cat([mix(c).argmax(1) for c in x.split(16)])
    return mix, mix.rbc, x, y, 1e-4, "Linf"


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from mixzoo.attacks import mmaa
    from mixzoo.core.machine import machine_line, run_record
    from mixzoo.core.plugins import lookup

    dev = args.device
    torch.set_num_threads(args.threads)
    with Phase(dev) as build:
        if args.pair == "fmnist":
            mix, rbc, x, y, eps, norm = fmnist_pair(args.n, dev)
        else:
            mix, rbc, x, y, eps, norm = imagenet_pair(args.n, dev, (args.abc_arch, args.rbc_arch))
    from mixzoo.attacks.memory import auto_batch_size, parse_batch_size
    from mixzoo.attacks.precision import check_precision_device

    n = len(y)
    policy = None if args.batch_size is None else parse_batch_size(args.batch_size)
    if policy == "auto":  # one APGD step's memory per image of the mixture, the rows that fit in the free memory
        bs = auto_batch_size(getattr(mix, "forward_pair", mix), x[:2], y[:2], n=n)
    else:
        bs = policy or n
    precision = check_precision_device(args.precision, dev)  # "auto" resolved for the device
    archs = None if args.pair == "fmnist" else [args.abc_arch, args.rbc_arch]
    out: dict[str, Any] = {"pair": args.pair, "archs": archs, "n": n, "batch_size": bs,
                           "batch_size_policy": policy or "all", "precision": precision,
                           "precision_policy": args.precision, "mmaa_precision": "float32", "eps": eps, "norm": norm,
                           "device": dev, "machine": machine_line(run_record(dev)), "torch": torch.__version__,
                           "cuda": torch.version.cuda, "python": platform.python_version(),
                           "gpu": torch.cuda.get_device_name(0) if dev.startswith("cuda") else None,
                           "build": build.row, "phases": {}}
    with torch.no_grad():
        mix(x[:2])  # warm-up (cuDNN autotuning, lazy init)
        with Phase(dev) as fwd:
            for c in x.split(bs):
                mix(c)
    out["phases"]["forward"] = {**fwd.row, "images_per_s": n / fwd.row["seconds"]}
    print(json.dumps({"forward": out["phases"]["forward"]}), flush=True)

    if not args.skip_mmaa:
        with Phase(dev) as ph:
            res = mmaa(rbc, x, y,
                       ApgdSettings(eps=eps, norm=norm, n_iter=args.mmaa_iter, n_target_classes=args.targets),
                       batch_size=bs, progress=False, top_k=getattr(mix, "top_k", None))
        factor = DEFAULT_ITERS["n_iter"] * 10 / (args.mmaa_iter * (1 + args.targets))  # APGD-CE + 9 x APGD-T
        out["phases"]["mmaa"] = {**ph.row, "n_iter": args.mmaa_iter, "n_target_classes": args.targets,
                                 "images_per_s": n / ph.row["seconds"],
                                 "flipped": int(res.misclassified.sum()),
                                 "scaled_to_defaults": {"label": "ESTIMATE (linear in iterations x (1 + targets))",
                                                        "seconds": ph.row["seconds"] * factor,
                                                        "images_per_s": n / (ph.row["seconds"] * factor)}}
        print(json.dumps({"mmaa": out["phases"]["mmaa"]}), flush=True)

    opts = {"batch_size": bs}
    if args.n_iter is not None:
        opts["n_iter"] = args.n_iter
    if args.n_queries is not None:
        opts["n_queries"] = args.n_queries
    attack = lookup("attack", args.attack)(eps=eps, norm=norm, seed=0, **opts)
    used = {k: int(attack.options.get(k, v)) for k, v in DEFAULT_ITERS.items()}
    with Phase(dev) as ph:
        res = attack.run(mix, x, y, progress=False, index=torch.arange(n), precision=precision)
    comps, scaled_total = [], 0.0
    for c in res.components:
        key = "n_queries" if c.name == "square" else "n_iter"
        scaled = c.seconds * DEFAULT_ITERS[key] / used[key]
        scaled_total += scaled
        comps.append({"name": c.name, "newly_broken": int(c.newly_broken), "seconds": c.seconds,
                      "scaled_to_defaults_s": scaled})
    clean_s = ph.row["seconds"] - sum(c.seconds for c in res.components)
    scaled_total += clean_s
    out["phases"]["attack"] = {
        **ph.row, "attack": args.attack, "options": attack.options, "images_per_s": n / ph.row["seconds"],
        "clean_correct": int(res.clean_correct.sum()), "robust": int(res.robust_correct.sum()),
        "components": comps, "warnings": list(res.warnings)[:10],
        "scaled_to_defaults": {"label": "ESTIMATE (each component linear in its iterations / queries)",
                               "seconds": scaled_total, "images_per_s": n / scaled_total,
                               "seconds_per_image": scaled_total / n}}
    print(json.dumps({"attack": {k: v for k, v in out["phases"]["attack"].items() if k != "options"}}), flush=True)
    return out


def estimate(args: argparse.Namespace) -> dict[str, Any]:
    m = json.loads(Path(args.measurement).read_text())
    att = m["phases"]["attack"]
    per_image = att["scaled_to_defaults"]["seconds_per_image"]
    components = {c["name"]: c["scaled_to_defaults_s"] / m["n"] for c in att["components"]}
    per_batch = per_image * args.batch_size
    batches = math.ceil(args.images / args.batch_size)
    mmaa_s = None
    if "mmaa" in m["phases"]:
        mm = m["phases"]["mmaa"]["scaled_to_defaults"]
        mmaa_s = args.calib / mm["images_per_s"]
    rows = []
    for g in (int(v) for v in args.gpus.split(",")):
        evaluation = math.ceil(batches / g) * per_batch
        rows.append({"gpus": g, "evaluation_hours": evaluation / 3600,
                     "calibration_mmaa_hours": None if mmaa_s is None else mmaa_s / 3600,
                     "total_hours": (evaluation + (mmaa_s or 0.0)) / 3600})
    out = {"label": "ESTIMATE", "basis": (
        f"{m['pair']} pair {m.get('archs')}, {m['n']} images at eps {m['eps']} (every image attacked by every"
        f" component: an upper bound per image), {att['attack']} with options {att['options']},"
        f" component times scaled linearly to"
        f" {DEFAULT_ITERS}; batch {m['batch_size']} ({m.get('batch_size_policy', 'all')}), precision"
        f" {m.get('precision', 'float32')} (policy {m.get('precision_policy', 'float32')});"
        f" {m['gpu'] or m['device']}, torch {m['torch']}, CUDA {m['cuda']}"),
        "images": args.images, "batch_size": args.batch_size, "calibration_images": args.calib,
        "seconds_per_image_one_gpu": per_image, "seconds_per_image_by_component": components, "rows": rows}
    print(json.dumps(out, indent=1))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    me = sub.add_parser("measure")
    me.add_argument("--pair", choices=("fmnist", "imagenet"), default="fmnist")
    me.add_argument("--n", type=int, default=250)
    me.add_argument("--batch-size", default=None,
                    help="images per batch, or auto (mixzoo.attacks.memory.auto_batch_size; default: all --n at once)")
    me.add_argument("--precision", default="float32",
                    help="the attack's precision policy: float32, tf32, bf16 or auto (MMAA runs in float32)")
    me.add_argument("--attack", default="adaptive")
    me.add_argument("--n-iter", type=int, default=None, help="APGD / FAB iterations (default: the attack's, 100)")
    me.add_argument("--n-queries", type=int, default=None, help="Square queries (default: the attack's, 5000)")
    me.add_argument("--mmaa-iter", type=int, default=100)
    me.add_argument("--targets", type=int, default=9)
    me.add_argument("--skip-mmaa", action="store_true")
    me.add_argument("--abc-arch", default="convnextv2_large", help="imagenet pair: timm name of the ABC")
    me.add_argument("--rbc-arch", default="swin_large_patch4_window7_224", help="imagenet pair: timm name of the RBC")
    me.add_argument("--device", default="cpu")
    me.add_argument("--threads", type=int, default=4)
    me.add_argument("--json", required=True)
    es = sub.add_parser("estimate")
    es.add_argument("measurement")
    es.add_argument("--images", type=int, default=5000)
    es.add_argument("--calib", type=int, default=1000, help="calibration images MMAA attacks")
    es.add_argument("--batch-size", type=int, default=50,
                    help="images per batch of the full run (GPU memory bounds it on large models)")
    es.add_argument("--gpus", default="1,8")
    es.add_argument("--json", required=True)
    args = ap.parse_args()
    result = measure(args) if args.cmd == "measure" else estimate(args)
    Path(args.json).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
