"""What the methods that train a mixing network share (adaptive smoothing, ``local-smoothing-adaptive``): the fit
(train split, checkpoint and weights next to the card), the card's ``network`` and ``taps`` records and the network
rebuilt from them."""

from __future__ import annotations

import hashlib
import time
import zipfile
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from mixzoo.core.errors import InputError
from mixzoo.core.options import OptionSpec
from mixzoo.methods.base import FitResult, MixingMethod, weight_hashes

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
    :meth:`key_values` and the weight files' hashes; :meth:`network` is the card's network (:func:`load_network`);
    :meth:`fit` trains :meth:`objective` on the train split and writes the weights and the card."""

    weights_of: ClassVar[str] = "network"  # what the weights file holds, as the error messages name it
    record_keys: ClassVar[tuple[str, ...]] = ()  # config fields of the card's ``training``, besides eps, norm, seed
    summary_keys: ClassVar[tuple[str, ...]] = ()  # card fields the fit summary repeats first

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

    def objective(self) -> Any:
        """The :class:`~mixzoo.methods.shared.training_loop.Objective` that :meth:`fit` trains."""
        raise NotImplementedError

    def config(self, opts: dict[str, Any], seed: int) -> Any:
        """The objective's config (``Objective.config``) from the checked fit options that name its fields, checked
        (``eps`` a placeholder until the pair's threat model is known)."""
        from dataclasses import fields

        kind = self.objective().config
        cfg = kind(**{f.name: opts[f.name] for f in fields(kind) if f.name in opts}, seed=int(seed))
        cfg.eps = 1.0
        return cfg.check()

    def prepare(self, pair: Any, cfg: Any, opts: dict[str, Any], seconds: dict[str, float]) -> Any:
        """What the method measures on the pair before training (timed in ``seconds``); given to
        :meth:`card_fields` and :meth:`finish`. Default: nothing."""
        return None

    def card_fields(self, cfg: Any, opts: dict[str, Any], prepared: Any) -> dict[str, Any]:
        """The method's card fields, written before the network's."""
        raise NotImplementedError

    def finish(self, params: dict[str, Any], pair: Any, prepared: Any, *, weights: dict[str, str], out: Path,
               opts: dict[str, Any], request: FitRequest, seconds: dict[str, float]) -> dict[str, Any]:
        """Complete ``params`` (the card's fields) in place once the weights are written; what the fit summary adds
        at its end. Default: nothing."""
        return {}

    def training_record(self, cfg: Any) -> dict[str, Any]:
        """The card's ``training`` field: :attr:`record_keys`, eps, norm and seed of ``cfg``."""
        config = asdict(cfg)
        return {k: config[k] for k in (*self.record_keys, "eps", "norm", "seed")}

    def fit(self, request: FitRequest) -> FitResult:
        """Check the options, the card path ``out`` (rank 0's under torchrun: every rank needs the checkpoint's path)
        and what would be written next to it, before any work; train on the first ``n_train`` train-split images,
        the last ``n_val`` of them held out for the per-epoch validation, with the checkpoint ``STEM.training.pt``
        next to the card (resumed unless option ``resume`` is false); rank 0 then writes the weights
        (``STEM.mixing-network.safetensors``, sha256 in the card's ``[weights]``) and the card."""
        import torch

        from mixzoo.core import distributed
        from mixzoo.core.cache import atomic_save_tensors
        from mixzoo.core.card import MixCard, provenance
        from mixzoo.core.paths import check_output, is_safetensors
        from mixzoo.methods.shared.taps import model_taps, tap_shapes
        from mixzoo.methods.shared.training_loop import TrainRun, train
        from mixzoo.zoo.data import load_dataset
        from mixzoo.zoo.pairs import prepare_pair

        opts = self.check_options(dict(request.options))  # defaults filled (idempotent on checked options)
        world = distributed.world()
        given = distributed.gather(None if request.out is None else str(request.out))[0]
        if given is None:
            raise InputError(f"{self.name} writes its {self.weights_of}'s weights next to the card; pass out= (--out)")
        out = Path(given)
        MixCard.check_path(out)
        weights_path = out.with_name(f"{out.stem}.mixing-network.safetensors")
        ckpt = out.with_name(f"{out.stem}.training.pt")
        check_output(weights_path, ours=is_safetensors, what="the mixing network's weights mixzoo wrote")
        check_output(ckpt, ours=zipfile.is_zipfile, what="a training checkpoint mixzoo wrote")
        cfg = self.config(opts, request.seed)
        n_val, n_train = opts["n_val"], opts.get("n_train")
        if n_train is not None and n_train < n_val + 1:
            raise InputError(f"option n_train of {self.name} must be an integer >= {n_val + 1} (n_val + 1), got"
                             f" {n_train!r}")
        pair = prepare_pair(request)
        cfg.eps, cfg.norm = pair.eps, pair.norm
        cfg.check()
        data = load_dataset(pair.dataset, "train", n=n_train, root=request.data_dir)
        if len(data) <= n_val:
            raise InputError(f"the {pair.dataset} train split has {len(data)} images, not more than n_val={n_val}")
        device, split = torch.device(request.device), len(data) - n_val
        images, labels = data.images.to(device), data.labels.to(device)
        seconds: dict[str, float] = {}
        prepared = self.prepare(pair, cfg, opts, seconds)
        if not opts.get("resume", True) and world.main:
            ckpt.unlink(missing_ok=True)
        distributed.barrier()  # no rank reads a checkpoint that rank 0 is about to delete
        t0 = time.perf_counter()
        res = train(pair.abc, pair.rbc, images[:split], labels[:split], cfg, objective=self.objective(), run=TrainRun(
            val=(images[split:], labels[split:]) if n_val else None, checkpoint=ckpt, progress=request.progress,
            checkpoint_every=opts["checkpoint_every"]))
        seconds["train"] = time.perf_counter() - t0
        if not world.main:  # trained its shards; rank 0 writes the weights and the card
            return FitResult(None, None, {**{k: getattr(cfg, k) for k in self.summary_keys if hasattr(cfg, k)},
                                          "epochs": cfg.epochs, "rank": world.rank}, seconds)
        weights = {weights_path.name: hashlib.sha256(atomic_save_tensors(weights_path, res.state).read_bytes())
                   .hexdigest()}
        taps = {"abc": model_taps(pair.abc, "ABC"), "rbc": model_taps(pair.rbc, "RBC")}  # what load_network rebuilds
        size = tuple(data.images.shape[1:])
        sg, sh = tap_shapes(pair.abc, taps["abc"], size), tap_shapes(pair.rbc, taps["rbc"], size)
        params = {**self.card_fields(cfg, opts, prepared), "weights_file": weights_path.name,
                  "network": {"early_channels": [sg["early"][0], sh["early"][0]],
                              "middle_channels": [sg["middle"][0], sh["middle"][0]], "width": cfg.width,
                              "blocks": cfg.blocks},
                  "taps": {r: {"early": t.early, "middle": t.middle, "nhwc": t.nhwc} for r, t in taps.items()},
                  "training": self.training_record(cfg), "history": res.history,
                  **{k: opts[k] for k in ("eval_n_iter", "eval_n_queries", "eval_n_target_classes")},
                  "epochs": cfg.epochs}
        extra = self.finish(params, pair, prepared, weights=weights, out=out, opts=opts, request=request,
                            seconds=seconds)
        card = MixCard(self.name, params, abc=pair.info("abc"), rbc=pair.info("rbc"), dataset=pair.dataset,
                       data={"split": "train", "n": split, "n_val": n_val, "fingerprint": data.fingerprint,
                             "source": getattr(data, "source", "")},
                       attack={"eps": pair.eps, "norm": pair.norm, **self.attack_fields(cfg)}, weights=weights,
                       provenance=provenance(command=request.provenance_command))
        card.path = card.save(out)
        last = res.history[-1] if res.history else {}
        summary = {**{k: params[k] for k in self.summary_keys}, "epochs": cfg.epochs,
                   "resumed_epochs": res.resumed_epochs,
                   **{k: v for k, v in last.items() if k.startswith(("val_", "alpha_", "beta_"))}, **extra}
        return FitResult(card, card.path, summary, seconds, {"checkpoint": res.resumed_epochs > 0})

    def attack_fields(self, cfg: Any) -> dict[str, Any]:
        """The card's ``[attack]`` fields besides the threat model. Default: none."""
        return {}


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
