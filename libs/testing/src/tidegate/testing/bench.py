"""Loading a script of ``bench/`` as a module, for tests of its reading and accounting.

The scripts import their siblings (``from e2e import ...``) as when run from ``bench/``, so the
folder goes on ``sys.path`` first; each is loaded once under the name given.
"""

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[5] / "bench"
"""The project's ``bench/`` folder."""


def load_script(script: str, name: str) -> ModuleType:
    """``bench/<script>`` as the module ``name`` (the loaded one when it already is)."""
    if name in sys.modules:
        return sys.modules[name]
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(name, BENCH / script)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {BENCH / script}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
