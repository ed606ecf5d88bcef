"""Engine release versions, parsed once: `0.25.0`, `v0.25.0`, `1.2.0rc2`, `0.5.9.post1`, an image tag
(`vllm/vllm-openai:v0.25.0`, `lmsysorg/sglang:v0.5.9-cu129`) or a table directory name."""

from __future__ import annotations

import re
from functools import total_ordering

from servelab.errors import ServelabError

_RELEASE = re.compile(r"(\d+(?:\.\d+)*)(?:\.?(rc|a|b|dev)(\d+))?(?:\.?post(\d+))?")
LATEST_TAGS = {"", "latest"}
# A version string (not an image): a release number and nothing else (`0.25.0`, `v1.3.0rc23.post1`).
_VERSION_TEXT = re.compile(r"v?\d+(\.\d+)+(rc\d+)?(\.post\d+)?")
# a pre-release sorts before its release, a post-release after it
_PRE_RANK = {"dev": 0, "a": 1, "b": 2, "rc": 3, None: 4}


@total_ordering
class Version:
    """A release number compared as releases are: 0.9 < 0.12.0 < 0.25.0rc1 < 0.25.0 < 0.25.0.post1."""

    __slots__ = ("post", "pre", "pre_num", "release", "text")

    def __init__(self, text: str):
        found = _RELEASE.search(str(text).strip().lstrip("vV"))
        if found is None:
            raise ServelabError(f"version {text!r}: expected a release number such as 0.25.0 or 1.2.0rc2")
        numbers = tuple(int(x) for x in found.group(1).split("."))
        while len(numbers) > 1 and numbers[-1] == 0:  # 0.25 and 0.25.0 are one release
            numbers = numbers[:-1]
        self.release = numbers
        self.pre = found.group(2)
        self.pre_num = int(found.group(3) or 0)
        self.post = int(found.group(4) or 0)
        self.text = found.group(0)

    def _order(self) -> tuple:
        return (self.release, _PRE_RANK[self.pre], self.pre_num, self.post)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Version) and self._order() == other._order()

    def __lt__(self, other: Version) -> bool:
        return self._order() < other._order()

    def __hash__(self) -> int:
        return hash(self._order())

    def __repr__(self) -> str:
        return f"Version({self.text!r})"

    def __str__(self) -> str:
        return self.text


def version_of_image(image: str) -> Version | None:
    """The release an image tag names (`vllm/vllm-openai:v0.25.0` -> 0.25.0), or None for a tag that names no
    release (`latest`, a digest only)."""
    tag = image.rsplit("@", 1)[0]
    tag = tag.rsplit(":", 1)[1] if ":" in tag.rsplit("/", 1)[-1] else ""
    if not re.match(r"v?\d", tag):
        return None
    return Version(tag)


def version_of(image_or_version: str | None) -> str | None:
    """The release an image tag or version string names (`vllm/vllm-openai:v0.25.0` -> 0.25.0,
    `lmsysorg/sglang:v0.5.9-cu129` -> 0.5.9); "latest" for `latest` or no tag; None when the tag names no
    release (a nightly or custom build)."""
    text = (image_or_version or "").strip()
    if "/" in text or ":" in text:  # an image reference: its tag, `latest` when it has none
        tail = text.split("@", 1)[0].rsplit("/", 1)[-1]
        if (tail.split(":", 1)[1] if ":" in tail else "") in LATEST_TAGS:
            return "latest"
        found = version_of_image(text)
        return str(found) if found is not None else None
    if text in LATEST_TAGS:
        return "latest"
    return text.lstrip("vV") if _VERSION_TEXT.fullmatch(text) else None


def numbered_release(image_or_version: str | None) -> Version | None:
    """The release number an image tag or version string names, or None where it names none (not given,
    `latest`, a nightly or custom build), which the engines' release rules take as their newest release."""
    number = version_of(image_or_version)
    return None if number is None or number == "latest" else Version(number)
