import gc
import sys

import pytest

try:
    # nnsight 0.5+ gives every object a `save` attribute, and anyio refuses to define a
    # typed-attribute class (the MCP client's stdio streams) that has an unannotated one:
    # define them before a test module imports nnsight (tests/frontends/test_mcp.py runs in the same
    # worker as the execution tests). The server imports mcp before nnsight, so it never meets this.
    import mcp.client.stdio  # noqa: F401
except ImportError:  # no mcp extra: tests/frontends/test_mcp.py skips
    pass


@pytest.fixture(autouse=True)
def _running_test(request):
    """The running test, for the execution harness (tests/execution.py), which names each
    emulated run of an execution test as benchmarks/cost_accuracy.py does to check the cost
    model on it."""
    harness = sys.modules.get("execution")
    if harness is None:  # no test imported the harness
        yield
        return
    harness.running, harness.runs = request.node, {}
    yield
    harness.running, harness.runs = None, {}


@pytest.fixture
def ipython():
    """IPython's in-process shell (the process's one instance), reset before and after the
    test. A reset's ``gc.collect()`` (it flushes the output cache) walks every object of the
    process: late in a test worker, after the execution tests, seconds a reset. The objects
    that are there before it are frozen meanwhile (``gc.freeze``), so that it walks only what
    the reset frees."""
    pytest.importorskip("IPython")
    from IPython.core.interactiveshell import InteractiveShell

    def reset(shell) -> None:
        gc.freeze()
        try:
            shell.reset(new_session=True)
        finally:
            gc.unfreeze()

    shell = InteractiveShell.instance()
    reset(shell)
    yield shell
    reset(shell)


@pytest.fixture(scope="session")
def verify():
    """The ndif_opt.verify package (skips the test when the verify extra is missing)."""
    return pytest.importorskip("ndif_opt.verify", exc_type=ImportError)


@pytest.fixture(scope="session")
def gpt2(verify):
    """A tiny GPT-2 (12 layers) wrapped in nnsight's LanguageModel, built once."""
    return verify.tiny_model("openai-community/gpt2")
