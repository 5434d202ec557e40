"""``import gymnax`` without the seconds its renderers cost.

gymnax's package import loads every env module, and Pong's imports seaborn (with scipy.stats), matplotlib.pyplot and
matplotlib.colors for its renderer alone: about 3 of the 4 s that `make_env("gymnax:CartPole-v1")` took on the 2-core
CPU, paid by every run on a gymnax env (and every test that starts one) before any of its work. Here those modules,
and the matplotlib package itself (`import matplotlib.pyplot` imports its parent first: another 0.3 s), are
stand-ins while gymnax imports, and the real ones are imported the first time a renderer reads from them.
"""

from __future__ import annotations

import importlib
import sys
import types


class _ImportedOnUse(types.ModuleType):
    """Stands in for a module that gymnax imports at its top but uses only to render: the first attribute read
    imports the real module and forwards to it."""

    def __getattr__(self, attr):
        if attr.startswith("__"):  # the import system's questions (`__path__`: a package?) do not import it
            raise AttributeError(attr)
        if sys.modules.get(self.__name__) is self:  # read while gymnax imports: the real module, not this one again
            del sys.modules[self.__name__]
        return getattr(importlib.import_module(self.__name__), attr)


_RENDER_ONLY_IMPORTS = ("seaborn", "matplotlib", "matplotlib.pyplot", "matplotlib.colors")


def import_gymnax():
    """``import gymnax``, with the modules only its renderers use imported on first use, not at import. The package
    first imports gymnax here (the registry, the DeepSea adapter); presentation.py's import of gymnax's visualizer
    comes only after a gymnax env was made."""
    if "gymnax" in sys.modules:
        return sys.modules["gymnax"]
    stand_ins = {name: _ImportedOnUse(name) for name in _RENDER_ONLY_IMPORTS if name not in sys.modules}
    for name, module in stand_ins.items():  # `from matplotlib import colors` reads the parent's attribute
        parent, _, child = name.rpartition(".")
        if parent in stand_ins:
            setattr(stand_ins[parent], child, module)
    sys.modules.update(stand_ins)
    try:
        import gymnax
    finally:  # only gymnax's module globals keep the stand-ins; a later import gets the real module
        for name, module in stand_ins.items():
            if sys.modules.get(name) is module:
                del sys.modules[name]
    return gymnax
