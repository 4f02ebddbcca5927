"""Matching checkpoint keys to model names, level by level (reconcile-initializers).

The user's ``renames`` come first, then the user's regex ``rules`` rewrite keys;
then keys and names are compared at the levels of
:mod:`graphpass.passes._reconcile_names`, most exact first. At each level only
keys and names still unmatched take part, so an exact match is never disturbed by
a looser one. Within a level:

* a name that two keys fit is ambiguous (unless the keys share their data, as
  tied weights saved under both names do), and
* a key that fits two names is ambiguous;

both are reported as problems listing the candidates, never resolved by a guess.
"""

from __future__ import annotations

import difflib
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from graphpass.passes._reconcile_names import (
    BasePrefix,
    base_prefix_candidates,
    canonical_forms,
    strip_wrappers,
)

__all__ = ["LEVELS", "Match", "Matching", "match_names"]

LEVELS = ("rename", "rule", "exact", "wrapper-prefix", "separator", "base-prefix")
"""The ways a key can match a name, in the order they are tried."""

_SHOWN = 6


@dataclass(frozen=True)
class Match:
    """A checkpoint key chosen for a model name.

    Attributes:
        name: The model name (an initializer, a weight input, or a name the exporter
            dropped but still refers to).
        key: The checkpoint key.
        rule: How they matched: one of :data:`LEVELS`.
    """

    name: str
    key: str
    rule: str


@dataclass
class Matching:
    """The outcome of :func:`match_names`.

    Attributes:
        matches: The match of each matched name.
        base_prefix: The base-prefix change chosen for the whole checkpoint, if any.
        base_prefix_ties: Changes that matched equally many keys (none was applied).
        aliases: Keys left unused because another key with the same data matched.
        problems: Ambiguities and bad renames, one readable line each.
        texts: Each key as the user's rules rewrote it (the key itself otherwise).
    """

    matches: dict[str, Match] = field(default_factory=dict)
    base_prefix: BasePrefix | None = None
    base_prefix_ties: list[BasePrefix] = field(default_factory=list)
    aliases: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    texts: dict[str, str] = field(default_factory=dict)

    def model_names(self, key: str) -> list[str]:
        """The names ``key`` may have in the model, most likely first.

        The user's rules are applied and wrappers stripped; the name with the chosen
        base-prefix change comes first, the name without it second.
        """
        name = strip_wrappers(self.texts.get(key, key))
        changed = self.base_prefix.apply_to_name(name) if self.base_prefix else None
        return [changed, name] if changed else [name]

    def key_of(self, name: str) -> str | None:
        """The key matched to ``name``, or ``None``."""
        match = self.matches.get(name)
        return match.key if match is not None else None


def match_names(
    names: Sequence[str],
    keys: Sequence[str],
    *,
    renames: Mapping[str, Sequence[str]] | None = None,
    rules: Sequence[tuple[re.Pattern[str], str]] = (),
    same_data: Callable[[str, str], bool] = lambda a, b: False,
) -> Matching:
    """Match checkpoint keys to model names.

    Args:
        names: The model names to fill, real ones first.
        keys: The checkpoint keys.
        renames: Explicit choices: a key and the names it fills (several for tied
            weights).
        rules: Regex rewrites of keys, ``(pattern, replacement)``; the first rule
            whose pattern is found in a key rewrites it.
        same_data: Whether two keys hold the same data (tied weights saved twice).

    Returns:
        The matches, the base-prefix change chosen, and the problems found.
    """
    matcher = _Matcher(names, keys, same_data)
    matcher.rename(renames or {})
    matcher.rewrite(rules)
    matcher.level("exact", lambda k: frozenset({k}), lambda n: frozenset({n}))
    matcher.level("wrapper-prefix", lambda k: frozenset({strip_wrappers(k)}),
                  lambda n: frozenset({strip_wrappers(n)}))
    matcher.level("separator", lambda k: canonical_forms(strip_wrappers(k)),
                  lambda n: canonical_forms(strip_wrappers(n)))
    prefix = matcher.choose_base_prefix()
    if prefix is not None:
        matcher.level("base-prefix", lambda k: prefix.forms(canonical_forms(strip_wrappers(k))),
                      lambda n: canonical_forms(strip_wrappers(n)))
    return matcher.result


class _Matcher:
    def __init__(self, names: Sequence[str], keys: Sequence[str],
                 same_data: Callable[[str, str], bool]):
        self.names = list(dict.fromkeys(names))
        self.keys = list(dict.fromkeys(keys))
        self.same_data = same_data
        self.result = Matching(texts={key: key for key in self.keys})
        self.text = self.result.texts
        self.rewritten: set[str] = set()
        self.taken: set[str] = set()

    # ------------------------------------------------------------------ user rules
    def rename(self, renames: Mapping[str, Sequence[str]]) -> None:
        known_names = set(self.names)
        for key, targets in renames.items():
            if key not in self.text:
                self.result.problems.append(
                    f"renames: the checkpoint has no key {key!r}{_close(key, self.keys)}")
                continue
            for name in targets:
                if name not in known_names:
                    self.result.problems.append(
                        f"renames: the model has no initializer or weight input {name!r} "
                        f"(for key {key!r}){_close(name, self.names)}")
                elif name in self.result.matches:
                    self.result.problems.append(
                        f"renames: {name!r} is given two keys, "
                        f"{self.result.matches[name].key!r} and {key!r}")
                else:
                    self.result.matches[name] = Match(name, key, "rename")
            self.taken.add(key)

    def rewrite(self, rules: Sequence[tuple[re.Pattern[str], str]]) -> None:
        for key in self.keys:
            if key in self.taken:
                continue
            for pattern, replacement in rules:
                if pattern.search(key):
                    self.text[key] = pattern.sub(replacement, key)
                    self.rewritten.add(key)
                    break

    # ---------------------------------------------------------------------- levels
    def level(self, level: str, key_forms: Callable[[str], Iterable[str]],
              name_forms: Callable[[str], Iterable[str]]) -> None:
        index: dict[str, set[str]] = defaultdict(set)
        for name in self.names:
            if name not in self.result.matches:
                for form in name_forms(name):
                    index[form].add(name)
        if not index:
            return
        keys_of: dict[str, list[str]] = defaultdict(list)
        for key in self.keys:
            if key in self.taken:
                continue
            fitting: set[str] = set()
            for form in key_forms(self.text[key]):
                fitting.update(index.get(form, ()))
            if len(fitting) > 1:
                self.result.problems.append(
                    f"key {key!r} fits several names ({level}): {_listing(sorted(fitting))}")
                self.taken.add(key)
            elif fitting:
                keys_of[fitting.pop()].append(key)
        for name, candidates in keys_of.items():
            chosen = sorted(candidates)[0]
            others = [k for k in candidates if k != chosen]
            if others and not all(self.same_data(chosen, other) for other in others):
                self.result.problems.append(
                    f"{name!r} is fitted by several checkpoint keys ({level}): "
                    f"{_listing(sorted(candidates))}")
                self.taken.update(candidates)
                continue
            rule = "rule" if chosen in self.rewritten else level
            self.result.matches[name] = Match(name, chosen, rule)
            self.taken.update(candidates)
            for other in others:
                self.result.aliases[other] = chosen

    def choose_base_prefix(self) -> BasePrefix | None:
        keys = [strip_wrappers(self.text[k]) for k in self.keys if k not in self.taken]
        names = [strip_wrappers(n) for n in self.names if n not in self.result.matches]
        if not keys or not names:
            return None
        index: set[str] = set()
        for name in names:
            index.update(canonical_forms(name))
        key_forms = [canonical_forms(key) for key in keys]
        scores: dict[BasePrefix, int] = {}
        for candidate in base_prefix_candidates(keys, names):
            scores[candidate] = sum(1 for forms in key_forms
                                    if candidate.forms(forms) & index)
        best = max(scores.values(), default=0)
        if best == 0:
            return None
        winners = [c for c, score in scores.items() if score == best]
        if len(winners) > 1:
            self.result.base_prefix_ties = winners
            return None
        self.result.base_prefix = winners[0]
        return winners[0]


def _listing(items: Sequence[str]) -> str:
    shown = ", ".join(repr(item) for item in items[:_SHOWN])
    return shown + (f" and {len(items) - _SHOWN} more" if len(items) > _SHOWN else "")


def _close(word: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""
