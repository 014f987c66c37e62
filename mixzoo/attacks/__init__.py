"""Attacks: APGD with margin tracking, minimum-margin AutoAttack (MMAA, Bai et al. 2024a, App. B.1), PGD and the
robustness evaluations ``pgd`` / ``apgd`` / ``autoattack`` / ``adaptive`` (App. B.2) that the attack hook registers."""

from mixzoo.attacks.apgd import apgd_ce, apgd_run, apgd_t
from mixzoo.attacks.base import Attack, Component
from mixzoo.attacks.margins import MarginRecord, signed_margin
from mixzoo.attacks.mmaa import MMAAResult, mmaa
from mixzoo.attacks.pgd import pgd
from mixzoo.attacks.result import AttackResult, ComponentStat, EvalResult
from mixzoo.attacks.suites import (
    AdaptiveAPGD,
    AdaptiveAutoAttack,
    AdaptiveStrong,
    APGDEnsemble,
    AutoAttackEval,
    PGDAttack,
)
from mixzoo.attacks.variants import GradientVariants, with_gradient

__all__ = [
    "APGDEnsemble", "AdaptiveAPGD", "AdaptiveAutoAttack", "AdaptiveStrong", "Attack", "AttackResult",
    "AutoAttackEval", "Component", "ComponentStat", "EvalResult", "GradientVariants", "MMAAResult", "MarginRecord",
    "PGDAttack", "apgd_ce", "apgd_run", "apgd_t", "mmaa", "pgd", "signed_margin", "with_gradient",
]
