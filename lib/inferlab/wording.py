"""The old name of `inferlab.qualitative_words`, kept while the serving lab (chapters/15_2_3) imports it."""
from inferlab.qualitative_words import (LARGE_CHANGE, SMALL_CHANGE, Ranking, ranking,  # noqa: F401
                                        size_of_change, thresholds_text)
