"""The knee rule, as the labs and the lessons' numbers name it: defined once in analysis/knee.py
(the lessons' pictures use it too, and analysis may not import labs)."""
from analysis.knee import KNEE_SHARE, RULE, knee

__all__ = ["KNEE_SHARE", "RULE", "knee"]
