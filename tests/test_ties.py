"""book.ties: what float64 and float32 make of a tie, next to exact arithmetic (chapter 05)."""

from fractions import Fraction

from servebook import quant
from servebook.book import scenarios, ties
from servebook.book.widgets import quant as explorer
from servebook.quant import Rounding


def test_the_seeds_tie_falls_below_3_5_in_float64_division_only():
    outcomes = ties.tie_outcomes(scenarios.EXAMPLE_WEIGHT, *scenarios.EXAMPLE_RANGE)
    assert outcomes["exact (Fraction)"] == ("7/2", [10, 10])
    assert outcomes["float64, r / s"] == ("3.4999999999999996", [9, 9])
    assert outcomes["float64, r * (1/s)"][1] == outcomes["float32, r * (1/s)"][1] == [10, 10]


def test_a_binary_tie_is_decided_by_the_rule_alone():
    outcomes = ties.tie_outcomes(*scenarios.BINARY_TIE)
    assert {codes == [9, 8] for _, codes in outcomes.values()} == {True}
    assert outcomes["exact (Fraction)"][0] == "5/2"


def test_missed_ties_on_two_grids():
    assert ties.missed_ties(*scenarios.EXAMPLE_RANGE) == {"float64 r / s": 2, "float64 r * (1/s)": 0}
    assert ties.missed_ties("-1.3", "2.6") == {"float64 r / s": 0, "float64 r * (1/s)": 5}
    assert ties.missed_ties("-0.75", "1.125") == {"float64 r / s": 0, "float64 r * (1/s)": 0}  # binary-exact


def test_float64_codes_clip_and_match_the_explorer():
    assert ties.float64_codes("1.4", *scenarios.EXAMPLE_RANGE) == (15, 15)  # saturated, never wrapped
    assert ties.float64_codes("-5", *scenarios.EXAMPLE_RANGE) == (0, 0)
    assert ties.division_code(0.35, 0.1, 6, 0, 15) == 9
    assert ties.division_code(0.35, 0.1, 6, 0, 15, Rounding.HALF_EVEN) == 9
    rows = dict(explorer.quant_explorer_rows())
    assert rows["float64"].startswith("q = 10 via r * (1/s), q = 9 via r / s")


def test_float64_grid_is_the_float_path_of_choose_qparams():
    s64, z64 = ties.float64_grid(*scenarios.EXAMPLE_RANGE)
    assert isinstance(s64, float) and (s64, z64) == (0.1, 6)
    exact = quant.choose_qparams_affine(*scenarios.EXAMPLE_RANGE, 4)
    assert exact == (Fraction(1, 10), 6)
