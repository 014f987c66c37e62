"""A card's exported artifact run on a GPU against mixzoo's classifier on the same GPU.

    python benchmarks/gpu_export.py --card benchmarks/results/cards/fmnist_mixednuts.toml --device cuda --out DIR

``mixzoo.share.export.export`` writes the artifact (checked on the CPU against mixzoo's outputs before it is kept);
this then runs it on ``--device`` on the first ``--n`` evaluation images and compares with
``mixzoo.load_mixed(card, device=DEVICE)``: the largest absolute difference of the log-probabilities (finite entries;
infinite ones must match exactly), the same measure as the export check, and whether the predicted classes agree.
``torch-export`` (``.pt2``): ``torch.export.load(path).module()`` moved to the device; ``onnx``: onnxruntime with
the CUDA execution provider when the installed onnxruntime has it (else recorded as unavailable). One JSON object
per format is printed and written to ``DIR/gpu_export.json``.
"""

from __future__ import annotations

import argparse
import json
import time
import traceback
from pathlib import Path
from typing import Any

import torch


def run_pt2(path: Path, images: torch.Tensor, device: str) -> torch.Tensor:
    module = torch.export.load(str(path)).module().to(device)
    with torch.no_grad():
        return module(images.to(device)).float()


def run_onnx(path: Path, images: torch.Tensor) -> tuple[torch.Tensor, list[str]]:
    import onnxruntime as ort

    if "CUDAExecutionProvider" not in ort.get_available_providers():
        raise RuntimeError(f"onnxruntime {ort.__version__} has no CUDAExecutionProvider"
                           f" (providers: {ort.get_available_providers()})")
    sess = ort.InferenceSession(str(path), providers=["CUDAExecutionProvider"])
    name = sess.get_inputs()[0].name
    return torch.from_numpy(sess.run(None, {name: images.cpu().numpy()})[0]), sess.get_providers()


def compare(a: torch.Tensor, b: torch.Tensor) -> dict[str, Any]:
    from mixzoo.share.export import max_abs_diff

    a, b = a.cpu().double(), b.cpu().double()
    return {"max_abs_diff": max_abs_diff(a, b), "max_scaled_diff": max_abs_diff(a, b, scaled=True),
            "same_predictions": int((a.argmax(1) == b.argmax(1)).sum()), "n": len(a)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--card", default=str(Path(__file__).resolve().parent / "results/cards/fmnist_mixednuts.toml"))
    ap.add_argument("--formats", default="torch-export,onnx")
    ap.add_argument("--n", type=int, default=1000, help="evaluation images compared on the device")
    ap.add_argument("--check-n", type=int, default=100, help="images the export itself is checked on (CPU)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    from mixzoo.core.card import MixCard
    from mixzoo.share.export import export
    from mixzoo.zoo.data import load_dataset
    from mixzoo.zoo.pairs import card_dataset, load_mixed

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    card = MixCard.load(args.card)
    model = load_mixed(card, device=args.device)
    data = load_dataset(card_dataset(card, model.rbc if hasattr(model, "rbc") else None), "evaluation", n=args.n)
    images = data.images[:args.n]
    with torch.no_grad():
        reference = model(images.to(args.device)).float()
        cpu_reference = load_mixed(card).eval()(images).float()
    rows: list[dict[str, Any]] = [{"what": "mixzoo on the device vs mixzoo on the CPU", "device": args.device,
                                   **compare(reference, cpu_reference)}]
    print(json.dumps(rows[-1]), flush=True)
    for fmt in args.formats.split(","):
        row: dict[str, Any] = {"format": fmt, "device": args.device}
        try:
            t0 = time.perf_counter()
            res = export(card, format=fmt, out=out, check_n=args.check_n)
            row.update(path=res.path.name, export_seconds=time.perf_counter() - t0,
                       cpu_check={"max_abs_diff": res.max_abs_diff, "max_scaled_diff": res.max_scaled_diff,
                                  "n": res.n_checked})
            if fmt == "torch-export":
                got = run_pt2(res.path, images, args.device)
            else:
                got, providers = run_onnx(res.path, images)
                row["providers"] = providers
            row.update(compare(got, reference))
        except Exception as exc:  # noqa: BLE001 - recorded, the next format still runs
            row["error"] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:400]}"
            row["traceback"] = traceback.format_exc()[-2000:]
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "traceback"}), flush=True)
    (out / "gpu_export.json").write_text(json.dumps({"card": args.card, "torch": torch.__version__,
                                                     "cuda": torch.version.cuda, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
