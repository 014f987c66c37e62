"""The files and card fields of a trained mixing network, shared by the methods that train one (adaptive smoothing,
``local-smoothing-adaptive``): where the weights and the training checkpoint go next to the card, the train split,
the card's ``network`` and ``taps`` records and the network rebuilt from them."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mixzoo.core.errors import InputError
from mixzoo.core.options import OptionSpec
from mixzoo.methods.base import MixingMethod, weight_hashes

if TYPE_CHECKING:
    from torch import nn

    from mixzoo.core.card import MixCard
    from mixzoo.methods.base import FitRequest

# the fit options of the train split and of resuming a training, the same for every method that trains a network
SPLIT_OPTIONS = {
    "n_train": OptionSpec("train-split images used (the last n_val of them are held out for validation)", int,
                          default_note="all"),
    "n_val": OptionSpec("train-split images held out for the per-epoch validation", int, 200, low=0)}
RESUME_OPTIONS = {
    "resume": OptionSpec("resume from the checkpoint next to the card", bool, True),
    "checkpoint_every": OptionSpec("batches between mid-epoch checkpoints (0 = after each epoch only)", int, 50,
                                   low=0)}


class NetworkMethod(MixingMethod):
    """A method whose card holds a trained mixing network: :meth:`validate` checks the method's own fields
    (:meth:`section_fields`) then the network's (:func:`check_network_fields`); :meth:`key_parts` is
    :meth:`key_values` and the weight files' hashes; :meth:`network` is the card's network (:func:`load_network`)."""

    def section_fields(self, params: dict[str, Any], source: str, sec: str) -> None:
        """Check the method's own fields of the section ``sec`` in place (:meth:`MixingMethod.validate`)."""
        raise NotImplementedError

    def validate(self, params: dict[str, Any], source: str) -> dict[str, Any]:
        self.section_fields(params, source, self.name)
        return check_network_fields(params, source, self.name)

    def key_values(self, card: MixCard) -> dict[str, Any]:
        """The card's values a cached evaluation depends on, besides the weights."""
        raise NotImplementedError

    def key_parts(self, card: MixCard) -> dict[str, Any]:
        return {**self.key_values(card), "weights": weight_hashes(card)}

    def network(self, card: MixCard) -> Any:
        """The trained mixing network of a card (its weight file checked against the card's sha256)."""
        return load_network(card)


def check_network_fields(params: dict[str, Any], source: str, sec: str) -> dict[str, Any]:
    """``params`` with the card fields of a trained mixing network (``weights_file``, ``network``, ``taps``) and the
    extra attacks' budgets (``eval_n_iter``, ``eval_n_queries``, ``eval_n_target_classes``) checked; one-line errors
    naming the field."""
    if not isinstance(params.get("weights_file"), str) or not params["weights_file"]:
        raise InputError(f"{source}: missing field '{sec}.weights_file'; write the card with `mixzoo mix`")
    net = params.get("network")
    keys = ("early_channels", "middle_channels", "width", "blocks")
    if not isinstance(net, dict) or any(k not in net for k in keys) or not all(
            isinstance(net[k], list) and len(net[k]) == 2 for k in keys[:2]):
        raise InputError(f"{source}: field '{sec}.network' must record {', '.join(keys)}; write the card with"
                         " `mixzoo mix`")
    taps = params.get("taps")
    if not isinstance(taps, dict) or any(not isinstance(taps.get(r), dict) or not {"early", "middle"} <= set(
            taps[r]) for r in ("abc", "rbc")):
        raise InputError(f"{source}: field '{sec}.taps' must record abc and rbc taps (early, middle)")
    for key, default, low in (("eval_n_iter", 100, 1), ("eval_n_queries", 5000, 1),
                              ("eval_n_target_classes", 9, 0)):
        v = params.setdefault(key, default)
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise InputError(f"{source}: field '{sec}.{key}' must be an integer >= {low}, got {v!r}")
    return params


def load_network(card: MixCard) -> Any:
    """A card's trained mixing network (``network`` architecture, ``weights_file`` checked against its sha256),
    frozen, in eval mode."""
    from mixzoo.core.errors import damaged_file
    from mixzoo.core.paths import read_safetensors
    from mixzoo.methods.shared.network import MixingNetwork

    arch = card.params["network"]
    net = MixingNetwork(arch["early_channels"], arch["middle_channels"], width=int(arch["width"]),
                        blocks=int(arch["blocks"]))
    file = card.weight_file(card.params["weights_file"])
    refit = "fit the card again with `mixzoo mix`, or restore the file written with it"
    try:
        net.load_state_dict(read_safetensors(file, fix=refit))
    except RuntimeError as exc:  # keys or shapes of another network
        raise damaged_file(file, f"does not hold the card's mixing network ({str(exc).splitlines()[0]})", refit)\
            from None
    return net.eval().requires_grad_(False)


def card_taps(abc: nn.Module, rbc: nn.Module, card: MixCard) -> tuple[Any, Any]:
    """The taps the card's network was trained on, as recorded, checked against the models (one-line errors)."""
    from mixzoo.methods.shared.taps import Taps, check_taps

    out = []
    for role, model in (("abc", abc), ("rbc", rbc)):
        rec = card.params["taps"][role]
        out.append(check_taps(model, Taps(rec["early"], rec["middle"], bool(rec.get("nhwc", False))), role.upper()))
    return out[0], out[1]


def check_training_outputs(out: Path) -> None:
    """Refuse, before training starts, what a trained method would write next to the card ``out`` over a file
    mixzoo did not write: the network's weights (``STEM.mixing-network.safetensors``, a safetensors file) and the
    resumable checkpoint (``STEM.training.pt``, a torch zip archive); a FIFO, directory or link at either path is
    refused too (:func:`mixzoo.core.paths.check_output`)."""
    import zipfile

    from mixzoo.core.paths import check_output, is_safetensors

    check_output(out.with_name(f"{out.stem}.mixing-network.safetensors"), ours=is_safetensors,
                 what="the mixing network's weights mixzoo wrote")
    check_output(out.with_name(f"{out.stem}.training.pt"), ours=zipfile.is_zipfile,
                 what="a training checkpoint mixzoo wrote")


def save_network(state: dict[str, Any], out: Path) -> tuple[str, str]:
    """Write trained weights next to the card ``out`` (safetensors, atomically, with an ordinary file's permissions);
    (file name, sha256)."""
    from mixzoo.core.cache import atomic_save_tensors

    name = f"{out.stem}.mixing-network.safetensors"
    path = atomic_save_tensors(out.with_name(name), state)
    return name, hashlib.sha256(path.read_bytes()).hexdigest()


def training_out(request: FitRequest, writes: str) -> Path:
    """The card path a trained method writes to (rank 0's ``out`` under torchrun: every rank needs the checkpoint's
    path), checked as a card path with nothing foreign where its weights and checkpoint go; ``writes`` says what a
    missing ``out`` leaves nowhere to go (e.g. "adaptive-smoothing writes its network's weights")."""
    from mixzoo.core import distributed
    from mixzoo.core.card import MixCard

    given = distributed.gather(None if request.out is None else str(request.out))[0]
    if given is None:
        raise InputError(f"{writes} next to the card; pass out= (--out)")
    out = Path(given)
    MixCard.check_path(out)
    check_training_outputs(out)
    return out


def check_n_train(n_train: int | None, n_val: int, method: str) -> None:
    """``n_train`` leaves at least one training image besides the ``n_val`` held out (one-line error otherwise)."""
    if n_train is not None and n_train < n_val + 1:
        raise InputError(f"option n_train of {method} must be an integer >= {n_val + 1} (n_val + 1), got"
                         f" {n_train!r}")


def train_split(pair: Any, n_train: int | None, n_val: int, request: FitRequest) -> tuple[Any, Any, Any, int]:
    """The first ``n_train`` train-split images (all if ``None``) of the pair's data set: ``(data, images, labels,
    split)`` with images and labels on the request's device; the last ``n_val`` (from ``split`` on) are held out for
    the per-epoch validation."""
    import torch

    from mixzoo.zoo.data import load_dataset

    data = load_dataset(pair.dataset, "train", n=n_train, root=request.data_dir)
    if len(data) <= n_val:
        raise InputError(f"the {pair.dataset} train split has {len(data)} images, not more than n_val={n_val}")
    device = torch.device(request.device)
    return data, data.images.to(device), data.labels.to(device), len(data) - n_val


def training_checkpoint(out: Path, resume: bool) -> Path:
    """The training checkpoint next to the card ``out``; deleted first (by rank 0, before any rank reads it) when
    ``resume`` is false."""
    from mixzoo.core import distributed

    ckpt = out.with_name(f"{out.stem}.training.pt")
    if not resume and distributed.world().main:
        ckpt.unlink(missing_ok=True)
    distributed.barrier()  # no rank reads a checkpoint that rank 0 is about to delete
    return ckpt


def network_record(pair: Any, image_size: tuple[int, ...], width: int, blocks: int) -> dict[str, Any]:
    """The card's ``network`` (channels at the taps of both models, width, blocks) and ``taps`` fields, from which
    :func:`load_network` rebuilds the network."""
    from mixzoo.methods.shared.taps import model_taps, tap_shapes

    taps = {"abc": model_taps(pair.abc, "ABC"), "rbc": model_taps(pair.rbc, "RBC")}
    sg, sh = tap_shapes(pair.abc, taps["abc"], image_size), tap_shapes(pair.rbc, taps["rbc"], image_size)
    return {"network": {"early_channels": [sg["early"][0], sh["early"][0]],
                        "middle_channels": [sg["middle"][0], sh["middle"][0]], "width": width, "blocks": blocks},
            "taps": {r: {"early": t.early, "middle": t.middle, "nhwc": t.nhwc} for r, t in taps.items()}}


def network_params(pair: Any, data: Any, cfg: Any, res: Any, out: Path, training: dict[str, Any],
                   opts: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """The trained weights ``res.state`` written next to the card ``out`` (:func:`save_network`), and the card fields
    every trained method writes after its own: ``weights_file``, ``network`` and ``taps`` (:func:`network_record`),
    ``training``, ``history``, the extra attacks' budgets and ``epochs``; ``(fields, {weights file: sha256})``."""
    weights_name, digest = save_network(res.state, out)
    return {"weights_file": weights_name, **network_record(pair, tuple(data.images.shape[1:]), cfg.width, cfg.blocks),
            "training": training, "history": res.history,
            **{k: opts[k] for k in ("eval_n_iter", "eval_n_queries", "eval_n_target_classes")},
            "epochs": cfg.epochs}, {weights_name: digest}


def train_on_split(pair: Any, cfg: Any, objective: Any, images: Any, labels: Any, split: int, n_val: int, *,
                   out: Path, request: FitRequest, opts: dict[str, Any]) -> Any:
    """Train ``objective``'s network on the first ``split`` train-split images, validating on the rest when
    ``n_val``, with the checkpoint next to the card ``out`` (resumed unless option ``resume`` is false) and the
    options ``checkpoint_every``; the :class:`~mixzoo.methods.shared.training_loop.TrainResult`."""
    from mixzoo.methods.shared.training_loop import TrainRun, train

    ckpt = training_checkpoint(out, bool(opts.get("resume", True)))
    return train(pair.abc, pair.rbc, images[:split], labels[:split], cfg, objective=objective, run=TrainRun(
        val=(images[split:], labels[split:]) if n_val else None, checkpoint=ckpt, progress=request.progress,
        checkpoint_every=opts["checkpoint_every"]))


def trained_card(name: str, params: dict[str, Any], pair: Any, data: Any, split: int, n_val: int, *,
                 attack: dict[str, Any], weights: dict[str, str], request: FitRequest, out: Path) -> MixCard:
    """The card of a trained method, saved to ``out`` (``card.path``): the pair, the train split it was trained on
    (``split`` images, ``n_val`` more held out), ``attack`` and the ``weights`` file's sha256."""
    from mixzoo.core.card import MixCard, provenance

    card = MixCard(name, params, abc=pair.info("abc"), rbc=pair.info("rbc"), dataset=pair.dataset,
                   data={"split": "train", "n": split, "n_val": n_val, "fingerprint": data.fingerprint,
                         "source": getattr(data, "source", "")},
                   attack=attack, weights=weights, provenance=provenance(command=request.provenance_command))
    card.path = card.save(out)
    return card
