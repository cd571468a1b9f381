"""tests/nnterp: run only where nnterp imports (nnterp 1.3.0 needs nnsight 0.6.3, the
`.venv-nnterp` of `.ci/run`); everywhere else the whole directory is skipped.

The module asked for is nnterp's own ``standardized_transformer``: with ``tests/`` on
``sys.path`` (pytest's rootdir insertion) this very directory is importable as a namespace
package ``nnterp``, so ``importorskip("nnterp")`` alone would succeed without nnterp.
"""

import pytest

pytest.importorskip("nnterp.standardized_transformer")
