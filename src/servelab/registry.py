"""Registry: implementations picked by name, with an error that lists the known names."""

from collections.abc import Iterator
from typing import Generic, TypeVar

from servelab.errors import ServelabError, closest

T = TypeVar("T")


class Registry(Generic[T]):
    """Name -> implementation. `what` names the kind of thing in errors ("executor", "op", ...)."""

    def __init__(self, what: str, items: dict[str, T] | None = None):
        self.what = what
        self._items: dict[str, T] = dict(items or {})

    def register(self, name: str, item: T) -> T:
        if name in self._items:
            raise ValueError(f"{self.what} {name!r} registered twice")
        self._items[name] = item
        return item

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            known = list(self._items)
            raise ServelabError(
                f"unknown {self.what} {name!r}{closest(name, known)}; known {self.what}s: {', '.join(known)}"
            ) from None

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)
