"""A retry around each request, rewritten to go around the session: it gives up.

`for attempt in range(MAX_ATTEMPTS): try: <trace>; break except ...: <wait>` gives up on
a request after its last attempt. Around a session, each handler that does not end by
raising raises the last failure itself: `if _ndif_attempt == <last>: raise`, `<last>`
computed again where the session failed — `stop - 1` of `range(stop)` or `range(start,
stop)` when `stop` gives the same value again (a constant, a name or an attribute of one
that the loop leaves alone). When that cannot be shown the retry is not rewritten: the
loop stays as it is and a finding says why. A retry that never gave up let the session's
failure pass silently: the replay after it read records of a session that never ran
(`NameError: name '_ndif_rows' is not defined`) where the original handled each item.

Failures are injected two ways: a request the server cannot run (a layer that does not
exist, verify's emulation: the original locally and emulated, the optimized script
emulated, on tiny GPT-2 and Llama models), and NDIF unreachable (every remote call raises
`ConnectionError` on the client; both scripts run in a subprocess and print the same).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from execution import both, optimized_and_verified, script

from ndif_opt import optimize

# the first item's layer does not exist: its request fails on the server at every
# attempt, and the original gives up on it and records the error
ITEM_RETRIES = '''
    import time
    from nnsight import LanguageModel

    MAX_ATTEMPTS = 3
    DELAYS = (0.001, 0.002, 0.004)
    model = LanguageModel("REPO")
    ITEMS = [("bad", 99), ("cat", 0), ("dog", 1)]
    results, errors = {}, []
    for name, layer in ITEMS:
        try:
            for attempt in ATTEMPTS:
                try:
                    with model.trace("The " + name + " sat on the", remote=True):
                        norm = LAYERS[layer].output[0, -1].norm().save()
                    break
                except Exception:
                    time.sleep(0.001)
            results[name] = round(norm.item(), 3)
            print(f"{name}: {results[name]}")
        except Exception as exc:
            errors.append((name, type(exc).__name__))
            print(f"skipping {name}: {type(exc).__name__}")
    print(f"done: {len(results)} ok, {len(errors)} errors")
'''


@both
def test_a_retry_counted_by_a_name_gives_up_after_its_last_attempt(family):
    # it gave up on `_ndif_attempt == None`, never: the session's failure passed, and the
    # replay read records of a session that never ran
    result, report = optimized_and_verified(ITEM_RETRIES.replace("ATTEMPTS:", "range(MAX_ATTEMPTS):"), family)
    assert "if _ndif_attempt == MAX_ATTEMPTS - 1:\n" in result.code, result.code
    assert "== None" not in result.code
    # three attempts of the session, then the loop as written: 1 + 1 + 3 requests
    assert report.after.requests == 3 + report.before.requests, report.to_text()


@both
def test_a_retry_whose_last_attempt_cannot_be_computed_again_is_left_as_it_is(family):
    result, report = optimized_and_verified(ITEM_RETRIES.replace("ATTEMPTS:", "range(len(DELAYS)):"), family)
    assert "model.session(" not in result.code and "_ndif_attempt" not in result.code, result.code
    assert report.after.requests == report.before.requests
    found = [f for f in result.findings if f.pass_id == "session-hoisting"]
    assert len(found) == 1, found
    assert found[0].range.start.line == _line_of(script(ITEM_RETRIES, family), "for name, layer in ITEMS"), found
    assert "`range(len(DELAYS))`" in found[0].reason and "never give up" in found[0].reason, found[0].reason


# NDIF unreachable: every remote trace or session raises ConnectionError on the client
UNREACHABLE = '''
import runpy
import sys

from nnsight import LanguageModel


def unreachable(method):
    def call(self, *args, **kwargs):
        if kwargs.get("remote"):
            raise ConnectionError("NDIF unreachable")
        return method(self, *args, **kwargs)
    return call


LanguageModel.__init__ = lambda self, *args, **kwargs: None  # no model is loaded
LanguageModel.trace = unreachable(LanguageModel.trace)
LanguageModel.session = unreachable(LanguageModel.session)
try:
    runpy.run_path(sys.argv[1], run_name="__main__")
except BaseException as error:
    print("raised", type(error).__name__, error)
'''

ITEMS_UNDER_RETRY = '''
    import time
    from nnsight import LanguageModel

    REMOTE = True
    MAX_ATTEMPTS = 2
    model = LanguageModel("openai-community/gpt2")
    results, errors = {}, []
    for prompt in ["The cat sat on the", "Paris is the capital of", "One two three"]:
        try:
            for attempt in range(1, MAX_ATTEMPTS + 1):
                try:
                    with model.trace(prompt, remote=REMOTE):
                        top = model.lm_head.output[0, -1].argmax(dim=-1).save()
                    break
                except ConnectionError as exc:
                    print(f"attempt {attempt} failed for {prompt!r}: {exc}")
                    time.sleep(0.001)
            results[prompt] = top.item()
            print(f"{prompt}: {results[prompt]}")
        except Exception as exc:
            errors.append({"prompt": prompt, "error": type(exc).__name__})
            print(f"skipping {prompt!r}: {type(exc).__name__}")
    print(f"done: {len(results)} ok, {len(errors)} errors")
'''


def _run_unreachable(tmp_path, name: str, source: str) -> str:
    (tmp_path / "unreachable.py").write_text(UNREACHABLE)
    (tmp_path / name).write_text(source)
    done = subprocess.run([sys.executable, "unreachable.py", name], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_with_ndif_unreachable_the_optimized_script_handles_each_item_as_written(tmp_path):
    pytest.importorskip("nnsight")
    source = textwrap.dedent(ITEMS_UNDER_RETRY)
    result = optimize(source)
    assert "model.session(" in result.code, result.code
    original = _run_unreachable(tmp_path, "original.py", source)
    optimized = _run_unreachable(tmp_path, "optimized.py", result.code)
    assert original.endswith("done: 0 ok, 3 errors\n"), original
    # the session's two attempts fail, then the loop runs as written: each item fails on
    # its own (it printed "raised NameError name '_ndif_rows' is not defined")
    said = "attempt {} of the session failed: ConnectionError('NDIF unreachable')\n"
    assert optimized == said.format(1) + said.format(2) + original, optimized
    assert "if _ndif_attempt == MAX_ATTEMPTS:\n" in result.code, result.code


@pytest.mark.parametrize("attempts, last", [
    ("range(MAX_ATTEMPTS)", "MAX_ATTEMPTS - 1"),
    ("range(1, MAX_ATTEMPTS + 1)", "MAX_ATTEMPTS"),
    ("range(1, MAX_ATTEMPTS + 3)", "MAX_ATTEMPTS + 2"),
    ("range(0, settings.tries)", "settings.tries - 1"),
    ("range(1, 2 * settings.tries, 1)", "2 * settings.tries - 1"),
    ("range(2 * 2)", "3"),
    ("range(1, 3 + 1)", "3"),
])
def test_the_last_attempt_is_the_ranges_stop_less_one_computed_again(attempts, last):
    result = optimize(_retry_script(attempts))
    assert "model.session(" in result.code, result.code
    assert f"if _ndif_attempt == {last}:\n" in result.code, result.code


FEWER = "\n\ndef fewer():\n    global MAX_ATTEMPTS\n    MAX_ATTEMPTS -= 1\n\n\n"


@pytest.mark.parametrize("attempts, changed, said", [
    ("range(len(PROMPTS))", "", "`range(len(PROMPTS))` is not"),
    ("range(0, MAX_ATTEMPTS, 2)", "", "`range(0, MAX_ATTEMPTS, 2)` is not"),
    ("range(TRIES[0])", "", "`range(TRIES[0])` is not"),
    ("range(0)", "", "`range(0)` is not"),
    # a function may declare the name `global` and change it while the session runs
    ("range(MAX_ATTEMPTS)", FEWER, "`range(MAX_ATTEMPTS)` is not"),
    # (a name or attribute the loop itself changes is refused before: the session's place
    # cannot read it, or the loop changes an object that stays on your machine)
    ("range(MAX_ATTEMPTS)", "MAX_ATTEMPTS = len(prompt)", "counts its attempts with `MAX_ATTEMPTS`"),
    ("range(settings.tries)", "settings.tries = len(prompt)", "changes or reads `settings`"),
])
def test_a_retry_whose_last_attempt_cannot_be_computed_again_is_not_rewritten(attempts, changed, said):
    source = _retry_script(attempts, "" if changed == FEWER else changed)
    if changed == FEWER:
        source = source.replace("tops = []\n", "tops = []\n" + FEWER)
    result = optimize(source)
    assert "model.session(" not in result.code, result.code
    found = [f for f in result.findings if f.pass_id == "session-hoisting"]
    assert len(found) == 1 and found[0].range.start.line == _line_of(source, "for prompt in PROMPTS"), found
    assert said in found[0].reason, found[0].reason


def test_every_handler_that_does_not_end_by_raising_gives_up():
    # one handler re-raises, one waits, one may `continue` (the give-up goes first), one
    # raises on a condition of its own (the give-up follows it all the same)
    source = _retry_script("range(MAX_ATTEMPTS)").replace(
        "        except Exception:\n            time.sleep(0.001)\n",
        "        except KeyboardInterrupt:\n"
        "            raise\n"
        "        except ConnectionError:\n"
        "            time.sleep(0.001)\n"
        "        except TimeoutError:\n"
        "            if attempt < 1:\n"
        "                continue\n"
        "        except Exception:\n"
        "            if attempt == MAX_ATTEMPTS:\n"
        "                raise\n",
    )
    result = optimize(source)
    code = result.code
    assert "model.session(" in code, code
    session_retry = code[code.index("for _ndif_attempt"):]
    assert "except KeyboardInterrupt:\n        raise\n    except ConnectionError:\n        time.sleep(0.001)\n" \
        "        if _ndif_attempt == MAX_ATTEMPTS - 1:\n            raise\n" in session_retry, code
    assert "except TimeoutError:\n        if _ndif_attempt == MAX_ATTEMPTS - 1:\n            raise\n" \
        "        if _ndif_attempt < 1:\n            continue\n" in session_retry, code
    assert "    except Exception:\n        if _ndif_attempt == MAX_ATTEMPTS:\n            raise\n" \
        "        if _ndif_attempt == MAX_ATTEMPTS - 1:\n            raise\n" in session_retry, code


def _retry_script(attempts: str, changed: str = "") -> str:
    """A loop of traces under a retry counted by ``attempts``; ``changed``: a line the
    loop runs before its retry."""
    source = textwrap.dedent('''\
        import time
        from nnsight import LanguageModel

        MAX_ATTEMPTS = 3
        TRIES = [3]
        PROMPTS = ["a b", "c d", "e f"]
        settings = type("Settings", (), {"tries": 3})()
        model = LanguageModel("openai-community/gpt2")
        tops = []

        for prompt in PROMPTS:
            CHANGED
            for attempt in ATTEMPTS:
                try:
                    with model.trace(prompt, remote=True):
                        tops.append(model.lm_head.output[0, -1].argmax().save())
                    break
                except Exception:
                    time.sleep(0.001)
        print(tops)
    ''')
    source = source.replace("for attempt in ATTEMPTS:", f"for attempt in {attempts}:")
    return source.replace("CHANGED", changed) if changed else source.replace("    CHANGED\n", "")


def _line_of(code: str, text: str) -> int:
    """The 0-based line ``text`` starts on (a finding's range counts from 0)."""
    return code[: code.index(text)].count("\n")


@pytest.mark.parametrize("handler, gives_up", [
    # with a numbered last attempt, a handler's own branches are followed at that number
    ("if attempt < 2:\n                time.sleep(5)\n            else:\n                raise\n", False),
    ("if attempt >= 2 and not attempt == 0:\n                raise\n            time.sleep(5)\n", False),
    ("if attempt == 3:\n                raise\n", True),  # one too far: it never raises
    ("if attempt < 2:\n                continue\n            raise\n", False),
    ("if attempt < 3:\n                continue\n            raise\n", True),  # it goes on at the last
    ("if len(PROMPTS) > attempt:\n                time.sleep(5)\n            else:\n                raise\n", True),
])
def test_a_handler_that_raises_on_the_last_attempt_by_itself_needs_no_give_up(handler, gives_up):
    source = _retry_script("range(3)").replace("time.sleep(0.001)\n", handler)
    code = optimize(source).code
    assert "model.session(" in code, code
    assert ("if _ndif_attempt == 2:\n" in code) is gives_up, code


def test_a_branch_that_cannot_be_decided_goes_on_to_the_handlers_own_raise():
    handler = "if len(PROMPTS) > 9:\n                print(attempt)\n            if attempt == 2:\n                raise\n"
    code = optimize(_retry_script("range(3)").replace("time.sleep(0.001)\n", handler)).code
    assert "model.session(" in code and code.count("if _ndif_attempt == 2:") == 1, code  # its own


# a retry that gives up in the loop's `else:` (every attempt failed), in a helper called
# for each prompt
RETRY_WITH_ELSE = '''
    import time
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    PROMPTS = ["The sky is", "Grass is usually", "Snow is"]


    def top_token(prompt):
        for attempt in range(3):
            try:
                with model.trace(prompt, remote=True):
                    logits = model.lm_head.output[0, -1].save()
                break
            except Exception:
                time.sleep(0.001 * 2 ** attempt)
        else:
            raise RuntimeError(f"gave up after {attempt + 1} attempts")
        return logits.argmax().item()


    tops = [top_token(p) for p in PROMPTS]
    print(tops)
'''


@both
def test_a_retry_that_gives_up_in_its_else_goes_around_the_session(family):
    result, report = optimized_and_verified(RETRY_WITH_ELSE, family)
    assert report.before.requests == 3 and report.after.requests == 1, report.to_text()
    # the `else:` gives up around the session too: no give-up is added to the handler
    assert 'else:\n    raise RuntimeError(f"gave up after {_ndif_attempt + 1} attempts")' in result.code, result.code
    assert "if _ndif_attempt ==" not in result.code
    estimate = [c for c in result.costs if c.pass_id == "session-hoisting"][0]
    assert estimate.before.requests == 3  # one attempt per call, not three


def test_with_ndif_unreachable_a_retry_with_else_gives_up_as_written(tmp_path):
    pytest.importorskip("nnsight")
    source = script(RETRY_WITH_ELSE, "gpt2")
    result = optimize(source)
    assert "model.session(" in result.code, result.code
    original = _run_unreachable(tmp_path, "original.py", source)
    optimized = _run_unreachable(tmp_path, "optimized.py", result.code)
    assert original == optimized == "raised RuntimeError gave up after 3 attempts\n", (original, optimized)


# a retry wrapper that gives up after its loop (`raise RuntimeError(...)`), each success a
# `return`: around the session the same give-up ends the retry (it re-raised the last failure)
WRAPPER_GIVING_UP_AFTER = '''
    import time
    from nnsight import LanguageModel

    model = LanguageModel("REPO")


    def with_retries(fn, *args, retries=3):
        for attempt in range(retries):
            try:
                return fn(*args)
            except Exception as exc:
                print(f"attempt {attempt} failed: {type(exc).__name__}")
                time.sleep(0.001)
        raise RuntimeError("all retries failed")


    def top_token(prompt):
        with model.trace(prompt, remote=True):
            logits = model.lm_head.output[0, -1].save()
        return logits.argmax().item()


    tops = [with_retries(top_token, p) for p in ["The cat sat on the", "The dog ran to the"]]
    print(tops)
'''


@both
def test_a_retry_wrapper_that_gives_up_after_its_loop_goes_around_the_session(family):
    result, report = optimized_and_verified(WRAPPER_GIVING_UP_AFTER, family)
    assert report.after.requests == 1, report.to_text()
    assert 'else:\n    raise RuntimeError("all retries failed")' in result.code, result.code


def test_with_ndif_unreachable_a_retry_wrapper_gives_up_as_written(tmp_path):
    pytest.importorskip("nnsight")
    source = script(WRAPPER_GIVING_UP_AFTER, "gpt2")
    result = optimize(source)
    assert "model.session(" in result.code, result.code
    original = _run_unreachable(tmp_path, "original.py", source)
    optimized = _run_unreachable(tmp_path, "optimized.py", result.code)
    assert original.endswith("raised RuntimeError all retries failed\n"), original
    assert optimized.endswith("raised RuntimeError all retries failed\n"), optimized
