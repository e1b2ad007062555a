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


def test_prose_rounding_writes_plain_numbers():
    assert [fmt.significant(v) for v in (11115, 12.9, 0.5, 507.9)] == ["11,000", "13", "0.5", "510"]
    assert fmt.significant(39.4, 1) == "40"        # where num writes '4e+01'
    cases = ((873, 10), (4.67, 0.5), (2.41, 0.5), (8.9, 5))
    assert [fmt.nearest(v, step) for v, step in cases] == ["870", "4.5", "2.5", "10"]
    # no exponent at either end, where :g writes 1.2e+06 and 1.2e-07
    assert [fmt.significant(v) for v in (1_234_567, 0.000123, 1.23e-7)] == ["1,200,000", "0.00012", "0.00000012"]
    assert [fmt.nearest(v, step) for v, step in ((1_234_567, 10), (-0.2, 1), (0.7, 0.1))] == ["1,234,570", "0", "0.7"]
    with pytest.raises(ValueError, match="step"):
        fmt.nearest(1.0, 0)
    with pytest.raises(ValueError, match="digits"):
        fmt.significant(1.0, 0)
