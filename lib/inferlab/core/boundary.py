"""Where a call enters the core: the one place its objects are checked.

A core function that takes a `ModelConfig`, an `Accelerator` or a `Precision` says so where it is
defined, `@enters(model=ModelConfig, precision=Precision)`. Called from outside the core (a notebook,
the simulator, a command line), it checks each named argument once: a name or anything else where an
object belongs is a `TypeError` naming the function, the parameter and the resolver to call. Called
from another core function it checks nothing: the objects were checked where the call came in, and
each was validated when it was built (`ModelConfig`, `Accelerator`, `Precision` check their fields in
`__post_init__`).
"""
from __future__ import annotations

import contextvars
import functools
import inspect

from inferlab.core.specs import Accelerator, ModelConfig, Precision, function_label, wrong_type

_INSIDE = contextvars.ContextVar("inside_the_core", default=False)


def enters(**expected):
    """Decorator: check the named parameters (`model=ModelConfig`, ...) when the call enters the core.
    A parameter whose default is None may be None."""
    for name, cls in expected.items():
        if cls not in (ModelConfig, Accelerator, Precision):
            raise TypeError(f"enters({name}=...): expected ModelConfig, Accelerator or Precision; got {cls!r}")

    def wrap(fn):
        params = list(inspect.signature(fn).parameters.values())
        missing = sorted(set(expected) - {p.name for p in params})
        if missing:
            raise TypeError(f"enters: {fn.__qualname__} has no parameter {', '.join(missing)}")
        checks = [(i, p.name, expected[p.name], p.default is None) for i, p in enumerate(params) if p.name in expected]
        label = function_label(fn.__module__, fn.__qualname__)

        @functools.wraps(fn)
        def entry(*args, **kwargs):
            if _INSIDE.get():
                return fn(*args, **kwargs)
            for i, name, cls, may_be_none in checks:
                if i < len(args):
                    value = args[i]
                elif name in kwargs:
                    value = kwargs[name]
                else:
                    continue  # its default: the function's own
                if not isinstance(value, cls) and not (may_be_none and value is None):
                    raise wrong_type(label, name, value, cls)
            token = _INSIDE.set(True)
            try:
                return fn(*args, **kwargs)
            finally:
                _INSIDE.reset(token)
        return entry
    return wrap
