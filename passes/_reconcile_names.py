"""Name forms for matching checkpoint keys to initializer names (reconcile-initializers).

Each matching level compares one *form* of a key with the same form of a name:

* ``exact``: the string itself;
* ``wrapper-prefix``: without the prefixes that training wrappers add
  (``module.`` from DataParallel/DDP and ``_orig_mod.`` from ``torch.compile`` at
  the front; ``_fsdp_wrapped_module.``, ``_checkpoint_wrapped_module.``,
  ``_fpw_module.`` and ``_orig_mod.`` anywhere);
* ``separator``: additionally with ``.``, ``::`` and ``/`` read as ``_`` (so
  ``blocks.0.norm.weight`` = ``blocks_0_norm_weight``), and torch.export's
  placeholder prefixes ``p_``/``b_``/``c_`` dropped;
* ``base-prefix``: the separator form after one global change of the model's base
  prefix (strip ``model.`` from every key, or add ``transformer.`` to every key),
  chosen for the whole checkpoint by the number of keys it matches.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Literal

__all__ = [
    "BasePrefix",
    "base_prefix_candidates",
    "canonical_forms",
    "ends_with_leaf",
    "leaf",
    "strip_wrappers",
]

_LEADING: Final = re.compile(r"^(?:module\.|_orig_mod\.)+")
_ANYWHERE: Final = re.compile(
    r"(^|\.)(?:_fsdp_wrapped_module|_checkpoint_wrapped_module|_fpw_module|_orig_mod)\.")
_SEPARATORS: Final = re.compile(r"(?:::|[./_])+")
_PLACEHOLDER: Final = re.compile(r"^[pbc]_(?=[^.]+$)")
_MAX_CANDIDATES: Final = 64


def strip_wrappers(name: str) -> str:
    """Drop the prefixes that DDP, torch.compile, FSDP and activation checkpointing add."""
    previous = None
    while previous != name:
        previous = name
        name = _LEADING.sub("", name)
        name = _ANYWHERE.sub(r"\1", name)
    return name


def _canonical(name: str) -> str:
    return _SEPARATORS.sub("_", name).strip("_")


def canonical_forms(name: str) -> frozenset[str]:
    """The separator-insensitive forms of a (wrapper-stripped) name.

    ``blocks.0.norm.weight``, ``blocks_0_norm_weight`` and ``blocks::0::norm::weight``
    share the form ``blocks_0_norm_weight``; a torch.export placeholder name
    (``p_blocks_0_norm_weight``, no dots) also gives the form without its prefix.
    """
    forms = {_canonical(name)}
    if _PLACEHOLDER.match(name):
        forms.add(_canonical(name[2:]))
    return frozenset(forms)


def leaf(name: str) -> str:
    """The last component of a name (``weight`` for ``blocks.0.norm.weight``).

    For a name without dots (``blocks_0_norm_weight``) it is the part after the last
    ``_``, which can be too short (``mean`` of ``bn_running_mean``); compare leaves
    with :func:`ends_with_leaf`.
    """
    return name.rsplit(".", 1)[-1] if "." in name else _canonical(name).rsplit("_", 1)[-1]


def ends_with_leaf(name: str, leaf_name: str) -> bool:
    """Whether ``name``'s separator form ends with the component ``leaf_name``."""
    form, ending = _canonical(name), _canonical(leaf_name)
    return form == ending or form.endswith("_" + ending)


@dataclass(frozen=True)
class BasePrefix:
    """One change of base prefix applied to every checkpoint key.

    Attributes:
        action: ``strip`` (the keys have a prefix the model lacks) or ``add`` (the
            model has a prefix the keys lack).
        prefix: The prefix without its trailing dot (``transformer``).
    """

    action: Literal["strip", "add"]
    prefix: str

    def apply(self, form: str) -> str | None:
        """The separator form of a key after the change (``None``: it does not apply)."""
        canonical_prefix = _canonical(self.prefix) + "_"
        if self.action == "add":
            return canonical_prefix + form
        return form[len(canonical_prefix):] if form.startswith(canonical_prefix) else None

    def apply_to_name(self, name: str) -> str | None:
        """The dotted name after the change (``None``: it does not apply)."""
        if self.action == "add":
            return f"{self.prefix}.{name}"
        return name[len(self.prefix) + 1:] if name.startswith(self.prefix + ".") else None

    def forms(self, key_forms: Iterable[str]) -> frozenset[str]:
        """Apply the change to each of a key's separator forms."""
        changed = (self.apply(form) for form in key_forms)
        return frozenset(form for form in changed if form)

    def __str__(self) -> str:
        return f"{self.action} {self.prefix + '.'!r}"


def base_prefix_candidates(keys: Iterable[str], names: Iterable[str]) -> list[BasePrefix]:
    """Possible base-prefix changes: strip a key's first component, or add a name's.

    Args:
        keys: Wrapper-stripped checkpoint keys still unmatched.
        names: Wrapper-stripped model names still unmatched.

    Returns:
        The candidates, most common first (at most 64 of each kind).
    """
    strip = Counter(key.split(".", 1)[0] for key in keys if "." in key)
    add = Counter(name.split(".", 1)[0] for name in names if "." in name)
    return ([BasePrefix("strip", p) for p, _ in strip.most_common(_MAX_CANDIDATES)]
            + [BasePrefix("add", p) for p, _ in add.most_common(_MAX_CANDIDATES)])
