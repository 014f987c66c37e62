"""Certified robust radii of constant-alpha mixed classifiers (Bai et al. 2024b, Lemma 3.2, Thm 3.5, Thm A.2; 002/004).

``certify`` (:mod:`.run`) is what ``mixzoo certify`` calls; :mod:`.radii` holds the formulas, :mod:`.lipschitz`
the provable bounds and the App. C.3 estimate, :mod:`.smoothing` the Monte Carlo randomized smoothing, :mod:`.report`
the curves and files.
"""

from mixzoo.certify.lipschitz import LipschitzBound, estimate_local_lipschitz, lipschitz_bound
from mixzoo.certify.radii import certified_accuracy, lipschitz_radius, logit_lipschitz_radius, smoothing_radius
from mixzoo.certify.report import CertCurve, CertifyResult, pareto_frontier
from mixzoo.certify.run import EstimateSettings, SmoothingSettings, certify, declared_lipschitz, mixture_clean_accuracy
from mixzoo.certify.smoothing import SmoothedEstimate, confidence_bounds, smoothed_estimate

__all__ = ["CertCurve", "CertifyResult", "EstimateSettings", "LipschitzBound", "SmoothedEstimate", "SmoothingSettings",
           "certified_accuracy", "certify", "confidence_bounds", "declared_lipschitz", "estimate_local_lipschitz",
           "lipschitz_bound", "lipschitz_radius", "logit_lipschitz_radius", "mixture_clean_accuracy",
           "pareto_frontier", "smoothed_estimate", "smoothing_radius"]
