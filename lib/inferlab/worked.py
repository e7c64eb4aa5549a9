"""The old name of `inferlab.worked_examples`, kept while the serving lab (chapters/15_2_3) imports it."""
from inferlab.worked_examples import equation, equation_tex, takeaway, tex_number  # noqa: F401
