"""The loop that trains a mixing network (Bai et al. 2024b, Sec. 4.4, 5.2, App. D.1) on the train split, base models
frozen, for every method that trains one: what is attacked, how and with which loss is an :class:`Objective`.

Determinism and resumption: every random draw of epoch ``e`` (shuffling, radii, steps, weights, random starts)
comes from a generator seeded by ``(seed, e)``; a checkpoint (network, optimizer, EMA, history) is written
atomically after each epoch and every ``checkpoint_every`` batches (with the epoch generator's state and the loss
sums so far), and a run started again with the same configuration resumes after the last batch saved and ends with
an uninterrupted run's weights.

Several processes (``torchrun``): every rank draws the same epoch permutation and takes a contiguous shard
of each global batch of ``batch_size`` (:func:`.parallel.shard`); the network is wrapped in DistributedDataParallel
with its batch norm over the global batch (:class:`.parallel.GlobalBatchNorm2d`), and each shard's loss is weighed
by its share of the batch, so one step is the one-process step on the global batch. Every random draw (APGD's
random starts included) is made for the whole batch from the epoch's generator and sliced, so each example gets the
numbers of its position in the batch, the generator advances as in one process, and one process draws exactly what
it drew before; the attacks act per example (the network in eval mode), so the union of the ranks' attacked images
is the one-process batch's. Identical: the order, the shards' draws, the per-batch attack settings and step counts.
Not bit-identical: the gradient average over the ranks, the batch-norm variance (``E[x^2] - E[x]^2`` of summed
statistics) and convolutions over smaller batches round differently, and an attack's sign steps can amplify such
differences; tests/e2e/test_adaptive_ddp.py finds the weights within 1e-5 of one process after an epoch. Rank 0 alone
validates, writes the checkpoint (then a barrier) and the weights; every rank resumes from the same checkpoint.
Every batch, the last included, needs at least one image per rank.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn

from mixzoo.core import distributed
from mixzoo.core.errors import InputError
from mixzoo.core.progress import console, progress_bar
from mixzoo.methods.shared import parallel
from mixzoo.methods.shared.network import MixingNetwork

SETTINGS = ("A", "B", "C")
LABEL_RULES = ("authors", "oracle")  # pseudo-labels of Bai et al. 2024b, Sec. 4.4 (mixzoo.methods.adaptive.loss)


@dataclass
class TrainConfig:
    """Training settings (defaults: the authors' CIFAR-10 configuration where it applies, CPU-sized otherwise)."""

    setting: str = "C"
    epochs: int = 5
    eps: float = 0.1
    norm: str = "Linf"
    batch_size: int = 128
    lr: float = 1e-4
    weight_decay: float = 1e-5
    ema: float = 0.0
    c_ce: float = 0.5
    c_bce: float = 1.0
    c_prod: float = 0.1
    clean_weight: float = 2.0
    pseudo_labels: str = "authors"
    temperature: float = 1.0
    width: int = 32
    blocks: int = 2
    steps: list[int] = field(default_factory=lambda: [5, 15])
    eps_factor: list[float] = field(default_factory=lambda: [0.4, 1.1])
    alpha_loss_max: float = 0.5
    n_target_classes: int = 1
    seed: int = 0
    method: ClassVar[str] = "adaptive-smoothing"  # named in the error messages
    non_negative: ClassVar[tuple[str, ...]] = ("weight_decay", "c_ce", "c_bce", "c_prod", "clean_weight", "temperature")

    def bad(self, key: str, want: str) -> InputError:
        return InputError(f"option {key} of {self.method} must be {want}, got {getattr(self, key)!r}")

    def check(self) -> TrainConfig:
        """One-line errors naming the option, before any work."""
        bad = self.bad
        self.setting = str(self.setting).upper()
        if self.setting not in SETTINGS:
            raise bad("setting", "A (gray-box PGD), B (white-box PGD) or C (APGD-CE + APGD-T)")
        for key, low in (("epochs", 1), ("batch_size", 1), ("width", 1), ("blocks", 0), ("n_target_classes", 0)):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise bad(key, f"an integer >= {low}")
        for key in ("lr", "eps"):
            if not finite_number(getattr(self, key)) or getattr(self, key) <= 0:
                raise bad(key, "a positive number")
        for key in self.non_negative:
            if not finite_number(getattr(self, key)) or getattr(self, key) < 0:
                raise bad(key, "a number >= 0")
        for key in ("ema", "alpha_loss_max"):
            if not finite_number(getattr(self, key)) or not 0 <= getattr(self, key) < 1 + (key == "alpha_loss_max"):
                raise bad(key, "a number in [0, 1)" if key == "ema" else "a number in [0, 1]")
        if self.pseudo_labels not in LABEL_RULES:
            raise bad("pseudo_labels", " or ".join(LABEL_RULES))
        if self.norm not in ("Linf", "L2"):
            raise bad("norm", "Linf or L2")
        s = self.steps = [self.steps] * 2 if isinstance(self.steps, int) else [_parse(v, int) for v in self.steps]
        if len(s) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in s) or not 1 <= s[0] <= s[1]:
            raise bad("steps", "an integer >= 1 or two integers LO,HI with 1 <= LO <= HI")
        f = self.eps_factor = [self.eps_factor] * 2 if finite_number(self.eps_factor) else [_parse(v, float)
                                                                                     for v in self.eps_factor]
        if len(f) != 2 or not all(finite_number(v) for v in f) or not 0 < f[0] <= f[1]:
            raise bad("eps_factor", "a positive number or two numbers LO,HI with 0 < LO <= HI")
        return self


def _parse(v: Any, kind: type) -> Any:
    """A list item from the command line (``-O steps=5,15`` gives strings) as a number, else unchanged."""
    if isinstance(v, str):
        try:
            return kind(v)
        except ValueError:
            return v
    return v


def finite_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def epoch_generator(seed: int, epoch: int) -> torch.Generator:
    """The generator of every random draw of one epoch (so a resumed run repeats the draws of the one it resumes)."""
    return torch.Generator().manual_seed(int(seed) * 1_000_003 + int(epoch) + 1)


def new_network(early: list[int], middle: list[int], cfg: TrainConfig) -> MixingNetwork:
    """The mixing network initialised from ``cfg.seed`` (the global generator is left as it was)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        return MixingNetwork(early, middle, width=cfg.width, blocks=cfg.blocks)


class Objective:
    """What the shared loop of :func:`train` trains: the classifier around the network, the attacks of a batch, the
    loss, the validation. Each method that trains a mixing network subclasses it (adaptive smoothing's
    :class:`~mixzoo.methods.adaptive.training.AdaptiveObjective`, ``local-smoothing-adaptive``'s
    :class:`~mixzoo.methods.local_smoothing.policy.PolicyObjective`, Bai et al. (local smoothing), Eq. 9).

    :meth:`label` names the run on the progress bar; :meth:`classifier` is the mixed classifier around ``net``
    (attacked, and trained through); :meth:`attacks` the batch's attacked images (and whatever :meth:`loss` needs),
    the network in eval mode, every random draw from ``gen`` for the whole global batch sliced with ``part = (lo, hi,
    n)`` (rows ``lo:hi`` of a global batch of ``n``), so a run's weights depend only on the seed and the epoch;
    :meth:`loss` (the batch's mean loss, its parts named by :attr:`keys`), the network in train mode;
    :meth:`evaluate` an epoch's validation numbers on held-out images; :meth:`describe` the line printed after them.
    """

    keys: ClassVar[tuple[str, ...]] = ("loss", "ce", "bce")  # the loss parts averaged per epoch (history, progress)
    config: ClassVar[type] = TrainConfig  # the settings it trains with

    def label(self, cfg: TrainConfig) -> str:
        raise NotImplementedError

    def classifier(self, abc: nn.Module, rbc: nn.Module, net: nn.Module, taps: tuple[Any, Any],
                   cfg: TrainConfig) -> nn.Module:
        raise NotImplementedError

    def attacks(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, cfg: TrainConfig, gen: torch.Generator,
                part: tuple[int, int, int]) -> Any:
        raise NotImplementedError

    def loss(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, attacked: Any,
             cfg: TrainConfig) -> tuple[torch.Tensor, dict[str, float]]:
        raise NotImplementedError

    def evaluate(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, cfg: TrainConfig) -> dict[str, float]:
        raise NotImplementedError

    def describe(self, record: dict[str, float]) -> str:
        raise NotImplementedError


def _save(path: Path, state: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)  # the card's folder: `mix --out` may name one not made yet
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as fh:
        torch.save(state, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _config_key(cfg: TrainConfig) -> dict[str, Any]:
    return {k: v for k, v in asdict(cfg).items() if k != "epochs"}


@dataclass
class TrainResult:
    """The trained weights (EMA if enabled), per-epoch history, epochs resumed from a checkpoint."""

    state: dict[str, torch.Tensor]
    history: list[dict[str, float]]
    resumed_epochs: int = 0
    resumed_batches: int = 0  # batches of the then unfinished epoch restored from a mid-epoch checkpoint


@dataclass(frozen=True)
class TrainRun:
    """How a :func:`train` run reports and keeps its state (none of it changes the trained weights): ``val``, images
    and labels (held out of the train split) for the per-epoch clean and attacked accuracy; ``checkpoint``, a file
    written after every epoch and resumed from; ``checkpoint_every``, batches between mid-epoch checkpoints (0: after
    each epoch only); ``progress``, the progress bar; ``on_epoch(e)``, called after epoch ``e``'s checkpoint is
    written; ``on_batch(epoch, b)``, called after batch ``b`` (1-based) of epoch ``epoch`` (0-based) and its
    checkpoint, if any."""

    val: tuple[torch.Tensor, torch.Tensor] | None = None
    checkpoint: str | Path | None = None
    checkpoint_every: int = 50
    progress: bool = True
    on_epoch: Callable[[int], None] | None = None
    on_batch: Callable[[int, int], None] | None = None

    def __post_init__(self) -> None:
        every = self.checkpoint_every
        if isinstance(every, bool) or not isinstance(every, int) or every < 0:
            raise InputError(f"checkpoint_every must be an integer >= 0 (0: after each epoch only), got {every!r}")


def train(abc: nn.Module, rbc: nn.Module, images: torch.Tensor, labels: torch.Tensor, cfg: TrainConfig, *,
          objective: Objective, run: TrainRun | None = None) -> TrainResult:
    """Train a mixing network for ``abc`` and ``rbc`` on ``images`` / ``labels`` (train split only) for
    ``cfg.epochs`` epochs, each in its own seeded order (:func:`epoch_generator`), resuming from ``run.checkpoint``
    when it holds part of this run. ``objective``: what is trained (:class:`Objective`); ``run``: validation,
    checkpoints, progress and callbacks (:class:`TrainRun`)."""
    trainer = _Trainer(abc, rbc, images, labels, cfg, objective,
                       run if run is not None else TrainRun())
    trainer.resume()
    with progress_bar(trainer.run.progress and trainer.world.main) as bar:
        for epoch in range(trainer.start, cfg.epochs):
            trainer.epoch(epoch, bar)
    final = trainer.ema if trainer.ema is not None else trainer.net.state_dict()
    return TrainResult({k: v.detach().clone() for k, v in final.items()}, trainer.history, trainer.start,
                       trainer.resumed_batches)


class _Trainer:
    """The state of one :func:`train` run: the network, the classifier around it, the optimizer, the EMA weights, the
    history, and where a checkpoint says to resume."""

    def __init__(self, abc: nn.Module, rbc: nn.Module, images: torch.Tensor, labels: torch.Tensor, cfg: TrainConfig,
                 objective: Objective, run: TrainRun):
        from mixzoo.methods.shared.taps import model_taps, tap_shapes

        cfg.check()
        self.images, self.labels, self.cfg, self.objective, self.run = images, labels, cfg, objective, run
        taps = (model_taps(abc, "ABC"), model_taps(rbc, "RBC"))
        size = tuple(images.shape[1:])
        sg, sh = tap_shapes(abc, taps[0], size), tap_shapes(rbc, taps[1], size)
        self.net = new_network([sg["early"][0], sh["early"][0]], [sg["middle"][0], sh["middle"][0]], cfg)
        self.device = images.device
        self.net.to(self.device)
        self.world = world = distributed.world()
        n, bs = len(labels), cfg.batch_size
        if world.size > 1 and min(bs, n % bs or bs) < world.size:
            raise InputError(f"every batch needs at least one image per process: batch_size={bs} over {n} images"
                             f" leaves a batch smaller than the {world.size} processes; raise batch_size or n_train")
        self.model = objective.classifier(abc, rbc, self.net, taps, cfg)
        # the attacks run the plain network (eval mode, no gradient sync); the training forward runs it through DDP
        self.trained = self.model if world.size == 1 else objective.classifier(
            abc, rbc, parallel.wrap(self.net, torch.device(self.device)), taps, cfg)
        self.opt = torch.optim.AdamW(self.net.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        self.ema = {k: v.detach().clone() for k, v in self.net.state_dict().items()} if cfg.ema > 0 else None
        self.history: list[dict[str, float]] = []
        self.start, self.resumed_batches = 0, 0
        self.mid: dict[str, Any] | None = None  # the unfinished epoch's saved position
        self.ckpt = Path(run.checkpoint) if run.checkpoint is not None else None

    def resume(self) -> None:
        """The state of ``run.checkpoint`` when it exists: refused when written with other options or holding more
        than ``cfg.epochs``."""
        ckpt, cfg = self.ckpt, self.cfg
        if ckpt is None or not ckpt.is_file():
            return
        state = torch.load(ckpt, weights_only=True, map_location=self.device)
        if state.get("config") != _config_key(cfg):
            raise InputError(f"checkpoint {ckpt} was written with other training options; delete it or train with"
                             " the same options to resume")
        self.net.load_state_dict(state["net"])
        self.opt.load_state_dict(state["opt"])
        self.ema = state.get("ema") or self.ema
        self.history, self.start = list(state["history"]), int(state["epoch"])
        self.mid = mid = state.get("mid")
        if self.start > cfg.epochs or (self.start == cfg.epochs and mid is not None):
            held = f"{self.start} epochs" + (" and part of the next" if mid is not None else "")
            need = self.start + (mid is not None)
            raise InputError(f"checkpoint {ckpt} already holds {held}, more than epochs={cfg.epochs}; train with"
                             f" epochs >= {need}, or delete it (resume=false) to start again")

    def save(self, epoch: int, position: dict[str, Any] | None) -> None:
        """The checkpoint after ``epoch`` epochs (and ``position`` in the next one), written by rank 0."""
        if self.ckpt is None:
            return
        if self.world.main:
            _save(self.ckpt, {"epoch": epoch, "net": self.net.state_dict(), "opt": self.opt.state_dict(),
                              "ema": self.ema, "history": self.history, "config": _config_key(self.cfg),
                              "mid": position})
        distributed.barrier()  # written before any rank may stop and later resume from it

    def epoch(self, epoch: int, bar: Any) -> None:
        """One epoch: its batches (from the saved position of a resumed one), validation, checkpoint, callback."""
        cfg, run, objective = self.cfg, self.run, self.objective
        gen = epoch_generator(cfg.seed, epoch)
        batches = torch.randperm(len(self.labels), generator=gen).split(cfg.batch_size)
        label = objective.label(cfg)
        sums = dict.fromkeys(objective.keys, 0.0)
        first = 0
        if self.mid is not None and epoch == self.start:
            # the generator's state after the saved batch: the rest of the epoch draws what it would have drawn
            gen.set_state(self.mid["gen"].cpu())
            first = self.resumed_batches = int(self.mid["batch"])
            sums.update(self.mid["sums"])
        task = bar.add_task(f"{label}: epoch {epoch + 1}/{cfg.epochs}", total=len(self.labels),
                            completed=sum(len(c) for c in batches[:first]))
        for b in range(first, len(batches)):
            parts = self.step(batches[b], gen)
            for k in sums:
                sums[k] += parts[k]
            shown = " ".join(f"{k} {v / (b + 1):.3f}" for k, v in sums.items())
            bar.update(task, advance=len(batches[b]), description=f"{label}: epoch {epoch + 1}/{cfg.epochs} {shown}")
            if run.checkpoint_every and (b + 1) % run.checkpoint_every == 0 and b + 1 < len(batches):
                self.save(epoch, {"batch": b + 1, "gen": gen.get_state(), "sums": dict(sums)})
            if run.on_batch is not None:
                run.on_batch(epoch, b + 1)
        record = {"epoch": epoch + 1, **{k: v / len(batches) for k, v in sums.items()}}
        if run.val is not None and self.world.main:  # the other ranks go on to the next epoch's first all-reduce
            live = {k: v.clone() for k, v in self.net.state_dict().items()} if self.ema is not None else None
            if self.ema is not None:  # validated with the EMA weights
                self.net.load_state_dict(self.ema)
            self.net.eval()
            record.update(objective.evaluate(self.model, *run.val, cfg))
            if live is not None:
                self.net.load_state_dict(live)
            if run.progress:
                console.print(f"epoch {epoch + 1}: {objective.describe(record)}")
        self.history.append(record)
        self.save(epoch + 1, None)
        if run.on_epoch is not None:
            run.on_epoch(epoch + 1)

    def step(self, batch: torch.Tensor, gen: torch.Generator) -> dict[str, float]:
        """One batch (this process's shard of it): attacked copies made with the plain network in eval mode, the
        objective's loss on clean and attacked images, an AdamW step, the EMA update; the loss parts (global means
        under torchrun)."""
        cfg, world, net = self.cfg, self.world, self.net
        lo, hi = parallel.shard(len(batch), world)
        idx = batch[lo:hi]
        x, y = self.images[idx], self.labels[idx]
        net.eval()
        attacked = self.objective.attacks(self.model, x, y, cfg, gen, (lo, hi, len(batch)))
        net.train()
        loss, parts = self.objective.loss(self.trained, x, y, attacked, cfg)
        self.opt.zero_grad(set_to_none=True)
        # DDP averages the ranks' gradients: weigh each shard's mean by its share of the global batch so the average
        # is the gradient of the global batch's mean (factor 1 in one process)
        (loss * (len(idx) * world.size / len(batch))).backward()
        self.opt.step()
        if self.ema is not None:
            with torch.no_grad():
                for k, v in net.state_dict().items():
                    self.ema[k] = self.ema[k] * cfg.ema + v.detach() * (1 - cfg.ema) if v.is_floating_point() \
                        else v.detach().clone()
        return _global_means(parts, len(idx)) if world.size > 1 else parts


def _global_means(parts: dict[str, float], count: int) -> dict[str, float]:
    """The global batch's means of the loss parts from each rank's shard means (all examples weigh the same)."""
    import torch.distributed as dist

    keys = sorted(parts)
    t = torch.tensor([*(parts[k] * count for k in keys), float(count)], dtype=torch.float64)
    dist.all_reduce(t)
    return {k: float(t[i] / t[-1]) for i, k in enumerate(keys)}
