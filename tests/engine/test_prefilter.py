"""The prefilter's shortcut: an import of nnsight at the head of a file, told by Python's
parser, gives the answer ast-grep would."""

import pytest

from ndif_opt.engine.prefilter import _imports_nnsight_first, uses_nnsight


@pytest.mark.parametrize("source", [
    "# a script\nfrom nnsight import LanguageModel\n",
    "import os\nif os:\n    pass\nimport nnsight\n",
    "import nnsight as ns, os\r\nx = 1\r\n",
    "from nnterp.standardized_transformer import StandardizedTransformer\n",
])
def test_an_import_at_the_head_is_told_by_the_parse(source):
    assert _imports_nnsight_first(source)
    assert uses_nnsight(source)


@pytest.mark.parametrize("source", [
    '"""Example:\nfrom nnsight import LanguageModel\n"""\nremote = 1\n',  # in a docstring
    "x = f(\nfrom nnsight import x\n",  # inside brackets (not Python: ast-grep decides)
    "y = 1 \\\nimport nnsight\n",  # a continued line
    "    from nnsight import x\n",  # indented
    "from nnsight . foo import x\n",  # spelled otherwise than the pattern
])
def test_anything_else_is_left_to_ast_grep(source):
    assert not _imports_nnsight_first(source)


def test_a_docstring_mention_is_still_no_use():
    assert not uses_nnsight('"""\nfrom nnsight import LanguageModel\n"""\nremote = 1\n')
