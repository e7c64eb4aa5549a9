"""The chapter's claims, checked: a registry of every number the chapter prints (data/claims.toml),
verdicts computed by the library, and the formulas and tables the text lost (data/lost_formulas.toml).

    from inferlab.claims import evaluate_claims, claims_table, lost_formulas
"""
from inferlab.claims.evaluate import APPROXIMATION_LIMIT, EvaluatedClaim, display, evaluate_registry
from inferlab.claims.registry import RegistryError, load_registry


def evaluate_claims(section: str | None = None, verdict: str | None = None, *, path=None):
    """Every claim of the registry (or of one section, or with one verdict), evaluated."""
    return evaluate_registry(load_registry(path), section, verdict)


def claims_table(section: str | None = None, verdict: str | None = None, *, path=None) -> str:
    """A plain-text table (id, description, book, ours, verdict) for a notebook cell."""
    from inferlab.claims.render import table
    return table(evaluate_claims(section, verdict, path=path))


def lost_formulas(section: str | None = None, *, path=None):
    """The formulas and tables the chapter's text announces but does not show."""
    from inferlab.claims.reconstructed_formulas import load_lost_formulas
    return load_lost_formulas(section, path=path)


__all__ = ["APPROXIMATION_LIMIT", "EvaluatedClaim", "RegistryError", "claims_table", "display",
           "evaluate_claims", "load_registry", "lost_formulas"]
