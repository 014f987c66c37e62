"""MMAA wall time vs pyautoattack's APGD-CE + APGD-T on the same model and images (results: mmaa_speed.md).

Model: a small CNN on scikit-learn digits upsampled to 28x28, trained for a few seconds (seeded). Three settings:

* ``realistic``: an eps where about half the images stay robust. AutoAttack attacks only still-correct images
  (APGD-T only those APGD-CE missed); MMAA must attack every image (it needs every margin). Besides wall time we
  count example-passes (one forward + backward of one image) and report time per example-pass.
* ``all-points``: only clean-correct images and an eps so small that nothing breaks, so both attack every image in
  every run: the like-for-like wall-time comparison.
* ``realistic`` with ``mmaa-lean``: MMAA with ``attack_all=False`` (only still-correct images are attacked, as
  AutoAttack does; the same calibration data for Algorithm 1, see ``mixzoo.attacks.mmaa``).
* ``ours-eval``: our APGD-CE + APGD-T in AutoAttack mode (``mixzoo.attacks.APGDEnsemble``, still-correct images
  only) vs pyautoattack on the realistic setting: the cost of our implementation itself.

``--model`` picks the network: ``digits-cnn`` (default, above), ``fmnist`` (the built-in zoo's ``fmnist-std``
on Fashion-MNIST evaluation images), or ``wrn-28-10`` (RobustBench's WideResNet-28-10 with random weights at its
real input size, 3x32x32, on uniform random images labelled with its own predictions: only the equal-work
``all-points`` row is meaningful for random weights, so only that row runs), or ``convnext-t`` (timm's
ConvNeXt-Tiny, random weights, 3x224x224, the same way: ``all-points`` only).

Usage: ``python benchmarks/mmaa_speed.py [--model digits-cnn] [--n 500] [--n-iter 25] [--repeats 3] [--device cpu]
[--threads 2]``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn

from mixzoo.attacks import APGDEnsemble, mmaa
from mixzoo.attacks.apgd import ApgdSettings
from mixzoo.attacks.margins import layer_norm
from mixzoo.core.compat import import_autoattack


def digits_28(device: str) -> tuple[torch.Tensor, torch.Tensor]:
    from sklearn.datasets import load_digits

    data = load_digits()
    x = torch.tensor(data.data, dtype=torch.float32).view(-1, 1, 8, 8) / 16
    x = F.interpolate(x, size=(28, 28), mode="bilinear", align_corners=False).clamp(0, 1)
    return x.to(device), torch.tensor(data.target).to(device)


def small_cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(32, 32, 3, stride=2, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(32 * 7 * 7, 10))


def train(model: nn.Module, x: torch.Tensor, y: torch.Tensor, epochs: int = 8) -> nn.Module:
    torch.manual_seed(0)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    for _ in range(epochs):
        perm = torch.randperm(len(y), device=y.device)
        for idx in perm.split(128):
            opt.zero_grad()
            F.cross_entropy(model(x[idx]), y[idx]).backward()
            opt.step()
    return model.eval().requires_grad_(False)


class Counting(nn.Module):
    """Counts images that go through a gradient-enabled forward pass (each is followed by one backward)."""

    def __init__(self, model: nn.Module, ln: bool = False):
        super().__init__()
        self.model, self.ln, self.passes = model, ln, 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled():
            self.passes += x.shape[0]
        out = self.model(x)
        return layer_norm(out) if self.ln else out


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _self_labelled(model: nn.Module, n: int, size: int, device: str) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """A randomly initialised network on ``n`` uniform random 3 x size x size images labelled with its own
    predictions (only equal-work timings mean anything for it)."""
    model = model.to(device).eval().requires_grad_(False)
    x = torch.rand(n, 3, size, size, generator=torch.Generator().manual_seed(0)).to(device)
    with torch.no_grad():
        y = model(x).argmax(1)
    return model, x, y


def load_model_and_data(name: str, n: int, device: str) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """The network and ``n`` evaluation images of ``--model`` (see the module docstring)."""
    if name == "digits-cnn":
        x, y = digits_28(device)
        return train(small_cnn().to(device), x[:1297], y[:1297]), x[1297:1297 + n], y[1297:1297 + n]
    if name == "fmnist":
        from mixzoo.zoo.data import load_dataset
        from mixzoo.zoo.models import load_model

        data = load_dataset("fashion-mnist", "evaluation", n=n)
        return load_model("fmnist-std", device=device).eval(), data.images.to(device), data.labels.to(device)
    if name == "wrn-28-10":
        from mixzoo.core.compat import import_robustbench

        import_robustbench()
        from robustbench.model_zoo.architectures.wide_resnet import WideResNet

        torch.manual_seed(0)
        return _self_labelled(WideResNet(depth=28, widen_factor=10), n, 32, device)
    if name == "convnext-t":
        from mixzoo.core.compat import import_timm

        torch.manual_seed(0)
        return _self_labelled(import_timm().create_model("convnext_tiny", pretrained=False), n, 224, device)
    raise SystemExit(f"unknown --model {name!r}; choose digits-cnn, fmnist, wrn-28-10 or convnext-t")


def run_autoattack(model: nn.Module, x, y, eps: float, n_iter: int, n_targets: int, device: str) -> torch.Tensor:
    aa = import_autoattack()
    attack = aa.AutoAttack(model, attacks=["apgd-ce", "apgd-t"], version="custom", eps=eps, norm="Linf", seed=0,
                           device=device)
    attack.apgd = aa.autopgd_base.APGDAttack(model, n_restarts=1, n_iter=n_iter, eps=eps, norm="Linf", seed=0,
                                             device=device)
    attack.apgd_targeted = aa.autopgd_base.APGDAttack_targeted(model, n_restarts=1, n_iter=n_iter, eps=eps,
                                                               norm="Linf", seed=0, device=device,
                                                               n_target_classes=n_targets)
    attack.verbose = False
    return attack.run_standard_evaluation(x, y, batch_size=len(y))[0]


def timed(fn, device: str) -> float:
    sync(device)
    t0 = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - t0


def compare(name: str, model: nn.Module, x, y, eps: float, args, ours: str = "mmaa") -> dict:
    """Median wall times over ``repeats`` alternating runs, and example-passes of each."""
    ours_t, aa_t = [], []
    for _ in range(args.repeats):
        c = Counting(model)
        if ours.startswith("mmaa"):
            ours_t.append(timed(lambda c=c: mmaa(c, x, y,
                                                 ApgdSettings(eps=eps, n_iter=args.n_iter,
                                                              n_target_classes=args.targets),
                                                 batch_size=len(y), attack_all=ours == "mmaa", progress=False),
                                args.device))
        else:
            ours_t.append(timed(lambda c=c: APGDEnsemble(eps=eps, n_iter=args.n_iter, n_target_classes=args.targets,
                                                         batch_size=len(y)).run(c, x, y, progress=False),
                                args.device))
        ours_passes = c.passes
        a = Counting(model, ln=ours.startswith("mmaa"))  # MMAA attacks h^LN: give AutoAttack the same model
        aa_t.append(timed(lambda a=a: run_autoattack(a, x, y, eps, args.n_iter, args.targets, args.device),
                          args.device))
        aa_passes = a.passes
    to, ta = statistics.median(ours_t), statistics.median(aa_t)
    row = {"setting": name, "ours": ours, "n": len(y), "eps": eps, "ours_s": to, "autoattack_s": ta,
           "ratio": to / ta, "ours_passes": ours_passes, "autoattack_passes": aa_passes,
           "ours_us_per_pass": 1e6 * to / ours_passes, "autoattack_us_per_pass": 1e6 * ta / aa_passes,
           "per_pass_ratio": (to / ours_passes) / (ta / aa_passes), "ours_all_s": ours_t, "autoattack_all_s": aa_t}
    print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()}))
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="digits-cnn", help="digits-cnn, fmnist, wrn-28-10 or convnext-t")
    parser.add_argument("--n", type=int, default=500)
    parser.add_argument("--n-iter", type=int, default=25)
    parser.add_argument("--targets", type=int, default=9)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--eps", type=float, default=0.1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", default=None, help="also write the rows to this file")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, xe, ye = load_model_and_data(args.model, args.n, args.device)
    with torch.no_grad():
        correct = model(xe).argmax(1) == ye
    print(f"clean accuracy {correct.float().mean():.3f} on {len(ye)} images; torch {torch.__version__};"
          f" {platform.processor() or platform.machine()}; threads {torch.get_num_threads()}; device {args.device};"
          f" model {args.model}")
    if args.model in ("wrn-28-10", "convnext-t"):
        rows = [compare("all-points", model, xe, ye, 1e-4, args)]
    else:
        rows = [
            compare("realistic", model, xe, ye, args.eps, args),
            compare("realistic", model, xe, ye, args.eps, args, ours="mmaa-lean"),
            compare("all-points", model, xe[correct], ye[correct], 1e-4, args),
            compare("ours-eval", model, xe, ye, args.eps, args, ours="apgd"),
        ]
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"args": vars(args), "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
