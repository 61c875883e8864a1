"""Declared pass options: each option is written once, and one parser serves
every way in (``--lcma-rewrite="..."``, ``lcma-rewrite{...}`` inside
``--pass-pipeline``, the Python API) and falcon-opt's ``--help``.

A pass's options are a dataclass with a ``PASS`` class attribute (the pass's
name) whose option fields are declared with :func:`option` (as xDSL's passes
and IREE's ``CompilerOptions`` declare theirs)::

    @dataclass
    class TilesOptions:
        PASS: ClassVar[str] = "falcon-tiles"
        table: str = option("cuda-sm80", choices=("cuda-sm80", "none", "auto"),
                            aliases=("target",), help="tile table")
        combine_max: int = option(64, range=(1, 4096), help="...")

    opts = parse_options(TilesOptions, "table=cuda-sm80 combine-max=32")
    to_text(opts)              # "combine-max=32"
    format_help(TilesOptions)  # the help lines falcon-opt shows

Text form: ``key=value`` tokens separated by spaces, optionally inside one
pair of braces and/or quotes; a value may be quoted (``scheme='strassen'``).
The command-line key of field ``max_error`` is ``max-error``. A field that is
not declared with :func:`option` (e.g. ``filename``) is not an option.

Value kinds (``type=``, else the default's type):

* ``str`` with ``choices``: one of them;
* ``bool``: ``true``/``false`` (``1``/``0``);
* ``int`` / ``float``: a number, checked against ``range`` (``(lo, hi)``,
  either end ``None`` for open; ``above=True`` makes ``lo`` exclusive);
* anything else: ``parse(text) -> value``, raising :class:`OptionError`
  (shown as is) or ``ValueError`` (shown after ``PASS option KEY:``).

``auto=True`` makes the text ``auto`` mean ``None`` ("falcon decides").
Every error is an :class:`OptionError` with one line naming the pass, the
option and what is expected.
"""

from __future__ import annotations

import dataclasses
import textwrap
from dataclasses import dataclass
from typing import Any, Callable, Optional

__all__ = ["OptionError", "OptionTypeError", "OptionSpec", "option", "option_specs", "parse_options", "to_text",
           "format_help", "option_keys", "strip_text"]

_META = "falcon.option"


class OptionError(ValueError):
    """Invalid pass options: unknown key, bad value, duplicate key (one line)."""


class OptionTypeError(OptionError, TypeError):
    """Options given as a Python value of the wrong type (``lcma=0``, a list,
    bytes): an :class:`OptionError` like any bad option (one line), and a
    ``TypeError`` for callers that catch that."""


@dataclass(frozen=True)
class OptionSpec:
    """What :func:`option` records about one option (in the field's metadata).

    Attributes:
        name: the dataclass field's name (``max_error``).
        key: the command-line key (``max-error``).
        help: one or two sentences for ``--help``.
        type: ``str``, ``bool``, ``int``, ``float``, or ``None`` for ``parse``.
        choices: allowed texts of a ``str`` option (``()``: any).
        range: ``(lo, hi)`` of a number, inclusive (``None``: open end).
        above: ``lo`` is exclusive (a float that must be > 0).
        auto: the text ``auto`` means ``None``.
        aliases: other keys accepted for this option (``target`` for ``profile``).
        parse: ``text -> value`` for values of other kinds.
        show: ``value -> text`` (inverse of ``parse``) for :func:`to_text`.
        metavar: the value's form in ``--help`` (default from the kind).
        expect: what is expected, as the error messages say it (default from
            the kind: ``"auto, peel or pad"``, ``"auto or 1..4"``).
        positional: a token without ``=`` is this option's value.
    """

    name: str
    key: str
    help: str
    type: Any = None
    choices: tuple = ()
    range: Optional[tuple] = None
    above: bool = False
    auto: bool = False
    aliases: tuple = ()
    parse: Optional[Callable[[str], Any]] = None
    show: Optional[Callable[[Any], str]] = None
    metavar: Optional[str] = None
    expect: Optional[str] = None
    positional: bool = False

    # -- the value's text form ------------------------------------------------
    def expected(self) -> str:
        """The ``expected ...`` part of this option's error messages."""
        if self.expect:
            return self.expect
        if self.type is bool:
            alts = ["true", "false"]
        elif self.choices:
            alts = list(self.choices)
        elif self.type in (int, float):
            alts = [self._range_text()]
        else:
            alts = [self.metavar or "a value"]
        if self.auto and "auto" not in alts:
            alts = ["auto"] + alts
        return alts[0] if len(alts) == 1 else ", ".join(alts[:-1]) + " or " + alts[-1]

    def _range_text(self) -> str:
        lo, hi = self.range or (None, None)
        if lo is not None and hi is not None:
            return f"{lo}..{hi}"
        if lo is not None:
            return f"{'>' if self.above else '>='} {lo}"
        if hi is not None:
            return f"<= {hi}"
        return "a number"

    def form(self) -> str:
        """The value's form for ``--help`` (``auto|peel|pad``, ``auto|1..4``)."""
        if self.metavar:
            return self.metavar
        if self.type is bool:
            alts = ["true", "false"]
        elif self.choices:
            alts = list(self.choices)
        elif self.type in (int, float):
            alts = [self._range_text().replace(" ", "")]
        else:
            alts = ["VALUE"]
        if self.auto and "auto" not in alts:
            alts = ["auto"] + alts
        return "|".join(alts)

    def value_of(self, text: str, pass_name: str, key: str) -> Any:
        """The value of ``text`` (quotes already stripped), typed as ``key``.

        Raises:
            OptionError: the value is not allowed (one line).
        """
        where = f"{pass_name} option {key}"
        if self.auto and text == "auto":
            return None
        if self.parse is not None:
            try:
                return self.parse(text)
            except OptionError:
                raise
            except ValueError as e:
                raise OptionError(f"{where}: {e}") from None
        if self.type is bool:
            if text not in ("true", "false", "1", "0"):
                raise OptionError(f"{where}='{text}' is invalid (expected {self.expected()})")
            return text in ("true", "1")
        if self.type in (int, float):
            return self._number(text, where)
        if self.choices and text not in self.choices:
            raise OptionError(f"{where}='{text}' is invalid (expected {self.expected()})")
        return text

    def _number(self, text: str, where: str):
        what = "an integer" if self.type is int else "a number"
        try:
            value = self.type(text)
        except ValueError:
            raise OptionError(f"{where}='{text}' is not {what} (expected {self.expected()})") from None
        lo, hi = self.range or (None, None)
        ok = value == value  # NaN is never in range
        if lo is not None:
            ok = ok and (value > lo if self.above else value >= lo)
        if hi is not None:
            ok = ok and value <= hi
        if not ok:
            raise OptionError(f"{where}={text} is out of range (expected {self.expected()})")
        return value

    def text_of(self, value: Any) -> str:
        """``value`` as the text :meth:`value_of` reads back."""
        if value is None and self.auto:
            return "auto"
        if self.show is not None:
            return self.show(value)
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, (tuple, list)):
            return ",".join(str(v) for v in value)
        return str(value)


def option(default: Any = dataclasses.MISSING, *, help: str, key: Optional[str] = None,
           type: Any = None, choices: tuple = (), range: Optional[tuple] = None,
           above: bool = False, auto: bool = False, aliases: tuple = (),
           parse: Optional[Callable[[str], Any]] = None, show: Optional[Callable[[Any], str]] = None,
           metavar: Optional[str] = None, expect: Optional[str] = None,
           positional: bool = False) -> Any:
    """A dataclass field that is a pass option (see :class:`OptionSpec` for the arguments).

    ``key`` defaults to the field's name with ``_`` written ``-``; ``type``
    to the default's type (give it when the default is ``None``). Mutable
    defaults are not supported (use tuples).
    """
    meta = dict(key=key, help=help, type=type, choices=tuple(choices), range=range, above=above,
                auto=auto, aliases=tuple(aliases), parse=parse, show=show, metavar=metavar,
                expect=expect, positional=positional)
    return dataclasses.field(default=default, metadata={_META: meta})


def option_specs(cls) -> list:
    """The :class:`OptionSpec` of every option field of dataclass ``cls``, in field order."""
    cached = cls.__dict__.get("_falcon_option_specs")
    if cached is not None:
        return cached
    specs = []
    for f in dataclasses.fields(cls):
        meta = f.metadata.get(_META)
        if meta is None:
            continue
        meta = dict(meta)
        key = meta.pop("key") or f.name.replace("_", "-")
        if meta["type"] is None and meta["parse"] is None and f.default is not None:
            meta["type"] = type(f.default)
        specs.append(OptionSpec(name=f.name, key=key, **meta))
    setattr(cls, "_falcon_option_specs", specs)
    return specs


def option_keys(cls) -> tuple:
    """The command-line keys of ``cls``'s options, in field order."""
    return tuple(s.key for s in option_specs(cls))


def strip_text(text: Optional[str]) -> str:
    """Option text without its outer white space, braces and quotes
    (``"{scheme=strassen}"`` -> ``scheme=strassen``), as :func:`parse_options` reads it."""
    text = (text or "").strip()
    for _ in range(2):  # '{...}', "'...'", or '{...}' inside quotes
        q = text[:1]
        if len(text) >= 2 and q in "'\"" and text[-1] == q and q not in text[1:-1]:
            text = text[1:-1].strip()
        if text.startswith("{") and text.endswith("}"):
            text = text[1:-1].strip()
    return text


def parse_options(cls, text: Optional[str]):
    """An instance of options class ``cls`` from ``"key=value key=value"``.

    Tokens are separated by white space; the whole text may sit in braces
    and/or quotes, each value in quotes. Options not given keep their
    defaults; a text that is only the class's ``AUTO`` word (if it has one,
    e.g. ``auto``) means all defaults. After all tokens, ``cls.validate(self)`` runs if the class has
    one (checks across options).

    Raises:
        OptionError: a token without ``=`` (unless the class has a positional
            option), an unknown key (the message lists the keys), a key given
            twice, a value the option does not allow, or any token for a class
            without options.
    """
    name = getattr(cls, "PASS", cls.__name__)
    specs = option_specs(cls)
    by_key = {}
    for s in specs:
        for k in (s.key, s.name) + s.aliases:
            by_key.setdefault(k, s)
    positional = next((s for s in specs if s.positional), None)
    keys = ", ".join(s.key for s in specs)
    values, seen = {}, {}
    words = strip_text(text).split()
    if words == [getattr(cls, "AUTO", None)]:
        words = []
    if words and not specs:
        raise OptionError(f"{name} takes no options (given: '{words[0]}')")
    for tok in words:
        key, eq, val = tok.partition("=")
        if not eq and positional is not None:
            key, val, eq = positional.key, tok, "="
        spec = by_key.get(key)
        ident = spec.name if spec else key
        if ident in seen:
            also = f" (also as '{seen[ident]}')" if seen[ident] != key else ""
            raise OptionError(f"{name} option '{key}' is given twice{also}")
        seen[ident] = key
        if not eq:
            raise OptionError(f"{name} option '{tok}' must be key=value (keys: {keys})")
        if spec is None:
            raise OptionError(f"unknown {name} option '{key}' (keys: {keys})")
        values[spec.name] = spec.value_of(val.strip("'\""), name, key)
    opts = cls(**values)
    validate = getattr(opts, "validate", None)
    if callable(validate):
        validate()
    return opts


def to_text(options) -> str:
    """The options that differ from their defaults, as ``"key=value ..."`` text
    (field order); :func:`parse_options` reads it back to equal options
    (values with white space excepted: the text form cannot hold them)."""
    out = []
    fields = {f.name: f for f in dataclasses.fields(options)}
    for s in option_specs(type(options)):
        value, default = getattr(options, s.name), fields[s.name].default
        if value != default:
            out.append(f"{s.key}={s.text_of(value)}")
    return " ".join(out)


def format_help(cls, indent: int = 30, width: int = 79) -> list:
    """``--help`` lines for ``cls``'s options: ``key=FORM`` then its help, the
    default and the aliases, wrapped at ``width`` and indented by ``indent``."""
    lines = []
    fields = {f.name: f for f in dataclasses.fields(cls)}
    pad = " " * indent
    for s in option_specs(cls):
        default = fields[s.name].default
        text = s.help.rstrip(".")
        text += f" (default {s.text_of(default) or 'none'}"
        text += f"; also {', '.join(a + '=' for a in s.aliases)})" if s.aliases else ")"
        lines.append(f"{pad}{s.key}={s.form()}")
        lines += textwrap.wrap(text, width=width, initial_indent=pad + "    ",
                               subsequent_indent=pad + "    ", break_on_hyphens=False)
    return lines
