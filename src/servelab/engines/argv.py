"""The one reader of server command lines: argv tokens into flags and positional words, and back.

Every engine's grammar is this one: `--name value`, `--name=value` and bare `--switch`; a negative number is
a value, never a flag (`--seed -1`); a value may be JSON (`--compilation-config '{"level": 3}'`). A flag's
canonical name is hyphenated: vLLM accepts `--max_num_seqs` and `--max-num-seqs` alike, and SGLang (hyphens)
and trtllm-serve (underscores) each take one spelling, which their grammar writes; reading both as one name
lets servelab compare a command with upstream's whatever the spelling. What differs between engines is data:
which other spellings name one flag (`aliases`), which flags never take a value (`switches`, so
`--enable-x MODEL` keeps MODEL positional) and which always do (`valued`, so `--stop -x` keeps `-x` as the
value). The per-engine tables live in servelab/engines/<engine>/grammar.py.
"""

from __future__ import annotations

from collections.abc import Collection, Container, Iterable, Mapping
from dataclasses import dataclass

NO_ALIASES: Mapping[str, str] = {}


@dataclass(frozen=True)
class FlagSet:
    """A set of canonical flag names given as names plus rules, for `parse`'s `switches` and `valued`: every
    flag whose name starts with one of `prefixes` (SGLang's and vLLM's `--enable-*` / `--disable-*` are all
    switches) except those in `exceptions`, and with `dotted`, every dotted flag (vLLM's
    `--compilation-config.mode 3` always takes the next token)."""

    names: frozenset[str] = frozenset()
    prefixes: tuple[str, ...] = ()
    exceptions: frozenset[str] = frozenset()
    dotted: bool = False

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        if name in self.names or (self.dotted and "." in name):
            return True
        return name.startswith(self.prefixes) and name not in self.exceptions if self.prefixes else False


def flag_set(
    *names: str, prefixes: tuple[str, ...] = (), exceptions: Iterable[str] = (), dotted: bool = False
) -> FlagSet:
    """A FlagSet of names, prefixes and exceptions as the engine spells them (read hyphenated)."""
    return FlagSet(
        frozenset(canonical(n) for n in names),
        tuple(canonical(p) for p in prefixes),
        frozenset(canonical(n) for n in exceptions),
        dotted,
    )


@dataclass(frozen=True, slots=True)
class Arg:
    """One flag (its canonical name, and its value or None for a bare switch) or one positional word
    (name None), with the tokens it was written as."""

    name: str | None
    value: str | None
    tokens: tuple[str, ...]

    @property
    def is_flag(self) -> bool:
        return self.name is not None


def is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def is_flag_token(token: str) -> bool:
    """Whether a token is written as a flag: a dash and a letter, never a negative number or a lone `-`."""
    return token.startswith("-") and len(token) > 1 and not is_number(token)


def canonical(token: str, aliases: Mapping[str, str] = NO_ALIASES) -> str:
    """A flag's one name: `--max_num_tokens=8` -> `--max-num-tokens`, an alias folded into its flag. In a
    dotted flag (`--attention_config.use_fp4_indexer_cache`) only the part before the first dot is the flag's
    name; the key after it is kept as written."""
    name = token.split("=", 1)[0]
    head, dot, key = name.partition(".")
    head = head.replace("_", "-")
    head = aliases.get(head, head)
    return head + dot + key


def parse(
    argv: Iterable[str],
    *,
    aliases: Mapping[str, str] = NO_ALIASES,
    switches: Container[str] = (),
    valued: Container[str] = (),
) -> list[Arg]:
    """The flags and positional words of a command line, in order. A flag takes the next token as its value
    unless it is written `--name=value`, it is one of `switches`, or the next token is itself a flag (and the
    flag is not one of `valued`). `switches` and `valued` hold canonical names."""
    tokens = list(argv)
    out: list[Arg] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if not is_flag_token(token):
            out.append(Arg(None, token, (token,)))
            i += 1
            continue
        name = canonical(token, aliases)
        if "=" in token:
            out.append(Arg(name, token.split("=", 1)[1], (token,)))
            i += 1
            continue
        nxt = tokens[i + 1] if i + 1 < len(tokens) else None
        takes = nxt is not None and name not in switches and (name in valued or not is_flag_token(nxt))
        if takes:
            assert nxt is not None
            out.append(Arg(name, nxt, (token, nxt)))
            i += 2
        else:
            out.append(Arg(name, None, (token,)))
            i += 1
    return out


def flag_values(args: Iterable[Arg]) -> dict[str, str | None]:
    """Canonical flag name -> its value (None: a bare switch); a flag given twice keeps its last value, as
    argparse does."""
    return {a.name: a.value for a in args if a.name is not None}


def render(args: Iterable[Arg]) -> list[str]:
    """The tokens of parsed arguments, as they were written."""
    return [token for a in args for token in a.tokens]


def without(args: Iterable[Arg], names: Collection[str]) -> list[Arg]:
    """The arguments less the flags named (canonical names), each with its value."""
    return [a for a in args if a.name is None or a.name not in names]


def merged(base: list[Arg], extra: Iterable[Arg]) -> list[Arg]:
    """`base` plus the flags of `extra` it does not already set (by canonical name); `extra`'s positional
    words are dropped."""
    have = {a.name for a in base if a.name is not None}
    return base + [a for a in extra if a.name is not None and a.name not in have]
