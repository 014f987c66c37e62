"""Adaptive smoothing (Bai et al. 2024b, Sec. 4-5): a trained mixing network alpha_theta(x) chooses, per input, how much
to trust the robust base classifier. ``mixing`` (the mixed classifier, Eq. 3.4 with alpha = alpha_theta(x)), ``loss``
(Eq. 4.2 and the pseudo-labels), ``training`` (Sec. 4.4, 5.2: settings A, B, C), ``attacks`` (setting D and the
attack on the mixing network alone), ``gate_attacks`` (the attack on the mixing network's logit), ``bounds`` (the
alpha_min search), ``method`` (the plugin object). The taps, the mixing network, the training loop and the attacks on
alpha are :mod:`mixzoo.methods.shared`'s, which ``local-smoothing-adaptive`` uses too."""
