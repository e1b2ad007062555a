"""The book's formatting helpers for prose: positions and lists."""

import pytest

from servebook.book import fmt


def test_an_ordinal_takes_the_suffix_of_its_last_digits():
    numbers = (1, 2, 3, 4, 11, 12, 13, 21, 101, 111, 112)
    assert [fmt.ordinal(n) for n in numbers] == [
        "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "101st", "111th", "112th"]


def test_an_ordinal_is_of_a_whole_positive_number():
    for bad, error in ((0, ValueError), (-1, ValueError), (True, TypeError), (2.0, TypeError), ("3", TypeError)):
        with pytest.raises(error, match="n must"):
            fmt.ordinal(bad)


def test_a_list_reads_as_prose():
    assert [fmt.listed(items) for items in ([16], [8, 16], [1, 4, 8, 16])] == ["16", "8 and 16", "1, 4, 8 and 16"]
    assert fmt.listed(["FP16", "INT8", "INT4"], "or") == "FP16, INT8 or INT4"
    for bad in ("abc", [], 3):
        with pytest.raises(TypeError, match="items"):
            fmt.listed(bad)
