"""One deployable artifact of a mixed classifier: ONNX (``.onnx``) or torch.export (``.pt2``).

The artifact holds the whole classifier a card describes (both base models, their normalisation and the mixing,
in eval mode): float32 [0, 1] NCHW images in (any batch size), log-probabilities out, run without mixzoo
(onnxruntime, or ``torch.export.load(path).module()``). :func:`export` keeps it only when, on the first ``check_n``
evaluation images and on the first alone, its largest difference from mixzoo's log-probabilities, divided by their
spread (the standard deviation of all their finite entries, :func:`spread_diff`), is at most ``tolerance``, and
infinite entries (a hard-max ABC) match exactly. Another runtime's kernels round float32 differently (a
Fashion-MNIST CNN's logits alone differ by 8.5e-6 between onnxruntime and torch), and a mixture that normalises its
RBC's logits (MixedNUTS's layer norm) scales that rounding up by the inverse of their spread; measured against the
outputs' own spread, the check is the same for sharp and for nearly uniform classifiers. A method whose classifier
cannot be one artifact says why (``MixingMethod.not_exportable``) and is refused in one line. The card's provenance
(method, base models and their weight hashes, dataset, threat model) travels inside the artifact (ONNX
``metadata_props``; a ``mixzoo.json`` extra file of the ``.pt2``).
"""

from __future__ import annotations

import contextlib
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
# the check's default: the largest difference at most 1e-4 of the outputs' spread (float32 rounding of trained digits
# and Fashion-MNIST pairs stays near 1e-6 of it; random weights, whose nearly uniform outputs have a small spread,
# near 3e-5)
TOLERANCE = 1e-4
CHECK_N = 100
ONNX_MODULES = ("onnx", "onnxruntime", "onnxscript")  # the `export` extra, for --format onnx


@dataclass
class ExportResult:
    """Where the artifact is, its format, and how its outputs compared with mixzoo's over ``n_checked`` evaluation
    images: the largest absolute difference of log-probabilities and that difference over ``spread``, which the
    check compares with ``tolerance`` (see the module docstring)."""

    path: Path
    format: str
    max_abs_diff: float
    max_scaled_diff: float
    n_checked: int
    input_size: tuple[int, ...]
    metadata: dict[str, Any]
    spread: float = 1.0
    tolerance: float = TOLERANCE


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


def spread_of(reference: Any) -> float:
    """The spread the check measures differences against: the standard deviation of ``reference``'s finite entries
    (all images and classes together), or 1 where they are constant or fewer than two."""
    import torch

    b = torch.as_tensor(reference, dtype=torch.float64)
    finite = b[torch.isfinite(b)]
    spread = float(finite.std()) if finite.numel() > 1 else 0.0
    return spread if spread > 0 else 1.0


def spread_diff(a: Any, b: Any, spread: float | None = None) -> float:
    """The largest ``|a - b|`` (:func:`max_abs_diff`: infinite entries must match, else inf; NaN gives NaN)
    divided by ``spread`` (default :func:`spread_of` ``b``): the difference in units of the outputs' own spread."""
    return max_abs_diff(a, b) / (spread_of(b) if spread is None else spread)


def check_onnx_modules(find_spec: Any = None) -> None:
    """Refuse ``--format onnx`` in one line, before anything loads, when a module of the ``export`` extra is
    missing (``importlib.util.find_spec``: nothing is imported)."""
    import importlib.util

    find = find_spec or importlib.util.find_spec
    missing = [name for name in ONNX_MODULES if find(name) is None]
    if missing:
        raise MixzooError(f"ONNX export needs {', '.join(ONNX_MODULES)} ({', '.join(missing)} missing);"
                          " pip install 'mixzoo[export]'")


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
    ``check_n`` evaluation images (see the module docstring: the largest difference over the outputs' spread at
    most ``tolerance``) before it is kept. ``abc`` / ``rbc`` replace the card's base models as in
    :func:`mixzoo.load_mixed`. A missing ONNX module is refused before anything loads."""
    import torch

    from mixzoo.core.card import MixCard
    from mixzoo.zoo.data import load_dataset, model_options
    from mixzoo.zoo.pairs import card_dataset, load_mixed

    check_format(format)
    if not isinstance(check_n, int) or isinstance(check_n, bool) or check_n < 1:
        raise InputError(f"check_n must be a positive number of images, got {check_n!r}")
    if isinstance(tolerance, bool) or not isinstance(tolerance, int | float) or not tolerance > 0 \
            or tolerance == float("inf"):
        raise InputError(f"--tolerance must be a positive number, got {tolerance!r} (e.g. --tolerance 1e-4)")
    if format == "onnx":
        check_onnx_modules()
    card = card if isinstance(card, MixCard) else MixCard.load(card)
    check_exportable(card)
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out} is a file; pass a directory")
    from mixzoo.core.paths import check_output, holding

    stem = card.path.stem if card.path is not None else card.method
    check_output(out, directory=True, files={f"{stem}{FORMATS[format]}": holding(b"mixzoo")})
    model = load_mixed(card, abc=abc, rbc=rbc, allow_unsafe=allow_unsafe).cpu().eval()
    data = load_dataset(card_dataset(card, model.rbc if hasattr(model, "rbc") else None), "evaluation", n=check_n,
                        root=data_dir, **model_options(getattr(model, "rbc", None), getattr(model, "abc", None)))
    images = data.images[:check_n]
    input_size = tuple(images.shape[1:])
    with torch.no_grad():
        reference = model(images)
    path = out / f"{stem}{FORMATS[format]}"
    created = [p for p in (out, *out.parents) if not p.exists()]  # removed again if nothing is written
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
        spread = spread_of(reference)
        diff = max(max_abs_diff(a, b) for a, b in outputs)
        scaled = max(spread_diff(a, b, spread) for a, b in outputs)
        if not scaled <= tolerance:
            raise MixzooError(f"the {format} artifact's log-probabilities differ from mixzoo's by {diff:.3g},"
                              f" {scaled:.3g} of their spread (std {spread:.3g}), more than --tolerance"
                              f" {tolerance:g}, on {len(images)} evaluation images; nothing was written")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
        if not path.exists():  # a failed export leaves no empty folder behind
            for folder in created:
                with contextlib.suppress(OSError):
                    folder.rmdir()
    return ExportResult(path, format, diff, scaled, len(images), input_size, metadata, spread, float(tolerance))

