'''The module a scaffolded plugin gets for each kind (:data:`KINDS`): its code, the hook in the package's
``__init__``, the names it declares in ``PROVIDES`` and its tests.

The texts are Python source with two placeholders, ``PLUGNAME`` (the plugin's name, the prefix of every entry name)
and ``PLUGMOD`` (its import name); :func:`mixzoo.scaffold.new_plugin` fills them in.
'''

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class KindTemplate:
    """One kind of a scaffolded plugin: ``module`` (its file in the package, ``KIND.py``) with ``source``; ``hook``,
    the code the package's ``__init__`` gets (imports of the module go inside the hook, so loading the plugin stays
    cheap); ``label`` (``KINDs``) and ``names``, its entry in ``PROVIDES``; ``test``, its tests; ``readme``, its
    line in the README."""

    kind: str
    module: str = field(init=False)
    label: str = field(init=False)
    names: tuple[str, ...]
    hook: str
    source: str
    test: str
    readme: str
    declares: str = ""  # module attributes the package's __init__ gets besides PROVIDES

    def __post_init__(self) -> None:
        object.__setattr__(self, "module", f"{self.kind}.py")
        object.__setattr__(self, "label", f"{self.kind}s")


def dict_hook(kind: str, hook: str, imports: str, entry: str) -> str:
    """Hook ``hook`` of the package's ``__init__``: ``{entry}``, with ``imports`` from the kind's module."""
    return f'''
@hookimpl
def {hook}() -> dict[str, Any]:
    from PLUGMOD.{kind} import {imports}

    return {{{entry}}}
'''


MODEL = KindTemplate(
    "model", ("PLUGNAME-digits-linear",),
    declares='''
SOURCE_KINDS = ["PLUGNAME-digits"]  # the source kinds mixzoo_model_sources loads (`mixzoo plugins` lists them)
# a registry entry: the fields of a registry.toml table plus its name (reference: Model spec fields)
MODEL = {
    "name": "PLUGNAME-digits-linear", "role": "robust", "dataset": "digits", "num_classes": 10,
    "input_size": [1, 8, 8], "mean": [0.3], "std": [0.4], "threat_model": "Linf", "epsilon": 0.1,
    "source": {"kind": "PLUGNAME-digits", "seed": 0, "adv_eps": 0.1, "steps": 150},
    "description": "linear digits classifier, FGSM-trained when it is loaded (mixzoo-plugin-PLUGNAME)",
    "license": "MIT",
}
''',
    hook='''
@hookimpl
def mixzoo_model_specs() -> list[dict[str, Any]]:
    return [MODEL]

''' + dict_hook("model", "mixzoo_model_sources", "load", "SOURCE_KINDS[0]: load"),
    source='''"""The model: a linear classifier on mixzoo's 8x8 ``digits``, trained when it is loaded (no weight file).

mixzoo calls :func:`load` for every registry entry whose ``source.kind`` is this plugin's source kind (hook
``mixzoo_model_sources``); the entry comes from hook ``mixzoo_model_specs``. The loader returns a plain
``nn.Module`` taking NORMALIZED input: mixzoo wraps it and applies the entry's ``mean`` / ``std`` to [0, 1] images.
Training is deterministic (fixed seed, full-batch steps on the train split, which never overlaps the calibration
split), so every load has the same weights and the same weight hash.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


def train_linear(seed: int, adv_eps: float, steps: int, mean: float, std: float) -> nn.Module:
    """A 64 -> 10 linear layer trained with full-batch SGD, on FGSM examples of radius ``adv_eps`` when > 0."""
    from mixzoo.zoo.data import load_dataset

    data = load_dataset("digits", "train")
    gen = torch.Generator().manual_seed(seed)
    net = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
    with torch.no_grad():
        net[1].weight.copy_(0.01 * torch.randn(10, 64, generator=gen))
        net[1].bias.zero_()
    opt = torch.optim.SGD(net.parameters(), lr=0.5, momentum=0.9)
    for _ in range(steps):
        inputs = data.images
        if adv_eps > 0:
            x = data.images.clone().requires_grad_(True)
            (grad,) = torch.autograd.grad(F.cross_entropy(net((x - mean) / std), data.labels), x)
            inputs = (data.images + adv_eps * grad.sign()).clamp(0.0, 1.0)
        opt.zero_grad()
        F.cross_entropy(net((inputs - mean) / std), data.labels).backward()
        opt.step()
    return net.eval()


def load(spec: Any, device: str, allow_unsafe: bool) -> nn.Module:
    """The network of a registry entry of this plugin's source kind, trained as its ``source`` table says."""
    src = spec.source
    net = train_linear(int(src["seed"]), float(src["adv_eps"]), int(src["steps"]), spec.mean[0], spec.std[0])
    return net.to(device)
''',
    test='''

def test_the_model_loads_by_name_and_is_deterministic():
    import mixzoo
    from mixzoo.zoo.data import load_dataset

    model = mixzoo.load_model("PLUGNAME-digits-linear")
    data = load_dataset("digits", "evaluation", 200)
    with torch.no_grad():
        accuracy = (model(data.images).argmax(1) == data.labels).float().mean().item()
    assert accuracy > 0.7
    assert model.weight_hash == mixzoo.load_model("PLUGNAME-digits-linear").weight_hash
''',
    readme="a model, `PLUGNAME-digits-linear` (robust, digits, Linf 0.1), of source kind `PLUGNAME-digits` "
           "(`model.py`)",
)

DATASET = KindTemplate(
    "dataset", ("PLUGNAME-inverted-digits",),
    hook=dict_hook("dataset", "mixzoo_datasets", "NAME, inverted_digits", "NAME: inverted_digits"),
    source='''"""A dataset: mixzoo's ``digits`` with inverted intensities (1 - x), split as ``digits`` is.

A dataset factory takes ``(split, n, root)`` and returns a :class:`mixzoo.zoo.data.ImageDataset` (images in [0, 1],
NCHW float32) for the splits ``train``, ``calibration`` and ``evaluation``, which must never overlap; ``indices``
are the examples' positions in ``source``, so the data set's fingerprint names exactly which images were used.
"""

from __future__ import annotations

from mixzoo.zoo.data import ImageDataset, load_dataset

NAME = "PLUGNAME-inverted-digits"


def inverted_digits(split: str, n: int | None = None, root: str | None = None) -> ImageDataset:
    """Split ``split`` of ``digits`` (its first ``n`` examples), every pixel x replaced by 1 - x."""
    base = load_dataset("digits", split, n)
    return ImageDataset(NAME, split, 1.0 - base.images, base.labels, base.num_classes, base.indices,
                        f"{base.source}/inverted")
''',
    test='''

def test_the_dataset_loads_by_name_with_disjoint_splits():
    from mixzoo.zoo.data import load_dataset

    data = load_dataset("PLUGNAME-inverted-digits", "calibration", 10)
    assert torch.equal(data.images, 1.0 - load_dataset("digits", "calibration", 10).images)
    evaluation = load_dataset("PLUGNAME-inverted-digits", "evaluation")
    assert not set(data.indices.tolist()) & set(evaluation.indices.tolist())
''',
    readme="a dataset, `PLUGNAME-inverted-digits` (`dataset.py`)",
)

CLAMP = KindTemplate(
    "clamp", ("PLUGNAME-tanh",),
    hook=dict_hook("clamp", "mixzoo_clamp_functions", "NAME, tanh_clamp", "NAME: tanh_clamp"),
    source='''"""A clamp function for MixedNUTS's transform of the RBC's logits, M(s, p, c) (Bai et al. 2024a, Eq. 4).

A clamp is elementwise and differentiable; ``mixzoo mix --clamp NAME`` uses it.
"""

from __future__ import annotations

import torch

NAME = "PLUGNAME-tanh"


def tanh_clamp(x: torch.Tensor) -> torch.Tensor:
    """x * (1 + tanh(x)) / 2: about 0 for x << 0, about x for x >> 0, smooth everywhere."""
    return 0.5 * x * (1.0 + torch.tanh(x))
''',
    test='''

def test_the_clamp_is_elementwise_and_differentiable():
    from mixzoo.core.plugins import lookup

    clamp = lookup("clamp", "PLUGNAME-tanh")
    x = torch.linspace(-6, 6, 25, requires_grad=True)
    y = clamp(x)
    (grad,) = torch.autograd.grad(y.sum(), x)
    assert y.shape == x.shape and torch.isfinite(grad).all()
    y = y.detach()
    assert abs(float(y[0])) < 1e-3 and abs(float(y[-1]) - 6) < 1e-3
''',
    readme="a clamp function, `PLUGNAME-tanh` (`clamp.py`)",
)

OPTIMIZER = KindTemplate(
    "optimizer", ("PLUGNAME-coarse",),
    hook=dict_hook("optimizer", "mixzoo_calibration_optimizers", "NAME, coarse", "NAME: coarse"),
    source='''"""A calibration optimizer: MixedNUTS's search for (s, p, c) (Bai et al. 2024a, Eq. 7, Algorithm 1).

An optimizer is ``optimizer(problem, grid) -> SearchResult``: ``problem.evaluate(s_values, p_values, c_values)``
evaluates the objective on every combination, ``problem.result(evaluation, ...)`` is the best point with mixzoo's
tie rule. ``mixzoo mix --optimizer NAME`` uses it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mixzoo.methods.mixednuts.calibrate import CalibrationProblem, Grid, SearchResult

NAME = "PLUGNAME-coarse"


def coarse(problem: CalibrationProblem, grid: Grid) -> SearchResult:
    """Every other value of the grid on each axis: about an eighth of the grid's cost."""
    ev = problem.evaluate(grid.s_values()[::2], grid.p_values()[::2], grid.c_values()[::2])
    return problem.result(ev, method=NAME, n_evaluated=ev.counts.numel(), notes=["every other grid value"])
''',
    test='''

def test_the_optimizer_calibrates_mixednuts(tmp_path):
    from mixzoo.methods import fit

    result = fit("mixednuts", "digits-std", "digits-pgd", options={"optimizer": "PLUGNAME-coarse", "n_iter": 3},
                 n_calib=200, out=tmp_path / "card.toml", cache_dir=str(tmp_path / "cache"), progress=False)
    assert "PLUGNAME-coarse" in (tmp_path / "card.toml").read_text()
    assert 0 < result.card.params["alpha"] <= 1
''',
    readme="a calibration optimizer for MixedNUTS, `PLUGNAME-coarse` (`optimizer.py`)",
)

ATTACK = KindTemplate(
    "attack", ("PLUGNAME-fgsm",),
    hook=dict_hook("attack", "mixzoo_attacks", "FGSM", "FGSM.name: FGSM"),
    source='''"""An attack: FGSM, one step along the sign of the loss gradient (``mixzoo bench --attack NAME``).

An attack subclasses :class:`mixzoo.attacks.Attack`: ``name``, the options of its own in ``options_spec`` (the
base adds those its run loop reads, ``batch_size``) and ``components``, the stages it runs. The base runs each
component on the examples still robust and counts a candidate only inside the eps-ball and [0, 1].
"""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from mixzoo.attacks import Attack, Component
from mixzoo.core.options import OptionSpec


class FGSM(Attack):
    """One step of size ``step * eps`` along the loss gradient's sign (Linf) or direction (L2)."""

    name: ClassVar[str] = "PLUGNAME-fgsm"
    options_spec: ClassVar[dict[str, OptionSpec]] = {
        "step": OptionSpec("the step as a share of eps", float, 1.0, low=0, high=1)}

    def components(self, model: nn.Module, n_classes: int) -> list[Component]:
        def fgsm(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            x = x.clone().requires_grad_(True)
            (grad,) = torch.autograd.grad(F.cross_entropy(model(x), y), x)
            if self.norm == "Linf":
                direction = grad.sign()
            else:
                direction = grad / grad.flatten(1).norm(dim=1).clamp_min(1e-12).view(-1, *[1] * (x.dim() - 1))
            return (x + self.options["step"] * self.eps * direction).clamp(0.0, 1.0).detach()

        return [Component("fgsm", fgsm)]
''',
    test='''

def test_the_attack_declares_only_its_option_and_runs():
    import mixzoo
    from mixzoo.core.plugins import lookup
    from mixzoo.zoo.data import load_dataset

    attack = lookup("attack", "PLUGNAME-fgsm")
    assert set(attack.options_spec) == {"step", "batch_size"}  # batch_size comes from the base
    data = load_dataset("digits", "evaluation", 100)
    result = attack(eps=0.1, step=0.5).run(mixzoo.load_model("digits-pgd"), data.images, data.labels,
                                           progress=False)
    assert result.robust_correct.sum() <= result.clean_correct.sum()
    assert [c.name for c in result.components] == ["fgsm"]
''',
    readme="an attack, `PLUGNAME-fgsm` (`attack.py`)",
)
