"""sharedserve.documents: the error a typed file's reader gives names the key at fault."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from sharedserve.documents import PositiveWhole, parse
from sharedserve.errors import ConfigError


@dataclass(frozen=True)
class _Listing:
    sizes: list[PositiveWhole]


def test_a_bad_item_of_a_list_of_annotated_values_names_its_key() -> None:
    # The item's Must(...) is a dataclass instance in the Annotated metadata: it was once taken
    # for a document type, and the error message failed to be made (NameError).
    with pytest.raises(ConfigError, match=r"sizes.*positive whole number, got 0"):
        parse(_Listing, {"sizes": [1, 0]}, where="listing.yaml")
