"""Containment of standard AutoAttack in ``adaptive``, example by example, on the digits MixedNUTS classifier: every
example the installed pyautoattack's standard evaluation (exact classifier, its own batch and seed) breaks is broken
by mixzoo's default evaluation with per-example draws (``benchmarks/eval_speed.py`` makes the same comparison with
wall times)."""

from __future__ import annotations

import pytest
import torch

# the first 100 evaluation images: about 32 s of CPU for this file on a 2-core AMD EPYC, one thread (250 images
# would take about 2.5x as long, an estimate); benchmarks/eval_speed_digits_cpu.md compares all 250
N_IMAGES = 100


@pytest.mark.slow
def test_adaptive_breaks_every_example_standard_autoattack_breaks(digits_card):
    import mixzoo
    from mixzoo.attacks import AdaptiveAutoAttack
    from mixzoo.attacks.variants import with_gradient
    from mixzoo.core.card import MixCard
    from mixzoo.core.compat import import_autoattack
    from mixzoo.zoo.data import load_dataset

    card = MixCard.load(digits_card)
    model = mixzoo.load_mixed(card)
    eps, norm = float(card.attack["eps"]), str(card.attack.get("norm", "Linf"))
    data = load_dataset("digits", "evaluation", n=N_IMAGES)
    x, y = data.images, data.labels

    aa = import_autoattack().AutoAttack(with_gradient(model, "exact"), norm=norm, eps=eps, seed=0,
                                        version="standard", device=x.device)
    aa.verbose = False
    with torch.no_grad():
        adv, _ = aa.run_standard_evaluation(x.clone(), y.clone(), batch_size=N_IMAGES)
        clean = model(x).argmax(dim=1) == y
        aa_broken = clean & (model(adv).argmax(dim=1) != y)

    ours = AdaptiveAutoAttack(eps=eps, norm=norm, seed=0).run(model, x, y, progress=False,
                                                               index=torch.arange(N_IMAGES))
    mixzoo_broken = ours.clean_correct.bool() & ~ours.robust_correct.bool()
    assert torch.equal(ours.clean_correct.bool(), clean)
    assert 20 < int(aa_broken.sum()) < int(clean.sum())  # the comparison has breaks and robust examples
    only_aa = torch.nonzero(aa_broken & ~mixzoo_broken).squeeze(1).tolist()
    assert not only_aa, f"examples broken by standard AutoAttack and not by adaptive: {only_aa}"
