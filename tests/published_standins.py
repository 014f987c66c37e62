"""Stand-ins for the published-model path, built from the real code that writes them: a RobustBench checkpoint
of ``cifar10/Linf/Wong2020Fast`` (PreActResNet-18 from RobustBench's own model zoo, random weights, saved as a state
dict in ``$MIXZOO_ROBUSTBENCH_DIR`` layout), a timm ResNet-18 with 10 classes at 32 px saved by timm's
``save_for_hf`` into a Hugging Face cache (``hf-hub:org/r18-c10``), and a user's data: a CIFAR-10 folder in
torchvision's layout (16 test images), an ImageFolder tree and an ``.npz`` file (16 images each).

Labels: the RBC's own prediction on every other image and another class on the rest, so that MixedNUTS finds both
images the RBC gets right and images it gets wrong (random weights would otherwise be wrong, or right, on all).
Used by ``tests/e2e/test_published_path.py`` and ``benchmarks/published_path_speed.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

HUB_NAME = "hf-hub:org/r18-c10"
RB_NAME = "cifar10/Linf/Wong2020Fast"


def build(root: Path) -> dict[str, str]:
    """Write every stand-in under ``root``; return the environment a command needs to find them offline."""
    import torch
    from hub_cache import put_timm_model
    from own_data import write_cifar10, write_imagefolder, write_npz

    from mixzoo.zoo import loading

    root.mkdir(parents=True, exist_ok=True)
    put_timm_model(root / "hf", HUB_NAME.removeprefix("hf-hub:"), arch="resnet18", num_classes=10, size=32)
    torch.manual_seed(0)
    net = loading.robustbench_entry("cifar10", "Linf", "Wong2020Fast")["model"]().eval()
    (root / "rb" / "cifar10" / "Linf").mkdir(parents=True)
    torch.save(net.state_dict(), root / "rb" / "cifar10" / "Linf" / "Wong2020Fast.pt")

    def labeller(images):  # N x H x W x 3 uint8 -> the RBC's prediction, shifted by one on every other image
        with torch.no_grad():
            pred = net(torch.from_numpy(images).permute(0, 3, 1, 2).float() / 255).argmax(1).numpy()
        pred[1::2] = (pred[1::2] + 1) % 10
        return pred

    write_cifar10(root / "cifar", n_test=16, labeller=labeller)
    write_imagefolder(root / "pets", classes=8, per_class=2, size=(32, 32), labeller=labeller)
    write_npz(root / "mine.npz", n=16, labeller=labeller)
    return offline_env(root)


def offline_env(root: Path) -> dict[str, str]:
    """This process's environment with the stand-ins' caches named and downloads off."""
    return {**os.environ, "HF_HUB_CACHE": str(root / "hf"), "HF_HUB_OFFLINE": "1", "MIXZOO_OFFLINE": "1",
            "MIXZOO_ROBUSTBENCH_DIR": str(root / "rb"), "MIXZOO_CACHE": str(root / "cache"),
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}


def steps(root: Path) -> list[tuple[str, list[str]]]:
    """The published-model path as a user runs it, offline: (label, mixzoo arguments)."""
    cheap_mmaa = ["--eps", "0.001", "-O", "n_iter=2", "-O", "n_restarts=1", "-O", "n_target_classes=1"]
    cheap_attack = ["--attack", "pgd", "-O", "n_iter=2"]
    return [
        ("info", ["info", HUB_NAME]),
        ("fetch-list", ["fetch-list", HUB_NAME, RB_NAME, "--data-dir", str(root / "cifar")]),
        ("mix on cifar10", ["mix", "--abc", HUB_NAME, "--rbc", RB_NAME, "--data-dir", str(root / "cifar"),
                            "--n-calib", "8", *cheap_mmaa, "--out", str(root / "card.toml")]),
        ("mix on an ImageFolder", ["mix", "--abc", HUB_NAME, "--rbc", RB_NAME, "--dataset",
                                   f"imagefolder:{root / 'pets'}", "--n-calib", "8", *cheap_mmaa,
                                   "--out", str(root / "card_pets.toml")]),
        ("bench", ["bench", str(root / "card_pets.toml"), "--budget", "quick", "--eps", "0.0314", "--n", "4",
                   "--out", str(root / "bench")]),  # every component on: declared attacks, baseline, curve
        ("mix linear on an npz", ["mix", "--method", "linear", "-O", "alpha=0.5", "--abc", HUB_NAME, "--rbc",
                                  RB_NAME, "--dataset", str(root / "mine.npz"), "--n-calib", "8",
                                  "--out", str(root / "card_npz.toml")]),
        ("sanity", ["sanity", str(root / "card_npz.toml"), *cheap_attack, "--n", "2", "--no-linear",
                    "--out", str(root / "sanity")]),
        ("sanity of MixedNUTS", ["sanity", str(root / "card_pets.toml"), "--budget", "quick", "--eps", "0.0314",
                                 "--n", "2", "--out", str(root / "sanity_nuts")]),
        ("export", ["export", str(root / "card.toml"), "--format", "torch-export", "--check-n", "2",
                    "--data-dir", str(root / "cifar"), "--out", str(root / "export")]),
    ]
