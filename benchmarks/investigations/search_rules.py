"""Algorithm 1 on the built-in Fashion-MNIST pair with both searches (mixzoo, authors): the chosen point, alpha, and
how many attacked-correct margins reach the threshold (difference (a)). Reuses the cache of `mixzoo mix`
(set MIXZOO_CACHE as for that run); writes nothing.

    MIXZOO_CACHE=... .venv/bin/python benchmarks/investigations/search_rules.py
"""
import warnings

import torch

from mixzoo.core.cache import Cache
from mixzoo.methods.mixednuts.calibrate import CalibrationProblem, calibrate
from mixzoo.methods.mixednuts.calibration_data import MMAASettings
from mixzoo.methods.mixednuts.fitting import _default_attack_setting, calibration_data
from mixzoo.methods.mixednuts.transforms import layer_norm
from mixzoo.zoo.data import load_dataset
from mixzoo.zoo.models import load_model

rbc = load_model("fmnist-pgd")
data = load_dataset("fashion-mnist", "calibration", n=1000)
eps, norm = _default_attack_setting(rbc, None, None)
cd = calibration_data(None, rbc, data, MMAASettings(eps, norm), cache=Cache(), progress=False)
print("cache hits", cd.cache_hits)
kw = dict(clean_logits=cd.clean_logits, clean_labels=cd.labels, attacked_logits=cd.attacked_logits,
          attacked_labels=cd.labels, beta=0.985)
att = layer_norm(cd.attacked_logits.double())
right = att.argmax(1) == cd.labels
for search in ("mixzoo", "authors"):
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        card = calibrate(**kw, search=search)
    prob = CalibrationProblem(att[right][:1], att[right], 0.985, clamp="gelu", dtype=torch.float64)
    m = prob.margins(torch.tensor([card.params["s"]]), torch.tensor([card.params["p"]]), card.params["c"])[0, 0, 1:]
    q = 1 / card.params["alpha"] - 1
    print(
        search,
        dict(
            s=card.params["s"],
            p=card.params["p"],
            c=card.params["c"],
            alpha=card.params["alpha"],
            objective=card.params["objective"],
        ),
        "kept",
        int((m >= q * (1 - 1e-12)).sum()),
        "of",
        int(right.sum()),
        [str(w.message) for w in rec],
    )
