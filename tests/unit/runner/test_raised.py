"""What the code raised, read back from its stderr (runner/raised.py): the answer's structured
`exception`. The samples are what CPython 3.11+, IPython and Node.js 20 print (recorded here)."""

from __future__ import annotations

import pytest
from sandbox_runtime.runner.raised import MAX_TRACEBACK_CHARS, raised, raised_message

CELL_VALUE_ERROR = """Traceback (most recent call last):
  File "<string>", line 26, in <module>
  File "<code-3>", line 2, in <module>
    raise ValueError("bad input")
ValueError: bad input
"""

CHAINED = """partial output the code printed
Traceback (most recent call last):
  File "<code-1>", line 2, in f
ZeroDivisionError: division by zero

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "<code-1>", line 6, in <module>
KeyError: 'k'
"""

SYNTAX_WITHOUT_TRACEBACK = """  File "<string>", line 1
    x = (
        ^
SyntaxError: '(' was never closed
"""

IPYTHON = (
    "\x1b[0;31m---------------------------------------------------------------------------\x1b[0m\n"
    "\x1b[0;31mValueError\x1b[0m                                Traceback (most recent call last)\n"
    "Cell \x1b[0;32mIn[1], line 1\x1b[0m\n"
    '\x1b[0;32m----> 1\x1b[0m raise ValueError("bad")\n\n'
    "\x1b[0;31mValueError\x1b[0m: bad\n"
)

NODE_TYPE_ERROR = """[stdin]:1
console.log(1); throw new TypeError("bad thing")
                ^

TypeError: bad thing
    at [stdin]:1:23
    at runScriptInThisContext (node:internal/vm:209:10)

Node.js v20.20.2
"""

NODE_SYNTAX_ERROR = """[stdin]:2



SyntaxError: Unexpected end of input
    at makeContextifyScript (node:internal/vm:185:14)

Node.js v20.20.2
"""


def test_raised_python_exception_name_value_and_traceback() -> None:
    # Given the traceback a cell that raised ValueError leaves on stderr / When read
    exception = raised(CELL_VALUE_ERROR, "python")
    # Then its name, message and the traceback as printed
    assert exception == {"name": "ValueError", "value": "bad input", "traceback": CELL_VALUE_ERROR}


def test_raised_chained_exceptions_keep_the_whole_chain_and_name_the_last() -> None:
    exception = raised(CHAINED, "python")
    assert exception is not None
    assert (exception["name"], exception["value"]) == ("KeyError", "'k'")
    # the output printed before the traceback is not part of it; both chained tracebacks are
    assert exception["traceback"].startswith("Traceback (most recent call last):\n")
    assert "ZeroDivisionError" in exception["traceback"]


def test_raised_syntax_error_without_traceback_and_ipython_format() -> None:
    syntax = raised(SYNTAX_WITHOUT_TRACEBACK, "python")
    assert syntax is not None and (syntax["name"], syntax["value"]) == ("SyntaxError", "'(' was never closed")
    ipython = raised(IPYTHON, "python")
    assert ipython is not None and (ipython["name"], ipython["value"]) == ("ValueError", "bad")
    assert "\x1b" not in ipython["traceback"]


@pytest.mark.parametrize(
    ("stderr", "name", "value"),
    [
        (NODE_TYPE_ERROR, "TypeError", "bad thing"),
        (NODE_SYNTAX_ERROR, "SyntaxError", "Unexpected end of input"),
    ],
)
def test_raised_node_uncaught_errors(stderr: str, name: str, value: str) -> None:
    for language in ("javascript", "typescript"):
        exception = raised(stderr, language)
        assert exception is not None
        assert (exception["name"], exception["value"]) == (name, value)
        assert exception["traceback"].startswith("[stdin]:") and "    at " in exception["traceback"]
        assert "Node.js v" not in exception["traceback"]


@pytest.mark.parametrize(
    ("stderr", "language"),
    [
        ("Error: printed by the code, not thrown\nmore output\n", "javascript"),
        ("ValueError: printed, not raised\n", "python"),  # no traceback header
        (CELL_VALUE_ERROR, "bash"),  # a script's stderr is its own
        ("", "python"),
    ],
)
def test_raised_reads_nothing_that_is_not_a_report(stderr: str, language: str) -> None:
    assert raised(stderr, language) is None


def test_raised_bounds_what_it_carries_and_words_the_message() -> None:
    # Given a traceback with a huge message
    huge = (
        'Traceback (most recent call last):\n  File "<code-1>", line 1\nValueError: ' + "x" * 100_000 + "\n"
    )
    exception = raised(huge, "python")
    assert exception is not None
    assert len(exception["traceback"]) == MAX_TRACEBACK_CHARS and len(exception["value"]) <= 2048
    message = raised_message(exception)
    assert message.startswith("The code raised ValueError: xxx") and len(message) < 400
