"""One deployable artifact of a mixed classifier: ONNX (``.onnx``) or torch.export (``.pt2``).

The artifact holds the whole classifier a card describes (both base models, their normalisation and the mixing,
in eval mode): float32 [0, 1] NCHW images in (any batch size), log-probabilities out; it runs without mixzoo
(onnxruntime, or ``torch.export.load(path).module()``). :func:`export` checks it before keeping it: on the first
``check_n`` evaluation images its outputs must equal mixzoo's (:func:`mixzoo.load_mixed`) to ``tolerance`` in
``numpy.allclose``'s sense, ``|a - b| <= tolerance * (1 + |b|)`` (log-probabilities near -20 carry the float32
rounding of another runtime's kernels: a Fashion-MNIST CNN's logits alone differ by 8.5e-6 between onnxruntime and
torch), with infinite log-probabilities of a hard-max ABC matched exactly, also at batch size 1; otherwise nothing
is written. A method whose classifier cannot be one artifact declares why (``MixingMethod.not_exportable``) and is
refused in one line. The card's provenance (method, base models and their weight hashes, dataset, threat model)
travels inside the artifact as metadata (ONNX ``metadata_props``; a ``mixzoo.json`` extra file of the ``.pt2``).
"""

from __future__ import annotations

import json
import os
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mixzoo.core.errors import InputError, MixzooError

FORMATS = {"onnx": ".onnx", "torch-export": ".pt2"}
INPUT_NAME, OUTPUT_NAME = "images", "log_probs"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
TOLERANCE = 1e-5
CHECK_N = 100


@dataclass
class ExportResult:
    """Where the artifact is, its format, and how its outputs compared with mixzoo's over ``n_checked`` evaluation
    images: the largest absolute difference of log-probabilities and the largest ``|a - b| / (1 + |b|)`` (finite
    entries; infinite ones matched exactly)."""

    path: Path
    format: str
    max_abs_diff: float
    max_scaled_diff: float
    n_checked: int
    input_size: tuple[int, ...]
    metadata: dict[str, Any]


def check_format(format: str) -> str:
    if format not in FORMATS:
        raise InputError(f"--format {format!r} is not an export format; choose {' or '.join(FORMATS)}")
    return format


def check_exportable(card: Any) -> None:
    """Refuse, in one line naming why, a card whose method declares its classifier cannot be one artifact."""
    method = card.mixing_method
    why = method.not_exportable
    if why:
        raise InputError(f"{method.title or method.name} cards cannot be exported: {why}")


def max_abs_diff(a: Any, b: Any, scaled: bool = False) -> float:
    """Largest absolute difference of two log-probability arrays (``scaled``: of ``|a - b| / (1 + |b|)``); infinite
    entries must be equal (else inf), and a NaN anywhere gives NaN."""
    import torch

    a, b = torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64)
    if a.shape != b.shape:
        return float("inf")
    if torch.isnan(a).any() or torch.isnan(b).any():
        return float("nan")
    inf = torch.isinf(a) | torch.isinf(b)
    if not torch.equal(a[inf], b[inf]):
        return float("inf")
    if not (~inf).any():
        return 0.0
    diff = (a[~inf] - b[~inf]).abs()
    return float((diff / (1 + b[~inf].abs()) if scaled else diff).max())


def run_artifact(path: str | Path, images: Any) -> Any:
    """The artifact's log-probabilities for ``images`` (a float32 NCHW tensor), as a torch tensor: ONNX through
    onnxruntime's CPU provider, ``.pt2`` through ``torch.export.load``; mixzoo is not involved."""
    import torch

    path = Path(path)
    if path.suffix == ".onnx":
        ort = _onnxruntime()
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        return torch.from_numpy(session.run([OUTPUT_NAME], {INPUT_NAME: images.cpu().numpy()})[0])
    if path.suffix == ".pt2":
        with torch.no_grad():
            return torch.export.load(str(path)).module()(images.cpu())
    raise InputError(f"{path} is neither .onnx nor .pt2")


def _onnxruntime() -> Any:
    try:
        import onnxruntime
    except ImportError:
        raise MixzooError("ONNX export needs onnx, onnxscript and onnxruntime; pip install 'mixzoo[export]'") from None
    return onnxruntime


def card_metadata(card: Any, input_size: tuple[int, ...]) -> dict[str, Any]:
    """What travels inside the artifact: the classifier's contract and the card's provenance."""
    from mixzoo.core import __version__

    return {"producer": f"mixzoo {__version__}", "method": card.method, "dataset": card.dataset,
            "abc": card.abc.get("name"), "abc_weight_hash": card.abc.get("weight_hash"),
            "rbc": card.rbc.get("name"), "rbc_weight_hash": card.rbc.get("weight_hash"),
            "threat_model": (card.attack or {}).get("norm"), "eps": (card.attack or {}).get("eps"),
            "input": f"float32 [0, 1] images, shape [batch, {', '.join(map(str, input_size))}]",
            "output": "log-probabilities, shape [batch, classes]", "card": card.summary()}


def _log_sigmoid(x: Any) -> Any:
    """``log(sigmoid(x)) = -softplus(-x)`` in ONNX. torch's exporter writes ``Log(Sigmoid(x))``, which is -inf in
    float32 below x = -17 or so and loses digits near 0 (1e-3 on adaptive smoothing's log-alphas); onnxruntime's
    Softplus is stable (within 3e-8 of torch over [-100, 100])."""
    from onnxscript import opset18 as op

    return op.Neg(op.Softplus(op.Neg(x)))


def _save_onnx(model: Any, example: Any, path: Path, metadata: dict[str, Any]) -> None:
    import torch

    _onnxruntime()
    import onnx

    batch = torch.export.Dim("batch", min=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (example,), str(path), input_names=[INPUT_NAME], output_names=[OUTPUT_NAME],
                          dynamic_shapes=({0: batch},), dynamo=True, external_data=False, verbose=False,
                          custom_translation_table={torch.ops.aten.log_sigmoid.default: _log_sigmoid})
    proto = onnx.load(str(path))
    if not proto.graph.input[0].type.tensor_type.shape.dim[0].dim_param:
        raise MixzooError("the ONNX exporter fixed the batch size at the example's; the classifier's module"
                          " specializes on the batch size (torch.export: 'Constraints violated (batch)')")
    for key, value in metadata.items():
        entry = proto.metadata_props.add()
        entry.key, entry.value = f"mixzoo.{key}", json.dumps(value) if not isinstance(value, str) else value
    onnx.save(proto, str(path))


def _save_torch_export(model: Any, example: Any, path: Path, metadata: dict[str, Any]) -> None:
    import torch

    batch = torch.export.Dim("batch", min=1)
    program = torch.export.export(model, (example,), dynamic_shapes=({0: batch},), strict=False)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="No complete tensor found")  # torch's note on CPU weights
        torch.export.save(program, str(path), extra_files={"mixzoo.json": json.dumps(metadata)})


def export(card: Any, format: str = "onnx", out: str | Path = ".", *, abc: Any = None, rbc: Any = None,
           check_n: int = CHECK_N, tolerance: float = TOLERANCE, data_dir: str | None = None,
           allow_unsafe: bool = False) -> ExportResult:
    """Export the mixed classifier of ``card`` (a card, its file, a published name or an ``hf-hub:`` id) as one
    ``format`` artifact (``onnx`` or ``torch-export``) into directory ``out``, named after the card; checked on
    ``check_n`` evaluation images (see the module docstring) before it is kept. ``abc`` / ``rbc`` replace the
    card's base models as in :func:`mixzoo.load_mixed`."""
    import torch

    from mixzoo.core.card import MixCard
    from mixzoo.zoo.data import load_dataset, model_options
    from mixzoo.zoo.pairs import card_dataset, load_mixed

    check_format(format)
    if not isinstance(check_n, int) or check_n < 1:
        raise InputError(f"check_n must be a positive number of images, got {check_n!r}")
    card = card if isinstance(card, MixCard) else MixCard.load(card)
    check_exportable(card)
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out} is a file; pass a directory")
    model = load_mixed(card, abc=abc, rbc=rbc, allow_unsafe=allow_unsafe).cpu().eval()
    data = load_dataset(card_dataset(card, model.rbc if hasattr(model, "rbc") else None), "evaluation", n=check_n,
                        root=data_dir, **model_options(getattr(model, "rbc", None), getattr(model, "abc", None)))
    images = data.images[:check_n]
    input_size = tuple(images.shape[1:])
    with torch.no_grad():
        reference = model(images)
    stem = card.path.stem if card.path is not None else card.method
    path = out / f"{stem}{FORMATS[format]}"
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / f".{path.name}.{os.getpid()}.tmp{FORMATS[format]}"
    metadata = card_metadata(card, input_size)
    try:
        save = _save_onnx if format == "onnx" else _save_torch_export
        try:
            save(model, images[:2].clone(), tmp, metadata)
        except MixzooError:
            raise
        except Exception as exc:  # noqa: BLE001 - a tracer's failure on a plugin's module becomes one line
            first = " ".join(_ANSI.sub("", str(exc)).split())[:240] or type(exc).__name__
            raise MixzooError(f"{format} could not trace the {card.method} classifier with a free batch size"
                              f" ({type(exc).__name__}: {first})") from None
        try:
            outputs = [(run_artifact(tmp, images), reference), (run_artifact(tmp, images[:1]), reference[:1])]
        except Exception as exc:  # noqa: BLE001 - the runtime's refusal of its own artifact, in one line
            first = " ".join(_ANSI.sub("", str(exc)).split())[:240] or type(exc).__name__
            raise MixzooError(f"the {format} artifact of the {card.method} classifier does not run on"
                              f" {len(images)} and 1 images ({type(exc).__name__}: {first}); nothing was written")\
                from None
        diff = max(max_abs_diff(a, b) for a, b in outputs)
        scaled = max(max_abs_diff(a, b, scaled=True) for a, b in outputs)
        if not scaled <= tolerance:
            raise MixzooError(f"the {format} artifact's log-probabilities differ from mixzoo's by {diff:.3g}"
                              f" (|a - b| / (1 + |b|) up to {scaled:.3g}, more than {tolerance:g}) on {len(images)}"
                              " evaluation images; nothing was written")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return ExportResult(path, format, diff, scaled, len(images), input_size, metadata)


__all__ = ["CHECK_N", "FORMATS", "TOLERANCE", "ExportResult", "check_exportable", "export", "max_abs_diff",
           "run_artifact"]
