'''The mixing-method and CLI-command kinds of a scaffolded plugin (see :mod:`mixzoo.scaffold.kinds`).'''

from __future__ import annotations

from mixzoo.scaffold.kinds import KindTemplate, dict_hook

METHOD = KindTemplate(
    "method", ("PLUGNAME-switch",),
    hook=dict_hook("method", "mixzoo_mixing_methods", "ConfidenceSwitch", "ConfidenceSwitch.name: ConfidenceSwitch()"),
    source='''"""A mixing method: the RBC's prediction where it is confident (max probability >= tau), else the ABC's.

A method subclasses :class:`mixzoo.methods.MixingMethod` and defines ``validate`` (checks its card section),
``build`` (the mixed classifier, [0, 1] images -> log-probabilities, in each gradient variant) and ``fit`` (a
card from a :class:`~mixzoo.methods.FitRequest`); ``extra_attacks`` names the adaptive attacks every evaluation of
its cards runs after the shared one. ``mixzoo mix --method NAME --tau 0.8`` fits it; ``mixzoo bench CARD``
evaluates it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from mixzoo.core.card import MixCard, provenance
from mixzoo.core.errors import InputError
from mixzoo.methods import ExtraAttack, FitRequest, FitResult, MixingMethod, OptionSpec
from mixzoo.methods.base import square_extra
from mixzoo.zoo.pairs import prepare_pair


class SwitchedClassifier(nn.Module):
    """log softmax(h(x)) where max softmax(h(x)) >= tau, else log softmax(g(x)).

    ``gradient="exact"``: the selected branch's gradient (the switch itself has none); ``"rbc"`` / ``"abc"``: that
    model's gradient everywhere with the switch's values, the bypass an adversary who knows the rule tries.
    """

    def __init__(self, abc: nn.Module, rbc: nn.Module, tau: float, gradient: str = "exact"):
        super().__init__()
        self.abc, self.rbc, self.tau, self.gradient = abc, rbc, float(tau), gradient

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        g = torch.log_softmax(self.abc(x), dim=-1)
        h = torch.log_softmax(self.rbc(x), dim=-1)
        use_rbc = (h.exp().amax(dim=-1, keepdim=True) >= self.tau).detach()
        out = torch.where(use_rbc, h, g)
        if self.gradient == "exact":
            return out
        branch = h if self.gradient == "rbc" else g
        return branch + (out - branch).detach()  # the switch's values, one model's gradient


class ConfidenceSwitch(MixingMethod):
    """Trust the RBC where it is confident, the ABC elsewhere (a hard switch on the RBC's confidence)."""

    name = "PLUGNAME-switch"
    title = "Confidence switch"
    paper = "mixzoo-plugin-PLUGNAME (not from the papers)"
    fit_cost = "free: tau is given"
    options = {"tau": OptionSpec("the RBC's confidence at and above which its prediction is used", float, 0.9,
                                 low=0, high=1)}

    def validate(self, params: dict[str, Any], source: str) -> dict[str, Any]:
        tau = params.get("tau")
        if isinstance(tau, bool) or not isinstance(tau, int | float) or not 0 < tau <= 1:
            raise InputError(f"{source}: field '{self.name}.tau' must be a number in (0, 1], got {tau!r}")
        return {**params, "tau": float(tau)}

    def build(self, abc: nn.Module | None, rbc: nn.Module | None, card: MixCard, *,
              gradient: str = "exact") -> nn.Module:
        if gradient not in self.gradients(card):
            raise InputError(f"{self.name} has no gradient {gradient!r}; choose {', '.join(self.gradients(card))}")
        return SwitchedClassifier(abc, rbc, card.params["tau"], gradient=gradient)

    def extra_attacks(self, card: MixCard) -> list[ExtraAttack]:
        return [ExtraAttack("apgd-rbc-gradient", "apgd", gradient="rbc", why="the switch bypassed: RBC gradient"),
                ExtraAttack("apgd-abc-gradient", "apgd", gradient="abc", why="the switch bypassed: ABC gradient"),
                square_extra(1000, why="gradient-free: the switch has no gradient")]

    def fit(self, request: FitRequest) -> FitResult:
        pair = prepare_pair(request)  # loads and checks both models and the calibration split
        card = MixCard(self.name, {"tau": request.options["tau"]}, abc=pair.info("abc"), rbc=pair.info("rbc"),
                       dataset=pair.dataset, data=pair.data_info(), attack={"eps": pair.eps, "norm": pair.norm},
                       provenance=provenance(command=request.provenance_command))
        with torch.no_grad():
            model = self.build(pair.abc, pair.rbc, card)
            accuracy = float((model(pair.data.images).argmax(1) == pair.data.labels).float().mean())
        path = card.save(request.out) if request.out is not None else None
        return FitResult(card, path, {"calibration_clean_accuracy": accuracy})
''',
    test='''

def test_the_method_fits_a_card_and_builds_a_classifier(tmp_path):
    import mixzoo
    from mixzoo.methods import fit

    result = fit("PLUGNAME-switch", "digits-std", "digits-pgd", options={"tau": 0.8}, n_calib=50,
                 out=tmp_path / "card.toml", cache_dir=str(tmp_path / "cache"), progress=False)
    assert result.card.params == {"tau": 0.8} and 0 < result.summary["calibration_clean_accuracy"] <= 1
    mixed = mixzoo.load_mixed(str(tmp_path / "card.toml"))
    out = mixed(torch.rand(4, 1, 8, 8))
    assert out.shape == (4, 10) and torch.allclose(out.exp().sum(1), torch.ones(4), atol=1e-5)
''',
    readme="a mixing method, `PLUGNAME-switch` (`method.py`)",
)

COMMAND = KindTemplate(
    "command", ("PLUGNAME-accuracy",),
    hook=dict_hook("command", "mixzoo_cli_commands", "accuracy_command", '"PLUGNAME-accuracy": accuracy_command'),
    source='''"""A command: ``mixzoo PLUGNAME-accuracy MODEL``, a model's clean accuracy on a split of its data set.

A command is a typer function decorated with :func:`mixzoo.core.commands.command` (mixzoo's errors become one line
and exit status 2), a thin layer over a library function (:func:`clean_accuracy`) that Python users call as well.
This module imports no torch at module level: ``mixzoo --help`` imports it.
"""

from __future__ import annotations

from typing import Annotated

import typer

from mixzoo.core.commands import command


def clean_accuracy(model: str, split: str = "evaluation", n: int | None = 200) -> float:
    """The share of the first ``n`` examples of ``split`` of the model's data set that ``model`` classifies right."""
    import torch

    import mixzoo
    from mixzoo.zoo.data import load_dataset

    net = mixzoo.load_model(model)
    data = load_dataset(net.spec.dataset, split, n)
    with torch.no_grad():
        return float((net(data.images).argmax(1) == data.labels).float().mean())


@command
def accuracy_command(
    model: Annotated[str, typer.Argument(help="a model name (`mixzoo list`)")],
    split: Annotated[str, typer.Option(help="train | calibration | evaluation")] = "evaluation",
    n: Annotated[int, typer.Option(help="examples (the first n of the split)")] = 200,
) -> None:
    """Print the clean accuracy of MODEL on a split of its data set."""
    print(f"{model}: {clean_accuracy(model, split, n):.1%} clean accuracy on {split}")
''',
    test='''

def test_the_command_prints_the_accuracy():
    from typer.testing import CliRunner

    from mixzoo.core.plugins import lookup

    accuracy_command = lookup("command", "PLUGNAME-accuracy")
    assert accuracy_command.__module__ == "PLUGMOD.command"
    app = typer.Typer()
    app.command("PLUGNAME-accuracy")(accuracy_command)
    app.command("unused")(lambda: None)  # two commands: typer keeps the command name
    result = CliRunner().invoke(app, ["PLUGNAME-accuracy", "digits-std", "--n", "50"])
    assert result.exit_code == 0 and "digits-std:" in result.output and "clean accuracy" in result.output
''',
    readme="a CLI command, `mixzoo PLUGNAME-accuracy MODEL` (`command.py`)",
)
