"""Values whose own code raises when the checks look at them: posixcron.E037, not a traceback."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from django.utils.functional import lazy


class _ExplodingSignature:
    def __call__(self, **kwargs: Any) -> None:  # pragma: no cover - never called
        pass

    @property
    def __signature__(self) -> Any:
        raise RuntimeError("signature exploded")


exploding_signature = _ExplodingSignature()


def _explode() -> str:
    raise RuntimeError("lazy text exploded")


exploding_description = lazy(_explode, str)()


class ExplodingMapping(Mapping[str, Any]):
    def __getitem__(self, key: str) -> Any:
        raise RuntimeError("getitem exploded")

    def __iter__(self) -> Iterator[str]:
        return iter(["a"])

    def __len__(self) -> int:
        return 1
