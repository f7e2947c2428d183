"""OverlayMap: an immutable mapping whose updated copy costs what changed, not its size.

Metadata images are replaced, never mutated, on every change; copying a 1,000-topic dict per
change made one ISR shrink cost the whole cluster. An OverlayMap is a shared base dict (never
mutated) plus a small overlay of changed keys and a set of base keys hidden (deleted):

    topics = OverlayMap({"a": 1})
    newer = topics.updated({"b": 2}, deleted=("a",))   # topics is unchanged

``updated`` copies only the overlay; once the overlay outgrows ``overlay_max(len)`` (about the
square root of the size) the next copy folds it into a new base, so an update costs
O(sqrt(size)) amortized. It iterates in a dict's insertion order (an updated key keeps its place,
a new or re-added key comes last) and compares equal to any mapping with the same items.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")

_MISSING: Any = object()
OVERLAY_ENTRIES_MIN = 32


def overlay_max(size: int) -> int:
    """Overlay entries (changed plus hidden keys) an OverlayMap of ``size`` keys holds before
    its next update folds them into a new base: copies per update and folds balance there."""
    return max(OVERLAY_ENTRIES_MIN, math.isqrt(size))


class OverlayMap(Mapping, Generic[K, V]):
    """Read-only mapping; see the module docstring. Safe to share across threads."""

    __slots__ = ("_base", "_changed", "_hidden", "_len")

    # Entries copied by ``updated`` since the process started (tests assert the cost stays small).
    entries_copied = 0

    def __init__(self, values: Mapping[K, V] | None = None) -> None:
        self._base: dict = dict(values) if values else {}
        self._changed: dict = {}  # new keys, and base keys with a new value
        self._hidden: frozenset = frozenset()  # deleted base keys (a re-added one is also in _changed)
        self._len = len(self._base)

    @classmethod
    def _of(cls, base: dict, changed: dict, hidden: frozenset, length: int) -> "OverlayMap[K, V]":
        out = cls.__new__(cls)
        out._base, out._changed, out._hidden, out._len = base, changed, hidden, length
        return out

    def __getitem__(self, key: K) -> V:
        value = self._changed.get(key, _MISSING)
        if value is not _MISSING:
            return value
        if key in self._hidden:
            raise KeyError(key)
        return self._base[key]

    def get(self, key: K, default: Any = None) -> Any:
        value = self._changed.get(key, _MISSING)
        if value is not _MISSING:
            return value
        if key in self._hidden:
            return default
        return self._base.get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._changed or (key in self._base and key not in self._hidden)

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[K]:
        hidden, changed = self._hidden, self._changed
        if not hidden and not changed:
            yield from self._base
            return
        for key in self._base:
            if key not in hidden:
                yield key
        base = self._base
        for key in changed:
            if key not in base or key in hidden:
                yield key

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, Mapping):
            return NotImplemented
        return len(self) == len(other) and dict(self.items()) == dict(other.items())

    __hash__ = None  # type: ignore[assignment]  # like a dict

    def __repr__(self) -> str:
        return f"OverlayMap({dict(self.items())!r})"

    def updated(self, changes: Mapping[K, V], deleted: Iterable[K] = ()) -> "OverlayMap[K, V]":
        """A new map with ``changes`` set and ``deleted`` keys removed (absent keys are ignored);
        this one is unchanged. A key both deleted and changed ends up changed."""
        base, hidden, length = self._base, set(self._hidden), self._len
        changed = dict(self._changed)
        for key in deleted:
            if key in changed:
                del changed[key]
                length -= 1
                if key in base:
                    hidden.add(key)  # a base key given a new value (or re-added)
            elif key in base and key not in hidden:
                hidden.add(key)
                length -= 1
        for key, value in changes.items():
            if key not in changed and (key not in base or key in hidden):
                length += 1
            changed[key] = value
        copied = len(changed) + len(hidden)
        if copied > overlay_max(length):
            folded = dict(self._fold(base, changed, hidden))
            OverlayMap.entries_copied += len(folded)
            return self._of(folded, {}, frozenset(), length)
        OverlayMap.entries_copied += copied
        return self._of(base, changed, frozenset(hidden), length)

    @staticmethod
    def _fold(base: dict, changed: dict, hidden: set | frozenset) -> Iterator[tuple[Any, Any]]:
        for key, value in base.items():
            if key not in hidden:
                yield key, changed.get(key, value)
        for key, value in changed.items():
            if key not in base or key in hidden:
                yield key, value

    def changed_keys(self, older: "OverlayMap[K, V]") -> set[K] | None:
        """The keys whose value may differ between ``older`` and this map (a superset), when both
        share a base; None when they do not (compare every key)."""
        if older._base is not self._base:
            return None
        return set(self._changed) | self._hidden | set(older._changed) | older._hidden
