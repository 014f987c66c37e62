"""Adaptive smoothing (Bai et al. 2024b, Sec. 4-5): a trained mixing network alpha_theta(x) chooses, per input, how much
to trust the robust base classifier. ``taps`` (which features the network reads), ``network`` (the mixing network,
Fig. 3 / App. D.1), ``mixing`` (the mixed classifier, Eq. 3.4 with alpha = alpha_theta(x)), ``loss`` (Eq. 4.2 and
the pseudo-labels), ``training`` (Sec. 4.4, 5.2: settings A, B, C), ``attacks`` (setting D and the attacks aimed at
the mixing network), ``method`` (the plugin object)."""
