import pytest


@pytest.fixture(scope="session")
def verify():
    """The ndif_opt.verify package (skips the test when the verify extra is missing)."""
    return pytest.importorskip("ndif_opt.verify", exc_type=ImportError)


@pytest.fixture(scope="session")
def gpt2(verify):
    """A tiny GPT-2 (12 layers) wrapped in nnsight's LanguageModel, built once."""
    return verify.tiny_model("openai-community/gpt2")
