"""Kept for the notebooks and pages that import `inferlab.serving.validate`: the validation study
lives in `inferlab.serving.study` (its pipelines and records in `study.validate`, the comparison
and its checks in `study.checks`)."""
from inferlab.serving.study.checks import *  # noqa: F401,F403
from inferlab.serving.study.validate import *  # noqa: F401,F403
